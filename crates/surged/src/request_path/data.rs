//! The data family: the object ops every daemon serves on its own store —
//! `Write`, `Read`, `ObjStat`, `ObjTruncate`, `ObjSeek`, `ObjAllocate`,
//! `ObjRemove`, `ObjRetire`, `ObjReinstate`, `ObjSync`, `ObjVerify`,
//! `ObjSums`, `ObjList`, and the store side of the node-local data path's grants
//! (`begin_local_write`, `commit_local_write`; the connection keeps the
//! grants, `crate::local`). Its state: the object store behind the read cache, the
//! checksum stage (a read's reply checksum), the fence of retired inodes,
//! the write stamps, and the write rate with the wait for space.
//!
//! An op joins this family by an arm in `DataHandler::handle` and its line
//! in `Family::of` (`mod.rs`).

use super::{misrouted, ReplyBody};
use crate::cache::{CacheKey, ReadThrough, Served};
use crate::checksum::{BlockSums, ChecksumStage};
use crate::failure::Failure;
use crate::fence::Fence;
use crate::job::Job;
use crate::meter::StoreMeter;
use crate::rates::Rates;
use crate::stamp::WriteClock;
use crate::store::{ObjectStore, SpaceFreed, SpaceWatch, WriteGrant, Written};
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_proto::msg::{ObjSumsReply, SeekReply, WriteReply, MAX_SUMS};
use surge_proto::{Errno, Request};

/// Longest a write waiting for space sleeps between two tries, even when
/// the store says nothing was freed: the device's free space (its reserve,
/// `space`) also changes with files outside the store.
const SPACE_POLL: Duration = Duration::from_secs(1);

/// Scratch memory of one `ObjSums` re-read.
const SUMS_SCRATCH: u64 = 1 << 20;

pub struct DataHandler {
    pub checksum: Arc<dyn ChecksumStage>,
    pub store: Arc<dyn ObjectStore>,
    /// Shared with the namespace family's PFS reads.
    pub cache: Arc<ReadThrough>,
    /// Largest read served at once (longer reads come back short).
    pub max_read: usize,
    pub meter: Arc<StoreMeter>,
    /// Stamps every object change (a file's version comes from them).
    pub write_clock: WriteClock,
    /// The data manager's rates, enforced here (every daemon).
    pub rates: Arc<Rates>,
    /// Wakes writes waiting for space (see `write_waiting_for_space`).
    pub space_freed: Arc<SpaceFreed>,
    /// The inodes whose objects may no longer be used (evicted or removed files).
    pub fence: Fence,
}

