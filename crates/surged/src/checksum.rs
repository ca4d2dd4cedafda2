//! The checksum stage: every checksum the daemon computes or checks passes
//! it. Every request body is checked against the CRC-32C in its header
//! before it is decoded, so corruption between the client's buffer and the
//! store is caught (end-to-end integrity); every reply carries one. The
//! same stage computes the per-block checksums the store keeps beside the
//! data (see `blocksums`): for a write, in the pass that checks the body,
//! so the data is read once; a read checks its blocks against them and
//! builds its reply's checksum from theirs ([`Running::update_block`]), so
//! it too reads the data once. Checksums are computed incrementally
//! ([`ChecksumStage::begin`]): the connection feeds a request body to a
//! [`BodyCheck`] in pieces as they arrive, so the checksum runs while the
//! rest of the body is on its way, and a parallel pipeline can take ranges
//! the same way.

use std::sync::OnceLock;
use surge_proto::msg::WRITE_HEAD_LEN;
use surge_proto::{Errno, Op, Request, RequestHeader};

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
/// and `block_crc` and register it in [`crate::stages::CHECKSUMS`];
/// [`InlineCrc32c`] is the default.
pub trait ChecksumStage: Send + Sync {
    /// An empty running checksum.
    fn begin(&self) -> Box<dyn Running>;

    /// The checksum of one block's bytes, `data.len() <= BLOCK`; a short
    /// block (the object's end) counts as padded with zeros, so growing the
    /// object does not change it.
    fn block_crc(&self, data: &[u8]) -> u32;
}

/// The check of one request body against its header's CRC-32C, fed the
/// body as it arrives (in pieces of any size, [`BodyCheck::arrived`]), so
/// that the checksum runs while the rest of the body is on its way. For a
/// write it yields, in the same pass, the checksums of the whole blocks
/// its data covers (the partial blocks at the data's ends are the store's
/// to recompute, from the bytes around them).
pub struct BodyCheck<'s> {
    stage: &'s dyn ChecksumStage,
    hdr: RequestHeader,
    sum: Box<dyn Running>,
    /// Body bytes added to `sum` (or to `block`) so far.
    fed: usize,
    /// For a write, once its head is in: the object offset of its data's
    /// first byte (the data starts `WRITE_HEAD_LEN` bytes into the body).
    data_offset: Option<u64>,
    /// The bytes of a whole block begun but not yet complete (kept, not
    /// reallocated, from one block to the next).
    block: Vec<u8>,
    sums: BlockSums,
}

