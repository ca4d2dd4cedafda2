//! The read cache in front of the object store and the PFS tier.
//!
//! A [`ReadCache`] only keeps and forgets bytes; the rule that makes it
//! safe lives here, in [`ReadThrough`], which every read and every change
//! passes: a change bumps the generation of what it changed before it
//! invalidates the cache, and a read that missed offers its bytes only if
//! the generation is still the one it saw before it read, checked under the
//! same lock, so a read racing a write can never bring back bytes the write
//! replaced. To plug in a cache, implement `ReadCache` and register it in
//! [`crate::stages::CACHES`]; [`NoCache`] is the default, [`Lru`]
//! (`--cache lru --cache-size BYTES`) keeps recent reads in memory.

use crate::locking::lock;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What cached bytes belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheKey {
    /// An object of the buffer tier, by inode number.
    Object(u64),
    /// A file of the PFS tier, as it was when read: another file at the
    /// path, or the file changed, is another key, so PFS entries need no
    /// invalidation (the PFS can change behind the daemon's back).
    PfsFile { dev: u64, ino: u64, size: u64, mtime_ns: i64, ctime_ns: i64 },
}

/// A cache of file bytes, called only through [`ReadThrough`].
pub trait ReadCache: Send + Sync {
    /// Copies the cached bytes of `key` at `offset` into `buf`; `None` on a
    /// miss, else how many bytes (short only where the file ended).
    fn lookup(&self, key: CacheKey, offset: u64, buf: &mut [u8]) -> Option<usize>;
    /// Offers `data`, read at `offset`; `at_end`: the file ended there (the
    /// read came back short).
    fn insert(&self, key: CacheKey, offset: u64, data: &[u8], at_end: bool);
    /// Forgets whatever is cached of `key` in `range`, and every entry that
    /// says the file ends in or past it.
    fn invalidate(&self, key: CacheKey, range: Range<u64>);
}

/// No cache: every read goes to the store (the page cache still helps).
#[derive(Debug, Default)]
pub struct NoCache;

impl ReadCache for NoCache {
    fn lookup(&self, _key: CacheKey, _offset: u64, _buf: &mut [u8]) -> Option<usize> {
        None
    }
    fn insert(&self, _key: CacheKey, _offset: u64, _data: &[u8], _at_end: bool) {}
    fn invalidate(&self, _key: CacheKey, _range: Range<u64>) {}
}

/// A byte-bounded LRU cache of whole reads: a read hits when the same
/// offset of the same file was read before with at least as many bytes
/// (or up to the file's end). Checkpoint restarts and analysis re-read
/// what was just written or read in the same request sizes, which is the
/// pattern this serves without the store's checksum pass.
pub struct Lru {
    limit: usize,
    state: Mutex<LruState>,
}

#[derive(Default)]
struct LruState {
    files: HashMap<CacheKey, BTreeMap<u64, Entry>>,
    /// Every entry by its last use, so the least recent is the first.
    by_use: BTreeMap<u64, (CacheKey, u64)>,
    bytes: usize,
    clock: u64,
}

struct Entry {
    data: Vec<u8>,
    /// The file ended where `data` does.
    at_end: bool,
    last_used: u64,
}

impl Entry {
    /// The file offsets whose change makes this entry wrong.
    fn covers(&self, offset: u64) -> Range<u64> {
        offset..if self.at_end { u64::MAX } else { offset + self.data.len() as u64 }
    }
}

impl Lru {
    /// A cache of at most `limit` bytes.
    pub fn new(limit: usize) -> Lru {
        Lru { limit, state: Mutex::new(LruState::default()) }
    }

    /// Bytes cached now.
    pub fn bytes(&self) -> usize {
        lock(&self.state).bytes
    }
}

impl LruState {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn evict_oldest(&mut self) {
        if let Some((_, (key, offset))) = self.by_use.pop_first() {
            self.remove(key, offset);
        }
    }

    fn remove(&mut self, key: CacheKey, offset: u64) {
        if let Some(entries) = self.files.get_mut(&key) {
            if let Some(entry) = entries.remove(&offset) {
                self.bytes -= entry.data.len();
                self.by_use.remove(&entry.last_used);
            }
            if entries.is_empty() {
                self.files.remove(&key);
            }
        }
    }
}

impl ReadCache for Lru {
    fn lookup(&self, key: CacheKey, offset: u64, buf: &mut [u8]) -> Option<usize> {
        let mut state = lock(&self.state);
        let clock = state.tick();
        let entry = state.files.get_mut(&key)?.get_mut(&offset)?;
        if entry.data.len() < buf.len() && !entry.at_end {
            return None;
        }
        let n = entry.data.len().min(buf.len());
        buf[..n].copy_from_slice(&entry.data[..n]);
        let was = std::mem::replace(&mut entry.last_used, clock);
        state.by_use.remove(&was);
        state.by_use.insert(clock, (key, offset));
        Some(n)
    }

    fn insert(&self, key: CacheKey, offset: u64, data: &[u8], at_end: bool) {
        if data.len() > self.limit {
            return;
        }
        let mut state = lock(&self.state);
        state.remove(key, offset);
        while state.bytes + data.len() > self.limit {
            state.evict_oldest();
        }
        let clock = state.tick();
        let entry = Entry { data: data.to_vec(), at_end, last_used: clock };
        state.bytes += data.len();
        state.by_use.insert(clock, (key, offset));
        state.files.entry(key).or_default().insert(offset, entry);
    }

