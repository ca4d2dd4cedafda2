//! The read cache in front of the object store.

use std::ops::Range;

/// A cache of object bytes. Writes, truncates and removes invalidate what
/// they change. An implementation that keeps data must make sure a read
/// that missed and then inserts cannot bring back bytes invalidated while
/// it was reading (e.g. with per-object generation numbers).
pub trait ReadCache: Send + Sync {
    /// Copies the cached bytes of object `ino` at `offset` into `buf`;
    /// `None` on a miss, else how many bytes (short at the object's end).
    fn lookup(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Option<usize>;
    /// Offers bytes just read from the store.
    fn insert(&self, ino: u64, offset: u64, data: &[u8]);
    /// Forgets whatever is cached of object `ino` in `range` (object offsets).
    fn invalidate(&self, ino: u64, range: Range<u64>);
}

/// No cache: every read goes to the store (the page cache still helps).
#[derive(Debug, Default)]
pub struct NoCache;

impl ReadCache for NoCache {
    fn lookup(&self, _ino: u64, _offset: u64, _buf: &mut [u8]) -> Option<usize> {
        None
    }
    fn insert(&self, _ino: u64, _offset: u64, _data: &[u8]) {}
    fn invalidate(&self, _ino: u64, _range: Range<u64>) {}
}
