//! The checksum stage: every checksum the daemon computes or checks passes
//! it. Every request body is checked against the CRC-32C in its header
//! before it is decoded, so corruption between the client's buffer and the
//! store is caught (end-to-end integrity); every reply carries one. The
//! same stage computes the per-block checksums the store keeps beside the
//! data (see `blocksums`): for a write, in the pass that checks the body,
//! so the data is read once; a read checks its blocks against them and
//! builds its reply's checksum from theirs ([`Running::update_block`]), so
//! it too reads the data once. Checksums are computed incrementally
//! ([`ChecksumStage::begin`]), so a parallel pipeline can take ranges as
//! they arrive.

use std::sync::OnceLock;
use surge_proto::{Errno, RequestHeader};

/// Bytes per checksummed block of an object. A page: aligned 4 KiB writes
/// need no read-modify-write, a small read checks at most two extra pages,
/// and the sidecar costs 4 bytes per block (0.1%).
pub const BLOCK: usize = 4096;

/// The CRC-32C of consecutive whole blocks of an object: block `first + i`
/// (object offset `(first + i) * BLOCK`) has checksum `crcs[i]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockSums {
    pub first: u64,
    pub crcs: Vec<u32>,
}

/// A checksum over bytes given in order, as they arrive (a parallel stage
/// may work on them while the rest is still on its way).
pub trait Running: Send {
    /// Adds the next bytes.
    fn update(&mut self, bytes: &[u8]);
    /// Adds the next `BLOCK` bytes by their checksum (as `block_crc` gives
    /// it for a whole block), without reading them again: bytes a read has
    /// checked against their checksums at rest cost nothing more.
    fn update_block(&mut self, block_crc: u32);
    /// The CRC-32C of everything added so far.
    fn finish(&self) -> u32;
}

/// Every checksum the daemon computes or checks goes through this stage:
/// request and reply bodies, checksums at rest (`blocksums`), stage-out
/// copies. To plug one in (a parallel pipeline, say), implement `begin`
/// and `block_crc` and pass it in [`crate::Stages`]; [`InlineCrc32c`] is
/// the default.
pub trait ChecksumStage: Send + Sync {
    /// An empty running checksum.
    fn begin(&self) -> Box<dyn Running>;

    /// The checksum of one block's bytes, `data.len() <= BLOCK`; a short
    /// block (the object's end) counts as padded with zeros, so growing the
    /// object does not change it.
    fn block_crc(&self, data: &[u8]) -> u32;

    /// `Ok` if `body` matches the header's CRC-32C.
    ///
    /// A mismatch is reported as `EIO`, not `EPROTO`: the frame was well
    /// formed but its bytes were damaged on the way, which an application
    /// should see as it sees a media error. `EPROTO` stays the sign of a
    /// peer that sends malformed requests.
    fn verify(&self, hdr: &RequestHeader, body: &[u8]) -> Result<(), Errno> {
        let mut sum = self.begin();
        sum.update(body);
        if sum.finish() != hdr.body_crc {
            return Err(Errno::EIO);
        }
        Ok(())
    }

    /// `verify` for a write whose data is `body[data_at..]`, to be stored at
    /// object offset `offset`; in the same pass, the checksums of the whole
    /// blocks the data covers (the partial blocks at its ends are the
    /// store's to recompute, from the bytes around them).
    fn verify_write(&self, hdr: &RequestHeader, body: &[u8], data_at: usize, offset: u64) -> Result<BlockSums, Errno> {
        let data = body.get(data_at..).ok_or(Errno::EIO)?;
        let head = ((BLOCK as u64 - offset % BLOCK as u64) % BLOCK as u64).min(data.len() as u64) as usize;
        let whole = (data.len() - head) / BLOCK * BLOCK;
        let mut sum = self.begin();
        sum.update(&body[..data_at + head]);
        let mut sums = BlockSums { first: offset.div_ceil(BLOCK as u64), crcs: Vec::with_capacity(whole / BLOCK) };
        for block in data[head..head + whole].chunks_exact(BLOCK) {
            let block_crc = self.block_crc(block);
            sum.update_block(block_crc);
            sums.crcs.push(block_crc);
        }
        sum.update(&data[head + whole..]);
        if sum.finish() != hdr.body_crc {
            return Err(Errno::EIO);
        }
        Ok(sums)
    }
}

/// The CRC-32C of a reply frame's body, `head` then `bulk`; `bulk_crc` is
/// the bulk's checksum when a read built it already from verified blocks.
pub fn reply_crc(stage: &dyn ChecksumStage, head: &[u8], bulk: &[u8], bulk_crc: Option<u32>) -> u32 {
    match bulk_crc {
        Some(crc) if head.is_empty() => crc,
        _ => {
            let mut sum = stage.begin();
            sum.update(head);
            sum.update(bulk);
            sum.finish()
        }
    }
}

