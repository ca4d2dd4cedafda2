//! The data manager's index in memory: every checkpoint file in the buffer
//! (its job, version, device and whether it is demoted), every job seen,
//! and the figures the report shows. The drain state
//! (`surge_bbos_state`, Table 5.1 of [Sung20, ch. 5]) is the durable
//! record; these books mirror its checkpoint sets and locations, so that
//! the demoters and the evicter choose files without reading the whole
//! state, and are rebuilt from it when daemon 0 starts (`resume`).

use super::evict_order::EvictOrder;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use surge_bbos::placement::Candidate;

/// A job's MTBF until `surge ckpt mtbf` sets it or restarts measure it:
/// one day, so that a job nobody described is neither the coldest nor the hottest.
pub const DEFAULT_MTBF_S: u64 = 86_400;

/// A file opened for writing this recently is not demoted yet: its job is
/// likely still writing it, and a copy would fail (changed during the copy).
pub const WRITE_SETTLE: Duration = Duration::from_secs(1);

/// Where a checkpoint file stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileStatus {
    /// In the buffer only: to be demoted.
    Pending,
    /// A demoter is copying it.
    Demoting,
    /// Copied to the PFS as `version` of inode `ino` (`bytes` long); the
    /// buffer copy stays as a cache until the evicter needs the space.
    Demoted { ino: u64, version: u64, bytes: u64 },
}

#[derive(Debug, Clone)]
pub struct FileEntry {
    pub job: u64,
    pub device: u32,
    pub version: u64,
    pub status: FileStatus,
    /// When a job last opened it for writing (FIFO's order).
    pub written: Option<Instant>,
    /// When a job last opened it, for reading or writing (LRU's order).
    pub opened: Option<Instant>,
}

#[derive(Debug, Clone)]
pub struct JobEntry {
    pub label: String,
    pub mtbf_s: u64,
    /// Whether `SetMtbf` gave the MTBF (restarts then do not change it).
    pub mtbf_given: bool,
    /// Reads for a restart, Unix time in ms.
    pub restarts: Vec<u64>,
    pub demoted_files: u64,
    pub demoted_bytes: u64,
    /// The next version of a file whose path has no number.
    pub next_counter: u64,
}

impl Default for JobEntry {
    fn default() -> JobEntry {
        JobEntry {
            label: String::new(),
            mtbf_s: DEFAULT_MTBF_S,
            mtbf_given: false,
            restarts: Vec::new(),
            demoted_files: 0,
            demoted_bytes: 0,
            next_counter: 1,
        }
    }
}

impl JobEntry {
    /// Records a restart read at `at_ms` and, unless the MTBF was given,
    /// estimates it again: the mean time between the restarts seen.
    pub fn restarted(&mut self, at_ms: u64) {
        self.restarts.push(at_ms);
        if let (false, [first, .., last]) = (self.mtbf_given, self.restarts.as_slice()) {
            let gaps = self.restarts.len() as u64 - 1;
            self.mtbf_s = (last.saturating_sub(*first) / 1000 / gaps).max(1);
        }
    }
}

/// What the data manager did since daemon 0 started.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub demoted_files: u64,
    pub demoted_bytes: u64,
    pub evicted_files: u64,
    pub evicted_bytes: u64,
    pub failed_demotions: u64,
    /// Files placed on the PFS directly, and the bytes written to them.
    pub direct_files: u64,
    pub direct_bytes: u64,
}

/// The device of key 4 (`app:APP:dev:DEVICE`) under which the drain state
/// keeps the files placed on the PFS directly (`placement`): no buffer
/// device has this index, so no demoter or evicter ever takes them.
pub const PFS_DEVICE: surge_bbos_state::DeviceId = surge_bbos_state::DeviceId(u32::MAX);

/// A checkpoint placed on the PFS directly: never in the buffer, so
/// nothing to demote or evict; kept so that its writers' `PfsWrite`s are
/// accepted and a newer version outdates the job's older ones.
#[derive(Debug, Clone)]
pub struct DirectFile {
    pub job: u64,
    pub version: u64,
    /// Written since the last `PfsSync`, to be verified by the next.
    pub unverified: crate::direct::Unverified,
}

