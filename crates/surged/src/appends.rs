//! Append locks (metadata daemon). Writes go straight to the data daemons,
//! and a file's size is the largest end its objects imply, so an O_APPEND
//! write must read the size and write there without another append slipping
//! in between, across every client. A local file system holds the inode
//! lock for that; here each append takes the file's append lock on daemon
//! 0 for the read-size-then-write, as a Lustre client takes an [0, EOF]
//! extent lock from the OST that holds the file's end.
//!
//! A lock is held by a token the client picks and carries a lease: a holder
//! that crashed or hung stops blocking appends when its lease ends (the
//! client's own request timeout, after which its write has failed anyway).
//! A live holder renews its lease while its write runs (taking the lock
//! again with its token); a holder whose lease lapsed and whose lock
//! another token took since is refused from then on (`Refused::Lost`,
//! remembered for the last [`LOST_KEPT`] such tokens), so it learns that
//! its append may overlap another instead of silently taking the lock
//! afresh. Waiting happens before the scheduling point, so a blocked append
//! holds no scheduler slot.

use crate::locking::lock;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
struct Holder {
    token: u64,
    until: Instant,
}

/// How many superseded tokens are remembered: a token is used for one
/// append, whose holder asks again within its lease or has crashed.
const LOST_KEPT: usize = 4096;

#[derive(Default)]
struct State {
    held: HashMap<u64, Holder>,
    /// Tokens whose lease lapsed and whose lock another token took, oldest first.
    lost: VecDeque<u64>,
    lost_set: HashSet<u64>,
}

impl State {
    fn supersede(&mut self, token: u64) {
        if self.lost.len() == LOST_KEPT {
            if let Some(old) = self.lost.pop_front() {
                self.lost_set.remove(&old);
            }
        }
        self.lost.push_back(token);
        self.lost_set.insert(token);
    }
}

#[derive(Default)]
pub struct AppendLocks {
    state: Mutex<State>,
    released: Condvar,
}

/// Why a lock was not granted.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Another holder kept it for the whole wait.
    Busy,
    /// This token's lease lapsed and another token took the lock since.
    Lost,
}

impl AppendLocks {
    /// Waits until `token` holds `ino`'s lock for `lease`; at most `lease`
    /// (by then a live holder's lease has ended too, unless it renewed).
    /// Taking a lock the token already holds renews it; a token that lost
    /// it (above) is refused.
    pub fn lock(&self, ino: u64, token: u64, lease: Duration) -> Result<(), Refused> {
        let deadline = Instant::now() + lease;
        let mut state = lock(&self.state);
        loop {
            if state.lost_set.contains(&token) {
                return Err(Refused::Lost);
            }
            let now = Instant::now();
            match state.held.get(&ino).copied() {
                Some(h) if h.token != token && h.until > now => {
                    if now >= deadline {
                        return Err(Refused::Busy);
                    }
                    let wait = h.until.min(deadline) - now;
                    state = self.released.wait_timeout(state, wait).unwrap_or_else(|e| e.into_inner()).0;
                }
                previous => {
                    if let Some(lapsed) = previous.filter(|h| h.token != token) {
                        state.supersede(lapsed.token);
                    }
                    state.held.insert(ino, Holder { token, until: now + lease });
                    return Ok(());
                }
            }
        }
    }

    /// Releases `ino`'s lock if `token` holds it; false if it did not (its
    /// lease ended and someone else may have appended meanwhile).
    pub fn unlock(&self, ino: u64, token: u64) -> bool {
        let mut state = lock(&self.state);
        let mine = state.held.get(&ino).is_some_and(|h| h.token == token);
        if mine {
            state.held.remove(&ino);
            self.released.notify_all();
        }
        mine
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn a_second_holder_waits_for_the_first_to_unlock() {
        let locks = Arc::new(AppendLocks::default());
        locks.lock(7, 1, Duration::from_secs(10)).unwrap();
        let waiter = {
            let locks = locks.clone();
            thread::spawn(move || {
                let started = Instant::now();
                locks.lock(7, 2, Duration::from_secs(10)).unwrap();
                started.elapsed()
            })
        };
        thread::sleep(Duration::from_millis(100));
        assert!(locks.unlock(7, 1));
        let waited = waiter.join().unwrap();
        assert!(waited >= Duration::from_millis(90) && waited < Duration::from_secs(5), "{waited:?}");
        assert!(!locks.unlock(7, 1), "the first holder no longer holds it");
        assert!(locks.unlock(7, 2));
    }

    #[test]
    fn locks_of_different_files_do_not_wait_for_each_other() {
        let locks = AppendLocks::default();
        locks.lock(1, 1, Duration::from_secs(10)).unwrap();
        let started = Instant::now();
        locks.lock(2, 2, Duration::from_secs(10)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_holder_that_never_unlocks_loses_the_lock_when_its_lease_ends() {
        let locks = AppendLocks::default();
        locks.lock(3, 1, Duration::from_millis(150)).unwrap();
        let started = Instant::now();
        locks.lock(3, 2, Duration::from_secs(10)).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(!locks.unlock(3, 1), "an expired holder's unlock must say it lost the lock");
    }

    #[test]
    fn a_holder_whose_lease_lapsed_and_was_taken_over_cannot_renew_it() {
        let locks = AppendLocks::default();
        locks.lock(5, 1, Duration::from_millis(50)).unwrap();
        locks.lock(5, 1, Duration::from_millis(50)).unwrap();
        thread::sleep(Duration::from_millis(80));
        locks.lock(5, 2, Duration::from_secs(10)).unwrap();
        assert_eq!(locks.lock(5, 1, Duration::from_secs(10)), Err(Refused::Lost));
        assert!(locks.unlock(5, 2));
        assert_eq!(locks.lock(5, 1, Duration::from_secs(10)), Err(Refused::Lost), "even once the lock is free");
    }

    #[test]
    fn a_waiter_gives_up_after_its_own_lease() {
        let locks = AppendLocks::default();
        locks.lock(4, 1, Duration::from_secs(30)).unwrap();
        assert_eq!(locks.lock(4, 2, Duration::from_millis(100)), Err(Refused::Busy));
    }
}
