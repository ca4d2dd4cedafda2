//! Which connection an open file's requests take (Mulconn's policies,
//! [Sung20, §4.3] in docs/references.md): the pool has N lanes per daemon, and a file picks lane
//! numbers for its requests.
//!
//! - TtoS binds the file, at open, to the opening thread's lane, so one
//!   file's requests never contend with another thread's on a socket.
//! - TtoM spreads the file's requests over all lanes in turn. A request of
//!   several pieces is cut into runs of [`SPREAD_RUN`] bytes, each on the
//!   next lane, so even one thread keeps several connections busy. The file
//!   keeps one shared position (`File::position`), and each request carries
//!   its own offset: Mulconn's kernel version opens the file N times with
//!   N independent offsets, so a plain `write()` there would scatter data.
//! - Auto is Mulconn's rule: TtoS for writes, TtoM for reads.

use crate::pool::thread_slot;
use std::sync::atomic::{AtomicU64, Ordering};
use surge_cluster::ConnPolicy;

/// Bytes TtoM sends down one lane before moving to the next: one request
/// (Mulconn round-robins every request), so a single thread's 1 MiB call
/// keeps four connections busy.
pub(crate) const SPREAD_RUN: usize = crate::extent::REQUEST_SIZE;

#[derive(Debug)]
pub(crate) struct Route {
    policy: ConnPolicy,
    /// The opener's thread slot (TtoS).
    bound: u64,
    /// Requests made so far (TtoM's turn counter).
    turns: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Read,
    Write,
}

impl Route {
    /// Called on the opening thread: TtoS binds to it, and TtoM's turns
    /// start from it. Starting every file at lane 0, as Mulconn's
    /// per-file counter does, sends the first request of every thread's
    /// file down the same connection, the second down the next, and so on:
    /// threads in step form a convoy on one socket at a time.
    pub fn at_open(policy: ConnPolicy) -> Route {
        let slot = thread_slot();
        Route { policy, bound: slot, turns: AtomicU64::new(slot) }
    }

    fn spreads(&self, direction: Direction) -> bool {
        match self.policy {
            ConnPolicy::Ttos => false,
            ConnPolicy::Ttom => true,
            ConnPolicy::Auto => direction == Direction::Read,
        }
    }

    /// Splits one stripe's pieces (in file order) into runs, each with the
    /// lane number to send it on.
    pub fn runs<T>(&self, direction: Direction, items: Vec<T>, len: impl Fn(&T) -> usize) -> Vec<(u64, Vec<T>)> {
        if !self.spreads(direction) {
            return vec![(self.bound, items)];
        }
        let mut runs: Vec<(u64, Vec<T>)> = Vec::new();
        let mut run_bytes = SPREAD_RUN;
        for item in items {
            if run_bytes >= SPREAD_RUN {
                runs.push((self.turns.fetch_add(1, Ordering::Relaxed), Vec::new()));
                run_bytes = 0;
            }
            run_bytes += len(&item);
            runs.last_mut().expect("a run was just started").1.push(item);
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(lens: &[usize]) -> Vec<usize> {
        lens.to_vec()
    }

    #[test]
    fn ttos_binds_to_the_opener_and_ttom_takes_turns() {
        let ttos = Route::at_open(ConnPolicy::Ttos);
        let runs = ttos.runs(Direction::Write, pieces(&[1 << 20, 1 << 20]), |l| *l);
        assert_eq!(runs, vec![(thread_slot(), vec![1 << 20, 1 << 20])]);

        let ttom = Route::at_open(ConnPolicy::Ttom);
        let (quarter, eighth) = (SPREAD_RUN, SPREAD_RUN / 2);
        // Requests go down the lanes in turn, from this thread's own; small
        // ones share a lane up to SPREAD_RUN bytes.
        let me = thread_slot();
        let runs = ttom.runs(Direction::Write, pieces(&[quarter, quarter, eighth, eighth, quarter]), |l| *l);
        assert_eq!(
            runs.iter().map(|r| (r.0, r.1.len())).collect::<Vec<_>>(),
            vec![(me, 1), (me + 1, 1), (me + 2, 2), (me + 3, 1)]
        );
        // The next call goes on from where the last one left off.
        assert_eq!(ttom.runs(Direction::Read, pieces(&[quarter]), |l| *l)[0].0, me + 4);
        // A file another thread opens starts from that thread's lane.
        let other = std::thread::spawn(|| Route::at_open(ConnPolicy::Ttom)).join().unwrap();
        assert_ne!(other.runs(Direction::Write, pieces(&[quarter]), |l| *l)[0].0, me + 5);
    }

    #[test]
    fn auto_is_ttos_for_writes_and_ttom_for_reads() {
        let auto = Route::at_open(ConnPolicy::Auto);
        let two_mib = pieces(&[1 << 20, 1 << 20]);
        assert_eq!(auto.runs(Direction::Write, two_mib.clone(), |l| *l).len(), 1);
        assert_eq!(auto.runs(Direction::Read, two_mib, |l| *l).len(), 2);
    }
}
