//! The read cache in front of the object store and the PFS tier.
//!
//! A [`ReadCache`] only keeps and forgets bytes; the rule that makes it
//! safe lives here, in [`ReadThrough`], which every read and every change
//! passes: a change bumps the generation of what it changed before it
//! invalidates the cache, and a read that missed offers its bytes only if
//! the generation is still the one it saw before it read, checked under the
//! same lock, so a read racing a write can never bring back bytes the write
//! replaced. To plug in a cache, implement `ReadCache` and pass it in
//! [`crate::Stages`]; [`NoCache`] is the default, `testing::Lru` a small one
//! the tests use.

use crate::lock;
use std::ops::Range;
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
}

impl ReadThrough {
    pub fn new(cache: Arc<dyn ReadCache>) -> ReadThrough {
        ReadThrough { cache, generations: std::array::from_fn(|_| Mutex::new(0)) }
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
            return Ok(Served::Cache(n));
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Lru;

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
}
