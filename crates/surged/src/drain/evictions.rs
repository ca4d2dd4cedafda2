//! The evictions daemon 0 made since it started: which buffer file (its
//! inode) left which path for which PFS copy. A client still holding an
//! evicted file gets ESTALE from the fence on its next `Read` or `Write`;
//! it then asks `Evicted` whether that file was evicted, not removed, and
//! whether the path still names the PFS copy it went to (it was not
//! replaced or renamed since), and goes on with that copy if so. The
//! evicter records each eviction (`Evicter::evict`), `accounting` answers
//! `Evicted` (`DrainManager::evicted_copy`).
//!
//! The record is in memory and keeps the last [`REMEMBERED`] evictions:
//! a handle on a file evicted before daemon 0 last started, or that many
//! evictions ago, keeps its ESTALE (loud, never other bytes).

use crate::locking::lock;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Evictions remembered: a few MiB at most, and more than the files a
/// buffer holds at once.
pub const REMEMBERED: usize = 65_536;

/// Where an evicted buffer file went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The path it was evicted from (canonical).
    pub path: String,
    /// The inode its PFS copy had then, as `Stat` gives it.
    pub pfs_ino: u64,
}

pub struct Evictions {
    remembered: usize,
    record: Mutex<Record>,
}

#[derive(Default)]
struct Record {
    by_ino: HashMap<u64, Eviction>,
    /// Inodes in the order evicted, oldest first.
    order: VecDeque<u64>,
}

impl Default for Evictions {
    fn default() -> Evictions {
        Evictions::remembering(REMEMBERED)
    }
}

impl Evictions {
    fn remembering(remembered: usize) -> Evictions {
        Evictions { remembered, record: Mutex::default() }
    }

    /// Buffer file `ino` was evicted from `path`, to the PFS copy `pfs_ino`.
    pub fn record(&self, ino: u64, path: &str, pfs_ino: u64) {
        let mut record = lock(&self.record);
        if record.by_ino.insert(ino, Eviction { path: path.to_string(), pfs_ino }).is_none() {
            record.order.push_back(ino);
        }
        while record.order.len() > self.remembered {
            if let Some(oldest) = record.order.pop_front() {
                record.by_ino.remove(&oldest);
            }
        }
    }

    /// Where buffer file `ino` went, if it is among the evictions remembered.
    pub fn of(&self, ino: u64) -> Option<Eviction> {
        lock(&self.record).by_ino.get(&ino).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eviction_is_remembered_until_as_many_newer_ones_push_it_out() {
        let evictions = Evictions::remembering(2);
        evictions.record(7, "/a", 100);
        evictions.record(8, "/b", 101);
        assert_eq!(evictions.of(7), Some(Eviction { path: "/a".into(), pfs_ino: 100 }));
        evictions.record(9, "/c", 102);
        assert_eq!(evictions.of(7), None, "the oldest goes");
        assert_eq!(evictions.of(8).map(|e| e.pfs_ino), Some(101));
        assert_eq!(evictions.of(9).map(|e| e.path), Some("/c".into()));
        assert_eq!(evictions.of(10), None, "never evicted");
    }
}
