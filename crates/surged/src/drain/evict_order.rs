//! The order in which the evicter takes demoted files out of the buffer
//! when it needs space (`surged --drain-evict`): BBOS's, the default, or
//! one of the restart-cache baselines it is compared with, LRU and FIFO
//! [Sung20, §5.3]. The comparisons themselves are the policy engine's
//! (`surge_bbos::placement::CachePolicy`, which the simulator ranks with
//! too); this module gives the evicter a file's `Candidate` and the order
//! to rank candidates by.
//!
//! - `bbos`: outdated versions first, then the latest versions of the
//!   coldest jobs, highest MTBF first (the cold-direction erratum of
//!   docs/bbos.md);
//! - `lru`: the file opened (for reading or writing) least recently first;
//! - `fifo`: the file written (opened for writing) longest ago first.
//!
//! Whatever the order, an outdated version is evicted as soon as it is
//! demoted (Algorithm 5.2, as in the simulator), and demotion keeps BBOS's
//! order; only the choice among the files kept as a cache changes. To add
//! an order, implement [`EvictOrder`] and list it in [`EvictOrderKind`].

use clap::ValueEnum;
use std::cmp::Ordering;
use std::fmt;
use surge_bbos::placement::{CachePolicy, Candidate};

/// Ranks two demoted files for eviction.
pub trait EvictOrder: Send + Sync {
    /// `Less` when `a` leaves the buffer before `b`.
    fn colder(&self, a: &Candidate, b: &Candidate) -> Ordering;
}

impl EvictOrder for CachePolicy {
    fn colder(&self, a: &Candidate, b: &Candidate) -> Ordering {
        CachePolicy::colder(*self, a, b)
    }
}

/// The orders `--drain-evict` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum EvictOrderKind {
    /// Outdated versions first, then the coldest jobs' (highest MTBF first) [Sung20]
    #[default]
    Bbos,
    /// The file opened least recently first
    Lru,
    /// The file written longest ago first
    Fifo,
}

impl EvictOrderKind {
    /// The name `--drain-evict` takes and the report shows.
    pub fn name(self) -> &'static str {
        match self {
            EvictOrderKind::Bbos => "bbos",
            EvictOrderKind::Lru => "lru",
            EvictOrderKind::Fifo => "fifo",
        }
    }

    pub fn order(self) -> &'static dyn EvictOrder {
        match self {
            EvictOrderKind::Bbos => &CachePolicy::Bbos,
            EvictOrderKind::Lru => &CachePolicy::Lru,
            EvictOrderKind::Fifo => &CachePolicy::Fifo,
        }
    }
}

impl fmt::Display for EvictOrderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::books::{Books, FileEntry, FileStatus};
    use std::time::{Duration, Instant};

    /// Three jobs' latest versions, demoted: `/cold` (MTBF 6000 s) written
    /// first and opened last, `/hot` (60 s) written second and never
    /// opened again, `/mid` (600 s) written last; and `/cold`'s outdated
    /// version, written before everything.
    fn books(now: Instant) -> Books {
        let mut books = Books::default();
        let ago = |s: u64| Some(now - Duration::from_secs(s));
        let demoted = FileStatus::Demoted { ino: 1, version: 1, bytes: 1 };
        let file =
            |job, version, written, opened| FileEntry { job, device: 0, version, status: demoted, written, opened };
        books.files.insert("/cold/1".into(), file(1, 1, ago(50), ago(50)));
        books.files.insert("/cold/2".into(), file(1, 2, ago(40), ago(1)));
        books.files.insert("/hot/1".into(), file(2, 1, ago(30), ago(30)));
        books.files.insert("/mid/1".into(), file(3, 1, ago(20), ago(10)));
        books.job(1).mtbf_s = 6000;
        books.job(2).mtbf_s = 60;
        books.job(3).mtbf_s = 600;
        books
    }

    fn order(kind: EvictOrderKind) -> Vec<String> {
        let now = Instant::now();
        books(now).eviction_order(kind.order(), now).into_iter().map(|c| c.0).collect()
    }

    #[test]
    fn bbos_takes_outdated_versions_then_the_highest_mtbf() {
        assert_eq!(order(EvictOrderKind::Bbos), ["/cold/1", "/cold/2", "/mid/1", "/hot/1"]);
    }

    #[test]
    fn lru_takes_the_file_opened_least_recently() {
        assert_eq!(order(EvictOrderKind::Lru), ["/cold/1", "/hot/1", "/mid/1", "/cold/2"]);
    }

    #[test]
    fn fifo_takes_the_file_written_longest_ago() {
        assert_eq!(order(EvictOrderKind::Fifo), ["/cold/1", "/cold/2", "/hot/1", "/mid/1"]);
    }

    #[test]
    fn every_order_has_the_name_the_flag_takes() {
        for kind in EvictOrderKind::value_variants() {
            assert_eq!(kind.to_possible_value().unwrap().get_name(), kind.name());
        }
    }
}
