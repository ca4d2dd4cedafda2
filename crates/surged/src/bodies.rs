//! The memory request bodies hold, bounded per daemon (`--max-body-memory`).
//!
//! A connection reads a request's body whole before it serves it (checked
//! in pieces as it arrives), and keeps the bodies it read ahead and a few
//! spare buffers. Each connection's buffers are bounded (`--max-frame`, the
//! read-ahead limits), but not their sum: 150 connections each one byte
//! short of a 40 MiB write held 6.2 GB until their frames timed out. So
//! every body buffer is charged to a [`BodyBudget`] before it is filled,
//! through its connection's [`BodyAccount`], and given back when freed.
//!
//! A body that does not fit waits a little for others to finish (the bytes
//! stay in the socket: back-pressure), then is refused with EAGAIN and
//! skipped without being kept, so the client hears why instead of hanging.
//! Bodies longer than the client library ever sends ([`LARGE_BODY`]) may
//! use only three quarters of the budget: a flood of large, stalled bodies
//! leaves room for the pieces ordinary clients send.

use crate::locking::lock;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The default `--max-body-memory`.
pub const MAX_BODY_MEMORY_DEFAULT: u64 = 1 << 30;
/// Bodies above this size are large: the client library cuts I/O into
/// pieces of at most 256 KiB, so only other programs send them.
pub const LARGE_BODY: usize = 1 << 20;
/// How long a body waits for room before it is refused.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// Bytes of body buffers held by every connection of a daemon, and the limit.
pub struct BodyBudget {
    limit: usize,
    used: Mutex<usize>,
    freed: Condvar,
}

impl BodyBudget {
    pub fn new(limit: usize) -> BodyBudget {
        BodyBudget { limit, used: Mutex::new(0), freed: Condvar::new() }
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        *lock(&self.used)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Would a body of `len` bytes fit now, without waiting?
    pub fn fits(&self, len: usize) -> bool {
        self.used().saturating_add(len) <= self.ceiling(len)
    }

    /// The most a body of `len` bytes may find in use, and still be read.
    fn ceiling(&self, len: usize) -> usize {
        if len > LARGE_BODY {
            self.limit / 4 * 3
        } else {
            self.limit
        }
    }

    /// Takes `bytes` for a body of `len` bytes, waiting up to `patience`
    /// for other connections to give some back; false if they did not.
    fn take(&self, bytes: usize, len: usize, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        let ceiling = self.ceiling(len);
        let mut used = lock(&self.used);
        while used.saturating_add(bytes) > ceiling {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            used = self.freed.wait_timeout(used, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        *used += bytes;
        true
    }

    /// Takes `bytes` whatever the limit (a buffer that grew while it was filled).
    fn take_anyway(&self, bytes: usize) {
        *lock(&self.used) += bytes;
    }

    fn give_back(&self, bytes: usize) {
        if bytes > 0 {
            *lock(&self.used) -= bytes;
            self.freed.notify_all();
        }
    }
}

/// What one connection's body buffers hold of the budget: the capacity of
/// every buffer it keeps (the body being read, those read ahead, spares).
/// Dropping it gives everything back.
pub struct BodyAccount<'a> {
    budget: &'a BodyBudget,
    held: usize,
}

impl<'a> BodyAccount<'a> {
    pub fn new(budget: &'a BodyBudget) -> BodyAccount<'a> {
        BodyAccount { budget, held: 0 }
    }

    /// Makes `buf` (held by this account, or new) ready for a body of
    /// `len` bytes, waiting up to `patience` for room; false, with `buf`
    /// left empty and given back, when there is none.
    pub fn make_room(&mut self, buf: &mut Vec<u8>, len: usize, patience: Duration) -> bool {
        buf.clear();
        if buf.capacity() >= len {
            return true;
        }
        self.free(std::mem::take(buf));
        if !self.budget.take(len, len, patience) {
            return false;
        }
        *buf = Vec::with_capacity(len);
        self.held += len;
        self.grew(len, buf);
        true
    }

    /// Charges what `buf` grew past `capacity` (the allocator rounded up,
    /// or it grew while it was filled), whatever the limit: it is held.
    pub fn grew(&mut self, capacity: usize, buf: &Vec<u8>) {
        let more = buf.capacity().saturating_sub(capacity);
        if more > 0 {
            self.budget.take_anyway(more);
            self.held += more;
        }
    }

    /// Frees a buffer this account holds.
    pub fn free(&mut self, buf: Vec<u8>) {
        let bytes = buf.capacity().min(self.held);
        drop(buf);
        self.held -= bytes;
        self.budget.give_back(bytes);
    }
}

impl Drop for BodyAccount<'_> {
    fn drop(&mut self) {
        self.budget.give_back(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn a_body_waits_for_room_then_is_refused_and_a_freed_buffer_makes_room() {
        let budget = BodyBudget::new(8 << 20);
        let mut first = BodyAccount::new(&budget);
        let mut held = Vec::new();
        assert!(first.make_room(&mut held, 4 << 20, Duration::ZERO));
        assert_eq!(budget.used(), 4 << 20);
        let mut second = BodyAccount::new(&budget);
        let mut buf = Vec::new();
        let started = Instant::now();
        assert!(!second.make_room(&mut buf, 4 << 20, Duration::from_millis(100)), "large bodies get 6 MiB of 8");
        assert!(started.elapsed() >= Duration::from_millis(100), "it waited first");
        assert!(second.make_room(&mut buf, 1 << 20, Duration::ZERO), "small ones still fit");
        second.free(buf);
        first.free(held);
        assert_eq!(budget.used(), 0);
        drop((first, second));
    }

    #[test]
    fn a_waiting_body_is_read_as_soon_as_another_connection_ends() {
        let budget = Arc::new(BodyBudget::new(4 << 20));
        let ready = Arc::new(std::sync::Barrier::new(2));
        let holder = {
            let (budget, ready) = (Arc::clone(&budget), Arc::clone(&ready));
            thread::spawn(move || {
                let mut account = BodyAccount::new(&budget);
                let mut buf = Vec::new();
                let took = account.make_room(&mut buf, 3 << 20, Duration::ZERO);
                ready.wait();
                assert!(took, "3 MiB of the 3 large bodies may take");
                thread::sleep(Duration::from_millis(100));
                // The connection ends: its account gives everything back.
            })
        };
        ready.wait();
        let mut account = BodyAccount::new(&budget);
        let mut buf = Vec::new();
        let started = Instant::now();
        assert!(account.make_room(&mut buf, 2 << 20, Duration::from_secs(5)));
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(50), "it had to wait: {waited:?}");
        assert!(waited < Duration::from_secs(2), "woken when the room was freed: {waited:?}");
        holder.join().unwrap();
        drop(account);
        assert_eq!(budget.used(), 0, "every byte given back");
    }
}