    fn invalidate(&self, key: CacheKey, range: Range<u64>) {
        let mut state = lock(&self.state);
        let Some(entries) = state.files.get(&key) else { return };
        let stale: Vec<u64> = entries
            .iter()
            .filter(|(&offset, entry)| {
                let covers = entry.covers(offset);
                covers.start < range.end && range.start < covers.end
            })
            .map(|(&offset, _)| offset)
            .collect();
        for offset in stale {
            state.remove(key, offset);
        }
    }
}

/// Generations are kept per stripe of keys, not per key: a change to one
/// key then makes the reads of its stripe's other keys skip the insert
/// (correct, only less cached) and the table stays bounded.
const STRIPES: usize = 64;

/// Where a read's bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    Cache(usize),
    /// From the store (or the PFS), through `fill`.
    Filled(usize),
}

impl Served {
    /// How many bytes were served.
    pub fn bytes(self) -> usize {
        match self {
            Served::Cache(n) | Served::Filled(n) => n,
        }
    }
}

/// A [`ReadCache`] with the generation rule enforced (see the module doc).
pub struct ReadThrough {
    cache: Arc<dyn ReadCache>,
    generations: [Mutex<u64>; STRIPES],
    /// Reads served from the cache, and those it missed (`surge status`).
    hits: AtomicU64,
    misses: AtomicU64,
}

impl ReadThrough {
    pub fn new(cache: Arc<dyn ReadCache>) -> ReadThrough {
        ReadThrough {
            cache,
            generations: std::array::from_fn(|_| Mutex::new(0)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn stripe(&self, key: &CacheKey) -> &Mutex<u64> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
        &self.generations[hash as usize % STRIPES]
    }

    /// Serves `buf` at `offset` of `key` from the cache, else with `fill`
    /// (which reads the store and returns how many bytes it got), offering
    /// what `fill` read to the cache when nothing changed `key` meanwhile.
    pub fn read<E>(
        &self,
        key: CacheKey,
        offset: u64,
        buf: &mut [u8],
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<Served, E> {
        if let Some(n) = self.cache.lookup(key, offset, buf) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Served::Cache(n));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let stripe = self.stripe(&key);
        let seen = *lock(stripe);
        let n = fill(buf)?;
        let generation = lock(stripe);
        if *generation == seen {
            self.cache.insert(key, offset, &buf[..n], n < buf.len());
        }
        Ok(Served::Filled(n))
    }

    /// Call after `key` changed in `range` (a write, truncate or remove
    /// reached the store, even in part).
    pub fn invalidate(&self, key: CacheKey, range: Range<u64>) {
        let mut generation = lock(self.stripe(&key));
        *generation += 1;
        self.cache.invalidate(key, range);
    }

    /// Reads served from the cache and reads that missed it, so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_that_raced_a_change_does_not_cache_what_it_read() {
        let cache = ReadThrough::new(Arc::new(Lru::new(1 << 20)));
        let key = CacheKey::Object(1);
        let mut buf = [0u8; 4];
        let raced = cache.read(key, 0, &mut buf, |buf| {
            buf.copy_from_slice(b"old!");
            cache.invalidate(key, 0..4); // a write landed while the store was read
            Ok::<_, ()>(4)
        });
        assert_eq!(raced, Ok(Served::Filled(4)));
        let again = cache.read(key, 0, &mut buf, |buf| {
            buf.copy_from_slice(b"new!");
            Ok::<_, ()>(4)
        });
        assert_eq!(again, Ok(Served::Filled(4)), "the raced read was cached");
        assert_eq!(cache.read(key, 0, &mut buf, |_| Err(())), Ok(Served::Cache(4)));
        assert_eq!(&buf, b"new!");
    }

    #[test]
    fn the_lru_stays_within_its_bytes_and_forgets_what_a_change_touches() {
        let lru = Lru::new(100);
        let key = CacheKey::Object(1);
        lru.insert(key, 0, &[1; 40], false);
        lru.insert(key, 40, &[2; 40], false);
        let mut buf = [0u8; 40];
        assert_eq!(lru.lookup(key, 0, &mut buf), Some(40)); // 0 is now the most recent
        lru.insert(key, 80, &[3; 40], false);
        assert!(lru.bytes() <= 100);
        assert_eq!(lru.lookup(key, 40, &mut buf), None, "the least recently used entry went");
        assert_eq!(lru.lookup(key, 0, &mut buf), Some(40));
        // A longer read than cached misses; a short entry at the file's end
        // answers any length, until something at or past it changes.
        assert_eq!(lru.lookup(key, 0, &mut [0u8; 41]), None);
        lru.insert(CacheKey::Object(2), 10, &[4; 5], true);
        assert_eq!(lru.lookup(CacheKey::Object(2), 10, &mut [0u8; 50]), Some(5));
        lru.invalidate(CacheKey::Object(2), 1000..1001);
        assert_eq!(lru.lookup(CacheKey::Object(2), 10, &mut [0u8; 50]), None);
        lru.invalidate(key, 39..40);
        assert_eq!(lru.lookup(key, 0, &mut buf), None);
        assert_eq!(lru.lookup(key, 80, &mut buf), Some(40));
        assert_eq!(lru.bytes(), 40, "what was forgotten no longer counts");
    }

    #[test]
    fn hits_and_misses_are_counted() {
        let cache = ReadThrough::new(Arc::new(Lru::new(1 << 20)));
        let mut buf = [0u8; 4];
        let fill = |buf: &mut [u8]| Ok::<_, ()>(buf.len());
        cache.read(CacheKey::Object(3), 0, &mut buf, fill).unwrap();
        cache.read(CacheKey::Object(3), 0, &mut buf, fill).unwrap();
        assert_eq!(cache.counts(), (1, 1));
    }
}