impl DataHandler {
    /// Serves a data op of `job`; `sums` are the block checksums of a
    /// `Write`'s data (`verify_write`).
    pub fn handle(
        &self,
        job: Job<'_>,
        req: &Request<'_>,
        sums: &BlockSums,
        out: &mut ReplyBody,
    ) -> Result<(), Failure> {
        match *req {
            Request::Write { ino, offset, data } => {
                let written = self
                    .rates
                    .checkpoint_write(job.id, data.len() as u64, || self.write(job, ino, offset, data, sums))?;
                self.rates.wrote(job.id, written.bytes as u64);
                out.put(&WriteReply { written: written.bytes as u64, size_before: written.size_before });
            }
            Request::Read { ino, offset, len } => {
                let _pass = self.fence.pass(ino)?;
                let buf = out.bulk_mut((len as usize).min(self.max_read));
                // The reply's checksum comes from the blocks the store checked.
                let mut sum = self.checksum.begin();
                let served = self.cache.read(CacheKey::Object(ino), offset, buf, |buf| {
                    let timing = self.meter.begin();
                    let n = self.store.read_summed(ino, offset, buf, Some(&mut *sum))?;
                    timing.done(n as u64);
                    Ok::<_, Failure>(n)
                })?;
                match served {
                    Served::Filled(n) => out.set_bulk(n, Some(sum.finish())),
                    Served::Cache(n) => out.set_bulk(n, None),
                }
            }
            Request::ObjStat { ino } => {
                // A retired object's size is not its file's (0 once deleted).
                let _pass = self.fence.pass(ino)?;
                out.put(&self.store.stat(ino)?)
            }
            Request::ObjTruncate { ino, len } => {
                let _pass = self.fence.pass(ino)?;
                let result = self.store.truncate(ino, len);
                self.cache.invalidate(CacheKey::Object(ino), len..u64::MAX);
                let stamped = self.stamp(ino);
                result?;
                stamped?;
            }
            Request::ObjSeek { ino, offset, hole } => {
                let _pass = self.fence.pass(ino)?;
                out.put(&SeekReply(self.store.seek(ino, offset, hole)?))
            }
            Request::ObjAllocate { ino, offset, len, mode } => {
                let _pass = self.fence.pass(ino)?;
                let result = self.store.allocate(ino, offset, len, mode);
                self.cache.invalidate(CacheKey::Object(ino), offset..offset.saturating_add(len));
                let stamped = self.stamp(ino);
                result?;
                stamped?;
            }
            Request::ObjRemove { ino } => {
                let result = self.store.remove(ino);
                self.cache.invalidate(CacheKey::Object(ino), 0..u64::MAX);
                result?;
            }
            Request::ObjRetire { ino, checked, size, mtime_ns } => {
                self.fence.retire(ino, || {
                    Ok(!checked || self.store.stat(ino).map(|now| (now.size, now.mtime_ns) == (size, mtime_ns))?)
                })?;
                self.cache.invalidate(CacheKey::Object(ino), 0..u64::MAX);
            }
            Request::ObjReinstate { ino } => self.fence.reinstate(ino)?,
            Request::ObjSync { ino } => self.store.sync(ino)?,
            Request::ObjVerify { ino, offset, len } => out.put(&self.store.verify(ino, offset, len)?),
            Request::ObjSums { ino, offset, len, piece } => out.put(&self.sums(ino, offset, len, piece)?),
            Request::ObjList { after, max } => out.put(&self.store.list(after, max as usize)?),
            Request::ObjHandles { .. }
            | Request::LocalReadBegin { .. }
            | Request::LocalWriteBegin { .. }
            | Request::LocalWriteCommit { .. } => return Err(crate::local::only_over_the_local_socket(req.op())),
            _ => return Err(misrouted(req)),
        }
        Ok(())
    }

    /// Serves an `ObjSums`: the range re-read from the store in scratch
    /// pieces of at most [`SUMS_SCRATCH`] bytes (never more memory however
    /// long the range), every block checked against its checksum at rest,
    /// and each piece's CRC-32C built from those checked blocks.
    fn sums(&self, ino: u64, offset: u64, len: u64, piece: u64) -> Result<ObjSumsReply, Failure> {
        let _pass = self.fence.pass(ino)?;
        if piece == 0 {
            return Err(Failure::new(Errno::EINVAL, "ObjSums needs a piece length above 0"));
        }
        let end = offset.saturating_add(len.min(piece.saturating_mul(MAX_SUMS as u64)));
        let mut scratch = vec![0u8; piece.min(SUMS_SCRATCH) as usize];
        let mut reply = ObjSumsReply { bytes: 0, crcs: Vec::new() };
        let mut pos = offset;
        while pos < end {
            let piece_end = (pos + piece).min(end);
            let mut sum = self.checksum.begin();
            let mut at = pos;
            while at < piece_end {
                let want = ((piece_end - at) as usize).min(scratch.len());
                let got = self.store.read_summed(ino, at, &mut scratch[..want], Some(&mut *sum))?;
                at += got as u64;
                if got < want {
                    break; // the object ends here
                }
            }
            if at > pos {
                reply.crcs.push(sum.finish());
                reply.bytes += at - pos;
            }
            if at < piece_end {
                break;
            }
            pos = at;
        }
        Ok(reply)
    }

