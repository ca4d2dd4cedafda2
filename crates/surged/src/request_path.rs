//! The request path behind the connection: the namespace (daemon 0), or
//! the read cache in front of the object store and the PFS tier. A request
//! is registered at the scheduling point as it is read ([`RequestPath::arrive`]),
//! admitted before `handle` and holds its ticket until its reply was sent.

use crate::appends::{AppendLocks, Refused};
use crate::background::Wake;
use crate::cache::{CacheKey, ReadThrough, Served};
use crate::checksum::{BlockSums, ChecksumStage};
use crate::collector::OrphanCounts;
use crate::demotion_control::DemotionControl;
use crate::drain::DrainManager;
use crate::failure::Failure;
use crate::fence::Fence;
use crate::handles::{ClientId, Handles};
// Until the import rewrite (/work/notes/rewrite-imports.sh) points the users at crate::job.
pub use crate::job::Job;
use crate::log;
use crate::meter::StoreMeter;
use crate::namespace::{AttrChange, FileCounts, Namespace};
use crate::pfs::Pfs;
use crate::rates::Rates;
use crate::sched::{Arrival, Grant, Scheduler};
use crate::stage_out::{stage_object, StageOrder, StagedCounts};
use crate::stage_temps::StageTemps;
use crate::stamp::WriteClock;
use crate::store::{ObjectStore, SpaceFreed, SpaceWatch, Written};
use crate::sys::pread_full;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use surge_proto::msg::{DaemonStatus, DrainTickReply, JobOpStatus, JobStatus, Reply, SeekReply, WriteReply};
use surge_proto::{path, Encoder, Errno, Op, Request, RequestHeader};

/// A reply being built: encoded fields, then bulk data (the bytes of a read).
/// Both buffers are reused from request to request.
#[derive(Default)]
pub struct ReplyBody {
    head: Encoder,
    bulk: Vec<u8>,
    bulk_len: usize,
    /// The bulk's CRC-32C, when a read built it already.
    bulk_crc: Option<u32>,
}

impl ReplyBody {
    pub fn clear(&mut self) {
        self.head.buf.clear();
        self.bulk_len = 0;
        self.bulk_crc = None;
    }

    pub fn put(&mut self, reply: &impl Reply) {
        reply.encode(&mut self.head);
    }

    /// Room for `len` bytes of bulk data; say how many were filled with `set_bulk_len`.
    pub fn bulk_mut(&mut self, len: usize) -> &mut [u8] {
        if self.bulk.len() < len {
            self.bulk.resize(len, 0);
        }
        &mut self.bulk[..len]
    }

    /// Says how many bulk bytes were filled, and their CRC-32C if known.
    pub fn set_bulk(&mut self, len: usize, crc: Option<u32>) {
        self.bulk_len = len;
        self.bulk_crc = crc;
    }

    pub fn bulk_crc(&self) -> Option<u32> {
        self.bulk_crc
    }

    pub fn head(&self) -> &[u8] {
        &self.head.buf
    }

    pub fn bulk(&self) -> &[u8] {
        &self.bulk[..self.bulk_len]
    }

    /// Frees the bulk buffer if a rare large read grew it past `keep` bytes.
    pub fn trim(&mut self, keep: usize) {
        if self.bulk.len() > keep {
            self.bulk = Vec::new();
        }
    }
}

