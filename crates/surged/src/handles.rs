//! The files clients hold open, counted by daemon 0 on every cluster (not
//! only with the data manager), so that neither the evicter nor the
//! deleter takes a buffer file from under a handle. Daemon 0 counts per
//! client the handles its `Open`s gave and its `Close`s returned; a client
//! is its `Hello` instance and pid, over all its connections, and holds
//! nothing once its last connection to daemon 0 is gone (it exited, was
//! killed, or its host died and the connection timed out).
//!
//! Eviction: an eviction and an open of the same file exclude each other:
//! the evicter refuses a file held or being opened, and an open that
//! arrives while its file is being evicted waits for the eviction to end,
//! then opens what is left (the PFS copy).
//!
//! Removal: a file removed (`Unlink`, or a `Rename` over it) while a client
//! holds it, or while an `Open` of its path is under way, is kept
//! ([`Handles::keep`], asked inside the removal's transaction). Opens of the
//! path that start during the removal wait for it to end ([`Handles::removing`]):
//! they would read the namespace as it was before the removal commits,
//! and take the file after the question was answered. A kept file's
//! doomed record gets a hold lease, and the deleter leaves its objects
//! alone, as POSIX asks for a file removed while open. Its last handle closed (`Close`, the client's last connection
//! gone, or the end of the last open of its path that did not take it),
//! the inode is unheld ([`Handles::take_unheld`]) and the request path
//! releases it to the deleter (`Namespace::release`).
//!
//! Handles are counted by inode (a rename keeps a file held) and opens
//! under way by path (their inode is not known yet). The counts live in
//! memory: a daemon 0 that restarts has lost them, and its clients'
//! connections too. A client announces the handles it holds on each new
//! connection to daemon 0 (`Hold`), which raises its counts to what it
//! announces; so after a restart they are counted again as the clients
//! come back. The kept files a restarted daemon 0 finds in the namespace
//! stay kept ([`Handles::with_kept`]) until their holders announce and
//! close them, or their hold lease ends. `drain::accounting` counts the
//! opens (`DrainManager::open`), the evicter asks before each eviction
//! (`DrainManager::evict_unheld`).

use crate::locking::lock;
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
    /// Removals under way per path.
    removing: HashMap<String, u32>,
    /// Removed files kept for their handles, and the path they were
    /// removed from (empty: kept before daemon 0 started).
    kept: HashMap<u64, String>,
    /// Kept files no handle holds any more, to release to the deleter.
    unheld: Vec<u64>,
}

impl Counts {
    /// `handles` of `ino` closed, out of the total per inode.
    fn release(&mut self, ino: u64, handles: u32) {
        if decrement(&mut self.by_ino, &ino, handles) == Some(0) {
            self.unhold_if_free(ino);
        }
    }

    /// Kept file `ino` goes to the deleter once no handle holds it and no
    /// open of the path it was removed from may be about to.
    fn unhold_if_free(&mut self, ino: u64) {
        let Some(path) = self.kept.get(&ino) else { return };
        if !self.by_ino.contains_key(&ino) && !self.opening.contains_key(path) {
            self.kept.remove(&ino);
            self.unheld.push(ino);
        }
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
    /// Signalled when an eviction or a removal ends.
    settled: Condvar,
}

/// An open of a path under way: the evicter leaves the path alone until it is dropped.
pub struct Opening<'a> {
    handles: &'a Handles,
    path: String,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        let counts = &mut *lock(&self.handles.counts);
        if decrement(&mut counts.opening, &self.path, 1) == Some(0) {
            // A file removed from this path during the open stayed kept in
            // case the open took it; it has its handle by now if it did.
            let removed_here: Vec<u64> =
                counts.kept.iter().filter(|(_, path)| **path == self.path).map(|(&ino, _)| ino).collect();
            for ino in removed_here {
                counts.unhold_if_free(ino);
            }
        }
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
        self.handles.settled.notify_all();
    }
}

/// A removal from a path under way: opens of the path wait until it is dropped.
pub struct Removing<'a> {
    handles: &'a Handles,
    path: String,
}

impl Drop for Removing<'_> {
    fn drop(&mut self) {
        decrement(&mut lock(&self.handles.counts).removing, &self.path, 1);
        self.handles.settled.notify_all();
    }
}

impl Handles {
    /// Counts that know the files kept when daemon 0 last stopped
    /// (`Namespace::kept_doomed`): each stays kept until a client that
    /// announces it (`Hold`) closes it, or its hold lease ends.
    pub fn with_kept(inos: impl IntoIterator<Item = u64>) -> Handles {
        let handles = Handles::default();
        lock(&handles.counts).kept.extend(inos.into_iter().map(|ino| (ino, String::new())));
        handles
    }

    /// A connection of `client` authenticated.
    pub fn connected(&self, client: ClientId) {
        *lock(&self.counts).connections.entry(client).or_default() += 1;
    }

    /// A connection of `client` ended; with its last one, its handles go
    /// (and true is returned: the client is gone).
    pub fn disconnected(&self, client: ClientId) -> bool {
        let mut counts = lock(&self.counts);
        if decrement(&mut counts.connections, &client, 1) != Some(0) {
            return false;
        }
        let gone: Vec<(u64, u32)> =
            counts.held.iter().filter(|((c, _), _)| *c == client).map(|(&(_, ino), &n)| (ino, n)).collect();
        for (ino, n) in gone {
            counts.held.remove(&(client, ino));
            counts.release(ino, n);
        }
        true
    }