#[derive(Debug, Default)]
pub struct Books {
    pub files: BTreeMap<String, FileEntry>,
    /// Checkpoints placed on the PFS directly (since daemon 0 started, or
    /// read back from the drain state by `resume`).
    pub direct: BTreeMap<String, DirectFile>,
    pub jobs: BTreeMap<u64, JobEntry>,
    pub totals: Totals,
}

/// A version of one job's files on one device, oldest first: what a demoter takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub job: u64,
    pub version: u64,
    pub files: Vec<String>,
    /// Older than the job's newest version: evicted as soon as it is demoted.
    pub outdated: bool,
}

impl Books {
    pub fn job(&mut self, job: u64) -> &mut JobEntry {
        self.jobs.entry(job).or_default()
    }

    pub fn mtbf(&self, job: u64) -> u64 {
        self.jobs.get(&job).map_or(DEFAULT_MTBF_S, |j| j.mtbf_s)
    }

    /// The newest version of `job`, in the buffer or placed on the PFS directly.
    pub fn newest_version(&self, job: u64) -> Option<u64> {
        let direct = self.direct.values().filter(|f| f.job == job).map(|f| f.version);
        self.files.values().filter(|f| f.job == job).map(|f| f.version).chain(direct).max()
    }

    /// The oldest version of `job` with files to demote on `device` now
    /// (`outdated_only`: only if older than the job's newest version); files
    /// opened for writing within `WRITE_SETTLE` wait.
    pub fn batch(&self, job: u64, device: u32, outdated_only: bool) -> Option<Batch> {
        let newest = self.newest_version(job)?;
        let settled = |f: &FileEntry| f.written.is_none_or(|at| at.elapsed() >= WRITE_SETTLE);
        let pending =
            |f: &FileEntry| f.job == job && f.device == device && f.status == FileStatus::Pending && settled(f);
        let version = self
            .files
            .values()
            .filter(|f| pending(f))
            .map(|f| f.version)
            .filter(|&v| !outdated_only || v < newest)
            .min()?;
        let files =
            self.files.iter().filter(|(_, f)| pending(f) && f.version == version).map(|(p, _)| p.clone()).collect();
        Some(Batch { job, version, files, outdated: version < newest })
    }

    /// Whether `job` has files to demote (`outdated_only`: of an older version than its newest).
    pub fn has_pending(&self, job: u64, outdated_only: bool) -> bool {
        let newest = self.newest_version(job).unwrap_or(0);
        self.files
            .values()
            .any(|f| f.job == job && f.status == FileStatus::Pending && (!outdated_only || f.version < newest))
    }

    /// Demoted files of versions older than their job's newest, which the
    /// evicter drops at once (Algorithm 5.2 deletes old versions as soon as
    /// they are demoted).
    pub fn outdated_demoted(&self) -> Vec<(String, u64, u64, u64)> {
        self.files
            .iter()
            .filter(|(_, f)| Some(f.version) < self.newest_version(f.job))
            .filter_map(|(path, f)| match f.status {
                FileStatus::Demoted { ino, version, bytes } => Some((path.clone(), ino, version, bytes)),
                _ => None,
            })
            .collect()
    }

    /// Demoted files the evicter may drop, in `order` (ties by version),
    /// times taken from `now`. (Files clients hold open are among them:
    /// the evicter skips those, `handles`.)
    pub fn eviction_order(&self, order: &dyn EvictOrder, now: Instant) -> Vec<(String, u64, u64, u64)> {
        // Seconds since `now`, negative; never seen (a file found by `resume`) counts as oldest.
        let at = |t: Option<Instant>| t.map_or(f64::NEG_INFINITY, |t| -now.saturating_duration_since(t).as_secs_f64());
        let mut candidates: Vec<_> = self
            .files
            .iter()
            .filter_map(|(path, f)| match f.status {
                FileStatus::Demoted { ino, version, bytes } => {
                    let candidate = Candidate {
                        outdated: Some(f.version) < self.newest_version(f.job),
                        mtbf: self.mtbf(f.job) as f64,
                        written_at: at(f.written),
                        last_use: at(f.opened),
                    };
                    Some((candidate, f.version, (path.clone(), ino, version, bytes)))
                }
                _ => None,
            })
            .collect();
        candidates.sort_by(|a, b| order.colder(&a.0, &b.0).then(a.1.cmp(&b.1)));
        candidates.into_iter().map(|(_, _, c)| c).collect()
    }

