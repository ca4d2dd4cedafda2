//! The replicator of [Sung20, §5.2.1] (`--drain-replica DIR`): a second
//! copy of every demoted file, in DIR under the file's path (a directory
//! on another device or node: the seed's remote storage node of the same
//! replication group, reached over its own network). The demoter lists a
//! file in R-order once its demotion is verified; this task, one in daemon
//! 0, takes the files in turn, copies each one's PFS copy with
//! `copy_file_range` (read and write where the kernel cannot copy between
//! the two file systems) into a hidden temp beside the replica, at the
//! pace of its own bucket (`--drain-replica-rate`, unlimited by default),
//! makes it durable, drops it from the page cache and reads it back: its
//! CRC-32C must be that of the PFS copy it came from. Only then is the
//! temp renamed into place and the file dropped from R-order, so a replica
//! is never seen half made and a daemon killed mid-copy finds the file
//! still listed after its restart (`resume` lists a file whose demotion
//! committed just before the kill, too).
//!
//! A file demoted again is listed again (at the tail, once) and replicated
//! again. Removing a file removes its replica and drops it from R-order;
//! a rename moves the replica (one rename(2) on the replica device) and
//! the listed names under it. Either, or a newer demotion, while the file
//! is being copied makes the copy stale: it is thrown away, not renamed
//! into place. A failure (the directory missing or unwritable, its device
//! full) leaves the file listed, behind the others, and ends the round:
//! the next round, a period later, tries again. A file whose PFS copy is
//! gone (removed behind Surge's back) is dropped, and counts as a failure.
//! DIR itself must exist (the directories under it are made as needed):
//! a remote file system that is not mounted does not fill the local disk.
//! Eviction does not wait for replicas: as in the seed, replication is
//! asynchronous, and the buffer copy's eviction needs only the verified
//! PFS copy.

use super::manager::DrainManager;
use super::replicas::{io_failure, temp_of, under, Replicas};
use crate::background::{Context, Task};
use crate::failure::Failure;
use crate::locking::lock;
use crate::logging::log;
use crate::sys;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_proto::{path, Errno};

/// Time between rounds when no demotion wakes the replicator: a failed
/// replication is tried again after it.
const PERIOD: Duration = Duration::from_secs(1);

/// What one replication came to.
enum Outcome {
    Replicated(u64),
    /// Overtaken while copied: the copy was thrown away.
    Stale,
    /// No PFS copy to replicate.
    Gone,
}

impl DrainManager {
    /// A demoted file (`path`) to replicate: listed in R-order, a copy of
    /// an older version under way made stale.
    pub(super) fn replicate_later(&self, path: &str) {
        let Some(replicas) = &self.replicas else { return };
        let mut progress = lock(&replicas.progress);
        progress.overtake(path);
        self.with_state("push to R-order", |s| s.push_replication(path));
        drop(progress);
        replicas.wake.wake();
    }

