//! Which checkpoint copies leave the buffer first, and which checkpoints
//! skip it [Sung20, §5.2.2].
//!
//! BBOS ranks copies cold-first: outdated versions (a newer checkpoint of
//! the same application exists), then the latest versions by failure rate,
//! lowest first, i.e. highest MTBF first (erratum: §5.2.1 once says
//! "highest failure rates"; every other passage and the restart results
//! need lowest, see docs/bbos.md). LRU and FIFO are the restart-cache
//! baselines the evaluation compares against. The same order picks what
//! demoters copy to the PFS first and what the deleters evict.
//!
//! Direct-to-PFS: once DWSF exceeds the capacity, a checkpoint that would
//! be cold anyway is written to the PFS instead of the buffer, which saves
//! demoting it later.

use std::cmp::Ordering;

/// A copy in the buffer, as the ranking sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// A newer checkpoint of the same application is complete.
    pub outdated: bool,
    pub mtbf: f64,
    pub written_at: f64,
    /// Last write or restart read.
    pub last_use: f64,
}

/// A restart cache policy: the order in which copies are demoted and evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachePolicy {
    /// Outdated versions first, then highest MTBF first.
    Bbos,
    /// Least recently written or read first.
    Lru,
    /// Oldest written first.
    Fifo,
}

impl CachePolicy {
    pub const ALL: [CachePolicy; 3] = [CachePolicy::Bbos, CachePolicy::Lru, CachePolicy::Fifo];

    pub fn name(self) -> &'static str {
        match self {
            CachePolicy::Bbos => "BBOS",
            CachePolicy::Lru => "LRU",
            CachePolicy::Fifo => "FIFO",
        }
    }

    /// `Less` when `a` leaves the buffer before `b`.
    pub fn colder(self, a: &Candidate, b: &Candidate) -> Ordering {
        match self {
            CachePolicy::Bbos => b.outdated.cmp(&a.outdated).then(b.mtbf.total_cmp(&a.mtbf)),
            CachePolicy::Lru => a.last_use.total_cmp(&b.last_use),
            CachePolicy::Fifo => a.written_at.total_cmp(&b.written_at),
        }
    }
}

/// The MTBF of a job on `nodes` nodes when each node fails independently
/// with mean time `node_mtbf`: failure rates add up.
pub fn job_mtbf(node_mtbf: f64, nodes: u32) -> f64 {
    node_mtbf / f64::from(nodes.max(1))
}

/// The direct-to-PFS decision of one period: the checkpoints that would be
/// evicted at its end anyway are those of the applications in the coldest
/// (DWPP − S)/DWPP share, so those skip the buffer once DWSF passes S.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColdCut {
    /// Checkpoints of applications with an MTBF above this are cold.
    mtbf_above: f64,
}

impl ColdCut {
    pub fn new(mtbfs: &[f64], capacity: f64, predicted_dwpp: f64) -> ColdCut {
        let share = ((predicted_dwpp - capacity) / predicted_dwpp).clamp(0.0, 1.0);
        let mut sorted = mtbfs.to_vec();
        sorted.sort_by(f64::total_cmp);
        let cold = (share * sorted.len() as f64).floor() as usize;
        let mtbf_above = if cold == 0 { f64::INFINITY } else { sorted[sorted.len() - cold - 1] };
        ColdCut { mtbf_above }
    }

    pub fn goes_direct(&self, mtbf: f64, dwsf: u64, capacity: u64) -> bool {
        dwsf > capacity && mtbf > self.mtbf_above
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(outdated: bool, mtbf: f64, written_at: f64, last_use: f64) -> Candidate {
        Candidate { outdated, mtbf, written_at, last_use }
    }

    fn order(policy: CachePolicy, copies: &[Candidate]) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..copies.len()).collect();
        idx.sort_by(|&a, &b| policy.colder(&copies[a], &copies[b]));
        idx
    }

    #[test]
    fn bbos_evicts_old_versions_first_then_the_highest_mtbf() {
        let copies = [copy(false, 10.0, 0.0, 9.0), copy(false, 50.0, 1.0, 1.0), copy(true, 5.0, 2.0, 2.0)];
        assert_eq!(order(CachePolicy::Bbos, &copies), [2, 1, 0]);
    }

    #[test]
    fn lru_follows_last_use_and_fifo_follows_write_time() {
        let copies = [copy(false, 10.0, 0.0, 9.0), copy(false, 50.0, 1.0, 1.0), copy(true, 5.0, 2.0, 2.0)];
        assert_eq!(order(CachePolicy::Lru, &copies), [1, 2, 0]);
        assert_eq!(order(CachePolicy::Fifo, &copies), [0, 1, 2]);
    }

    #[test]
    fn a_job_on_more_nodes_fails_more_often() {
        assert_eq!(job_mtbf(1000.0, 4), 250.0);
        assert_eq!(job_mtbf(1000.0, 0), 1000.0);
    }

    #[test]
    fn only_the_coldest_applications_go_direct_and_only_past_the_capacity() {
        let mtbfs = [10.0, 20.0, 30.0, 40.0];
        // DWPP 2 S: half the data cannot stay, the two highest MTBFs are cold.
        let cut = ColdCut::new(&mtbfs, 100.0, 200.0);
        assert!(cut.goes_direct(30.0, 101, 100));
        assert!(!cut.goes_direct(20.0, 101, 100));
        assert!(!cut.goes_direct(40.0, 100, 100));
        // A period that fits sends nothing direct.
        assert!(!ColdCut::new(&mtbfs, 100.0, 90.0).goes_direct(40.0, 500, 100));
    }
}
