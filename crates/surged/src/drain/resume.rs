//! The drain state reconciled with the namespace when daemon 0 starts, so
//! that a daemon killed at any point loses no file and demotes none twice:
//! - a recorded file that is gone (removed, or evicted just before the
//!   kill) is forgotten;
//! - a file still of tier `Buffer` waits for demotion, whatever the state
//!   says (a demotion the kill cut short is started again, and the temp
//!   copy it left on the PFS is removed);
//! - a file of tier `Staged` is demoted (its demotion committed, even if
//!   the kill came before `file:NAME` turned `pfs:`, and then it is listed
//!   in R-order for the replicator) and its job is in `Clean`;
//! - a file placed on the PFS directly (key 4 under `PFS_DEVICE`) that is
//!   still a PFS file is one again, so its writers carry on (`placement`);
//! - a location of no recorded file is dropped;
//! - every job with files to demote is in V-order, one with outdated
//!   versions in E-order, and the jobs' MTBFs and restarts come back;
//! - a buffer file of the namespace (tier `Buffer`) the state does not
//!   record is booked as a checkpoint of [`UNBOOKED_JOB`] and demoted like
//!   any other: the state may have lost it (a demotion that failed while
//!   the PFS root was absent once forgot its file), and a file nobody
//!   books is never demoted.

use super::books::{Books, FileEntry, FileStatus, PFS_DEVICE};
use super::manager::DrainManager;
use crate::failure::Failure;
use crate::handles::ClientId;
use crate::job::Job;
use crate::locking::lock;
use crate::logging::log;
use std::collections::BTreeSet;
use surge_bbos_state::{AppId, DeviceId, Location, Tier as StateTier};
use surge_proto::{Errno, FileKind, Tier};

/// The job the buffer files found unbooked at start are booked to (their
/// own is not recorded anywhere); an `Open` for writing by their job later
/// books them to it.
pub const UNBOOKED_JOB: u64 = u64::MAX;

impl DrainManager {
    pub(super) fn resume(&self) -> Result<(), Failure> {
        let Some(state) = self.state() else { return Ok(()) };
        let failed = |e: surge_bbos_state::StateError| Failure::new(Errno::EIO, e.to_string());
        let snapshot = state.snapshot().map_err(failed)?;
        let mut books = lock(&self.books);
        for (&job, &mtbf) in &snapshot.victims {
            books.job(job.0).mtbf_s = mtbf.0;
        }
        for (job, restarts) in &snapshot.restarts {
            let entry = books.job(job.0);
            entry.restarts = restarts.iter().map(|r| r.at_ms).collect();
            if let Some(last) = restarts.last() {
                entry.mtbf_s = last.mtbf.0;
            }
        }
        let (mut gone, mut requeued, mut direct) = (0, 0, 0);
        for (&(job, device), files) in &snapshot.checkpoints {
            if device == PFS_DEVICE {
                let (restored, dropped) = self.restore_direct(&mut books, job, files)?;
                (direct, gone) = (direct + restored, gone + dropped);
                continue;
            }
            for (version, path) in files {
                let attr = match self.setting.namespace.stat(path) {
                    Ok(attr) if attr.kind == FileKind::File && attr.tier != Tier::Pfs => Some(attr),
                    Ok(_) => None,
                    Err(f) if f.errno == Errno::ENOENT || f.errno == Errno::ENOTDIR => None,
                    Err(f) => return Err(f),
                };
                let Some(attr) = attr else {
                    state.forget_file(job, device, path).map_err(failed)?;
                    gone += 1;
                    continue;
                };
                self.remove_stage_temps(path, attr.ino);
                let demoted = snapshot.locations.get(path).is_some_and(|l| l.tier == StateTier::Pfs);
                let status = if attr.tier == Tier::Staged {
                    if !demoted {
                        // Killed before its demotion was recorded, and so before it was listed in R-order.
                        self.replicate_later(path);
                        state.set_location(path, &Location::pfs(path)).map_err(failed)?;
                    }
                    FileStatus::Demoted { ino: attr.ino, version: attr.staged_version, bytes: 0 }
                } else {
                    if demoted {
                        state.set_location(path, &Location::buffer(path)).map_err(failed)?;
                    }
                    requeued += 1;
                    FileStatus::Pending
                };
                let entry =
                    FileEntry { job: job.0, device: device.0, version: version.0, status, written: None, opened: None };
                books.files.insert(path.clone(), entry);
            }
        }
        let recorded = |p: &&String| books.files.contains_key(*p) || books.direct.contains_key(*p);
        for path in snapshot.locations.keys().filter(|p| !recorded(p)) {
            // No job owns it: its checkpoint entry is gone already.
            state.forget_file(AppId(0), DeviceId(0), path).map_err(failed)?;
        }
        self.requeue_all(&books, &snapshot).map_err(failed)?;
        drop(books);
        let unbooked = self.book_unbooked()?;
        log!(
            Info,
            0,
            "drain: resumed with {} checkpoint file(s) in the buffer ({requeued} to demote); {gone} gone since; \
             {direct} placed on the PFS directly; {unbooked} found unbooked in the namespace, booked to demote",
            lock(&self.books).files.len()
        );
        Ok(())
    }

