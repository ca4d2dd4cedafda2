//! The namespace change feed of daemon 0: every committed namespace change
//! gets a number and goes into a bounded ring, and watchers (`Watch`, a
//! long poll on a connection of its own) are answered with the changes
//! after the last one they saw. Clients cache names and attributes and drop
//! what a change names (docs/core.md, "Cached names and attributes"), as
//! NFSv4 delegations are recalled or a FUSE server notifies the kernel.
//!
//! How to plug in: a change is published where it commits
//! (`Namespace::write`, with the paths its writer touched) and, for
//! changes a request makes outside the database (a PFS-only entry), by the
//! request path after the request succeeded ([`ChangeFeed::publish`]).
//! Publishing one change twice is harmless. A change is charged to the
//! client whose request the thread serves ([`on_behalf_of`]) when the
//! client's own rule (`surge_proto::changes::made_by`) names it: that
//! client dropped it from its cache already and skips it in the feed.
//! Other changes its request made (directories above a new name copied
//! from the PFS, a staged file found changed) are charged to no client,
//! so its own cache drops them too.

use crate::handles::ClientId;
use crate::locking::lock;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use surge_proto::msg::{Change, ChangesReply};

/// Changes kept for watchers that fell behind; one further behind starts over (`lost`).
pub const RING: usize = 65_536;
/// Most changes one `Watch` reply carries.
pub const MAX_REPLY: usize = 4096;
/// Longest a `Watch` waits for a change.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// The client a thread serves, and the paths its request names as changed.
struct Origin {
    client: ClientId,
    named: Vec<String>,
}

thread_local! {
    static ORIGIN: RefCell<Option<Origin>> = const { RefCell::new(None) };
}

/// Runs `work`, a request of `client` that by the client's rule changes
/// `named`, with those changes charged to `client`.
pub fn on_behalf_of<T>(client: ClientId, named: &[(String, bool)], work: impl FnOnce() -> T) -> T {
    let origin = Origin { client, named: named.iter().map(|(p, _)| p.clone()).collect() };
    let before = ORIGIN.with(|o| o.replace(Some(origin)));
    let out = work();
    ORIGIN.with(|o| *o.borrow_mut() = before);
    out
}

/// Whom a change of `path` made now is charged to.
fn origin_of(path: &str) -> ClientId {
    ORIGIN.with(|o| match &*o.borrow() {
        Some(origin) if origin.named.iter().any(|p| p == path) => origin.client,
        _ => ClientId::DAEMON,
    })
}

struct Ring {
    /// The number the next change gets.
    next: u64,
    /// The daemon is stopping: watches are answered at once.
    closed: bool,
    changes: VecDeque<(u64, Change)>,
}

pub struct ChangeFeed {
    ring: Mutex<Ring>,
    published: Condvar,
}

impl Default for ChangeFeed {
    /// Numbers start at the start time in nanoseconds: a watcher of a
    /// daemon 0 that restarted asks after a number below the new ring's
    /// first, and learns it lost track.
    fn default() -> Self {
        let start = SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        Self::starting_at(start)
    }
}

impl ChangeFeed {
    fn starting_at(first: u64) -> ChangeFeed {
        ChangeFeed {
            ring: Mutex::new(Ring { next: first, closed: false, changes: VecDeque::new() }),
            published: Condvar::new(),
        }
    }

    /// Publishes changes of `paths` (each with whether everything under
    /// it changed too), charged to the client this thread serves.
    pub fn publish(&self, paths: impl IntoIterator<Item = (String, bool)>) {
        let mut ring = lock(&self.ring);
        let before = ring.next;
        for (path, subtree) in paths {
            let ClientId { instance, pid } = origin_of(&path);
            let number = ring.next;
            ring.next += 1;
            ring.changes.push_back((number, Change { instance, pid, path, subtree }));
            if ring.changes.len() > RING {
                ring.changes.pop_front();
            }
        }
        if ring.next != before {
            self.published.notify_all();
        }
    }

    /// The daemon is stopping: every watch is answered now, and from now on at once.
    pub fn close(&self) {
        lock(&self.ring).closed = true;
        self.published.notify_all();
    }

