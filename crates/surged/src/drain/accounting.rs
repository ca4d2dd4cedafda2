//! The I/O worker's part of Algorithm 5.1 [Sung20, ch. 5], on daemon 0's
//! namespace requests, and the handles `Open` and `Close` count
//! (`crate::handles`); a new cold checkpoint goes to the PFS directly instead
//! (`placement`). A file a job creates or opens for writing is a
//! checkpoint of that job (its version from its path, `version`; its
//! device the daemon of its first stripe). A newer version makes the
//! job's older ones outdated (E-order, demoted and evicted first). A read
//! of a checkpoint by another job, or of a job's latest version, is a
//! restart read (`APPID:restart`), which measures the job's MTBF. Removal
//! and rename keep the books and the state in step with the namespace.
//!
//! The data written (DWSF) is not counted here but by the throttler, from
//! the bytes the daemons report: an open says nothing of how much follows.
//! A failure of the state store never fails the request: it is logged and
//! reported, and the resume pass repairs the state at the next start.

use super::books::{FileEntry, FileStatus, PFS_DEVICE};
use super::manager::DrainManager;
use super::version::version_in_path;
use crate::failure::Failure;
use crate::handles::ClientId;
use crate::job::Job;
use crate::locking::lock;
use crate::peers::BACKGROUND_JOB;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use surge_bbos_state::{AppId, DeviceId, Location, Mtbf, Restart, Version};
use surge_proto::msg::open_flags::{CREATE, TRUNC, WRITE};
use surge_proto::{path, Attr, Errno, FileKind, Layout, Tier};

impl DrainManager {
    /// `Open` of `path` by `job` with `flags` on daemon 0: after an
    /// eviction of the file under way, on the PFS directly when the
    /// placement takes it (`open_direct`), else by the namespace, and
    /// counted as a handle of the client's when it opens a buffer file (the
    /// client closes only those). `local`: the daemons of the client's node.
    pub fn open(
        &self,
        job: Job<'_>,
        path: &str,
        flags: u32,
        mode: u32,
        layout: Layout,
        local: &[u32],
    ) -> Result<Attr, Failure> {
        let namespace = &self.setting.namespace;
        let Ok(canonical) = path::canonical(path) else {
            return namespace.open_from(path, flags, mode, layout, local);
        };
        let opening = self.handles.opening(&canonical);
        if let Some(attr) = self.open_direct(job, &canonical, flags, mode)? {
            return Ok(attr);
        }
        let attr = namespace.open_from(path, flags, mode, layout, local)?;
        if attr.kind == FileKind::File && attr.tier != Tier::Pfs && job.client != ClientId::DAEMON {
            self.handles.opened(job.client, attr.ino);
        }
        drop(opening);
        self.opened(job, &canonical, flags, &attr);
        Ok(attr)
    }

    /// `Evicted` of `path` and `ino`: the attr of the PFS copy buffer file
    /// `ino` was evicted to from `path`, while `path` still names it;
    /// ESTALE when it was not evicted from there (removed, or evicted
    /// before this daemon 0 started) or `path` names another file now. An
    /// eviction of `path` under way is waited for (the fence may answer
    /// ESTALE before the eviction is done, or undone).
    pub fn evicted_copy(&self, path: &str, ino: u64) -> Result<Attr, Failure> {
        let stale = |why: String| Failure::new(Errno(libc::ESTALE), format!("inode {ino} at {path}: {why}"));
        let canonical = path::canonical(path)?;
        drop(self.handles.opening(&canonical));
        let Some(eviction) = self.evictions.of(ino) else {
            return Err(stale("not evicted since daemon 0 started (removed, or evicted before)".to_string()));
        };
        if eviction.path != canonical {
            return Err(stale(format!("evicted from {}, not from here", eviction.path)));
        }
        match self.setting.namespace.stat(&canonical) {
            Ok(attr) if attr.tier == Tier::Pfs && attr.ino == eviction.pfs_ino => Ok(attr),
            Ok(_) => Err(stale("the path names another file since the eviction".to_string())),
            Err(failure) if failure.errno == Errno::ENOENT => {
                Err(stale("its PFS copy was removed or renamed since the eviction".to_string()))
            }
            Err(failure) => Err(failure),
        }
    }

    /// `Open` of `path` by `job` succeeded with `attr`.
    fn opened(&self, job: Job<'_>, path: &str, flags: u32, attr: &Attr) {
        if self.state().is_none() || attr.kind != FileKind::File || job.id == BACKGROUND_JOB {
            return;
        }
        let Ok(path) = path::canonical(path) else { return };
        // A PFS-only file opened for writing is not in the buffer yet: its
        // client's first write makes the buffer copy, by an `Open` of its own.
        if flags & (CREATE | WRITE | TRUNC) != 0 && attr.tier != Tier::Pfs {
            self.record_checkpoint(job, &path, attr);
        } else {
            self.record_read(job.id, &path);
        }
    }

