//! The checksum stage: every checksum the daemon computes or checks passes
//! it. Every request body is checked against the CRC-32C in its header
//! before it is decoded, so corruption between the client's buffer and the
//! store is caught (end-to-end integrity); every reply carries one. The
//! same stage computes the per-block checksums the store keeps beside the
//! data (see `blocksums`): for a write, in the pass that checks the body,
//! so the data is read once; a read checks its blocks against them and
//! builds its reply's checksum from theirs ([`Running::update_blocks`]), so
//! it too reads the data once.
//!
//! Block checksums are asked for in batches ([`ChecksumStage::sum_blocks`]
//! over [`Batch`]es: the blocks a piece of a write body completes, the
//! blocks a read or a scrub checks, a write's edge blocks together), so an
//! implementation can spread them over threads ([`ThreadedCrc32c`]) or a
//! pipeline; [`InlineCrc32c`] takes them one after the other on the
//! caller's thread. Running checksums ([`ChecksumStage::begin`]) take
//! bytes as they come and whole blocks by their checksums: the connection
//! feeds a request body to a [`BodyCheck`] in pieces as they arrive, so the
//! checksum runs while the rest of the body is on its way.
//!
//! To plug in a stage, implement [`ChecksumStage`] (`begin`, `sum_blocks`)
//! and register it in [`crate::stages::CHECKSUMS`].

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

/// Consecutive blocks to checksum in one call: `data` cut into `BLOCK`-byte
/// blocks, block `i`'s checksum going to `crcs[i]`. The bytes a block lacks
/// past `data`'s end count as zeros: a short block at an object's end, or a
/// block of zeros given as no bytes at all, so growing an object does not
/// change a checksum.
pub struct Batch<'a> {
    data: &'a [u8],
    crcs: &'a mut [u32],
}

impl<'a> Batch<'a> {
    /// Panics when `data` holds more than `crcs.len()` blocks: a caller's
    /// bug (a checksum would be lost), not bad input.
    pub fn new(data: &'a [u8], crcs: &'a mut [u32]) -> Batch<'a> {
        assert!(data.len() <= crcs.len() * BLOCK, "{} bytes do not fit {} blocks", data.len(), crcs.len());
        Batch { data, crcs }
    }

    /// How many blocks the batch has.
    pub fn blocks(&self) -> usize {
        self.crcs.len()
    }

    /// The bytes of block `i`: `BLOCK` of them, or fewer (even none) past
    /// the data's end, which count as zeros.
    pub fn block(&self, i: usize) -> &'a [u8] {
        let data: &'a [u8] = self.data;
        &data[(i * BLOCK).min(data.len())..((i + 1) * BLOCK).min(data.len())]
    }

    /// Puts `crc` as the checksum of block `i`.
    pub fn set(&mut self, i: usize, crc: u32) {
        self.crcs[i] = crc;
    }

    /// The batch borrowed again, for a shorter while (to split it).
    pub fn reborrow(&mut self) -> Batch<'_> {
        Batch { data: self.data, crcs: self.crcs }
    }

    /// The first `blocks` blocks, and the rest.
    pub fn split_at(self, blocks: usize) -> (Batch<'a>, Batch<'a>) {
        let (front, back) = self.crcs.split_at_mut(blocks);
        let cut = (blocks * BLOCK).min(self.data.len());
        (Batch { data: &self.data[..cut], crcs: front }, Batch { data: &self.data[cut..], crcs: back })
    }
}

/// A checksum over bytes given in order, as they arrive.
pub trait Running: Send {
    /// Adds the next bytes.
    fn update(&mut self, bytes: &[u8]);
    /// Adds the next `crcs.len()` whole blocks by their checksums (as
    /// [`ChecksumStage::sum_blocks`] gives them), without reading them
    /// again: bytes checksummed once as blocks (a write's, or a read's
    /// checked against their checksums at rest) cost nothing more.
    fn update_blocks(&mut self, crcs: &[u32]);
    /// The CRC-32C of everything added so far.
    fn finish(&self) -> u32;
}

