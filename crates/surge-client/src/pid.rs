//! This process's id without a system call per use: glibc's `getpid` asks
//! the kernel every time (since 2.25), and the library checks it on every
//! request (connections, lanes, descriptors and cached names belong to the
//! process that made them, never to a forked child). The id is kept here
//! and forgotten in the child of every `fork` (a `pthread_atfork` handler),
//! which reads it again on first use.
//!
//! A child made without glibc's `fork` (a raw `clone`, `vfork`) runs no
//! handler: such a child must not call into the library, which the
//! interposer already ensures (a vfork child's calls go to the kernel).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

/// 0: not known (never a process id).
static CURRENT: AtomicU32 = AtomicU32::new(0);
static FORK_HANDLER: Once = Once::new();

extern "C" fn forget_in_child() {
    CURRENT.store(0, Ordering::Relaxed);
}

/// This process's id.
pub fn current() -> u32 {
    let known = CURRENT.load(Ordering::Relaxed);
    if known != 0 {
        return known;
    }
    FORK_HANDLER.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
    });
    let pid = std::process::id();
    CURRENT.store(pid, Ordering::Relaxed);
    pid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_kernels_and_a_forked_child_gets_its_own() {
        assert_eq!(current(), std::process::id());
        // SAFETY: the child only compares ids and leaves with _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let ok = current() == std::process::id() && current() != 0;
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        assert!(child > 0);
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child saw its own id");
        assert_eq!(current(), std::process::id());
    }
}
