//! Atomic appends across clients. A file's size is the largest end its
//! objects imply, so an O_APPEND write reads the size and writes there; two
//! clients doing that at once would both write at the same end. Each append
//! therefore holds the file's append lock on the metadata daemon (surged's
//! `appends` module) from reading the size until its bytes are written.

use crate::error::{Error, Result};
use crate::shared::Shared;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use surge_proto::Request;

/// A holder token no other append (of this or any other client) uses: a
/// random per-process base plus a counter.
fn next_token() -> u64 {
    static BASE: OnceLock<u64> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(|| RandomState::new().build_hasher().finish());
    base.wrapping_add(COUNT.fetch_add(1, Ordering::Relaxed))
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
    pub fn take(shared: &'a Shared, ino: u64, path: &'a str) -> Result<AppendLock<'a>> {
        let token = next_token();
        let lease_ms = shared.append_lease.as_millis().clamp(1, u32::MAX as u128) as u32;
        shared.meta::<()>(&Request::AppendLock { ino, token, lease_ms }).map_err(|e| {
            Error::new(
                e.errno(),
                format!("cannot append to {path}: another client held its append lock too long ({e})"),
            )
        })?;
        Ok(AppendLock { shared, ino, token, path, held: true })
    }

    /// Releases the lock; an error if it was lost on the way (the lease
    /// ended before the write did, so another append may overlap it).
    pub fn release(mut self) -> Result<()> {
        self.held = false;
        self.shared.meta::<()>(&Request::AppendUnlock { ino: self.ino, token: self.token }).map_err(|e| {
            Error::new(
                libc::EIO,
                format!(
                    "append to {} took longer than its lock's lease, another append may overlap it ({e})",
                    self.path
                ),
            )
        })
    }
}

impl Drop for AppendLock<'_> {
    fn drop(&mut self) {
        if self.held {
            // The append already failed; its error is the one to report.
            let _ = self.shared.meta::<()>(&Request::AppendUnlock { ino: self.ino, token: self.token });
        }
    }
}