impl<'s> BodyCheck<'s> {
    pub fn new(stage: &'s dyn ChecksumStage, hdr: &RequestHeader) -> BodyCheck<'s> {
        BodyCheck {
            stage,
            hdr: *hdr,
            sum: stage.begin(),
            fed: 0,
            data_offset: None,
            block: Vec::new(),
            sums: BlockSums::default(),
        }
    }

    /// Takes the bytes of `body` (everything received so far) not yet fed.
    pub fn arrived(&mut self, body: &[u8]) {
        let complete = body.len() == self.hdr.body_len as usize;
        if self.data_offset.is_none() && self.hdr.op == Op::Write as u8 {
            // A write's data blocks are known once its head (the offset) is in.
            if body.len() < WRITE_HEAD_LEN && !complete {
                return;
            }
            if let Ok(Request::Write { offset, .. }) =
                Request::decode(Op::Write, &body[..WRITE_HEAD_LEN.min(body.len())])
            {
                self.data_offset = Some(offset);
                self.sums.first = offset.div_ceil(BLOCK as u64);
            }
        }
        let mut new = &body[self.fed..];
        self.fed = body.len();
        let Some(offset) = self.data_offset else { return self.sum.update(new) };
        // Bytes up to the data's first block boundary go in as they are.
        let first_block = WRITE_HEAD_LEN + ((BLOCK as u64 - offset % BLOCK as u64) % BLOCK as u64) as usize;
        let plain_end = first_block.saturating_sub(self.fed - new.len()).min(new.len());
        self.sum.update(&new[..plain_end]);
        new = &new[plain_end..];
        if !self.block.is_empty() {
            let take = (BLOCK - self.block.len()).min(new.len());
            self.block.extend_from_slice(&new[..take]);
            new = &new[take..];
            if self.block.len() == BLOCK {
                self.add_block_crc(self.stage.block_crc(&self.block));
                self.block.clear();
            }
        }
        let mut blocks = new.chunks_exact(BLOCK);
        for block in &mut blocks {
            self.add_block_crc(self.stage.block_crc(block));
        }
        self.block.extend_from_slice(blocks.remainder());
    }

    fn add_block_crc(&mut self, crc: u32) {
        self.sum.update_block(crc);
        self.sums.crcs.push(crc);
    }

    /// `Ok` with the block checksums of a write's data (none for other
    /// requests) if the body matches the header's CRC-32C.
    ///
    /// A mismatch is reported as `EIO`, not `EPROTO`: the frame was well
    /// formed but its bytes were damaged on the way, which an application
    /// should see as it sees a media error. `EPROTO` stays the sign of a
    /// peer that sends malformed requests.
    pub fn finish(mut self) -> Result<BlockSums, Errno> {
        // The data's tail, short of a whole block, is checksummed as bytes.
        self.sum.update(&self.block);
        if self.fed != self.hdr.body_len as usize || self.sum.finish() != self.hdr.body_crc {
            return Err(Errno::EIO);
        }
        Ok(self.sums)
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

    /// `body` checked as if it arrived `piece` bytes at a time.
    fn check(hdr: &RequestHeader, body: &[u8], piece: usize) -> Result<BlockSums, Errno> {
        let mut check = BodyCheck::new(&InlineCrc32c, hdr);
        let mut end = 0;
        loop {
            end = (end + piece).min(body.len());
            check.arrived(&body[..end]);
            if end == body.len() {
                return check.finish();
            }
        }
    }

    #[test]
    fn accepts_the_right_crc_and_reports_eio_otherwise() {
        let body = b"some request body";
        let mut hdr = header(Op::Open as u8, body);
        assert_eq!(check(&hdr, body, body.len()), Ok(BlockSums::default()));
        hdr.body_crc ^= 1;
        assert_eq!(check(&hdr, body, 3), Err(Errno::EIO));
    }

    #[test]
    fn a_body_that_stops_short_of_its_length_is_not_accepted() {
        let body = b"some request body";
        let hdr = header(Op::Open as u8, body);
        let mut short = BodyCheck::new(&InlineCrc32c, &hdr);
        short.arrived(&body[..4]);
        assert_eq!(short.finish(), Err(Errno::EIO));
    }

    #[test]
    fn a_write_check_yields_the_crc_of_every_whole_block_it_covers_whatever_pieces_it_arrives_in() {
        let data = surge_testkit::pattern(7, 5 * BLOCK + 300);
        for offset in [0u64, 1, 100, BLOCK as u64 - 1, BLOCK as u64, 7 * BLOCK as u64 + 5] {
            let mut head = surge_proto::Encoder::new();
            let bulk = Request::Write { ino: 7, offset, data: &data }.encode(&mut head);
            let body = [&head.buf[..], bulk].concat();
            for len in [0usize, 1, 300, BLOCK, BLOCK + 1, 2 * BLOCK + 17, data.len()] {
                let body = &body[..WRITE_HEAD_LEN + len];
                let mut hdr = header(Op::Write as u8, body);
                let start = offset.div_ceil(BLOCK as u64);
                let end = (offset + len as u64) / BLOCK as u64;
                let want: Vec<u32> = (start..end.max(start))
                    .map(|k| {
                        let at = (k * BLOCK as u64 - offset) as usize;
                        crc32c::crc32c(&data[at..at + BLOCK])
                    })
                    .collect();
                for piece in [1, 5, 17, BLOCK - 1, BLOCK, 3 * BLOCK + 1, body.len().max(1)] {
                    let sums = check(&hdr, body, piece).unwrap();
                    assert_eq!((sums.first, &sums.crcs), (start, &want), "offset {offset} len {len} piece {piece}");
                }
                hdr.body_crc ^= 0x100;
                assert_eq!(check(&hdr, body, 1000), Err(Errno::EIO));
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