    /// Announces an open of `path`, waiting first for an eviction of it,
    /// or a removal from it, to end.
    pub fn opening(&self, path: &str) -> Opening<'_> {
        let mut counts = lock(&self.counts);
        while counts.evicting.contains(path) || counts.removing.contains_key(path) {
            counts = self.settled.wait(counts).unwrap_or_else(std::sync::PoisonError::into_inner);
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

    /// Announces a removal from `path` (an `Unlink`, or a `Rename` onto it),
    /// before its transaction begins; opens of `path` wait until it is dropped.
    pub fn removing(&self, path: &str) -> Removing<'_> {
        *lock(&self.counts).removing.entry(path.to_string()).or_default() += 1;
        Removing { handles: self, path: path.to_string() }
    }

    /// File `ino`, just removed from `path`: kept (true) while a client
    /// holds it or an open of `path` is under way, until both are over.
    pub fn keep(&self, path: &str, ino: u64) -> bool {
        let mut counts = lock(&self.counts);
        let held = counts.by_ino.contains_key(&ino) || counts.opening.contains_key(path);
        if held {
            counts.kept.insert(ino, path.to_string());
        }
        held
    }

    /// May removed file `ino` go to the deleter (its remover's `Release`)?
    /// Not while a client holds it: its last close releases it then.
    pub fn releasable(&self, ino: u64) -> bool {
        let counts = &mut *lock(&self.counts);
        let opening = counts.kept.get(&ino).is_some_and(|path| counts.opening.contains_key(path));
        if opening || counts.by_ino.contains_key(&ino) {
            return false;
        }
        counts.kept.remove(&ino);
        true
    }

    /// The kept files whose last handle closed since the last call.
    pub fn take_unheld(&self) -> Vec<u64> {
        std::mem::take(&mut lock(&self.counts).unheld)
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
    fn a_removed_file_is_kept_until_its_last_handle_closes_whoever_removed_it() {
        let handles = Handles::default();
        handles.connected(A);
        handles.connected(B);
        handles.opened(A, 7);
        handles.opened(B, 7);
        assert!(!handles.keep("/g", 8), "nobody holds 8");
        assert!(handles.keep("/f", 7));
        assert!(!handles.releasable(7), "its remover's release waits for the holders");
        handles.closed(A, 7);
        assert!(handles.take_unheld().is_empty(), "B still holds it");
        handles.disconnected(B);
        assert_eq!(handles.take_unheld(), [7]);
        assert!(handles.take_unheld().is_empty(), "unheld once");
        assert!(handles.releasable(7));
    }

    #[test]
    fn a_file_removed_while_an_open_of_its_path_is_under_way_is_kept_until_the_open_ends() {
        let handles = Handles::default();
        handles.connected(A);
        let opening = handles.opening("/f");
        assert!(handles.keep("/f", 7));
        assert!(!handles.releasable(7), "the open may be taking it");
        drop(opening);
        assert_eq!(handles.take_unheld(), [7], "the open took another file");
        let opening = handles.opening("/f");
        assert!(handles.keep("/f", 9));
        handles.opened(A, 9);
        drop(opening);
        assert!(handles.take_unheld().is_empty(), "the open took it");
        handles.closed(A, 9);
        assert_eq!(handles.take_unheld(), [9]);
    }

    /// Opens `path` in a thread of its own; when the open went ahead.
    fn open_in_another_thread(
        handles: &Arc<Handles>,
        path: &'static str,
    ) -> std::thread::JoinHandle<std::time::Instant> {
        let handles = Arc::clone(handles);
        std::thread::spawn(move || {
            let _opening = handles.opening(path);
            std::time::Instant::now()
        })
    }

    #[test]
    fn an_open_that_starts_during_a_removal_from_its_path_waits_for_the_removal_to_end() {
        let handles = Arc::new(Handles::default());
        let removing = handles.removing("/f");
        assert!(!handles.keep("/f", 7), "no open began before the removal: nothing to keep");
        let opener = open_in_another_thread(&handles, "/f");
        std::thread::sleep(Duration::from_millis(100));
        let ended = std::time::Instant::now();
        drop(removing);
        assert!(opener.join().unwrap() >= ended, "the open read the namespace before the removal committed");
        let _other = handles.opening("/g");
    }

    #[test]
    fn files_kept_before_a_restart_stay_kept_until_a_client_announces_and_closes_them() {
        let handles = Handles::with_kept([7, 8]);
        handles.connected(A);
        handles.hold(A, &[7]);
        handles.closed(A, 8); // never announced: not A's to close
        assert!(handles.take_unheld().is_empty());
        handles.closed(A, 7);
        assert_eq!(handles.take_unheld(), [7]);
        assert!(handles.releasable(8), "8 waits for its remover's release or its lease");
    }

    #[test]
    fn an_open_waits_for_the_eviction_of_its_file_and_an_open_under_way_blocks_eviction() {
        let handles = Arc::new(Handles::default());
        let opening = handles.opening("/f");
        assert!(handles.evicting("/f", 7).is_none(), "an open of /f is under way");
        drop(opening);
        let evicting = handles.evicting("/f", 7).unwrap();
        assert!(handles.evicting("/f", 7).is_none(), "one eviction at a time");
        let opener = open_in_another_thread(&handles, "/f");
        std::thread::sleep(Duration::from_millis(100));
        let ended = std::time::Instant::now();
        drop(evicting);
        assert!(opener.join().unwrap() >= ended, "the open went ahead during the eviction");
        assert!(handles.opening("/g").path == "/g", "other paths never wait");
    }
}
