//! Frame headers and framed I/O.
//!
//! Every request is a 40-byte [`RequestHeader`] followed by `body_len` bytes
//! of body; every reply a 24-byte [`ReplyHeader`] and its body. Both carry a
//! CRC-32C of the body, so corruption anywhere between the client's buffer
//! and the daemon's store is detected (end-to-end integrity).
//! A body may be sent as a head plus a bulk tail without copying the two
//! together: the CRC is computed over their concatenation.

use crate::codec::DecodeError;
use crate::errno::Errno;
use std::fmt;
use std::io::{self, IoSlice, Read, Write};

pub const MAGIC: [u8; 2] = *b"SG";
pub const PROTOCOL_VERSION: u8 = 11;
pub const REQUEST_HEADER_LEN: usize = 40;
pub const REPLY_HEADER_LEN: usize = 24;
/// Default largest body a daemon accepts (`surged --max-frame`).
pub const MAX_FRAME_DEFAULT: u32 = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub op: u8,
    pub body_len: u32,
    /// Chosen by the client; echoed in the reply.
    pub request_id: u64,
    /// The job this request is charged to (see `docs/protocol.md`).
    pub job_id: u64,
    /// Bytes of file data this request moves (read or written), for schedulers.
    pub io_size: u64,
    pub body_crc: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader {
    pub op: u8,
    /// 0 on success, else a Linux errno.
    pub status: i32,
    pub request_id: u64,
    pub body_len: u32,
    pub body_crc: u32,
}

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The peer closed the connection cleanly between frames.
    Closed,
    Io(io::Error),
    BadMagic([u8; 2]),
    BadVersion(u8),
    TooLarge {
        len: u32,
        max: u32,
    },
    BadCrc {
        expected: u32,
        actual: u32,
    },
    Body(DecodeError),
}

