//! A demoter (Algorithm 5.2 of [Sung20, ch. 5]): one per buffer device,
//! that is per daemon, running while the policy demotes. It takes the work
//! of its device in the algorithm's order: first a job from E-order, whose
//! oldest outdated version it demotes and evicts at once; else the coldest
//! job of V-order (highest MTBF, erratum 6 of docs/bbos.md), whose oldest
//! version it demotes and keeps in the buffer as a cache, listing the job
//! in `Clean` for the evicter. A demotion is `demote::stage_file`, the
//! verified procedure of `surge stage-out`; every stripe's copy is paced by
//! the demotion rate of the daemon holding it.
//!
//! Unlike the algorithm, a version is not popped off `APPID:dev:DEVICE`
//! before its demotion: its files stay there until they leave the buffer,
//! and `file:NAME` turns `pfs:` once a file is demoted. So a daemon killed
//! mid-demotion loses track of nothing (`resume`). A failed demotion puts
//! the file back, to be tried again; the job's latest version is left
//! alone while the job is writing (it would fail, changed during the copy).

use super::books::{Batch, FileStatus};
use super::manager::DrainManager;
use crate::background::{Context, Task};
use crate::demote::{self, Staged};
use crate::failure::Failure;
use crate::locking::lock;
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_bbos_state::{AppId, Location, Mtbf};
use surge_proto::{Errno, FileKind, Tier};

/// Time between rounds when the throttler does not wake the demoter.
const PERIOD: Duration = Duration::from_secs(1);
/// Victims looked at in one pick before the demoter gives up for the round.
const VICTIMS_PER_PICK: usize = 16;

pub struct Demoter {
    manager: Arc<DrainManager>,
    device: u32,
}

impl Demoter {
    pub fn new(manager: Arc<DrainManager>, device: u32) -> Demoter {
        Demoter { manager, device }
    }
}

/// What the demoter took: a batch, and the job's MTBF when it came from V-order.
struct Work {
    batch: Batch,
    victim: Option<Mtbf>,
}

impl DrainManager {
    /// Whether the policy demotes now.
    fn demoting(&self) -> bool {
        lock(&self.plan).demotion_rate > 0.0
    }

    /// The next batch of `device`: E-order first, then V-order. The files
    /// taken are marked `Demoting`.
    fn next_work(&self, device: u32) -> Option<Work> {
        let state = self.state()?;
        if let Some(job) = self.with_state("pop from E-order", |s| s.pop_evict()).flatten() {
            let mut books = lock(&self.books);
            match books.batch(job.0, device, true) {
                Some(batch) => return Some(self.take(&mut books, Work { batch, victim: None })),
                // Outdated files on another device: that demoter's.
                None if books.has_pending(job.0, true) => {
                    self.with_state("push back to E-order", |s| s.push_evict(job));
                }
                None => {}
            }
        }
        let mut passed = Vec::new();
        let mut found = None;
        for _ in 0..VICTIMS_PER_PICK {
            let Some((job, mtbf)) = self.with_state("pop from V-order", |s| s.pop_victim()).flatten() else { break };
            let mut books = lock(&self.books);
            let writing = lock(&self.plan).writing.contains(&job.0);
            match books.batch(job.0, device, false) {
                Some(batch) if !(writing && Some(batch.version) == books.newest_version(job.0)) => {
                    found = Some(self.take(&mut books, Work { batch, victim: Some(mtbf) }));
                    break;
                }
                _ if books.has_pending(job.0, false) => passed.push((job, mtbf)),
                _ => {}
            }
        }
        for (job, mtbf) in passed {
            if let Err(e) = state.add_victim(job, mtbf) {
                self.note_error(&format!("drain state: put a victim back in V-order: {e}"));
            }
        }
        found
    }

    fn take(&self, books: &mut super::books::Books, work: Work) -> Work {
        for path in &work.batch.files {
            if let Some(file) = books.files.get_mut(path) {
                file.status = FileStatus::Demoting;
            }
        }
        work
    }

    /// A file demoted (and kept in the buffer): `file:NAME` turns `pfs:`.
    /// False, and the file waits for demotion again, when a job opened it
    /// for writing after the copy `began` (its PFS copy may be stale).
    fn demoted(&self, path: &str, staged: &Staged, began: Instant) -> bool {
        let mut books = lock(&self.books);
        let Some(file) = books.files.get_mut(path) else { return false };
        if file.written.is_some_and(|at| at > began) {
            file.status = FileStatus::Pending;
            return false;
        }
        file.status = FileStatus::Demoted { ino: staged.ino, version: staged.version, bytes: staged.bytes };
        let job = file.job;
        let entry = books.job(job);
        entry.demoted_files += 1;
        entry.demoted_bytes += staged.bytes;
        books.totals.demoted_files += 1;
        books.totals.demoted_bytes += staged.bytes;
        // Listed before `pfs:` is recorded: `resume` lists a file demoted without it.
        self.replicate_later(path);
        self.with_state("record a demoted file", |s| s.set_location(path, &Location::pfs(path)));
        true
    }

    /// A demoted file evicted from the buffer: it leaves the books and the state.
    pub(super) fn evicted(&self, path: &str, bytes: u64) {
        let mut books = lock(&self.books);
        let Some(file) = books.files.remove(path) else { return };
        books.totals.evicted_files += 1;
        books.totals.evicted_bytes += bytes;
        self.forget(&books, path, &file);
        self.setting.deleter.wake();
    }

