//! Atomic appends across clients. A file's size is the largest end its
//! objects imply, so an O_APPEND write reads the size and writes there; two
//! clients doing that at once would both write at the same end. Each append
//! therefore holds the file's append lock on the metadata daemon (surged's
//! `appends` module) from reading the size until its bytes are written.
//!
//! The lock has a lease, so a holder must never write under one that may
//! have lapsed: taking the lock and reading the size start over under a new
//! lease when they used half of it, and while the bytes are written the
//! lease is renewed every third of it, so a slow write (one waiting for
//! space) keeps the lock. A renewal refused because another append took the
//! lock fails the append (EIO).

use crate::error::{Error, Result};
use crate::shared::Shared;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Instant, SystemTime};
use surge_proto::Request;

/// How many times taking the lock and reading the size may use up half the
/// lease before the append fails.
const ATTEMPTS: u32 = 3;

/// A holder token no other append (of this or any other client) uses: a
/// random per-process base plus a counter. A forked child inherits its
/// parent's base and counter (and the seed of `RandomState`), so a process
/// draws its own base from its pid and the time when it first appends:
/// siblings sharing one token held the lock together and wrote over each
/// other.
fn next_token() -> u64 {
    static OWNER: AtomicU32 = AtomicU32::new(0);
    static BASE: AtomicU64 = AtomicU64::new(0);
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    if OWNER.load(Ordering::Acquire) != pid {
        let mut seed = RandomState::new().build_hasher();
        seed.write_u32(pid);
        seed.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos());
        BASE.store(seed.finish(), Ordering::Relaxed);
        OWNER.store(pid, Ordering::Release);
    }
    BASE.load(Ordering::Relaxed).wrapping_add(COUNT.fetch_add(1, Ordering::Relaxed))
}

/// Takes `ino`'s append lock for `token`, or renews it while `token` holds it.
fn lock(shared: &Shared, ino: u64, token: u64) -> Result<()> {
    let lease_ms = shared.append_lease.as_millis().clamp(1, u32::MAX as u128) as u32;
    shared.meta::<()>(&Request::AppendLock { ino, token, lease_ms })
}

/// Holds file `ino`'s append lock until released (or dropped, on an error path).
pub(crate) struct AppendLock<'a> {
    shared: &'a Shared,
    ino: u64,
    token: u64,
    path: &'a str,
    held: bool,
}

impl<'a> AppendLock<'a> {
    /// Takes the lock and reads where the append lands with `end`, under a
    /// lease with at least half of it left for the write.
    pub fn take_at_end(
        shared: &'a Shared,
        ino: u64,
        path: &'a str,
        end: impl Fn() -> Result<u64>,
    ) -> Result<(AppendLock<'a>, u64)> {
        for _ in 0..ATTEMPTS {
            let asked = Instant::now();
            let token = next_token();
            lock(shared, ino, token).map_err(|e| {
                Error::new(
                    e.errno(),
                    format!("cannot append to {path}: another client held its append lock too long ({e})"),
                )
            })?;
            let lock = AppendLock { shared, ino, token, path, held: true };
            let end = end()?;
            if asked.elapsed() < shared.append_lease / 2 {
                return Ok((lock, end));
            }
            // Dropped: unlocked, and taken again under a fresh lease.
        }
        Err(Error::new(
            libc::ETIMEDOUT,
            format!(
                "cannot append to {path}: taking its append lock and reading its size took half the lock's lease \
                 ({:?}) {ATTEMPTS} times; nothing was written",
                shared.append_lease
            ),
        ))
    }

    /// Runs `write` while another thread renews the lease every third of
    /// it. A renewal the daemon refuses (the lease lapsed and another append
    /// took the lock) fails the append once `write` is done; one that does
    /// not get through (daemon 0 away) leaves the verdict to the release,
    /// as does a process with no room for another thread.
    pub fn hold_while<T>(&self, write: impl FnOnce() -> Result<T>) -> Result<T> {
        let (done, finished) = mpsc::channel::<()>();
        let (written, renewed) = std::thread::scope(|s| {
            let keeper = std::thread::Builder::new().spawn_scoped(s, move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(self.shared.append_lease / 3) {
                    let _op = self.shared.pool.operation();
                    match lock(self.shared, self.ino, self.token) {
                        Err(e) if e.errno() == libc::ESTALE => return Err(e),
                        _ => continue,
                    }
                }
                Ok(())
            });
            let written = write();
            drop(done);
            (written, keeper.map_or(Ok(()), |keeper| keeper.join().unwrap_or(Ok(()))))
        });
        let written = written?;
        renewed.map_err(|e| self.overlapped(e))?;
        Ok(written)
    }

    /// Releases the lock; an error if it was lost on the way (the lease
    /// ended before the write did, so another append may overlap it).
    pub fn release(mut self) -> Result<()> {
        self.held = false;
        self.shared
            .meta::<()>(&Request::AppendUnlock { ino: self.ino, token: self.token })
            .map_err(|e| self.overlapped(e))
    }

    fn overlapped(&self, e: Error) -> Error {
        Error::new(
            libc::EIO,
            format!("append to {} took longer than its lock's lease, another append may overlap it ({e})", self.path),
        )
    }
}

impl Drop for AppendLock<'_> {
    fn drop(&mut self) {
        if self.held {
            // The append already failed, or starts over; its error is the one to report.
            let _ = self.shared.meta::<()>(&Request::AppendUnlock { ino: self.ino, token: self.token });
        }
    }
}
