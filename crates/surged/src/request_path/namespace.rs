//! The namespace family: daemon 0's file-system ops — `Open`, `Close`,
//! `Hold`, `Release`, `Evicted`, `MarkLost`, `Stat`, `Mkdir`, `Symlink`,
//! `Mknod`, `Link`, `Readlink`, `StageDir`, the xattr calls, `Rmdir`,
//! `Unlink`, `Rename`, `Readdir`, `SetLayout`, `SetAttr`, `StageBegin`,
//! `StageCommit`, `StageAbort`, `AppendLock`, `AppendUnlock`, `PfsRead`,
//! `Fsck` and `Watch` (the change feed, `crate::changes`).
//! Its state: the namespace (`None` on the other daemons, which refuse
//! these ops), the open handles and removals kept for them, the append
//! locks, the stage-out temps, the deleter's wake-up, the data manager
//! (told of opens and removals), and the PFS with the read cache for
//! `PfsRead`.
//!
//! An op joins this family by an arm in `NamespaceHandler::handle` and its
//! line in `Family::of` (`mod.rs`).

use super::{misrouted, ReplyBody};
use crate::appends::{AppendLocks, Refused};
use crate::background::Wake;
use crate::cache::{CacheKey, ReadThrough};
use crate::drain::DrainManager;
use crate::failure::Failure;
use crate::fsck::Fsck;
use crate::handles::{ClientId, Handles};
use crate::job::Job;
use crate::logging::log;
use crate::namespace::{AttrChange, FileCounts, Namespace, Shard};
use crate::pfs::Pfs;
use crate::shard::Step;
use crate::stage_temps::StageTemps;
use crate::sys::pread_full;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use surge_proto::{path, Errno, Request};

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

/// The namespace's part of the daemon's status (zeros on the daemons without one).
#[derive(Default)]
pub struct NamespaceCounts {
    pub files: u64,
    pub dirs: u64,
    pub doomed: u64,
    pub held: u64,
    pub contents: FileCounts,
}

pub struct NamespaceHandler {
    pub index: u32,
    /// This daemon's shard when the namespace is spread over the daemons (`crate::shard`).
    pub shard: Option<Shard>,
    /// Daemon 0 only (shared with its background tasks).
    pub namespace: Option<Arc<Namespace>>,
    /// Starts a round of the deleter (daemon 0): a removal doomed a file.
    pub deleter: Wake,
    /// Daemon 0: checks the namespace against the objects (`Fsck`).
    pub fsck: Option<Fsck>,
    /// Daemon 0: the data manager (BBOS, `crate::drain`).
    pub drain: Option<Arc<DrainManager>>,
    /// Daemon 0: the files clients hold open, and the removed ones kept for them.
    pub handles: Arc<Handles>,
    /// Daemon 0: who may append to which file now.
    pub appends: AppendLocks,
    /// Daemon 0: who is copying into each stage-out temp.
    pub stage_temps: Arc<StageTemps>,
    /// Daemon 0: the last count of unstaged and lost files and when it was taken.
    pub unstaged: Mutex<Option<(Instant, FileCounts)>>,
    pub pfs: Arc<Pfs>,
    /// Shared with the data family (`PfsRead` caches PFS files' bytes).
    pub cache: Arc<ReadThrough>,
    /// Largest read served at once (longer reads come back short).
    pub max_read: usize,
}

impl NamespaceHandler {
    /// Serves a namespace op of `job`; the changes it makes are the
    /// client's in the change feed (`crate::changes`), also those of an
    /// entry only on the PFS, which no database commit publishes.
    pub fn handle(&self, job: Job<'_>, req: &Request<'_>, out: &mut ReplyBody) -> Result<(), Failure> {
        let named = surge_proto::changes::made_by(req);
        crate::changes::on_behalf_of(job.client, &named, || {
            self.serve(job, req, out)?;
            if let Some(ns) = &self.namespace {
                ns.changes().publish(named.iter().cloned());
            }
            Ok(())
        })
    }

    fn serve(&self, job: Job<'_>, req: &Request<'_>, out: &mut ReplyBody) -> Result<(), Failure> {
        let ns =
            || self.namespace.as_ref().ok_or_else(|| Failure::new(Errno::EINVAL, "namespace requests go to daemon 0"));
        if let Some(shard) = self.shard {
            match (Step::of(shard, req)?, req) {
                (Step::Anchor, &Request::Mkdir { path, mode }) => {
                    out.put(&ns()?.anchor(path, mode)?);
                    return Ok(());
                }
                (Step::Unanchor, &Request::Rmdir { path }) => return ns()?.unanchor(path).map(drop),
                (_, &Request::Rename { from, .. }) => crate::shard::refuse_directory_rename(ns()?, from)?,
                _ => {}
            }
        }
        match *req {
            Request::AppendLock { ino, token, lease_ms } => {
                ns()?;
                let lease = Duration::from_millis(lease_ms.into());
                self.appends.lock(ino, token, lease).map_err(|why| match why {
                    Refused::Busy => Failure::new(
                        Errno(libc::ETIMEDOUT),
                        format!("inode {ino}'s append lock stayed held for {lease:?}"),
                    ),
                    Refused::Lost => Failure::new(
                        Errno(libc::ESTALE),
                        format!(
                            "inode {ino}'s append lock lease of this append lapsed and another append took the lock"
                        ),
                    ),
                })?;
            }
            Request::Open { path, flags, mode, layout, ref local } => {
                let attr = match &self.drain {
                    Some(drain) => drain.open(job, path, flags, mode, layout, local),
                    None => ns().and_then(|ns| ns.open_from(path, flags, mode, layout, local)),
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
                *crate::locking::lock(&self.unstaged) = None;
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
            Request::Watch { after, wait_ms } => {
                out.put(&ns()?.changes().since(after, Duration::from_millis(wait_ms.into())))
            }
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
            Request::Sync => ns()?.sync()?,
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
            Request::Fsck { repair } => {
                let fsck =
                    self.fsck.as_ref().ok_or_else(|| Failure::new(Errno::EINVAL, "fsck requests go to daemon 0"))?;
                let report = fsck.run(repair)?;
                let problems = report.findings.iter().filter(|f| f.class.is_problem()).count();
                log!(Info, self.index, "fsck{}: {problems} problem(s) found", if repair { " --repair" } else { "" });
                out.put(&report)
            }
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
            _ => return Err(misrouted(req)),
        }
        Ok(())
    }

    /// Whether this daemon keeps the namespace (daemon 0).
    pub fn is_kept(&self) -> bool {
        self.namespace.is_some()
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

    /// The namespace's part of the status; zeros without a namespace.
    pub fn counts(&self) -> Result<NamespaceCounts, Failure> {
        let Some(ns) = &self.namespace else { return Ok(NamespaceCounts::default()) };
        let ((files, dirs), (doomed, held)) = (ns.counts()?, ns.doomed_counts()?);
        Ok(NamespaceCounts { files, dirs, doomed, held, contents: self.unstaged_files(ns)? })
    }

    /// The namespace's unstaged files, counted again once `UNSTAGED_FRESH` passed.
    fn unstaged_files(&self, ns: &Namespace) -> Result<FileCounts, Failure> {
        let mut last = crate::locking::lock(&self.unstaged);
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
