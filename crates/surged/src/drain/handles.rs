//! The files clients hold open, so that the evicter never takes a buffer
//! file from under a handle. Daemon 0 counts per client the handles its
//! `Open`s gave and its `Close`s returned; a client is its `Hello` instance
//! and pid, over all its connections, and holds nothing once its last
//! connection to daemon 0 is gone (it exited, was killed, or its host
//! died and the connection timed out). An eviction and an open of the same
//! file exclude each other: the evicter refuses a file held or being
//! opened, and an open that arrives while its file is being evicted waits
//! for the eviction to end, then opens what is left (the PFS copy).
//!
//! Handles are counted by inode (a rename keeps a file held) and opens
//! under way by path (their inode is not known yet). The counts live in
//! memory: a daemon 0 that restarts has lost them, and its clients'
//! connections too. A client announces the handles it holds on each new
//! connection to daemon 0 (`Hold`), which raises its counts to what it
//! announces; so after a restart they are counted again as the clients
//! come back. `accounting` counts the opens, closes and holds
//! (`DrainManager::open`), the evicter asks before each eviction
//! (`DrainManager::evict_unheld`).

use crate::lock;
use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex};

/// A client as daemon 0 counts its handles: its `Hello` instance and pid
/// (a forked child keeps its parent's instance but is another process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientId {
    pub instance: u64,
    pub pid: u32,
}

impl ClientId {
    /// The daemons' own connections, which open no files.
    pub const DAEMON: ClientId = ClientId { instance: 0, pid: 0 };
}

#[derive(Default)]
struct Counts {
    /// Connections to daemon 0 per client.
    connections: HashMap<ClientId, u32>,
    /// Handles per client and inode.
    held: HashMap<(ClientId, u64), u32>,
    /// Handles per inode, all clients together.
    by_ino: HashMap<u64, u32>,
    /// Opens under way per path.
    opening: HashMap<String, u32>,
    /// Paths being evicted.
    evicting: HashSet<String>,
}

impl Counts {
    /// `handles` of `ino` closed, out of the total per inode.
    fn release(&mut self, ino: u64, handles: u32) {
        decrement(&mut self.by_ino, &ino, handles);
    }
}

/// Takes `n` from `key`'s count, dropping the entry at zero: the count left,
/// None when `key` had none.
fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, u32>, key: &K, n: u32) -> Option<u32> {
    let count = counts.get_mut(key)?;
    *count = count.saturating_sub(n);
    let left = *count;
    if left == 0 {
        counts.remove(key);
    }
    Some(left)
}

#[derive(Default)]
pub struct Handles {
    counts: Mutex<Counts>,
    /// Signalled when an eviction ends.
    evicted: Condvar,
}

/// An open of a path under way: the evicter leaves the path alone until it is dropped.
pub struct Opening<'a> {
    handles: &'a Handles,
    path: String,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        decrement(&mut lock(&self.handles.counts).opening, &self.path, 1);
    }
}

/// An eviction under way: opens of its path wait until it is dropped.
pub struct Evicting<'a> {
    handles: &'a Handles,
    path: String,
}

impl Drop for Evicting<'_> {
    fn drop(&mut self) {
        lock(&self.handles.counts).evicting.remove(&self.path);
        self.handles.evicted.notify_all();
    }
}

impl Handles {
    /// A connection of `client` authenticated.
    pub fn connected(&self, client: ClientId) {
        *lock(&self.counts).connections.entry(client).or_default() += 1;
    }

    /// A connection of `client` ended; with its last one, its handles go.
    pub fn disconnected(&self, client: ClientId) {
        let mut counts = lock(&self.counts);
        if decrement(&mut counts.connections, &client, 1) != Some(0) {
            return;
        }
        let gone: Vec<(u64, u32)> =
            counts.held.iter().filter(|((c, _), _)| *c == client).map(|(&(_, ino), &n)| (ino, n)).collect();
        for (ino, n) in gone {
            counts.held.remove(&(client, ino));
            counts.release(ino, n);
        }
    }

    /// Announces an open of `path`, waiting first for an eviction of it to end.
    pub fn opening(&self, path: &str) -> Opening<'_> {
        let mut counts = lock(&self.counts);
        while counts.evicting.contains(path) {
            counts = self.evicted.wait(counts).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *counts.opening.entry(path.to_string()).or_default() += 1;
        Opening { handles: self, path: path.to_string() }
    }

    /// `client`'s open gave it a handle of `ino`.
    pub fn opened(&self, client: ClientId, ino: u64) {
        let mut counts = lock(&self.counts);
        *counts.held.entry((client, ino)).or_default() += 1;
        *counts.by_ino.entry(ino).or_default() += 1;
    }