/// Computes the CRC on the connection's own thread (hardware CRC32
/// instructions where the CPU has them).
#[derive(Debug, Default)]
pub struct InlineCrc32c;

impl ChecksumStage for InlineCrc32c {
    fn begin(&self) -> Box<dyn Running> {
        Box::new(InlineRunning(0))
    }

    fn block_crc(&self, data: &[u8]) -> u32 {
        static ZEROS: [u8; BLOCK] = [0; BLOCK];
        let crc = crc32c::crc32c(data);
        crc32c::crc32c_append(crc, &ZEROS[..BLOCK - data.len()])
    }
}

/// The CRC-32C of what was added so far (0 for nothing).
struct InlineRunning(u32);

impl Running for InlineRunning {
    fn update(&mut self, bytes: &[u8]) {
        self.0 = crc32c::crc32c_append(self.0, bytes);
    }

    fn update_block(&mut self, block_crc: u32) {
        // CRC(a ++ b) = shift(CRC(a), len b) ^ CRC(b).
        self.0 = after_a_block(self.0) ^ block_crc;
    }

    fn finish(&self) -> u32 {
        self.0
    }
}

/// The linear part of appending `BLOCK` bytes to a CRC-32C: what a CRC
/// becomes before the next block's own CRC is xored in. It is linear over
/// GF(2), so it is four table lookups, one table per byte of the CRC.
fn after_a_block(crc: u32) -> u32 {
    static TABLES: OnceLock<[[u32; 256]; 4]> = OnceLock::new();
    let tables = TABLES.get_or_init(|| {
        // Column `bit` of the operator: the image of that single bit.
        // `append(c, zeros) ^ append(0, zeros)` cancels the CRC's affine
        // part (its inverted start and end), leaving the linear map.
        let zeros = [0u8; BLOCK];
        let base = crc32c::crc32c_append(0, &zeros);
        let column: Vec<u32> = (0..32).map(|bit| crc32c::crc32c_append(1 << bit, &zeros) ^ base).collect();
        let mut tables = [[0u32; 256]; 4];
        for (byte, table) in tables.iter_mut().enumerate() {
            for (value, entry) in table.iter_mut().enumerate() {
                *entry = (0..8).filter(|b| value >> b & 1 == 1).fold(0, |acc, b| acc ^ column[byte * 8 + b]);
            }
        }
        tables
    });
    crc.to_le_bytes().iter().zip(tables).fold(0, |acc, (&b, table)| acc ^ table[b as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(op: u8, body: &[u8]) -> RequestHeader {
        RequestHeader {
            op,
            body_len: body.len() as u32,
            request_id: 1,
            job_id: 2,
            io_size: 0,
            body_crc: crc32c::crc32c(body),
        }
    }

    #[test]
    fn accepts_the_right_crc_and_reports_eio_otherwise() {
        let body = b"some request body";
        let mut hdr = header(0x20, body);
        assert_eq!(InlineCrc32c.verify(&hdr, body), Ok(()));
        hdr.body_crc ^= 1;
        assert_eq!(InlineCrc32c.verify(&hdr, body), Err(Errno::EIO));
    }

    #[test]
    fn a_write_check_yields_the_crc_of_every_whole_block_it_covers() {
        let data: Vec<u8> =
            (0..5 * BLOCK + 300).map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(7) as u8).collect();
        let mut body = b"16 header bytes.".to_vec();
        body.extend_from_slice(&data);
        for offset in [0u64, 1, 100, BLOCK as u64 - 1, BLOCK as u64, 7 * BLOCK as u64 + 5] {
            for len in [0usize, 1, 300, BLOCK, BLOCK + 1, 2 * BLOCK + 17, data.len()] {
                let body = &body[..16 + len];
                let mut hdr = header(0x20, body);
                let sums = InlineCrc32c.verify_write(&hdr, body, 16, offset).unwrap();
                let start = offset.div_ceil(BLOCK as u64);
                let end = (offset + len as u64) / BLOCK as u64;
                assert_eq!(sums.first, start, "offset {offset} len {len}");
                let want: Vec<u32> = (start..end.max(start))
                    .map(|k| {
                        let at = (k * BLOCK as u64 - offset) as usize;
                        crc32c::crc32c(&body[16 + at..16 + at + BLOCK])
                    })
                    .collect();
                assert_eq!(sums.crcs, want, "offset {offset} len {len}");
                hdr.body_crc ^= 0x100;
                assert_eq!(InlineCrc32c.verify_write(&hdr, body, 16, offset), Err(Errno::EIO));
            }
        }
    }

    #[test]
    fn a_short_block_counts_as_padded_with_zeros() {
        let mut block = vec![0u8; BLOCK];
        block[..3].copy_from_slice(b"abc");
        assert_eq!(InlineCrc32c.block_crc(b"abc"), crc32c::crc32c(&block));
        assert_eq!(InlineCrc32c.block_crc(&block), crc32c::crc32c(&block));
    }
}