/// Every checksum the daemon computes or checks goes through this stage:
/// request and reply bodies, checksums at rest (`blocksums`), stage-out
/// copies. Block checksums are asked for in batches (a request's blocks,
/// or several requests'), so an implementation may spread a batch over
/// threads ([`ThreadedCrc32c`]); a running checksum takes the blocks back
/// by their checksums ([`Running::update_blocks`]), so a body's or a
/// reply's checksum costs one pass over its bytes, whichever thread made
/// it. To plug one in, implement `begin` and `sum_blocks` and register it in
/// [`crate::stages::CHECKSUMS`]; [`InlineCrc32c`] is the default.
pub trait ChecksumStage: Send + Sync {
    /// An empty running checksum.
    fn begin(&self) -> Box<dyn Running>;

    /// Fills the checksums of every block of every batch, returning once
    /// all are in. A block's checksum is its CRC-32C with the bytes it
    /// lacks counted as zeros ([`Batch`]).
    fn sum_blocks(&self, batches: &mut [Batch<'_>]);
}

impl dyn ChecksumStage + '_ {
    /// The checksums of the blocks of `data` into `crcs` (one batch).
    pub fn block_crcs(&self, data: &[u8], crcs: &mut [u32]) {
        self.sum_blocks(&mut [Batch::new(data, crcs)]);
    }

    /// The checksum of one block's bytes, `data.len() <= BLOCK` (a batch
    /// of one: an edge of a write, a block a change re-checks).
    pub fn block_crc(&self, data: &[u8]) -> u32 {
        let mut crc = [0];
        self.block_crcs(data, &mut crc);
        crc[0]
    }
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
                // One allocation for the request's block checksums, not one per piece.
                self.sums.crcs.reserve((self.hdr.body_len as usize).saturating_sub(WRITE_HEAD_LEN) / BLOCK);
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
        // The block begun in an earlier piece, if this one completes it,
        // and the whole blocks after it: one batch of the request's blocks.
        let mut completed = false;
        if !self.block.is_empty() {
            let take = (BLOCK - self.block.len()).min(new.len());
            self.block.extend_from_slice(&new[..take]);
            new = &new[take..];
            completed = self.block.len() == BLOCK;
        }
        let (held, whole) = (usize::from(completed), new.len() / BLOCK);
        if held + whole > 0 {
            let done = self.sums.crcs.len();
            self.sums.crcs.resize(done + held + whole, 0);
            let (held_crc, whole_crcs) = self.sums.crcs[done..].split_at_mut(held);
            let held_bytes: &[u8] = if completed { &self.block } else { &[] };
            self.stage
                .sum_blocks(&mut [Batch::new(held_bytes, held_crc), Batch::new(&new[..whole * BLOCK], whole_crcs)]);
            self.sum.update_blocks(&self.sums.crcs[done..]);
        }
        if completed {
            self.block.clear();
        }
        self.block.extend_from_slice(&new[whole * BLOCK..]);
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

    fn sum_blocks(&self, batches: &mut [Batch<'_>]) {
        for batch in batches {
            crc32c_here(batch);
        }
    }
}

/// Fills `batch`'s checksums with CRC-32C on the calling thread.
fn crc32c_here(batch: &mut Batch<'_>) {
    static ZEROS: [u8; BLOCK] = [0; BLOCK];
    for i in 0..batch.blocks() {
        let data = batch.block(i);
        let crc = crc32c::crc32c(data);
        batch.set(i, crc32c::crc32c_append(crc, &ZEROS[..BLOCK - data.len()]));
    }
}

/// The CRC-32C of what was added so far (0 for nothing).
struct InlineRunning(u32);

impl Running for InlineRunning {
    fn update(&mut self, bytes: &[u8]) {
        self.0 = crc32c::crc32c_append(self.0, bytes);
    }

    fn update_blocks(&mut self, crcs: &[u32]) {
        // CRC(a ++ b) = shift(CRC(a), len b) ^ CRC(b).
        self.0 = crcs.iter().fold(self.0, |crc, &block_crc| after_a_block(crc) ^ block_crc);
    }

    fn finish(&self) -> u32 {
        self.0
    }
}

/// CRC-32C with the blocks of a batch spread over a fixed pool of threads:
/// the calling thread hands the pool its helpers' shares, checksums the
/// last share itself and returns when all are in. A share is at least
/// [`ThreadedCrc32c::MIN_SHARE`] blocks, so smaller batches (a write body's
/// 64 KiB pieces as they arrive, a write's edge blocks) stay on the calling
/// thread, where handing them over would cost about as much as the CRC.
/// Running checksums stay on the calling thread: they take the blocks by
/// their checksums.
pub struct ThreadedCrc32c {
    /// The threads a batch may be spread over, the caller's among them.
    threads: usize,
    /// `threads - 1` helpers.
    pool: rayon::ThreadPool,
}

impl ThreadedCrc32c {
    /// Fewest blocks worth handing to another thread: 64 KiB, which the
    /// hardware CRC takes a few microseconds for, about what waking a
    /// parked thread costs.
    pub const MIN_SHARE: usize = 16;

    /// A stage that spreads a batch over `threads` threads, the calling one
    /// among them (1: all on the calling thread, as [`InlineCrc32c`]).
    pub fn new(threads: usize) -> Result<ThreadedCrc32c, String> {
        if threads == 0 {
            return Err("crc32c-threads: threads must be at least 1 (1 checksums on the connection's thread)".into());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads - 1)
            .thread_name(|i| format!("surged-crc{i}"))
            .build()
            .map_err(|e| format!("crc32c-threads: cannot start {} checksum threads: {e}", threads - 1))?;
        Ok(ThreadedCrc32c { threads, pool })
    }

    /// The threads a batch may be spread over, the caller's among them.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl ChecksumStage for ThreadedCrc32c {
    fn begin(&self) -> Box<dyn Running> {
        Box::new(InlineRunning(0))
    }

    fn sum_blocks(&self, batches: &mut [Batch<'_>]) {
        let total: usize = batches.iter().map(Batch::blocks).sum();
        let parts = self.threads.min(total / Self::MIN_SHARE);
        if parts <= 1 {
            return batches.iter_mut().for_each(crc32c_here);
        }
        let share = total.div_ceil(parts);
        self.pool.in_place_scope(|scope| {
            // The helpers take the blocks in front, a share each (a share
            // may straddle two batches: two jobs); the caller the rest.
            let mut to_hand = total - share;
            let mut in_share = 0;
            for batch in batches.iter_mut() {
                let mut rest = batch.reborrow();
                while to_hand > 0 && rest.blocks() > 0 {
                    let take = rest.blocks().min(share - in_share).min(to_hand);
                    let (mut piece, after) = rest.split_at(take);
                    scope.spawn(move |_| crc32c_here(&mut piece));
                    rest = after;
                    to_hand -= take;
                    in_share = (in_share + take) % share;
                }
                crc32c_here(&mut rest);
            }
        });
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
        check_by(&InlineCrc32c, hdr, body, piece)
    }

    /// `check` through `stage`.
    fn check_by(stage: &dyn ChecksumStage, hdr: &RequestHeader, body: &[u8], piece: usize) -> Result<BlockSums, Errno> {
        let mut check = BodyCheck::new(stage, hdr);
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

    /// Block `i` of `data` padded with zeros to `BLOCK`, checksummed byte by byte.
    fn padded_crc(data: &[u8], i: usize) -> u32 {
        let mut block = [0u8; BLOCK];
        let bytes = &data[(i * BLOCK).min(data.len())..((i + 1) * BLOCK).min(data.len())];
        block[..bytes.len()].copy_from_slice(bytes);
        crc32c::crc32c(&block)
    }

    /// Lengths a batch comes in: empty, a short block, one block, a partial
    /// last block, 256 blocks (a 1 MiB request), and past it.
    const LENGTHS: [usize; 7] = [0, 3, BLOCK, 5 * BLOCK + 17, 256 * BLOCK, 256 * BLOCK + 1, 301 * BLOCK - 9];

    /// The checksums `stage` gives for the blocks of `data`.
    fn crcs_of(stage: &dyn ChecksumStage, data: &[u8]) -> Vec<u32> {
        let mut crcs = vec![0; data.len().div_ceil(BLOCK)];
        stage.block_crcs(data, &mut crcs);
        crcs
    }

    #[test]
    fn a_batch_holds_the_crc_of_each_of_its_blocks_with_a_short_last_block_padded_with_zeros() {
        // Read from an odd address too: a batch need not be aligned in memory.
        let buffer = surge_testkit::pattern(3, 301 * BLOCK + 1);
        for len in LENGTHS {
            let data = &buffer[1..1 + len];
            let want: Vec<u32> = (0..len.div_ceil(BLOCK)).map(|i| padded_crc(data, i)).collect();
            assert_eq!(crcs_of(&InlineCrc32c, data), want, "{len} bytes");
        }
        let stage: &dyn ChecksumStage = &InlineCrc32c;
        assert_eq!(stage.block_crc(b"abc"), padded_crc(b"abc", 0));
        assert_eq!(stage.block_crc(&[]), crc32c::crc32c(&[0u8; BLOCK]), "no bytes: a block of zeros");
    }

    #[test]
    #[should_panic(expected = "do not fit")]
    fn a_batch_with_more_bytes_than_blocks_is_refused() {
        let mut crcs = [0u32; 1];
        Batch::new(&[0u8; BLOCK + 1], &mut crcs);
    }

    #[test]
    fn the_threaded_stage_gives_what_the_inline_one_gives_for_one_batch_or_several() {
        let buffer = surge_testkit::pattern(5, 301 * BLOCK + 1);
        for threads in [1, 2, 3, 8] {
            let stage = ThreadedCrc32c::new(threads).unwrap();
            assert_eq!(stage.threads(), threads);
            for len in LENGTHS {
                let data = &buffer[1..1 + len];
                assert_eq!(crcs_of(&stage, data), crcs_of(&InlineCrc32c, data), "{threads} threads, {len} bytes");
            }
            // Several requests' batches in one call, shares straddling them.
            let pieces = [&buffer[..40 * BLOCK], &buffer[7..7 + 3], &buffer[1..200 * BLOCK + 1], &buffer[..0]];
            let mut crcs: Vec<Vec<u32>> = pieces.iter().map(|piece| vec![0; piece.len().div_ceil(BLOCK)]).collect();
            let mut batches: Vec<Batch> =
                pieces.iter().zip(&mut crcs).map(|(piece, crcs)| Batch::new(piece, crcs)).collect();
            stage.sum_blocks(&mut batches);
            for (piece, crcs) in pieces.iter().zip(&crcs) {
                assert_eq!(crcs, &crcs_of(&InlineCrc32c, piece), "{threads} threads, {} bytes", piece.len());
            }
        }
    }

    #[test]
    fn a_threaded_stage_with_no_threads_is_refused_with_what_to_give() {
        let message = ThreadedCrc32c::new(0).err().unwrap();
        assert!(message.contains("at least 1"), "{message}");
    }

    #[test]
    fn blocks_added_by_their_crcs_give_the_crc_of_their_bytes() {
        let data = surge_testkit::pattern(9, 70 * BLOCK);
        let crcs = crcs_of(&InlineCrc32c, &data);
        for stage in [&InlineCrc32c as &dyn ChecksumStage, &ThreadedCrc32c::new(2).unwrap()] {
            let mut sum = stage.begin();
            sum.update(b"head");
            sum.update_blocks(&crcs[..1]);
            sum.update_blocks(&crcs[1..]);
            sum.update_blocks(&[]);
            sum.update(b"tail");
            assert_eq!(sum.finish(), crc32c::crc32c(&[&b"head"[..], &data, b"tail"].concat()));
        }
    }

    #[test]
    fn a_body_checked_by_the_threaded_stage_yields_the_same_block_crcs() {
        let data = surge_testkit::pattern(11, 257 * BLOCK);
        let mut head = surge_proto::Encoder::new();
        let bulk = Request::Write { ino: 7, offset: 5, data: &data }.encode(&mut head);
        let body = [&head.buf[..], bulk].concat();
        let hdr = header(Op::Write as u8, &body);
        let stage = ThreadedCrc32c::new(4).unwrap();
        for piece in [BLOCK + 3, 64 * 1024, body.len()] {
            let threaded = check_by(&stage, &hdr, &body, piece);
            assert_eq!(threaded, check(&hdr, &body, piece), "piece {piece}");
            assert_eq!(threaded.unwrap().crcs.len(), 256);
        }
    }
}