pub struct RequestPath {
    pub index: u32,
    pub checksum: Arc<dyn ChecksumStage>,
    pub scheduler: Arc<dyn Scheduler>,
    pub store: Box<dyn ObjectStore>,
    pub cache: ReadThrough,
    /// Daemon 0 only (shared with its background tasks).
    pub namespace: Option<Arc<Namespace>>,
    /// Starts a round of the deleter (daemon 0): a removal doomed a file.
    pub deleter: Wake,
    pub orphans: Arc<OrphanCounts>,
    pub pfs: Arc<Pfs>,
    /// Largest read served at once (longer reads come back short).
    pub max_read: usize,
    pub buffer: PathBuf,
    pub capacity: Option<u64>,
    pub meter: StoreMeter,
    /// Daemon 0: who may append to which file now.
    pub appends: AppendLocks,
    /// Stamps every object change (a file's version comes from them).
    pub write_clock: WriteClock,
    pub staged: StagedCounts,
    /// Daemon 0: the last count of unstaged and lost files and when it was taken.
    pub unstaged: Mutex<Option<(Instant, FileCounts)>>,
    /// Daemon 0: the data manager (BBOS, `crate::drain`).
    pub drain: Option<Arc<DrainManager>>,
    /// Daemon 0: the files clients hold open, and the removed ones kept for them.
    pub handles: Arc<Handles>,
    /// Daemon 0: who is copying into each stage-out temp.
    pub stage_temps: Arc<StageTemps>,
    /// The data manager's rates, enforced here (every daemon).
    pub rates: Rates,
    /// What holds demotion copies to the demotion rate (`--drain-rate-control`).
    pub demotion: Box<dyn DemotionControl>,
    /// Wakes writes waiting for space (see `write_waiting_for_space`).
    pub space_freed: Arc<SpaceFreed>,
    /// What this daemon's trimmer did (`drain::trimmer`), for `DrainTick`.
    pub trim: Arc<crate::drain::trimmer::TrimStatus>,
    /// The inodes whose objects may no longer be used (evicted or removed files).
    pub fence: Fence,
}

/// Longest a write waiting for space sleeps between two tries, even when
/// the store says nothing was freed: the device's free space (its reserve,
/// `space`) also changes with files outside the store.
const SPACE_POLL: Duration = Duration::from_secs(1);

/// How long a count of unstaged files is reused: counting reads the whole
/// namespace, and every `statfs` on a mount asks for the status.
const UNSTAGED_FRESH: Duration = Duration::from_secs(1);

/// How long a PFS file must have been left unchanged before its bytes may
/// be cached: a change within the same tick of the file system's clock
/// would leave its timestamps as they were (git's "racy" rule).
const PFS_SETTLED: Duration = Duration::from_secs(2);

/// The cache key of a PFS file's bytes as `meta` describes the file;
/// `None` while it may still be changing (see `PFS_SETTLED`).
fn settled_pfs_file(meta: &std::fs::Metadata) -> Option<CacheKey> {
    let changed = SystemTime::UNIX_EPOCH + Duration::new(meta.ctime().max(0) as u64, meta.ctime_nsec() as u32);
    if changed.elapsed().ok()? < PFS_SETTLED {
        return None;
    }
    Some(CacheKey::PfsFile {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
    })
}