    /// Serves a `Write` (unless `ino` is retired): the store write, then the
    /// object's new stamp, all before the inode may be retired.
    fn write(&self, job: Job<'_>, ino: u64, offset: u64, data: &[u8], sums: &BlockSums) -> Result<Written, Failure> {
        let _pass = self.fence.pass(ino)?;
        let written = self.write_waiting_for_space(job, ino, offset, data, sums);
        self.cache.invalidate(CacheKey::Object(ino), offset..offset.saturating_add(data.len() as u64));
        // Even a failed write may have changed some bytes.
        let stamped = self.stamp(ino);
        let written = written?;
        stamped?;
        Ok(written)
    }

    /// Writes to the store, waiting for space (`waiting_for_space`).
    fn write_waiting_for_space(
        &self,
        job: Job<'_>,
        ino: u64,
        offset: u64,
        data: &[u8],
        sums: &BlockSums,
    ) -> Result<Written, Failure> {
        self.waiting_for_space(job, || {
            let timing = self.meter.begin();
            let written = self.store.write_summed(ino, offset, data, sums);
            timing.done(written.as_ref().map_or(0, |w| w.bytes as u64));
            written
        })
    }

    /// Runs `attempt` (a write, or a write grant); one the store refuses
    /// with ENOSPC waits for space while the data manager's last tick says
    /// so, until the end of its burst's wait (`SpaceWait`), trying again
    /// whenever the store frees some, and fails with ENOSPC as before once
    /// the wait is over.
    fn waiting_for_space<T>(
        &self,
        job: Job<'_>,
        mut attempt: impl FnMut() -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let mut waiting: Option<(SpaceWatch<'_>, Instant)> = None;
        loop {
            let done = attempt();
            if !matches!(&done, Err(full) if full.errno == Errno::ENOSPC) {
                return done;
            }
            match &mut waiting {
                None => match job.space.and_then(|space| space.deadline(self.rates.space_wait())) {
                    // Watching from now on, and at once once more: space freed
                    // since the refusal counts.
                    Some(until) => waiting = Some((self.space_freed.watch(), until)),
                    None => return done,
                },
                Some((watch, until)) if Instant::now() < *until => {
                    watch.wait(until.saturating_duration_since(Instant::now()).min(SPACE_POLL));
                }
                Some(_) => return done,
            }
        }
    }

    /// The node-local data path: what a `Write` of `len` bytes does before
    /// its data (the caller holds the fence's pass until the commit): the
    /// checkpoint rate, the wait for space, and the store's grant.
    pub fn begin_local_write(&self, job: Job<'_>, ino: u64, offset: u64, len: u64) -> Result<WriteGrant, Failure> {
        self.rates.checkpoint_write(job.id, len, || {
            self.waiting_for_space(job, || self.store.grant_write(ino, offset, len, self.write_clock.next()))
        })
    }

    /// Ends a write grant of `job`: the store records the checksums (`crcs`
    /// from the client, or its own when `None`), and, as after a `Write`,
    /// the cached bytes are dropped, the object stamped and the bytes counted.
    pub fn commit_local_write(&self, job: u64, grant: WriteGrant, crcs: Option<&[u32]>) -> Result<Written, Failure> {
        let (ino, offset, len, stamp_ns) = (grant.ino, grant.offset, grant.len, grant.stamp_ns);
        // Metered as stored here; the busy time is the commit's only (the
        // client's pwrite is not the daemon's), so local writes raise the
        // store's measured rate (`surge status`), not its busy time.
        let timing = self.meter.begin();
        let written = self.store.commit_write(grant, crcs);
        timing.done(written.as_ref().map_or(0, |w| w.bytes as u64));
        self.cache.invalidate(CacheKey::Object(ino), offset..offset.saturating_add(len));
        let stamped = self.stamp_at(ino, stamp_ns);
        let written = written?;
        stamped?;
        self.rates.wrote(job, written.bytes as u64);
        Ok(written)
    }

    /// Gives object `ino` a modification time no change had before.
    fn stamp(&self, ino: u64) -> Result<(), Failure> {
        self.stamp_at(ino, self.write_clock.next())
    }

    fn stamp_at(&self, ino: u64, stamp_ns: i64) -> Result<(), Failure> {
        self.store
            .set_mtime(ino, stamp_ns)
            .map_err(|errno| Failure::new(errno, format!("object {ino} changed, but its write stamp could not be set")))
    }
}
