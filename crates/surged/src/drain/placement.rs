//! Direct-to-PFS placement [Sung20, §5.2.2] in daemon 0 (`--drain-direct
//! cold`): when a job creates a new file for writing and the period's cold
//! cut (`surge_bbos::placement::ColdCut`, set by the throttler) finds it
//! cold (DWSF is past S and the job's MTBF among the coldest share), the
//! file is created on the PFS instead of the buffer (`Namespace::create_on_pfs`):
//! its name shows tier `Pfs`, its client writes it with `PfsWrite` and
//! makes it durable and verified with `PfsSync` (`crate::direct`), and
//! reads are served from the PFS as for any PFS file. It never takes
//! buffer space, so it is never demoted.
//!
//! Daemon 0 keeps such files in its books (`Books::direct`) so that other
//! writers may open them for writing too (ranks of one checkpoint), and a
//! direct file counts as its job's newest version, outdating older ones in
//! the buffer. A file the PFS refuses to create is placed in the buffer as
//! usual (the failure is logged and reported); a write the PFS refuses
//! fails for the writer.
//!
//! The placements are also in the drain state, so that they survive a
//! restart of daemon 0 and its writers carry on: each is a checkpoint of
//! key 4 under the device [`PFS_DEVICE`] plus its location `pfs:PATH`
//! (key 5), added when the file is placed and forgotten in one step when
//! it is removed, renamed (it comes back under its new name) or found
//! copied into the buffer. `resume` puts them back in the books
//! (`restore_direct`), dropping those no longer on the PFS. The CRCs of
//! the ranges written are not stored: after a restart a `PfsSync`
//! verifies the ranges written since, not those written before.

use super::accounting::seen;
use super::books::{Books, DirectFile, PFS_DEVICE};
use super::config::Placement;
use super::manager::DrainManager;
use super::version::version_in_path;
use crate::failure::Failure;
use crate::job::Job;
use crate::locking::lock;
use crate::peers::BACKGROUND_JOB;
use crate::rates::Bucket;
use surge_bbos_state::{AppId, Location, Version};
use surge_proto::msg::open_flags::{CREATE, EXCL, TRUNC, WRITE};
use surge_proto::{path, Attr, Errno, FileKind, Tier};

impl DrainManager {
    /// `Open` of `path` (canonical) by `job` on the PFS directly: a file
    /// placed there, opened for writing again, or a new checkpoint the cold
    /// cut finds cold, created there. `None`: any other open, which is the
    /// namespace's (`DrainManager::open`).
    pub(super) fn open_direct(&self, job: Job<'_>, path: &str, flags: u32, mode: u32) -> Result<Option<Attr>, Failure> {
        if let Some(attr) = self.reopen_direct(path, flags)? {
            return Ok(Some(attr));
        }
        if !self.is_cold(job.id, flags) {
            return Ok(None);
        }
        match self.setting.namespace.create_on_pfs(path, flags, mode) {
            Ok(Some(attr)) => {
                self.placed_direct(job, path);
                Ok(Some(attr))
            }
            Ok(None) => Ok(None),
            Err(failure) => {
                self.note_error(&format!(
                    "drain: {path} could not be placed on the PFS directly, it goes to the buffer: {}",
                    failure.text()
                ));
                Ok(None)
            }
        }
    }

    /// Whether a new checkpoint of `job` opened with `flags` is cold now.
    fn is_cold(&self, job: u64, flags: u32) -> bool {
        if self.setting.config.direct != Placement::Cold
            || job == BACKGROUND_JOB
            || flags & (CREATE | WRITE) != CREATE | WRITE
        {
            return false;
        }
        let mtbf = lock(&self.books).mtbf(job) as f64;
        let plan = lock(&self.plan);
        plan.cold.is_some_and(|cut| cut.goes_direct(mtbf, plan.dwsf, plan.capacity()))
    }

    /// A file placed on the PFS directly, opened for writing again (without
    /// `TRUNC`, which replaces it by a buffer file as for any PFS file):
    /// its PFS attributes. `None` for any other open.
    fn reopen_direct(&self, path: &str, flags: u32) -> Result<Option<Attr>, Failure> {
        let Ok(path) = path::canonical(path) else { return Ok(None) };
        if flags & (WRITE | TRUNC) != WRITE || flags & (CREATE | EXCL) == CREATE | EXCL {
            return Ok(None);
        }
        self.still_direct(&path)?.then(|| self.setting.namespace.stat(&path)).transpose()
    }

    /// Whether `path` (canonical) is a file placed on the PFS directly and
    /// still only there: a writer that truncated or appended to it copied
    /// it into the buffer, and it is an ordinary file since.
    fn still_direct(&self, path: &str) -> Result<bool, Failure> {
        if !lock(&self.books).direct.contains_key(path) {
            return Ok(false);
        }
        let on_pfs = match self.setting.namespace.stat(path) {
            Ok(attr) => attr.tier == Tier::Pfs,
            Err(failure) if failure.errno == Errno::ENOENT => false,
            Err(failure) => return Err(failure),
        };
        if !on_pfs {
            self.drop_direct(&mut lock(&self.books), path);
        }
        Ok(on_pfs)
    }

