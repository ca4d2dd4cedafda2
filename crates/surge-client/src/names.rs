//! Cached names and attributes: what daemon 0's `Stat` said of a path,
//! kept so that a repeated lookup or stat does not cross to daemon 0, and
//! dropped when daemon 0's change feed (`Watch`, docs/protocol.md) or this
//! client's own request says the path changed (docs/core.md, "Cached names
//! and attributes"). The model is NFS's attribute cache with NFSv4's
//! delegation recall, with a feed where NFS has callbacks.
//!
//! Coherence:
//! - This client's own changes drop what they change when their reply
//!   arrives (`surge_proto::changes::made_by`, the rule daemon 0 publishes
//!   by): seen at once by every thread and, through the mount, by every
//!   process of the node.
//! - Other clients of the node (processes with the interposer and no
//!   mount, the `surge` command) tick a clock in shared memory after each
//!   change they make (`NodeClock`, one per user, /dev/shm/surge-names-UID); a cache
//!   that sees it moved drops everything before it answers, so their
//!   changes are seen at once too, without waiting for the feed.
//! - Another client's changes arrive on the feed, one round trip after they
//!   commit; in any case nothing is served older than the cache's lifetime
//!   (`SURGE_META_CACHE`), which also bounds changes made outside Surge to
//!   the PFS-only part of the namespace.
//! - Hits are served only while the feed is followed: a watcher that lost
//!   its connection, fell behind or saw daemon 0 restart drops everything
//!   and serves nothing until it follows the feed again.
//! - A reply that raced a change is not cached: every drop moves a
//!   generation on, and a reply is kept only if none happened since its
//!   request was sent.
//! - Only what daemon 0 decides is cached. A buffer file's size, times and
//!   staged-ness come from its objects (the glimpse) at every stat, so
//!   writes, which never reach daemon 0, are seen at once. A file's
//!   attributes daemon 0 gives from the PFS (tier `pfs`, `lost`) and those
//!   of a file with several names (a change through one name is published
//!   under that name only) are never cached.
//!
//! How to plug in: `Shared` asks [`Names::get`] before a `Stat` and puts the
//! reply back ([`Names::put`]), drops what its requests changed
//! ([`Names::forget`]), and starts the watcher ([`Names::watch`]) once a
//! process stats enough names to gain from it; the FUSE mount registers a
//! listener ([`Names::listen`]) to pass another client's changes on to the
//! kernel's caches.

use crate::conn::Conn;
use crate::error::Result;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use surge_proto::msg::ChangesReply;
use surge_proto::{Attr, FileKind, Request, Tier};

/// A process that stats only a few names gains nothing from the cache, and
/// its watcher costs a connection to daemon 0 and a thread: it starts at
/// this many stats.
pub const STATS_BEFORE_WATCHING: u32 = 16;
/// How long a watcher waits before it dials daemon 0 again.
const REDIAL: Duration = Duration::from_secs(1);
/// Longest wait asked of one `Watch`: a client that went away is noticed
/// within it.
const MOST_WAIT: Duration = Duration::from_secs(10);

/// Changed paths, each with whether everything under it changed too;
/// `None`: anything may have changed.
pub type Listener = Box<dyn Fn(Option<&[(String, bool)]>) + Send + Sync>;

struct Cached {
    attr: Attr,
    at: Instant,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<String, Cached>,
    /// The node clock as this cache last took it into account.
    node_seen: u64,
    /// The process whose watcher follows the feed now; hits are served to it only.
    following: Option<u32>,
    /// The process that started a watcher (a forked child starts its own).
    watcher_of: Option<u32>,
}