impl RequestPath {
    /// Registers a request just read off its connection at the scheduling
    /// point; the connection admits it ([`Arrival::admit`]) when its turn
    /// on the connection comes, and holds the ticket until the reply has
    /// been sent. `None` for the session requests, which are the
    /// connection's, and for `AppendLock`, which waits for the lock outside
    /// the scheduling point (a blocked append holds no slot).
    pub fn arrive(&self, hdr: &RequestHeader) -> Option<Arrival<'_>> {
        let op = Op::from_u8(hdr.op)?;
        // A `DrainTick` steers the rates: it must not queue behind the data it paces.
        let scheduled =
            !matches!(op, Op::Hello | Op::Auth | Op::Status | Op::Shutdown | Op::AppendLock | Op::DrainTick);
        scheduled.then(|| Arrival::new(&*self.scheduler, Grant { job: hdr.job_id, op, io_size: hdr.io_size }))
    }

    /// Serves a file-system request of `job` (the session requests are the
    /// connection's); `sums` are the block checksums of a `Write`'s data
    /// (`verify_write`).
    pub fn handle(
        &self,
        job: Job<'_>,
        req: &Request<'_>,
        sums: &BlockSums,
        out: &mut ReplyBody,
    ) -> Result<(), Failure> {
        let ns =
            || self.namespace.as_ref().ok_or_else(|| Failure::new(Errno::EINVAL, "namespace requests go to daemon 0"));
        let drain =
            || self.drain.as_deref().ok_or_else(|| Failure::new(Errno::EINVAL, "drain status is kept by daemon 0"));
        if let Request::AppendLock { ino, token, lease_ms } = *req {
            ns()?;
            let lease = Duration::from_millis(lease_ms.into());
            return self.appends.lock(ino, token, lease).map_err(|why| match why {
                Refused::Busy => {
                    Failure::new(Errno(libc::ETIMEDOUT), format!("inode {ino}'s append lock stayed held for {lease:?}"))
                }
                Refused::Lost => Failure::new(
                    Errno(libc::ESTALE),
                    format!("inode {ino}'s append lock lease of this append lapsed and another append took the lock"),
                ),
            });
        }
        match *req {
            Request::Open { path, flags, mode, layout } => {
                let attr = match &self.drain {
                    Some(drain) => drain.open(job, path, flags, mode, layout),
                    None => ns().and_then(|ns| ns.open(path, flags, mode, layout)),
                };
                // A file removed while this open was under way may be free now, whatever the open's outcome.
                self.release_unheld();
                out.put(&attr?);
            }
            Request::Close { ino } => {
                ns()?;
                self.handles.closed(job.client, ino);
                self.release_unheld();
            }
            Request::Hold { ref inos } => {
                ns()?;
                if job.client != ClientId::DAEMON {
                    self.handles.hold(job.client, inos);
                }
            }
            Request::Evicted { path, ino } => {
                ns()?;
                let drain = self.drain.as_deref().ok_or_else(|| {
                    Failure::new(
                        Errno(libc::ESTALE),
                        format!("inode {ino}: nothing is evicted without the data manager"),
                    )
                })?;
                out.put(&drain.evicted_copy(path, ino)?);
            }
            Request::MarkLost { daemon, whole, ref inos } => {
                let reply = ns()?.mark_lost(daemon, whole, inos)?;
                *crate::lock(&self.unstaged) = None;
                log!(
                    Warn,
                    self.index,
                    "daemon {daemon} came back without {}: {} file(s) marked lost",
                    if whole { "its store".to_string() } else { format!("{} object(s)", inos.len()) },
                    reply.files
                );
                out.put(&reply);
            }
            Request::Stat { path } => out.put(&ns()?.stat(path)?),
            Request::Mkdir { path, mode } => out.put(&ns()?.mkdir(path, mode)?),
            Request::Symlink { path, target } => out.put(&ns()?.symlink(path, target)?),
            Request::Mknod { path, kind, mode, rdev, uid, gid } => {
                out.put(&ns()?.mknod(path, kind, mode, rdev, uid, gid)?)
            }
            Request::Link { from, to } => out.put(&ns()?.link(from, to)?),
            Request::Readlink { path } => out.put(&ns()?.readlink(path)?),
            Request::StageDir { path } => out.put(&ns()?.stage_dir(path)?),
            Request::GetXattr { path, name } => out.put(&ns()?.get_xattr(path, name)?),
            Request::ListXattr { path } => out.put(&ns()?.list_xattr(path)?),
            Request::SetXattr { path, name, value, flags } => ns()?.set_xattr(path, name, Some(value), flags)?,
            Request::RemoveXattr { path, name } => ns()?.set_xattr(path, name, None, 0)?,
            Request::Rmdir { path } => ns()?.rmdir(path)?,
            Request::Unlink { path, keep } => {
                let _removing = self.removing(path);
                out.put(&ns()?.unlink(path, self.keep_removed(keep))?);
                if let Some(drain) = &self.drain {
                    drain.removed(path);
                    drain.replica_removed(path);
                }
                self.deleter.wake();
            }
            Request::Rename { from, to, keep } => {
                let _removing = self.removing(to);
                out.put(&ns()?.rename(from, to, self.keep_removed(keep))?);
                if let Some(drain) = &self.drain {
                    drain.renamed(from, to);
                    drain.replica_renamed(from, to);
                }
                self.deleter.wake();
            }
            Request::Release { ino } => {
                // Held by another client (or this one again): its last close releases it.
                if self.handles.releasable(ino) {
                    ns()?.release(ino)?;
                    self.deleter.wake();
                }
            }
            Request::Readdir { path, after, max } => out.put(&ns()?.readdir(path, after, max)?),
            Request::SetLayout { path, layout } => out.put(&ns()?.set_layout(path, layout)?),
            Request::SetAttr { path, mode, uid, gid, atime_ns, mtime_ns } => {
                out.put(&ns()?.set_attr(path, &AttrChange { mode, uid, gid, atime_ns, mtime_ns })?)
            }
            Request::StageBegin { path, size } => {
                let ns = ns()?;
                out.put(&self.stage_temps.begin(job.client, || ns.stage_begin(path, size))?)
            }
            Request::StageCommit { path, ino, temp, size, version, objects_mtime_ns } => {
                // Committed, or refused and the temp removed: the stage-out has ended either way.
                let committed = ns()?.stage_commit(path, ino, temp, size, version, objects_mtime_ns);
                self.stage_out_ended(temp);
                out.put(&committed?)
            }
            Request::StageAbort { temp } => {
                ns()?.stage_abort(temp)?;
                self.stage_out_ended(temp);
            }
            Request::AppendLock { .. } => unreachable!("served above"),
            Request::AppendUnlock { ino, token } => {
                ns()?;
                if !self.appends.unlock(ino, token) {
                    return Err(Failure::new(
                        Errno(libc::ESTALE),
                        format!("inode {ino}'s append lock was not held by this append"),
                    ));
                }
            }
            Request::PfsRead { path, offset, len } => {
                let ns = ns()?; // a namespace request, though the PFS is reachable from every daemon
                let path =
                    path::canonical(path).map_err(|errno| Failure::new(errno, format!("invalid path {path:?}")))?;
                let (file, meta) = self.pfs.open_file(&path)?;
                if let Some(now) = crate::pfs::node_of(&meta) {
                    ns.check_copy_read(&path, &now)?;
                }
                let buf = out.bulk_mut((len as usize).min(self.max_read));
                let read = |buf: &mut [u8]| pread_full(&file, buf, offset);
                let n = match settled_pfs_file(&meta) {
                    Some(key) => self.cache.read(key, offset, buf, read)?.bytes(),
                    None => read(buf)?,
                };
                out.set_bulk(n, None);
            }
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
            Request::ObjList { after, max } => out.put(&self.store.list(after, max as usize)?),
            Request::ObjStage { ino, layout, stripe, temp, object_offset, len } => {
                let order = StageOrder { ino, layout, stripe, temp, object_offset, len };
                let demotion = job.id == crate::peers::BACKGROUND_JOB;
                let pacing = demotion.then(|| self.demotion.pacing());
                let staged = stage_object(&*self.store, &self.pfs, &*self.checksum, &order, pacing.as_ref())?;
                self.staged.add(&staged);
                if demotion {
                    self.rates.demoted(staged.bytes);
                }
                out.put(&staged);
            }
            Request::DrainTick { checkpoint_bps, demote_bps, direct_bps, wait_for_space_ms } => {
                self.rates.set(checkpoint_bps, direct_bps, wait_for_space_ms);
                self.demotion.set_rate(demote_bps);
                let device_size = surge_cluster::fs_space(&self.buffer).map_or(0, |(size, _)| size);
                out.put(&DrainTickReply {
                    written: self.rates.written(),
                    demoted_bytes: self.rates.demoted_bytes(),
                    used: self.store.usage().bytes,
                    capacity: self.capacity.unwrap_or(device_size),
                    rate_control: self.demotion.in_force().into(),
                    trim: self.trim.report(),
                });
            }
            Request::DrainStatus => out.put(&drain()?.report()?),
            Request::SetMtbf { job, seconds } => drain()?.set_mtbf(job, seconds)?,
            Request::PfsWrite { path, offset, data } => {
                out.put(&drain()?.write_direct(path, offset, data, &self.rates.direct)?)
            }
            Request::PfsSync { path } => drain()?.sync_direct(path)?,
            Request::Hello { .. } | Request::Auth { .. } | Request::Status | Request::Shutdown => {
                return Err(Failure::new(Errno::EPROTO, "session request outside the session handshake"));
            }
        }
        Ok(())
    }

    /// A removal from `path` under way (`Handles::removing`); none for a
    /// path that is not valid (the namespace refuses it).
    fn removing(&self, path: &str) -> Option<crate::handles::Removing<'_>> {
        path::canonical(path).ok().map(|path| self.handles.removing(&path))
    }

    /// Whether a removal keeps the file it removes: its remover has it open
    /// (`keep`, released by its `Release`), or a client holds it or is
    /// opening its path (released by its last close, `release_unheld`).
    fn keep_removed(&self, keep: bool) -> impl Fn(&str, u64) -> bool + '_ {
        move |path, ino| self.handles.keep(path, ino) || keep
    }

    fn stage_out_ended(&self, temp: &str) {
        if let Ok(temp) = path::canonical(temp) {
            self.stage_temps.ended(&temp);
        }
    }

    /// Removes the temps of the stage-outs `client` began and did not
    /// finish: its last connection to daemon 0 ended (it exited or was
    /// killed mid-copy). A temp that cannot be removed now stays recorded
    /// for the orphan collector.
    pub fn abandon_stage_outs(&self, client: ClientId) {
        let Some(ns) = &self.namespace else { return };
        for temp in self.stage_temps.abandoned_by(client) {
            match ns.stage_abort(&temp) {
                Ok(()) => log!(Info, self.index, "stage-out into {temp} abandoned by its client: the temp is removed"),
                Err(failure) => {
                    log!(Warn, self.index, "stage-out into {temp} abandoned; its temp stays for now: {failure}")
                }
            }
        }
    }

    /// Gives the deleter the removed files kept until their last handle
    /// closed (daemon 0: after a `Close`, an `Open`, a client gone). A
    /// failure leaves them kept until their hold lease ends.
    pub fn release_unheld(&self) {
        let Some(ns) = &self.namespace else { return };
        let unheld = self.handles.take_unheld();
        if unheld.is_empty() {
            return;
        }
        for ino in unheld {
            if let Err(failure) = ns.release(ino) {
                log!(Warn, self.index, "removed inode {ino} stays until its hold lease ends: {failure}");
            }
        }
        self.deleter.wake();
    }

    /// Serves a request this daemon's background tasks make of it (through
    /// `peers`), as one from the network but past the scheduling point
    /// (background work is not a job's): the reply's fields (no bulk
    /// data), or the failure.
    pub fn call_locally(&self, req: &Request<'_>) -> Result<Vec<u8>, Failure> {
        let mut out = ReplyBody::default();
        self.handle(Job::BACKGROUND, req, &BlockSums::default(), &mut out)?;
        Ok(out.head().to_vec())
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

    /// Writes to the store; a write the store refuses with ENOSPC waits for
    /// space while the data manager's last tick says so, until the end of
    /// its burst's wait (`SpaceWait`), trying again whenever
    /// the store frees some, and fails with ENOSPC as before once the wait
    /// is over.
    fn write_waiting_for_space(
        &self,
        job: Job<'_>,
        ino: u64,
        offset: u64,
        data: &[u8],
        sums: &BlockSums,
    ) -> Result<Written, Failure> {
        let mut waiting: Option<(SpaceWatch<'_>, Instant)> = None;
        loop {
            let timing = self.meter.begin();
            let written = self.store.write_summed(ino, offset, data, sums);
            timing.done(written.as_ref().map_or(0, |w| w.bytes as u64));
            if !matches!(&written, Err(full) if full.errno == Errno::ENOSPC) {
                return written;
            }
            match &mut waiting {
                None => match job.space.and_then(|space| space.deadline(self.rates.space_wait())) {
                    // Watching from now on, and at once once more: space freed
                    // since the refusal counts.
                    Some(until) => waiting = Some((self.space_freed.watch(), until)),
                    None => return written,
                },
                Some((watch, until)) if Instant::now() < *until => {
                    watch.wait(until.saturating_duration_since(Instant::now()).min(SPACE_POLL));
                }
                Some(_) => return written,
            }
        }
    }

    /// Gives object `ino` a modification time no change had before.
    fn stamp(&self, ino: u64) -> Result<(), Failure> {
        self.store
            .set_mtime(ino, self.write_clock.next())
            .map_err(|errno| Failure::new(errno, format!("object {ino} changed, but its write stamp could not be set")))
    }

    /// The storage and namespace part of the daemon's status.
    pub fn status(&self) -> Result<DaemonStatus, Failure> {
        let usage = self.store.usage();
        // The status stays useful when statvfs fails: it reports zeros.
        let (device_size, device_free) = surge_cluster::fs_space(&self.buffer).unwrap_or((0, 0));
        let (store_bytes, store_busy_ns) = self.meter.totals();
        let ((files, dirs), (doomed, held), contents) = match &self.namespace {
            Some(ns) => (ns.counts()?, ns.doomed_counts()?, self.unstaged_files(ns)?),
            None => ((0, 0), (0, 0), FileCounts::default()),
        };
        let jobs = self.scheduler.jobs();
        Ok(DaemonStatus {
            index: self.index,
            is_metadata: self.namespace.is_some(),
            objects: usage.objects,
            bytes_used: usage.bytes,
            capacity: self.capacity.unwrap_or(device_size),
            device_free,
            files,
            dirs,
            buffer_dir: self.buffer.display().to_string(),
            store_bytes,
            store_busy_ns,
            doomed,
            held,
            orphans_found: self.orphans.found.load(Ordering::Relaxed),
            orphans_collected: self.orphans.collected.load(Ordering::Relaxed),
            jobs: jobs
                .iter()
                .map(|l| JobStatus {
                    job: l.job,
                    waiting: l.waiting,
                    in_service: l.in_service,
                    requests: l.requests,
                    bytes: l.bytes,
                })
                .collect(),
            job_ops: jobs
                .iter()
                .flat_map(|l| {
                    l.by_op.served().map(|(op, load)| JobOpStatus {
                        job: l.job,
                        op: op as u8,
                        requests: load.requests,
                        bytes: load.bytes,
                    })
                })
                .collect(),
            staged_bytes: self.staged.bytes.load(Ordering::Relaxed),
            staged_objects: self.staged.objects.load(Ordering::Relaxed),
            unstaged_files: contents.unstaged,
            lost_files: contents.lost,
            ..DaemonStatus::default()
        })
    }

    /// The namespace's unstaged files, counted again once `UNSTAGED_FRESH` passed.
    fn unstaged_files(&self, ns: &Namespace) -> Result<FileCounts, Failure> {
        let mut last = crate::lock(&self.unstaged);
        match *last {
            Some((when, count)) if when.elapsed() < UNSTAGED_FRESH => Ok(count),
            _ => {
                let count = ns.unstaged_files()?;
                *last = Some((Instant::now(), count));
                Ok(count)
            }
        }
    }
}
