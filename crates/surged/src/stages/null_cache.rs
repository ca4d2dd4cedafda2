//! A null read cache, the template for a new one (as [Darshan]'s
//! null module is for a new module): copy this file to
//! `cache_<name>.rs` (or into `cache.rs`, as the `lru` cache is), rename
//! the type, keep bytes in `insert` and give them back in `lookup`, and
//! register it with one entry in [`crate::stages::CACHES`]
//! (docs/architecture.md, "Adding a stage", follows these steps for `lru`).
//! It is compiled with the crate's tests, which start a daemon on it.
//!
//! A cache only keeps and forgets bytes: `cache::ReadThrough` calls it and
//! keeps the rule that a read racing a change never brings back old bytes,
//! so a cache needs no locking against writers of its own.

use crate::cache::{CacheKey, ReadCache};
use std::ops::Range;

/// Keeps nothing: every lookup misses.
#[derive(Default)]
pub struct NullCache;

impl ReadCache for NullCache {
    /// Copy what you keep of `key` at `offset` into `buf`: `Some(bytes)`
    /// only when you have all of `buf` (or up to the file's end).
    fn lookup(&self, _key: CacheKey, _offset: u64, _buf: &mut [u8]) -> Option<usize> {
        None
    }

    /// Keep `data` (read at `offset`; `at_end`: the file ends there) if you
    /// want it, within your bound (`StageOptions::cache_size`).
    fn insert(&self, _key: CacheKey, _offset: u64, _data: &[u8], _at_end: bool) {}

    /// Forget what you keep of `key` in `range`, and any entry that says
    /// the file ends in or past it.
    fn invalidate(&self, _key: CacheKey, _range: Range<u64>) {}
}