    /// `client` says it holds a handle of each of `inos` (an inode named
    /// twice: two handles), as it does on a new connection: its count of
    /// each becomes at least that, so announcing again counts nothing twice.
    pub fn hold(&self, client: ClientId, inos: &[u64]) {
        let mut announced: HashMap<u64, u32> = HashMap::new();
        for &ino in inos {
            *announced.entry(ino).or_default() += 1;
        }
        let counts = &mut *lock(&self.counts);
        for (ino, handles) in announced {
            let held = counts.held.entry((client, ino)).or_default();
            let more = handles.saturating_sub(*held);
            *held += more;
            if more > 0 {
                *counts.by_ino.entry(ino).or_default() += more;
            }
        }
    }

    /// `client` closed a handle of `ino`; one it does not hold is ignored.
    pub fn closed(&self, client: ClientId, ino: u64) {
        let mut counts = lock(&self.counts);
        if decrement(&mut counts.held, &(client, ino), 1).is_some() {
            counts.release(ino, 1);
        }
    }

    /// Files held open, all clients together.
    pub fn files_held(&self) -> usize {
        lock(&self.counts).by_ino.len()
    }

    /// Starts evicting `path` (inode `ino`), unless a client holds it or is opening it.
    pub fn evicting(&self, path: &str, ino: u64) -> Option<Evicting<'_>> {
        let mut counts = lock(&self.counts);
        if counts.by_ino.contains_key(&ino) || counts.opening.contains_key(path) || counts.evicting.contains(path) {
            return None;
        }
        counts.evicting.insert(path.to_string());
        Some(Evicting { handles: self, path: path.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    const A: ClientId = ClientId { instance: 1, pid: 10 };
    const B: ClientId = ClientId { instance: 2, pid: 10 };

    #[test]
    fn a_file_is_evictable_once_every_client_closed_it() {
        let handles = Handles::default();
        handles.connected(A);
        handles.connected(B);
        handles.opened(A, 7);
        handles.opened(A, 7);
        handles.opened(B, 7);
        handles.closed(A, 7);
        handles.closed(B, 7);
        handles.closed(B, 7); // not B's any more: ignored
        assert!(handles.evicting("/f", 7).is_none(), "A still holds one");
        handles.closed(A, 7);
        assert_eq!(handles.files_held(), 0);
        assert!(handles.evicting("/f", 7).is_some());
    }

    #[test]
    fn a_hold_counts_what_was_not_counted_yet_and_nothing_twice() {
        let handles = Handles::default();
        handles.connected(A);
        handles.opened(A, 7);
        // A restarted daemon 0 knows nothing of 8; 7 it counted already.
        handles.hold(A, &[7, 8, 8]);
        handles.hold(A, &[8, 7, 8]);
        assert_eq!(handles.files_held(), 2);
        handles.closed(A, 7);
        assert!(handles.evicting("/f", 7).is_some(), "7 was held once, not twice");
        handles.closed(A, 8);
        assert!(handles.evicting("/g", 8).is_none(), "8 was held twice");
        handles.hold(B, &[8]);
        handles.closed(A, 8);
        assert!(handles.evicting("/g", 8).is_none(), "B holds it");
        handles.disconnected(A);
        handles.closed(B, 8);
        assert_eq!(handles.files_held(), 0);
    }

    #[test]
    fn a_client_whose_last_connection_ends_holds_nothing() {
        let handles = Handles::default();
        handles.connected(A);
        handles.connected(A);
        handles.connected(B);
        handles.opened(A, 7);
        handles.opened(B, 8);
        handles.disconnected(A);
        assert!(handles.evicting("/f", 7).is_none(), "A has a connection left");
        handles.disconnected(A);
        assert!(handles.evicting("/f", 7).is_some());
        assert!(handles.evicting("/g", 8).is_none(), "B holds it");
        handles.disconnected(B);
        assert_eq!(handles.files_held(), 0);
    }

    #[test]
    fn an_open_waits_for_the_eviction_of_its_file_and_an_open_under_way_blocks_eviction() {
        let handles = Arc::new(Handles::default());
        let opening = handles.opening("/f");
        assert!(handles.evicting("/f", 7).is_none(), "an open of /f is under way");
        drop(opening);
        let evicting = handles.evicting("/f", 7).unwrap();
        assert!(handles.evicting("/f", 7).is_none(), "one eviction at a time");
        let opener = {
            let handles = Arc::clone(&handles);
            std::thread::spawn(move || {
                let _opening = handles.opening("/f");
                std::time::Instant::now()
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        let ended = std::time::Instant::now();
        drop(evicting);
        assert!(opener.join().unwrap() >= ended, "the open went ahead during the eviction");
        assert!(handles.opening("/g").path == "/g", "other paths never wait");
    }
}