    /// The changes numbered above `after` (at most `MAX_REPLY`), waiting
    /// up to `wait` for one (see `Watch` in docs/protocol.md).
    pub fn since(&self, after: u64, wait: Duration) -> ChangesReply {
        let deadline = Instant::now() + wait.min(MAX_WAIT);
        let mut ring = lock(&self.ring);
        loop {
            let last = ring.next - 1;
            let oldest = ring.changes.front().map_or(ring.next, |(n, _)| *n);
            if after > last || after < oldest - 1 {
                return ChangesReply { next: last, lost: true, changes: Vec::new() };
            }
            if after < last {
                let skip = (after + 1 - oldest) as usize;
                let changes: Vec<Change> =
                    ring.changes.iter().skip(skip).take(MAX_REPLY).map(|(_, c)| c.clone()).collect();
                return ChangesReply { next: after + changes.len() as u64, lost: false, changes };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || ring.closed {
                return ChangesReply { next: after, lost: false, changes: Vec::new() };
            }
            ring = self.published.wait_timeout(ring, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn paths(reply: &ChangesReply) -> Vec<&str> {
        reply.changes.iter().map(|c| c.path.as_str()).collect()
    }

    #[test]
    fn a_watcher_gets_the_changes_after_the_last_it_saw_in_order() {
        let feed = ChangeFeed::starting_at(100);
        let first = feed.since(u64::MAX, Duration::ZERO);
        assert!(first.lost);
        feed.publish([("/a".to_string(), false), ("/d".to_string(), true)]);
        let got = feed.since(first.next, Duration::ZERO);
        assert_eq!((paths(&got), got.lost, got.next), (vec!["/a", "/d"], false, 101));
        assert!(got.changes[1].subtree);
        feed.publish([("/b".to_string(), false)]);
        assert_eq!(paths(&feed.since(got.next, Duration::ZERO)), vec!["/b"]);
        let idle = feed.since(102, Duration::ZERO);
        assert_eq!((idle.changes.len(), idle.lost, idle.next), (0, false, 102));
    }

    #[test]
    fn a_watcher_that_fell_behind_the_ring_or_a_restart_is_told_it_lost_track() {
        let feed = ChangeFeed::starting_at(10);
        feed.publish((0..RING + 5).map(|i| (format!("/f{i}"), false)));
        assert!(feed.since(10, Duration::ZERO).lost, "the first changes left the ring");
        let recent = feed.since(10 + 5 - 1, Duration::ZERO);
        assert!(!recent.lost);
        assert_eq!(recent.changes.len(), MAX_REPLY);
        assert_eq!(recent.changes[0].path, "/f5");
        // A number from before a restart (numbers then start higher) or beyond the last.
        assert!(feed.since(3, Duration::ZERO).lost);
        assert!(feed.since(10 + RING as u64 + 5, Duration::ZERO).lost);
    }

    /// A watcher of a new feed waiting (up to 30 s) for its first change.
    fn waiting_watcher() -> (Arc<ChangeFeed>, std::thread::JoinHandle<ChangesReply>) {
        let feed = Arc::new(ChangeFeed::starting_at(1));
        let waiter = {
            let feed = Arc::clone(&feed);
            std::thread::spawn(move || feed.since(0, Duration::from_secs(30)))
        };
        std::thread::sleep(Duration::from_millis(50));
        (feed, waiter)
    }

    #[test]
    fn a_waiting_watcher_wakes_when_a_change_is_published_and_sees_who_made_it() {
        let (feed, waiter) = waiting_watcher();
        let client = ClientId { instance: 7, pid: 3 };
        // The request names /x; the directory it copied from the PFS on the way is no change of its rule.
        on_behalf_of(client, &[("/x".to_string(), false)], || {
            feed.publish([("/x".to_string(), false), ("/pfs-dir".to_string(), false)])
        });
        let got = waiter.join().unwrap();
        assert_eq!(paths(&got)[0], "/x");
        let origins: Vec<(u64, u32)> = got.changes.iter().map(|c| (c.instance, c.pid)).collect();
        assert_eq!(origins, vec![(7, 3), (0, 0)]);
        // Outside a request, the daemon's own work.
        feed.publish([("/y".to_string(), false)]);
        assert_eq!(feed.since(2, Duration::ZERO).changes[0].instance, 0);
    }

    #[test]
    fn a_stopping_daemon_answers_waiting_watches_at_once() {
        let (feed, waiter) = waiting_watcher();
        let started = Instant::now();
        feed.close();
        assert!(waiter.join().unwrap().changes.is_empty());
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(feed.since(0, Duration::from_secs(30)).changes.is_empty());
    }

    #[test]
    fn a_watch_with_nothing_new_returns_empty_after_its_wait() {
        let feed = ChangeFeed::starting_at(1);
        let started = Instant::now();
        let got = feed.since(0, Duration::from_millis(30));
        assert!(got.changes.is_empty() && !got.lost);
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