/// A counter in shared memory that every client of this user on this
/// node moves on after each namespace change it makes (of any cluster: a
/// change in another only costs a cache a needless drop).
struct NodeClock(&'static AtomicU64);

/// This user's node clock (`ClientConfig::node_clock`).
pub fn node_clock_path() -> PathBuf {
    // SAFETY: getuid cannot fail.
    PathBuf::from(format!("/dev/shm/surge-names-{}", unsafe { libc::getuid() }))
}

impl NodeClock {
    /// The clock at `path`; `None` where it cannot be had (nothing is then
    /// cached: a change another process of the node made would go unseen
    /// until the feed brings it).
    fn open(path: &Path) -> Option<NodeClock> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .ok()?;
        // Another user's file planted under the name is not ours to trust.
        if file.metadata().ok()?.uid() != uid {
            return None;
        }
        if file.metadata().ok()?.len() < 8 {
            file.set_len(8).ok()?;
        }
        // SAFETY: a shared mapping of the file's first 8 bytes, which it
        // has; kept for the life of the process (never unmapped), and
        // only ever accessed as one aligned atomic (the mapping is page-aligned).
        unsafe {
            use std::os::fd::AsRawFd;
            let at = libc::mmap(
                std::ptr::null_mut(),
                8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            if at == libc::MAP_FAILED {
                return None;
            }
            Some(NodeClock(&*(at as *const AtomicU64)))
        }
    }

    fn now(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Moves the clock on; the value it had.
    fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::AcqRel)
    }
}

pub struct Names {
    /// How long an entry may be served; zero: nothing is cached.
    lifetime: Duration,
    /// `None`: not to be had here (and nothing is cached).
    node: Option<NodeClock>,
    /// This client's `Hello` instance: its own changes come back on the feed.
    instance: u64,
    state: Mutex<State>,
    /// Moves on at every drop (see the module doc).
    generation: AtomicU64,
    stats: AtomicU32,
    listener: Mutex<Option<Listener>>,
    /// The client went away: its watcher ends.
    closed: AtomicBool,
    /// The watcher's connection while it has one, shut down by `close` to end its wait.
    watching: Mutex<Option<RawFd>>,
}

fn pid() -> u32 {
    crate::pid::current()
}

/// Whether daemon 0's `attr` of a name may be cached (see the module doc).
fn cacheable(attr: &Attr) -> bool {
    attr.kind != FileKind::File || matches!(attr.tier, Tier::Buffer | Tier::Staged) && attr.nlink <= 1
}