    /// Records `path`, just created on the PFS for `job`.
    fn placed_direct(&self, job: Job<'_>, path: &str) {
        let Ok(path) = path::canonical(path) else { return };
        let mut books = lock(&self.books);
        seen(&mut books, job);
        let version = version_in_path(&path).unwrap_or_else(|| {
            let entry = books.job(job.id);
            entry.next_counter += 1;
            entry.next_counter - 1
        });
        // A newer version outdates the job's older ones in the buffer (E-order).
        let outdates = books.newest_version(job.id).is_some_and(|newest| version > newest);
        let app = AppId(job.id);
        if outdates {
            self.with_state("outdate the versions in the buffer", |s| match s.is_in_buffer(app)? {
                true => s.push_evict(app),
                false => Ok(()),
            });
        }
        books.totals.direct_files += 1;
        let file = DirectFile { job: job.id, version, unverified: Default::default() };
        self.record_direct(&path, &file);
        books.direct.insert(path, file);
    }

    /// Records `file`, placed on the PFS directly as `path`, in the drain state.
    pub(super) fn record_direct(&self, path: &str, file: &DirectFile) {
        self.with_state("record a file placed on the PFS directly", |s| {
            s.add_checkpoint(AppId(file.job), PFS_DEVICE, Version(file.version), path)?;
            s.set_location(path, &Location::pfs(path))
        });
    }

    /// Drops `path` from the files placed on the PFS directly, in the books
    /// and in the drain state; the dropped entry.
    pub(super) fn drop_direct(&self, books: &mut Books, path: &str) -> Option<DirectFile> {
        let file = books.direct.remove(path)?;
        // Copied into the buffer and recorded as a checkpoint there, it left
        // the state then (`record_checkpoint`), and key 5 is the buffer copy's.
        if !books.files.contains_key(path) {
            self.unrecord_direct(path, file.job);
        }
        Some(file)
    }

    /// Forgets `path`, placed on the PFS directly for `job`, in the drain
    /// state (key 4's entry and key 5 in one step).
    fn unrecord_direct(&self, path: &str, job: u64) {
        self.with_state("forget a file placed on the PFS directly", |s| s.forget_file(AppId(job), PFS_DEVICE, path));
    }

    /// At `resume`: the files the state records as placed on the PFS
    /// directly for `job` back in the books, counted in the report (their
    /// sizes as their bytes); those gone from the PFS, or copied into the
    /// buffer, are forgotten. How many came back, and how many were dropped.
    pub(super) fn restore_direct(
        &self,
        books: &mut Books,
        job: AppId,
        files: &[(Version, String)],
    ) -> Result<(usize, usize), Failure> {
        let (mut restored, mut dropped) = (0, 0);
        for (version, path) in files {
            let size = match self.setting.namespace.stat(path) {
                Ok(attr) if attr.kind == FileKind::File && attr.tier == Tier::Pfs => Some(attr.size),
                Ok(_) => None,
                Err(f) if f.errno == Errno::ENOENT || f.errno == Errno::ENOTDIR => None,
                Err(f) => return Err(f),
            };
            let Some(size) = size else {
                self.unrecord_direct(path, job.0);
                dropped += 1;
                continue;
            };
            books.totals.direct_files += 1;
            books.totals.direct_bytes += size;
            let file = DirectFile { job: job.0, version: version.0, unverified: Default::default() };
            books.direct.insert(path.clone(), file);
            restored += 1;
        }
        Ok((restored, dropped))
    }

    /// `PfsWrite` of `data` at `offset` into `path`, a file placed on the
    /// PFS directly, at `pacer`'s rate; the bytes written.
    pub fn write_direct(&self, path: &str, offset: u64, data: &[u8], pacer: &Bucket) -> Result<u64, Failure> {
        let path = self.direct_path(path)?;
        let written = crate::direct::write(&self.setting.pfs, &path, offset, data, pacer)?;
        let mut books = lock(&self.books);
        books.totals.direct_bytes += written as u64;
        if let Some(file) = books.direct.get_mut(&path) {
            file.unverified.wrote(offset, &data[..written]);
        }
        Ok(written as u64)
    }

    /// `PfsSync` of `path`, a file placed on the PFS directly: durable and verified.
    pub fn sync_direct(&self, path: &str) -> Result<(), Failure> {
        let path = self.direct_path(path)?;
        let unverified = lock(&self.books).direct.get(&path).map(|f| f.unverified.clone()).unwrap_or_default();
        crate::direct::sync(&self.setting.pfs, &path, &unverified)?;
        if let Some(file) = lock(&self.books).direct.get_mut(&path) {
            // Only what was verified: writes that came in meanwhile stay to be checked.
            if file.unverified == unverified {
                file.unverified = Default::default();
            }
        }
        Ok(())
    }

    /// `path` canonical, if it is a file placed on the PFS directly (EPERM otherwise).
    fn direct_path(&self, path: &str) -> Result<String, Failure> {
        let canonical = path::canonical(path).map_err(|errno| Failure::new(errno, format!("invalid path {path:?}")))?;
        if !lock(&self.books).direct.contains_key(&canonical) {
            return Err(Failure::new(
                Errno(libc::EPERM),
                format!(
                    "{path} was not placed on the PFS directly by daemon 0: PfsWrite and PfsSync write only such files"
                ),
            ));
        }
        match self.setting.namespace.stat(&canonical) {
            Ok(attr) if attr.tier == Tier::Pfs => Ok(canonical),
            Ok(_) => {
                self.drop_direct(&mut lock(&self.books), &canonical);
                Err(Failure::new(
                    Errno(libc::ESTALE),
                    format!(
                        "{path} was copied into the buffer since it was opened: reopen it to write its buffer copy"
                    ),
                ))
            }
            Err(failure) => {
                Err(Failure::new(failure.errno, format!("{path} is gone from the PFS: {}", failure.text())))
            }
        }
    }
}
