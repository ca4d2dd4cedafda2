//! The orphan collector, a background task of daemon 0: deletes objects
//! that belong to no file. Orphans come from what the deleter cannot see:
//! a write that lands after its file's objects were deleted (a holder on
//! another node still writing), objects of a namespace that was lost and
//! made afresh, objects written by a buggy or malicious client under an
//! inode the namespace never handed out.
//!
//! A round, at start and every `--collect-every` seconds, first removes
//! the stage-out temps recorded in the namespace that no stage-out under
//! way owns (`crate::stage_temps`), then lists every
//! daemon's objects (`ObjList`, page by page), keeping those unchanged for
//! the grace period (`--orphan-grace`); *then* read the inodes in use (the
//! namespace's files and the doomed ones, in one transaction); delete each
//! listed object whose inode is not among them.
//!
//! Why this never deletes a live file's object: a file's inode is in the
//! namespace before any object of it can exist (the client learns the
//! inode from the `Open` that created it), and the namespace is read after
//! the listing. So a listed object of a file that exists at that read is
//! seen in use; one whose file was removed before it is doomed (the
//! deleter's, kept while a client holds it) or already deleted, and then
//! truly an orphan. Inodes are never reused, so no new file can take an
//! orphan's inode afterwards; the one exception is an object planted under
//! an inode the namespace has not handed out yet, which a file created in
//! the instant between the read and the delete would lose. The grace keeps the collector off objects
//! still being written: an unlinked file that a holder on another node
//! keeps writing is collected once that holder has been quiet for the
//! grace period, rather than raced write by write.

use crate::background::{Context, Task};
use crate::failure::Failure;
use crate::logging::log;
use crate::namespace::{Namespace, Shard};
use crate::peers::Peers;
use crate::shard;
use crate::stage_temps::StageTemps;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use surge_proto::msg::{ListedObject, ObjListReply};
use surge_proto::Request;

/// Objects asked for per `ObjList` page.
const PAGE: u32 = 4096;

/// What the collector did since the daemon started, for `surge status`.
#[derive(Debug, Default)]
pub struct OrphanCounts {
    pub found: AtomicU64,
    pub collected: AtomicU64,
}

pub struct Collector {
    pub namespace: Arc<Namespace>,
    pub peers: Arc<Peers>,
    pub daemons: u32,
    pub every: Duration,
    /// How long an object must have been unchanged to be collected.
    pub grace: Duration,
    pub counts: Arc<OrphanCounts>,
    /// Who is copying into each stage-out temp: the recorded temps of no
    /// one's are removed.
    pub stage_temps: Arc<StageTemps>,
    /// This daemon's shard of a namespace spread over the daemons: only its inodes' objects are its to collect.
    pub shard: Option<Shard>,
}

/// Every object of `daemon` (`ObjList`, page by page), until `stopping`
/// says to stop: what the collector and `surge fsck` (`crate::fsck`)
/// check against the namespace.
pub fn list_objects(peers: &Peers, daemon: u32, stopping: impl Fn() -> bool) -> Result<Vec<ListedObject>, Failure> {
    let (mut objects, mut after) = (Vec::new(), 0);
    while !stopping() {
        let page: ObjListReply = peers.call(daemon, &Request::ObjList { after, max: PAGE })?;
        let last = page.objects.last().map(|o| o.ino);
        objects.extend(page.objects);
        match last {
            Some(last) if !page.end => after = last,
            _ => break,
        }
    }
    Ok(objects)
}

impl Collector {
    /// The objects of `daemon` unchanged for the grace period.
    fn quiet_objects(&self, daemon: u32, cx: &Context) -> Result<Vec<u64>, Failure> {
        let grace_ms = self.grace.as_millis() as u64;
        let objects = list_objects(&self.peers, daemon, || cx.stopping())?;
        let quiet = objects.iter().filter(|o| o.idle_ms >= grace_ms && shard::owns(self.shard, o.ino));
        Ok(quiet.map(|o| o.ino).collect())
    }
}

impl Task for Collector {
    fn name(&self) -> &'static str {
        "orphan collector"
    }

    fn period(&self) -> Duration {
        self.every
    }

    fn run_once(&mut self, cx: &Context) -> Result<(), Failure> {
        // The objects are collected whatever becomes of the temps.
        match self.stage_temps.sweep(|under_way| self.namespace.remove_stage_temps(under_way)) {
            Ok(0) => {}
            Ok(n) => log!(Info, cx.index, "orphan collector: {n} abandoned stage-out temp(s) removed from the PFS"),
            Err(f) => log!(Warn, cx.index, "orphan collector: abandoned stage-out temps stay for the next round: {f}"),
        }
        let mut listed = Vec::new();
        let mut unreachable = None;
        for daemon in 0..self.daemons {
            match self.quiet_objects(daemon, cx) {
                Ok(quiet) => listed.push((daemon, quiet)),
                // The other daemons are still collected.
                Err(failure) => unreachable = Some(failure),
            }
        }
        // After the listing: see the module's header.
        let in_use = self.namespace.inodes_in_use()?;
        let (mut found, mut collected) = (0, 0);
        for (daemon, quiet) in listed {
            for ino in quiet.into_iter().filter(|ino| !in_use.contains(ino)) {
                if cx.stopping() {
                    break;
                }
                found += 1;
                self.counts.found.fetch_add(1, Ordering::Relaxed);
                match self.peers.call::<()>(daemon, &Request::ObjRemove { ino }) {
                    Ok(()) => {
                        collected += 1;
                        self.counts.collected.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(failure) => unreachable = Some(failure),
                }
            }
        }
        if found > 0 {
            log!(Info, cx.index, "orphan collector: {found} orphan object(s) found, {collected} deleted");
        }
        unreachable
            .map_or(Ok(()), |f| Err(Failure::new(f.errno, format!("a daemon could not be collected: {}", f.text()))))
    }
}