    /// `Unlink` of `path` succeeded: its replica goes too.
    pub fn replica_removed(&self, path: &str) {
        let (Some(replicas), Ok(path)) = (&self.replicas, path::canonical(path)) else { return };
        let path = path.as_str();
        let mut progress = lock(&replicas.progress);
        progress.overtake(path);
        self.with_state("remove from R-order", |s| s.remove_replication(path));
        // With the temp a daemon killed mid-copy may have left.
        let replica = replicas.replica_of(path);
        for file in [temp_of(&replica), replica] {
            match fs::remove_file(&file) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    self.note_error(&format!("drain: removing the replica {} failed: {e}", file.display()))
                }
                _ => {}
            }
        }
    }

    /// `Rename` of `from` (a file or a directory) to `to` succeeded: the
    /// replicas move along, and so do the names listed in R-order.
    pub fn replica_renamed(&self, from: &str, to: &str) {
        let (Some(replicas), Ok(from), Ok(to)) = (&self.replicas, path::canonical(from), path::canonical(to)) else {
            return;
        };
        let (from, to) = (from.as_str(), to.as_str());
        let mut progress = lock(&replicas.progress);
        progress.overtake(from);
        progress.overtake(to);
        let listed = self.with_state("read R-order", |s| s.replications()).unwrap_or_default();
        for old in listed.iter().filter(|f| under(f, from)) {
            let new = format!("{to}{}", &old[from.len()..]);
            self.with_state("rename in R-order", |s| {
                s.remove_replication(old)?;
                s.push_replication(&new)
            });
        }
        let (old, new) = (replicas.replica_of(from), replicas.replica_of(to));
        let moved = match old.symlink_metadata() {
            Ok(_) => new.parent().map_or(Ok(()), fs::create_dir_all).and_then(|()| fs::rename(&old, &new)),
            // Never replicated: a replica of the file it replaced is stale.
            Err(_) => match fs::remove_file(&new) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
        };
        if let Err(e) = moved {
            self.note_error(&format!("drain: moving the replica of {from} to {to} failed: {e}"));
        }
        drop(progress);
        replicas.wake.wake();
    }

    /// Replicates `path` (see the module doc).
    fn replicate(&self, replicas: &Replicas, path: &str) -> Result<Outcome, Failure> {
        let (source, meta) = match self.setting.pfs.open_file(path) {
            Ok(opened) => opened,
            Err(Errno::ENOENT | Errno::ENOTDIR) => {
                let progress = lock(&replicas.progress);
                // Removed or renamed meanwhile (its entry went or moved with it), or listed again.
                if progress.overtaken {
                    return Ok(Outcome::Stale);
                }
                self.with_state("remove from R-order", |s| s.remove_replication(path));
                return Ok(Outcome::Gone);
            }
            Err(e) => return Err(Failure::new(e, format!("{path}: cannot open its PFS copy"))),
        };
        // Not made here: a remote file system not mounted must not fill the local disk instead.
        if !replicas.dir.is_dir() {
            let why = format!("the replica directory {} is missing (or not a directory)", replicas.dir.display());
            return Err(Failure::new(Errno::ENOENT, why));
        }
        let replica = replicas.replica_of(path);
        let temp = temp_of(&replica);
        if let Some(parent) = replica.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| io_failure(&e, format!("cannot make the replica directory {}", parent.display())))?;
        }
        let began = Instant::now();
        let copied = replicas.copy_verified(&source, meta.len(), meta.permissions().mode(), &temp);
        let mut progress = lock(&replicas.progress);
        let committed = copied.and_then(|()| match progress.overtaken {
            true => Ok(Outcome::Stale),
            false => {
                fs::rename(&temp, &replica)
                    .and_then(|()| sys::sync_dir(replica.parent().unwrap_or(&replicas.dir)))
                    .map_err(|e| io_failure(&e, format!("cannot put the replica {} in place", replica.display())))?;
                self.with_state("remove from R-order", |s| s.remove_replication(path));
                Ok(Outcome::Replicated(meta.len()))
            }
        });
        if !matches!(committed, Ok(Outcome::Replicated(_))) {
            let _ = fs::remove_file(&temp);
        }
        if let Ok(Outcome::Replicated(bytes)) = committed {
            progress.files += 1;
            progress.bytes += bytes;
            progress.busy += began.elapsed();
        }
        committed
    }
}

/// The replicator task (one, in daemon 0, with `--drain-replica`).
pub struct Replicator {
    pub manager: Arc<DrainManager>,
}

impl Task for Replicator {
    fn name(&self) -> &'static str {
        "replicator"
    }

    fn period(&self) -> Duration {
        PERIOD
    }

    /// Replicates the files of R-order in turn, each at most once a round;
    /// a failure ends the round, and the replicator backs off.
    fn run_once(&mut self, cx: &Context) -> Result<(), Failure> {
        let manager = &*self.manager;
        let Some(replicas) = &manager.replicas else { return Ok(()) };
        let listed = manager.with_state("read R-order", |s| s.replications()).map_or(0, |l| l.len());
        for _ in 0..listed {
            if cx.stopping() {
                break;
            }
            // Taken under the lock: a removal, rename or demotion from now on overtakes the copy.
            let mut progress = lock(&replicas.progress);
            let Some(path) = manager.with_state("rotate R-order", |s| s.next_replication()).flatten() else { break };
            (progress.in_flight, progress.overtaken) = (Some(path.clone()), false);
            drop(progress);
            let outcome = manager.replicate(replicas, &path);
            let mut progress = lock(&replicas.progress);
            progress.in_flight = None;
            match outcome {
                Ok(Outcome::Replicated(bytes)) => log!(Debug, 0, "drain: replicated {path} ({bytes} bytes)"),
                Ok(Outcome::Stale) => {}
                Ok(Outcome::Gone) => {
                    progress.failures += 1;
                    drop(progress);
                    manager.note_error(&format!("drain: {path} has no PFS copy to replicate any more: dropped"));
                }
                Err(failure) => {
                    progress.failures += 1;
                    drop(progress);
                    let message = format!("replicating {path} failed, to be tried again: {}", failure.text());
                    manager.remember_error(&format!("drain: {message}"));
                    return Err(Failure::new(failure.errno, message));
                }
            }
        }
        Ok(())
    }
}