impl Names {
    /// A cache whose entries live `lifetime` (zero: none are kept), for
    /// the client of `Hello` instance `instance`, on the node whose clock is `clock`.
    pub fn new(lifetime: Duration, instance: u64, clock: &Path) -> Names {
        let node = if lifetime.is_zero() { None } else { NodeClock::open(clock) };
        Names {
            lifetime: if node.is_some() { lifetime } else { Duration::ZERO },
            node,
            instance,
            state: Mutex::default(),
            generation: AtomicU64::new(0),
            stats: AtomicU32::new(0),
            listener: Mutex::new(None),
            closed: AtomicBool::new(false),
            watching: Mutex::new(None),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn enabled(&self) -> bool {
        !self.lifetime.is_zero()
    }

    /// How long an entry may be served (the bound on another client's changes).
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// Daemon 0's attributes of `path`, while cached and current.
    pub fn get(&self, path: &str) -> Option<Attr> {
        let node = self.node.as_ref()?;
        let mut state = self.state();
        if state.following != Some(pid()) {
            return None;
        }
        let now = node.now();
        if now != state.node_seen {
            // Another process of the node changed something.
            state.entries.clear();
            state.node_seen = now;
            self.generation.fetch_add(1, Ordering::AcqRel);
            return None;
        }
        state.entries.get(path).filter(|c| c.at.elapsed() < self.lifetime).map(|c| c.attr.clone())
    }

    /// The generation to hand to [`Names::put`] with the reply of a request sent now.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Caches `attr` of `path`, from a reply to a request sent at
    /// generation `seen`; nothing if something was dropped since.
    pub fn put(&self, path: &str, attr: &Attr, seen: u64) {
        if !self.enabled() || !cacheable(attr) {
            return;
        }
        let Some(node) = &self.node else { return };
        let mut state = self.state();
        let node_still = node.now() == state.node_seen;
        if state.following == Some(pid()) && self.generation() == seen && node_still {
            let attr = Attr { created: false, ..attr.clone() };
            state.entries.insert(path.to_string(), Cached { attr, at: Instant::now() });
        }
    }

    /// Drops what `changes`, made by this client, name, and tells the
    /// node's other clients; returns whether the generation moved on.
    pub fn forget_own(&self, changes: &[(String, bool)]) -> bool {
        let Some(node) = self.node.as_ref().filter(|_| !changes.is_empty()) else { return false };
        let before = node.tick();
        let mut state = self.state();
        if state.node_seen == before {
            // Only this change happened on the node since: the rest stays.
            state.node_seen = before + 1;
        }
        self.drop_changed(&mut state, changes);
        true
    }

    /// Drops what `changes` name; returns whether the generation moved on.
    pub fn forget(&self, changes: &[(String, bool)]) -> bool {
        if changes.is_empty() || !self.enabled() {
            return false;
        }
        self.drop_changed(&mut self.state(), changes);
        true
    }

    fn drop_changed(&self, state: &mut State, changes: &[(String, bool)]) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        for (path, subtree) in changes {
            state.entries.remove(path);
            if *subtree {
                let under = if path == "/" { "/".to_string() } else { format!("{path}/") };
                let doomed: Vec<String> = state
                    .entries
                    .range(under.clone()..)
                    .map(|(p, _)| p)
                    .take_while(|p| p.starts_with(&under))
                    .cloned()
                    .collect();
                for p in doomed {
                    state.entries.remove(&p);
                }
            }
        }
    }

    /// Drops everything; hits are served again once `following` is set.
    fn forget_all(&self, following: Option<u32>) {
        let mut state = self.state();
        self.generation.fetch_add(1, Ordering::AcqRel);
        state.entries.clear();
        state.following = following;
        state.node_seen = self.node.as_ref().map_or(0, NodeClock::now);
    }

    /// Counts a stat; true once for the process when it should start its watcher.
    pub fn stat_counted(&self) -> bool {
        if !self.enabled() {
            return false;
        }
        let stats = self.stats.fetch_add(1, Ordering::Relaxed) + 1;
        stats >= STATS_BEFORE_WATCHING && self.claim_watcher()
    }

    /// True for the one caller of this process that is to start the watcher.
    fn claim_watcher(&self) -> bool {
        let mut state = self.state();
        if state.watcher_of == Some(pid()) {
            return false;
        }
        // A forked child's entries are its parent's, which no watcher here follows.
        state.entries.clear();
        state.following = None;
        state.watcher_of = Some(pid());
        true
    }

    /// Hands another client's changes to `listener` too (the mount, for
    /// the kernel's caches), and starts the watcher now.
    pub fn listen(self: &Arc<Self>, listener: Listener, dial: impl FnMut() -> Option<Result<Conn>> + Send + 'static) {
        *self.listener.lock().unwrap_or_else(PoisonError::into_inner) = Some(listener);
        if self.enabled() && self.claim_watcher() {
            self.watch(dial);
        }
    }

    fn tell_listener(&self, changes: Option<&[(String, bool)]>) {
        if let Some(listener) = &*self.listener.lock().unwrap_or_else(PoisonError::into_inner) {
            listener(changes);
        }
    }

    /// Starts the thread that follows daemon 0's change feed on a
    /// connection of its own (`dial`: `None` once the client is gone), for
    /// as long as the client lives. `wait` caps each long poll below the
    /// I/O timeout.
    pub fn watch(self: &Arc<Self>, dial: impl FnMut() -> Option<Result<Conn>> + Send + 'static) {
        let names = Arc::clone(self);
        let spawned = std::thread::Builder::new().name("surge-names".into()).spawn(move || names.follow_feed(dial));
        if spawned.is_err() {
            // No thread: nothing is ever served from the cache (`following` stays unset).
            self.state().watcher_of = None;
        }
    }

    fn follow_feed(&self, mut dial: impl FnMut() -> Option<Result<Conn>>) {
        let me = pid();
        loop {
            let Some(dialled) = dial() else { return };
            if let Ok(mut conn) = dialled {
                let wait = (conn.io_timeout() / 2).min(MOST_WAIT);
                *self.watching() = Some(conn.as_raw_fd());
                if !self.gone() {
                    let _ = self.follow_on(&mut conn, me, wait);
                }
                // Before the descriptor is closed (and its number reused).
                *self.watching() = None;
            }
            self.forget_all(None);
            self.tell_listener(None);
            // The client is gone when only this thread holds the cache.
            if self.gone() {
                return;
            }
            std::thread::sleep(REDIAL);
        }
    }

    fn gone(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Follows the feed on `conn` until it fails or the client is gone.
    fn follow_on(&self, conn: &mut Conn, me: u32, wait: Duration) -> Result<()> {
        let wait_ms = wait.as_millis() as u32;
        let first: ChangesReply = conn.call(&Request::Watch { after: u64::MAX, wait_ms: 0 })?;
        let mut after = first.next;
        self.forget_all(Some(me));
        self.tell_listener(None);
        while !self.gone() {
            let reply: ChangesReply = conn.call(&Request::Watch { after, wait_ms })?;
            after = reply.next;
            if reply.lost {
                self.forget_all(Some(me));
                self.tell_listener(None);
                continue;
            }
            let theirs: Vec<(String, bool)> = reply
                .changes
                .into_iter()
                .filter(|c| c.instance != self.instance || c.pid != me)
                .map(|c| (c.path, c.subtree))
                .collect();
            if self.forget(&theirs) {
                self.tell_listener(Some(&theirs));
            }
        }
        Ok(())
    }

    fn watching(&self) -> MutexGuard<'_, Option<RawFd>> {
        self.watching.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The client is going away: its watcher ends now (its connection,
    /// which daemon 0 counts as the client's, closes with it).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        if let Some(fd) = *self.watching() {
            // SAFETY: `fd` is the watcher's open socket: it is cleared under this lock before it is closed.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::Layout;

    fn attr(kind: FileKind, tier: Tier, nlink: u32) -> Attr {
        Attr {
            ino: 5,
            kind,
            mode: 0o644,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            uid: 0,
            gid: 0,
            nlink,
            rdev: 0,
            layout: Layout::INHERIT,
            tier,
            created: true,
            staged_version: 0,
            blocks: 0,
        }
    }

    /// A node of this test's own: a node clock in a directory of its own.
    fn node() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let clock = dir.path().join("clock");
        (dir, clock)
    }

    fn on(node: &(tempfile::TempDir, PathBuf), lifetime: Duration, instance: u64) -> Names {
        Names::new(lifetime, instance, &node.1)
    }

    fn following(node: &(tempfile::TempDir, PathBuf), lifetime: Duration) -> Names {
        let names = on(node, lifetime, 1);
        names.forget_all(Some(pid()));
        names
    }

    #[test]
    fn nothing_is_served_unless_the_feed_is_followed() {
        let node = node();
        let names = on(&node, Duration::from_secs(9), 1);
        let dir = attr(FileKind::Dir, Tier::Buffer, 1);
        names.put("/d", &dir, names.generation());
        assert!(names.get("/d").is_none());
        names.forget_all(Some(pid()));
        names.put("/d", &dir, names.generation());
        let got = names.get("/d").unwrap();
        assert!(!got.created, "a cached attr is a stat's, not an open's");
        names.forget_all(None);
        assert!(names.get("/d").is_none());
    }

    #[test]
    fn a_reply_that_raced_a_change_is_not_cached() {
        let node = node();
        let names = following(&node, Duration::from_secs(9));
        let seen = names.generation();
        assert!(names.forget(&[("/elsewhere".into(), false)]));
        names.put("/d", &attr(FileKind::Dir, Tier::Buffer, 1), seen);
        assert!(names.get("/d").is_none());
    }

    #[test]
    fn a_change_by_another_client_of_the_node_is_seen_at_once_and_ones_own_keeps_the_rest() {
        let node = node();
        let (here, there) = (on(&node, Duration::from_secs(9), 1), on(&node, Duration::from_secs(9), 2));
        here.forget_all(Some(pid()));
        there.forget_all(Some(pid()));
        let dir = attr(FileKind::Dir, Tier::Buffer, 1);
        for p in ["/a", "/b"] {
            here.put(p, &dir, here.generation());
        }
        here.forget_own(&[("/a".into(), false)]);
        assert!(here.get("/b").is_some(), "its own change drops only what it changed");
        there.forget_own(&[("/elsewhere".into(), false)]);
        assert!(here.get("/b").is_none(), "another process's change, not yet on the feed");
        // Taken into account: entries are cached again.
        here.put("/b", &dir, here.generation());
        assert!(here.get("/b").is_some());
        // A reply to a request sent before another process's change is not cached.
        let seen = here.generation();
        there.forget_own(&[("/x".into(), false)]);
        here.put("/c", &dir, seen);
        assert!(here.get("/c").is_none());
    }

    #[test]
    fn a_rename_drops_the_subtree_and_nothing_beside_it() {
        let node = node();
        let names = following(&node, Duration::from_secs(9));
        let dir = attr(FileKind::Dir, Tier::Buffer, 1);
        for p in ["/a", "/a/x", "/a/x/y", "/a-b", "/ab", "/b"] {
            names.put(p, &dir, names.generation());
        }
        names.forget(&[("/a".into(), true), ("/b".into(), false)]);
        let kept: Vec<&str> =
            ["/a", "/a/x", "/a/x/y", "/a-b", "/ab", "/b"].into_iter().filter(|p| names.get(p).is_some()).collect();
        assert_eq!(kept, vec!["/a-b", "/ab"]);
        names.forget(&[("/".into(), true)]);
        assert!(names.get("/ab").is_none());
    }

    #[test]
    fn files_whose_attributes_daemon_0_takes_from_the_pfs_or_that_have_several_names_are_not_cached() {
        let node = node();
        let names = following(&node, Duration::from_secs(9));
        for (path, a, kept) in [
            ("/buffer", attr(FileKind::File, Tier::Buffer, 1), true),
            ("/staged", attr(FileKind::File, Tier::Staged, 1), true),
            ("/pfs", attr(FileKind::File, Tier::Pfs, 1), false),
            ("/lost", attr(FileKind::File, Tier::Lost, 1), false),
            ("/linked", attr(FileKind::File, Tier::Buffer, 2), false),
            ("/pfs-dir", attr(FileKind::Dir, Tier::Pfs, 1), true),
        ] {
            names.put(path, &a, names.generation());
            assert_eq!(names.get(path).is_some(), kept, "{path}");
        }
    }

    #[test]
    fn an_entry_is_not_served_past_the_lifetime() {
        let node = node();
        let names = following(&node, Duration::from_millis(20));
        names.put("/d", &attr(FileKind::Dir, Tier::Buffer, 1), names.generation());
        assert!(names.get("/d").is_some());
        std::thread::sleep(Duration::from_millis(30));
        assert!(names.get("/d").is_none());
    }

    #[test]
    fn a_zero_lifetime_caches_nothing_and_starts_no_watcher() {
        let node = node();
        let names = on(&node, Duration::ZERO, 1);
        names.forget_all(Some(pid()));
        names.put("/d", &attr(FileKind::Dir, Tier::Buffer, 1), names.generation());
        assert!(names.get("/d").is_none());
        assert!((0..100).all(|_| !names.stat_counted()));
    }

    #[test]
    fn the_watcher_starts_once_per_process_after_enough_stats() {
        let node = node();
        let names = on(&node, Duration::from_secs(9), 1);
        let started = (0..3 * STATS_BEFORE_WATCHING).filter(|_| names.stat_counted()).count();
        assert_eq!(started, 1);
    }
}