impl FrameError {
    /// The errno a caller reports for this failure.
    pub fn errno(&self) -> Errno {
        match self {
            FrameError::Io(e) => match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Errno(libc::ETIMEDOUT),
                _ => Errno::EIO,
            },
            FrameError::TooLarge { .. } => Errno::EMSGSIZE,
            FrameError::Closed => Errno::EIO,
            _ => Errno::EPROTO,
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Closed => f.write_str("connection closed by peer"),
            FrameError::Io(e) => write!(f, "i/o error: {e}"),
            FrameError::BadMagic(m) => write!(f, "bad frame magic {m:02x?} (not a Surge peer?)"),
            FrameError::BadVersion(v) => {
                write!(f, "protocol version {v} not supported (this side speaks {PROTOCOL_VERSION})")
            }
            FrameError::TooLarge { len, max } => {
                write!(f, "frame body of {len} bytes exceeds the limit of {max}")
            }
            FrameError::BadCrc { expected, actual } => {
                write!(f, "body checksum mismatch: header says {expected:08x}, body has {actual:08x}")
            }
            FrameError::Body(e) => write!(f, "malformed body: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

impl From<DecodeError> for FrameError {
    fn from(e: DecodeError) -> Self {
        FrameError::Body(e)
    }
}

impl RequestHeader {
    pub fn encode(&self) -> [u8; REQUEST_HEADER_LEN] {
        let mut b = [0u8; REQUEST_HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = PROTOCOL_VERSION;
        b[3] = self.op;
        b[4..8].copy_from_slice(&self.body_len.to_le_bytes());
        b[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        b[16..24].copy_from_slice(&self.job_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.io_size.to_le_bytes());
        b[32..36].copy_from_slice(&self.body_crc.to_le_bytes());
        // b[36..40] reserved, zero.
        b
    }

    pub fn decode(b: &[u8; REQUEST_HEADER_LEN]) -> Result<Self, FrameError> {
        check_magic_version(b[0..2].try_into().unwrap(), b[2])?;
        Ok(RequestHeader {
            op: b[3],
            body_len: u32::from_le_bytes(b[4..8].try_into().unwrap()),
            request_id: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            job_id: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            io_size: u64::from_le_bytes(b[24..32].try_into().unwrap()),
            body_crc: u32::from_le_bytes(b[32..36].try_into().unwrap()),
        })
    }
}

impl ReplyHeader {
    pub fn encode(&self) -> [u8; REPLY_HEADER_LEN] {
        let mut b = [0u8; REPLY_HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = PROTOCOL_VERSION;
        b[3] = self.op;
        b[4..8].copy_from_slice(&self.status.to_le_bytes());
        b[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.body_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.body_crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; REPLY_HEADER_LEN]) -> Result<Self, FrameError> {
        check_magic_version(b[0..2].try_into().unwrap(), b[2])?;
        Ok(ReplyHeader {
            op: b[3],
            status: i32::from_le_bytes(b[4..8].try_into().unwrap()),
            request_id: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            body_len: u32::from_le_bytes(b[16..20].try_into().unwrap()),
            body_crc: u32::from_le_bytes(b[20..24].try_into().unwrap()),
        })
    }
}

fn check_magic_version(magic: [u8; 2], version: u8) -> Result<(), FrameError> {
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    if version != PROTOCOL_VERSION {
        return Err(FrameError::BadVersion(version));
    }
    Ok(())
}

/// CRC-32C of a body sent as `head` followed by `bulk`.
pub fn body_crc(head: &[u8], bulk: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(head), bulk)
}

/// Reads one header; `Closed` if the peer hung up before its first byte.
fn read_header<const N: usize>(r: &mut impl Read) -> Result<[u8; N], FrameError> {
    let mut b = [0u8; N];
    let mut got = 0;
    while got < N {
        match r.read(&mut b[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    Ok(b)
}

/// Reads a request header and its body into `body` (reused across calls),
/// enforcing `max_body` before allocating. The body CRC is left to the
/// caller ([`verify_body`]): the daemon checks it in its checksum stage.
pub fn read_request(r: &mut impl Read, max_body: u32, body: &mut Vec<u8>) -> Result<RequestHeader, FrameError> {
    read_request_in_pieces(r, max_body, body, |_, _| {})
}

/// Bytes of a request body read before the caller hears of them: a
/// checksum can run over one piece while the next is on its way.
pub const BODY_PIECE: usize = 64 * 1024;

/// [`read_request`], calling `arrived(header, body so far)` each time up
/// to [`BODY_PIECE`] more bytes of the body have arrived (and once for an
/// empty body).
pub fn read_request_in_pieces(
    r: &mut impl Read,
    max_body: u32,
    body: &mut Vec<u8>,
    arrived: impl FnMut(&RequestHeader, &[u8]),
) -> Result<RequestHeader, FrameError> {
    let hdr = read_request_header(r, max_body)?;
    read_request_body_in_pieces(r, &hdr, body, arrived)?;
    Ok(hdr)
}

/// Reads a request header, refusing a body longer than `max_body`; the
/// caller then reads the body with [`read_request_body_in_pieces`] (or
/// [`skip_request_body`]), after deciding where it may go.
pub fn read_request_header(r: &mut impl Read, max_body: u32) -> Result<RequestHeader, FrameError> {
    let hdr = RequestHeader::decode(&read_header::<REQUEST_HEADER_LEN>(r)?)?;
    if hdr.body_len > max_body {
        return Err(FrameError::TooLarge { len: hdr.body_len, max: max_body });
    }
    Ok(hdr)
}

/// Reads the body `hdr` announces into `body`, calling `arrived(header,
/// body so far)` each time up to [`BODY_PIECE`] more bytes of it have
/// arrived (and once for an empty body).
pub fn read_request_body_in_pieces(
    r: &mut impl Read,
    hdr: &RequestHeader,
    body: &mut Vec<u8>,
    mut arrived: impl FnMut(&RequestHeader, &[u8]),
) -> Result<(), FrameError> {
    // Read into spare capacity: no memset of the buffer for every request.
    body.clear();
    body.reserve(hdr.body_len as usize);
    let len = hdr.body_len as usize;
    loop {
        let piece = (len - body.len()).min(BODY_PIECE);
        let got = r.take(piece as u64).read_to_end(body)?;
        if got != piece {
            return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        arrived(hdr, body);
        if body.len() == len {
            return Ok(());
        }
    }
}

/// Reads the body `hdr` announces and throws it away, [`BODY_PIECE`] at a
/// time: a request refused before its body was read leaves the stream in step.
pub fn skip_request_body(r: &mut impl Read, hdr: &RequestHeader) -> Result<(), FrameError> {
    let len = u64::from(hdr.body_len);
    let skipped = io::copy(&mut r.take(len), &mut io::sink())?;
    if skipped != len {
        return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(())
}

/// Checks a request body against its header's CRC-32C.
pub fn verify_body(hdr: &RequestHeader, body: &[u8]) -> Result<(), FrameError> {
    let actual = crc32c::crc32c(body);
    if actual != hdr.body_crc {
        return Err(FrameError::BadCrc { expected: hdr.body_crc, actual });
    }
    Ok(())
}

/// Reads a reply header; the caller then reads the body with
/// [`read_reply_body`] (into its own buffer, so bulk data lands where the
/// application wants it without an extra copy).
pub fn read_reply_header(r: &mut impl Read, max_body: u32) -> Result<ReplyHeader, FrameError> {
    let hdr = ReplyHeader::decode(&read_header::<REPLY_HEADER_LEN>(r)?)?;
    if hdr.body_len > max_body {
        return Err(FrameError::TooLarge { len: hdr.body_len, max: max_body });
    }
    Ok(hdr)
}

/// Reads exactly `into.len()` body bytes (must equal `hdr.body_len`) and verifies the CRC.
pub fn read_reply_body(r: &mut impl Read, hdr: &ReplyHeader, into: &mut [u8]) -> Result<(), FrameError> {
    debug_assert_eq!(into.len(), hdr.body_len as usize);
    r.read_exact(into)?;
    let actual = crc32c::crc32c(into);
    if actual != hdr.body_crc {
        return Err(FrameError::BadCrc { expected: hdr.body_crc, actual });
    }
    Ok(())
}

/// Writes header, head and bulk with as few system calls as the kernel allows.
pub fn write_frame(w: &mut impl Write, header: &[u8], head: &[u8], bulk: &[u8]) -> io::Result<()> {
    let mut parts = [IoSlice::new(header), IoSlice::new(head), IoSlice::new(bulk)];
    let mut slices: &mut [IoSlice<'_>] = &mut parts;
    let total = header.len() + head.len() + bulk.len();
    let mut written = 0;
    while written < total {
        let n = match w.write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        written += n;
        IoSlice::advance_slices(&mut slices, n);
    }
    w.flush()
}

/// Sends a request whose body is `head` followed by `bulk`.
pub fn write_request(
    w: &mut impl Write,
    op: u8,
    request_id: u64,
    job_id: u64,
    io_size: u64,
    head: &[u8],
    bulk: &[u8],
) -> io::Result<()> {
    let hdr = RequestHeader {
        op,
        body_len: (head.len() + bulk.len()) as u32,
        request_id,
        job_id,
        io_size,
        body_crc: body_crc(head, bulk),
    };
    write_frame(w, &hdr.encode(), head, bulk)
}

/// Sends a reply: `status` 0 with a body, or an errno with an optional
/// UTF-8 message as body.
pub fn write_reply(
    w: &mut impl Write,
    op: u8,
    request_id: u64,
    status: i32,
    head: &[u8],
    bulk: &[u8],
) -> io::Result<()> {
    write_reply_summed(w, op, request_id, status, head, bulk, body_crc(head, bulk))
}

/// `write_reply` with the body's CRC-32C computed by the caller (the
/// daemon's checksum stage, which builds a read's from its blocks').
pub fn write_reply_summed(
    w: &mut impl Write,
    op: u8,
    request_id: u64,
    status: i32,
    head: &[u8],
    bulk: &[u8],
    body_crc: u32,
) -> io::Result<()> {
    let hdr = ReplyHeader { op, status, request_id, body_len: (head.len() + bulk.len()) as u32, body_crc };
    write_frame(w, &hdr.encode(), head, bulk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip_with_split_body() {
        let mut wire = Vec::new();
        write_request(&mut wire, 9, 42, 7, 5, b"head", b"bulk!").unwrap();
        let mut body = Vec::new();
        let hdr = read_request(&mut &wire[..], 1024, &mut body).unwrap();
        verify_body(&hdr, &body).unwrap();
        assert_eq!((hdr.op, hdr.request_id, hdr.job_id, hdr.io_size), (9, 42, 7, 5));
        assert_eq!(body, b"headbulk!");
    }

    #[test]
    fn a_body_is_handed_over_in_pieces_as_it_is_read_and_a_short_one_is_an_error() {
        let bulk = vec![7u8; 2 * BODY_PIECE + 10];
        let mut wire = Vec::new();
        write_request(&mut wire, 9, 1, 1, 0, b"head", &bulk).unwrap();
        let mut seen = Vec::new();
        let mut body = Vec::new();
        read_request_in_pieces(&mut &wire[..], u32::MAX, &mut body, |_, so_far| seen.push(so_far.len())).unwrap();
        assert_eq!(seen, [BODY_PIECE, 2 * BODY_PIECE, bulk.len() + 4]);

        let mut seen = Vec::new();
        let cut = &wire[..wire.len() - 1];
        let short = read_request_in_pieces(&mut &cut[..], u32::MAX, &mut body, |_, so_far| seen.push(so_far.len()));
        assert!(matches!(short, Err(FrameError::Io(_))));
        assert_eq!(seen, [BODY_PIECE, 2 * BODY_PIECE]);
    }

    #[test]
    fn rejects_bad_magic_version_size_and_crc() {
        let mut wire = Vec::new();
        write_request(&mut wire, 1, 1, 1, 0, b"abc", b"").unwrap();
        let mut body = Vec::new();

        let mut bad = wire.clone();
        bad[0] = b'X';
        assert!(matches!(read_request(&mut &bad[..], 1024, &mut body), Err(FrameError::BadMagic(_))));

        let mut bad = wire.clone();
        bad[2] = 99;
        assert!(matches!(read_request(&mut &bad[..], 1024, &mut body), Err(FrameError::BadVersion(99))));

        assert!(matches!(read_request(&mut &wire[..], 2, &mut body), Err(FrameError::TooLarge { len: 3, max: 2 })));

        let mut bad = wire.clone();
        *bad.last_mut().unwrap() ^= 1;
        let hdr = read_request(&mut &bad[..], 1024, &mut body).unwrap();
        assert!(matches!(verify_body(&hdr, &body), Err(FrameError::BadCrc { .. })));

        // Truncated mid-body and mid-header.
        assert!(matches!(read_request(&mut &wire[..wire.len() - 1], 1024, &mut body), Err(FrameError::Io(_))));
        assert!(matches!(read_request(&mut &wire[..10], 1024, &mut body), Err(FrameError::Io(_))));
        assert!(matches!(read_request(&mut &wire[..0], 1024, &mut body), Err(FrameError::Closed)));
    }

    #[test]
    fn reply_round_trip() {
        let mut wire = Vec::new();
        write_reply(&mut wire, 3, 8, -0, b"", b"data").unwrap();
        let mut r = &wire[..];
        let hdr = read_reply_header(&mut r, 100).unwrap();
        let mut body = vec![0; hdr.body_len as usize];
        read_reply_body(&mut r, &hdr, &mut body).unwrap();
        assert_eq!((hdr.op, hdr.request_id, hdr.status, &body[..]), (3, 8, 0, &b"data"[..]));
    }
}
