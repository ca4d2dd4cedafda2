//! The checksum stage: every request body is checked against the CRC-32C in
//! its header before it is decoded, so corruption between the client's
//! buffer and the store is caught (end-to-end integrity).

use surge_proto::{frame, Errno, RequestHeader};

pub trait ChecksumStage: Send + Sync {
    /// `Ok` if `body` matches the header's CRC-32C.
    ///
    /// A mismatch is reported as `EIO`, not `EPROTO`: the frame was well
    /// formed but its bytes were damaged on the way, which an application
    /// should see as it sees a media error. `EPROTO` stays the sign of a
    /// peer that sends malformed requests.
    fn verify(&self, hdr: &RequestHeader, body: &[u8]) -> Result<(), Errno>;
}

/// Computes the CRC on the connection's own thread (hardware CRC32
/// instructions where the CPU has them).
#[derive(Debug, Default)]
pub struct InlineCrc32c;

impl ChecksumStage for InlineCrc32c {
    fn verify(&self, hdr: &RequestHeader, body: &[u8]) -> Result<(), Errno> {
        frame::verify_body(hdr, body).map_err(|_| Errno::EIO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_right_crc_and_reports_eio_otherwise() {
        let body = b"some request body";
        let mut hdr = RequestHeader {
            op: 0x20,
            body_len: body.len() as u32,
            request_id: 1,
            job_id: 2,
            io_size: 0,
            body_crc: crc32c::crc32c(body),
        };
        assert_eq!(InlineCrc32c.verify(&hdr, body), Ok(()));
        hdr.body_crc ^= 1;
        assert_eq!(InlineCrc32c.verify(&hdr, body), Err(Errno::EIO));
    }
}