    /// Algorithm 5.1, lines 3–6, and what it leaves implicit: the in-buffer
    /// flag and the job's place in V-order.
    pub(super) fn record_checkpoint(&self, job: Job<'_>, path: &str, attr: &Attr) {
        let mut books = lock(&self.books);
        seen(&mut books, job);
        let known = books.files.get(path).cloned();
        let version = match (version_in_path(path), &known) {
            (Some(version), _) => version,
            // Opened again for writing: the same checkpoint, still that version.
            (None, Some(entry)) if entry.job == job.id => entry.version,
            (None, _) => {
                let entry = books.job(job.id);
                entry.next_counter += 1;
                entry.next_counter - 1
            }
        };
        let device = attr.layout.daemon_of(0, self.setting.daemons);
        if let Some(old) = known.filter(|old| old.job != job.id || old.device != device) {
            self.with_state("forget a replaced checkpoint", |s| {
                s.forget_file(AppId(old.job), DeviceId(old.device), path)
            });
        }
        let newest = books.newest_version(job.id);
        let (app, mtbf) = (AppId(job.id), Mtbf(books.mtbf(job.id)));
        // A new newest version outdates the job's older files (E-order once per version).
        let outdates = newest.is_some_and(|newest| version > newest);
        let copied_up = books.direct.get(path).map(|f| AppId(f.job));
        self.with_state("record a checkpoint", |s| {
            // A file placed on the PFS directly, copied into the buffer: an
            // ordinary checkpoint from now on (its handles still writing it
            // direct get ESTALE, `direct_path`).
            if let Some(owner) = copied_up {
                s.forget_file(owner, PFS_DEVICE, path)?;
            }
            if outdates && s.is_in_buffer(app)? {
                s.push_evict(app)?;
            }
            s.add_checkpoint(app, DeviceId(device), Version(version), path)?;
            s.set_location(path, &Location::buffer(path))?;
            s.set_in_buffer(app, true)?;
            s.add_victim(app, mtbf)
        });
        let now = Instant::now();
        let entry = FileEntry {
            job: job.id,
            device,
            version,
            status: FileStatus::Pending,
            written: Some(now),
            opened: Some(now),
        };
        books.files.insert(path.to_string(), entry);
    }

    /// A read of a recorded checkpoint: a restart read when another job
    /// reads it, or its job reads its latest version.
    fn record_read(&self, reader: u64, path: &str) {
        let mut books = lock(&self.books);
        let newest = match books.files.get(path) {
            Some(file) => books.newest_version(file.job),
            None => return,
        };
        let Some(file) = books.files.get_mut(path) else { return };
        file.opened = Some(Instant::now());
        let (owner, version) = (file.job, file.version);
        if owner != reader || Some(version) == newest {
            let at_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
            let entry = books.job(owner);
            entry.restarted(at_ms);
            let mtbf = Mtbf(entry.mtbf_s);
            let pending = books.has_pending(owner, false);
            self.with_state("record a restart", |s| {
                s.record_restart(AppId(owner), Restart { at_ms, mtbf })?;
                if pending {
                    s.add_victim(AppId(owner), mtbf)?;
                }
                Ok(())
            });
        }
    }

    /// `Unlink` of `path` succeeded.
    pub fn removed(&self, path: &str) {
        let Ok(path) = path::canonical(path) else { return };
        let mut books = lock(&self.books);
        self.drop_direct(&mut books, &path);
        if let Some(file) = books.files.remove(&path) {
            self.forget(&books, &path, &file);
        }
    }

    /// `Rename` of `from` (a file or a directory) to `to` succeeded: the
    /// checkpoints under `from` move, with the versions of their new paths
    /// (a checkpoint written under a temporary name and renamed into place
    /// takes its final name's version). A file `to` replaced is forgotten.
    pub fn renamed(&self, from: &str, to: &str) {
        let (Ok(from), Ok(to)) = (path::canonical(from), path::canonical(to)) else { return };
        let mut books = lock(&self.books);
        if let Some(replaced) = books.files.remove(&to) {
            self.forget(&books, &to, &replaced);
        }
        let under = format!("{from}/");
        self.drop_direct(&mut books, &to);
        let direct: Vec<String> =
            books.direct.keys().filter(|p| **p == from || p.starts_with(&under)).cloned().collect();
        for old in direct {
            // One copied into the buffer moves as a buffer checkpoint below.
            let copied_up = books.files.contains_key(&old);
            if let Some(mut file) = self.drop_direct(&mut books, &old).filter(|_| !copied_up) {
                let new = format!("{to}{}", &old[from.len()..]);
                file.version = version_in_path(&new).unwrap_or(file.version);
                self.record_direct(&new, &file);
                books.direct.insert(new, file);
            }
        }
        let moved: Vec<String> = books.files.keys().filter(|p| **p == from || p.starts_with(&under)).cloned().collect();
        for old in moved {
            let Some(mut file) = books.files.remove(&old) else { continue };
            self.forget(&books, &old, &file);
            let new = format!("{to}{}", &old[from.len()..]);
            file.version = version_in_path(&new).unwrap_or(file.version);
            let location = match file.status {
                FileStatus::Demoted { .. } => Location::pfs(&new),
                // A demotion under way was of the old name: the file is demoted again.
                FileStatus::Pending | FileStatus::Demoting => {
                    file.status = FileStatus::Pending;
                    Location::buffer(&new)
                }
            };
            self.with_state("record a renamed checkpoint", |s| {
                s.add_checkpoint(AppId(file.job), DeviceId(file.device), Version(file.version), &new)?;
                s.set_location(&new, &location)
            });
            books.files.insert(new, file);
        }
    }

    /// Drops `file` (already out of the books) from the state; clears its
    /// job's in-buffer flag when it was the job's last file there.
    pub(super) fn forget(&self, books: &super::books::Books, path: &str, file: &FileEntry) {
        let app = AppId(file.job);
        let last = !books.files.values().any(|f| f.job == file.job);
        self.with_state("forget a checkpoint", |s| {
            s.forget_file(app, DeviceId(file.device), path)?;
            if last {
                s.set_in_buffer(app, false)?;
            }
            Ok(())
        });
    }
}

/// Notes that `job` checkpoints (its label as its clients gave it): every
/// job seen counts in the placement policy's share of MTBFs.
pub(super) fn seen(books: &mut super::books::Books, job: Job<'_>) {
    let entry = books.job(job.id);
    if !job.label.is_empty() {
        job.label.clone_into(&mut entry.label);
    }
}