    /// Books the namespace's buffer files that the books do not have, as
    /// checkpoints of [`UNBOOKED_JOB`]; how many.
    fn book_unbooked(&self) -> Result<usize, Failure> {
        let unstaged = self.setting.namespace.unstaged()?;
        let job = Job { id: UNBOOKED_JOB, label: "unbooked", client: ClientId::DAEMON, space: None };
        let mut booked = 0;
        for (path, attr) in unstaged {
            let known = {
                let books = lock(&self.books);
                books.files.contains_key(&path) || books.direct.contains_key(&path)
            };
            if !known {
                self.record_checkpoint(job, &path, &attr);
                booked += 1;
            }
        }
        Ok(booked)
    }

    /// Puts every job back in the lists its files call for.
    fn requeue_all(&self, books: &Books, snapshot: &surge_bbos_state::Snapshot) -> surge_bbos_state::state::Result<()> {
        let Some(state) = self.state() else { return Ok(()) };
        let jobs = books.jobs_in_buffer();
        let evicting: BTreeSet<AppId> = snapshot.evict_order.iter().copied().collect();
        let cleaning: BTreeSet<AppId> = snapshot.clean.iter().copied().collect();
        for &job in &jobs {
            let app = AppId(job);
            if books.has_pending(job, false) {
                state.add_victim(app, surge_bbos_state::Mtbf(books.mtbf(job)))?;
            }
            if books.has_pending(job, true) && !evicting.contains(&app) {
                state.push_evict(app)?;
            }
            let demoted = books.files.values().any(|f| f.job == job && matches!(f.status, FileStatus::Demoted { .. }));
            if demoted && !cleaning.contains(&app) {
                state.push_clean(app)?;
            }
            state.set_in_buffer(app, true)?;
        }
        for app in snapshot.in_buffer.iter().filter(|app| !jobs.contains(&app.0)) {
            state.set_in_buffer(*app, false)?;
        }
        Ok(())
    }

    /// Removes the stage temps of inode `ino` beside `path` on the PFS, left
    /// by a demotion the daemon's end cut short.
    fn remove_stage_temps(&self, path: &str, ino: u64) {
        let pfs = &self.setting.pfs;
        let removed = pfs
            .stage_temps_of(path, ino)
            .map_err(Failure::from)
            .and_then(|temps| temps.iter().try_for_each(|temp| pfs.remove_stage_temp(temp)).map(|()| temps.len()));
        match removed {
            Ok(0) => {}
            Ok(n) => log!(Info, 0, "drain: removed {n} unfinished demotion copy(ies) of {path} from the PFS"),
            Err(f) => self.note_error(&format!("drain: cannot remove the unfinished demotion copies of {path}: {f}")),
        }
    }
}