    /// The jobs with files in the buffer, in job order.
    pub fn jobs_in_buffer(&self) -> BTreeSet<u64> {
        self.files.values().map(|f| f.job).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(job: u64, device: u32, version: u64, status: FileStatus) -> FileEntry {
        FileEntry { job, device, version, status, written: None, opened: None }
    }

    #[test]
    fn a_demoter_takes_the_oldest_version_on_its_device_and_knows_when_it_is_outdated() {
        let mut books = Books::default();
        books.files.insert("/a/ckpt1.r0".into(), file(7, 0, 1, FileStatus::Pending));
        books.files.insert("/a/ckpt1.r1".into(), file(7, 1, 1, FileStatus::Pending));
        books.files.insert("/a/ckpt2.r0".into(), file(7, 0, 2, FileStatus::Pending));
        let batch = books.batch(7, 0, true).unwrap();
        assert_eq!(batch, Batch { job: 7, version: 1, files: vec!["/a/ckpt1.r0".into()], outdated: true });
        assert_eq!(books.batch(7, 1, false).unwrap().files, ["/a/ckpt1.r1"]);
        books.files.get_mut("/a/ckpt1.r0").unwrap().status = FileStatus::Demoting;
        // Version 2 is the newest: not outdated, taken only as a victim.
        assert_eq!(books.batch(7, 0, true), None);
        assert!(!books.batch(7, 0, false).unwrap().outdated);
        assert!(books.has_pending(7, true), "ckpt1.r1 on device 1");
        assert_eq!(books.batch(8, 0, false), None);
        books.files.insert(
            "/b/ckpt1".into(),
            FileEntry { written: Some(Instant::now()), ..file(8, 0, 1, FileStatus::Pending) },
        );
        assert_eq!(books.batch(8, 0, false), None, "just opened for writing");
        assert!(books.has_pending(8, false));
    }

    #[test]
    fn the_outdated_demoted_files_are_the_demoted_ones_of_older_versions() {
        let mut books = Books::default();
        let demoted = |n| FileStatus::Demoted { ino: n, version: n, bytes: n };
        books.files.insert("/hot/2".into(), file(1, 0, 2, demoted(1)));
        books.files.insert("/hot/1".into(), file(1, 0, 1, demoted(2)));
        books.files.insert("/cold/5".into(), file(2, 0, 5, demoted(3)));
        books.files.insert("/cold/6".into(), file(2, 0, 6, FileStatus::Pending));
        books.files.insert("/other/2".into(), file(4, 0, 2, demoted(5)));
        books.files.insert("/other/1".into(), file(4, 0, 1, FileStatus::Pending));
        let outdated: Vec<String> = books.outdated_demoted().into_iter().map(|c| c.0).collect();
        assert_eq!(outdated, ["/cold/5", "/hot/1"]);
    }

    #[test]
    fn restarts_estimate_the_mtbf_unless_it_was_given() {
        let mut job = JobEntry::default();
        job.restarted(1_000_000);
        assert_eq!(job.mtbf_s, DEFAULT_MTBF_S, "one restart measures nothing");
        job.restarted(1_600_000);
        job.restarted(2_200_000);
        assert_eq!(job.mtbf_s, 600);
        let mut given = JobEntry { mtbf_s: 42, mtbf_given: true, ..JobEntry::default() };
        given.restarted(0);
        given.restarted(10_000);
        assert_eq!(given.mtbf_s, 42);
    }
}