    /// A demotion that failed: the file waits for the next try, and the
    /// failure is returned to end the round (the demoter backs off); one
    /// that is gone from the buffer is forgotten, and the round goes on.
    /// ENOENT alone does not say it is gone (a PFS directory that is not
    /// there says it too), the namespace does.
    fn demotion_failed(&self, path: &str, failure: &Failure) -> Option<Failure> {
        let gone = failure.errno == Errno::ENOENT
            && match self.setting.namespace.stat(path) {
                Ok(attr) => attr.kind != FileKind::File || attr.tier == Tier::Pfs,
                Err(f) => f.errno == Errno::ENOENT || f.errno == Errno::ENOTDIR,
            };
        let mut books = lock(&self.books);
        if gone {
            if let Some(file) = books.files.remove(path) {
                self.forget(&books, path, &file);
            }
            return None;
        }
        books.totals.failed_demotions += 1;
        drop(books);
        self.back_to_buffer(path);
        let message = format!("demoting {path} failed, to be tried again: {}", failure.text());
        self.remember_error(&format!("drain: {message}"));
        Some(Failure::new(failure.errno, message))
    }

    /// A file whose demotion failed, or that was written since: it waits to be demoted again.
    pub(super) fn back_to_buffer(&self, path: &str) {
        if let Some(file) = lock(&self.books).files.get_mut(path) {
            file.status = FileStatus::Pending;
        }
        self.with_state("record a file back in the buffer", |s| s.set_location(path, &Location::buffer(path)));
    }

    /// Files of the batch not handled (the daemon is stopping, or one failed): back to waiting.
    fn put_back(&self, files: &[String]) {
        let mut books = lock(&self.books);
        for path in files {
            if let Some(file) = books.files.get_mut(path).filter(|f| f.status == FileStatus::Demoting) {
                file.status = FileStatus::Pending;
            }
        }
    }

    /// The job goes back in the order it came from while it has files left there.
    fn requeue(&self, work: &Work) {
        let job = work.batch.job;
        let books = lock(&self.books);
        let (again, mtbf) = (books.has_pending(job, work.victim.is_none()), Mtbf(books.mtbf(job)));
        drop(books);
        match (again, work.victim) {
            (false, _) => {}
            (true, None) => {
                self.with_state("push back to E-order", |s| s.push_evict(AppId(job)));
            }
            (true, Some(_)) => {
                self.with_state("put a victim back in V-order", |s| s.add_victim(AppId(job), mtbf));
            }
        }
    }
}

impl Task for Demoter {
    fn name(&self) -> &'static str {
        "demoter"
    }

    fn period(&self) -> Duration {
        PERIOD
    }

    /// Demotes batch after batch while the policy demotes; a failed
    /// demotion (a daemon down, most often) ends the round, so the demoter
    /// backs off instead of trying the next file, and the same one, at once.
    fn run_once(&mut self, cx: &Context) -> Result<(), Failure> {
        let manager = &*self.manager;
        let setting = &manager.setting;
        while !cx.stopping() && manager.demoting() {
            let Some(work) = manager.next_work(self.device) else { return Ok(()) };
            let started = Instant::now();
            let mut pushed_clean = false;
            for (done, path) in work.batch.files.iter().enumerate() {
                if cx.stopping() || !manager.demoting() {
                    manager.put_back(&work.batch.files[done..]);
                    break;
                }
                let began = Instant::now();
                let staged = match demote::stage_file(&setting.peers, &setting.namespace, setting.daemons, path) {
                    Ok(staged) => staged,
                    Err(failure) => {
                        let failed = manager.demotion_failed(path, &failure);
                        manager.put_back(&work.batch.files[done + 1..]);
                        if let Some(failed) = failed {
                            manager.requeue(&work);
                            return Err(failed);
                        }
                        break;
                    }
                };
                // Only on the PFS (evicted or staged out by someone else): not the buffer's any more.
                if staged.version == 0 {
                    manager.removed(path);
                    continue;
                }
                if !manager.demoted(path, &staged, began) {
                    continue;
                }
                // An outdated version leaves at once, unless a client holds it.
                let evicted = work.batch.outdated.then(|| manager.evict_unheld(path, &staged)).flatten();
                match evicted {
                    Some(Ok(_)) => manager.evicted(path, staged.bytes),
                    // Written since its copy: to be demoted again.
                    Some(Err(failure)) if failure.errno == Errno(libc::ESTALE) => manager.back_to_buffer(path),
                    outcome => {
                        if let Some(Err(failure)) = outcome {
                            manager.note_error(&format!("drain: evicting {path} failed: {}", failure.text()));
                        }
                        if !pushed_clean {
                            manager.with_state("push to Clean", |s| s.push_clean(AppId(work.batch.job)));
                            pushed_clean = true;
                        }
                    }
                }
            }
            manager.requeue(&work);
            crate::logging::log!(
                Debug,
                0,
                "drain: device {} demoted version {} of job {} in {:?}",
                self.device,
                work.batch.version,
                work.batch.job,
                started.elapsed()
            );
        }
        Ok(())
    }
}
