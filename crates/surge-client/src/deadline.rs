//! One deadline per operation. `SURGE_TIMEOUT` bounds how long a whole
//! call (a `stat`, a `read`, a `write`) may go without an answer from a
//! daemon, however many requests, daemons, retries and connection waits it
//! takes: the public entry points [`begin`] an operation, every socket wait
//! below them is cut to the time left, and each reply that arrives moves
//! the deadline to a full timeout from then ([`progressed`]), so a long
//! transfer that keeps moving is never cut off. Without this the timeouts
//! multiplied (a stat that glimpses and retries took twice the timeout,
//! `ls -l` of five files ten times).
//!
//! The deadline is per thread; work fanned out to other threads shares the
//! caller's ([`current`], [`within`]).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When an operation runs out of time, shared by the threads it uses.
pub(crate) struct Deadline {
    start: Instant,
    timeout: Duration,
    /// Nanoseconds from `start`.
    until: AtomicU64,
}

impl Deadline {
    fn extend(&self) {
        let until = (self.start.elapsed() + self.timeout).as_nanos() as u64;
        self.until.fetch_max(until, Ordering::Relaxed);
    }

    fn left(&self) -> Duration {
        Duration::from_nanos(self.until.load(Ordering::Relaxed)).saturating_sub(self.start.elapsed())
    }
}

thread_local! {
    // Reached with `try_with` only: a program's last writes (stdio's flush
    // at exit, atexit handlers) come after this thread's locals are gone,
    // and then run without a deadline rather than fail.
    static CURRENT: RefCell<Option<Arc<Deadline>>> = const { RefCell::new(None) };
}

/// The operation in progress on this thread; ends when dropped.
pub(crate) struct Operation {
    /// This guard set the deadline (an operation called from inside
    /// another keeps the outer one's).
    owner: bool,
}

impl Drop for Operation {
    fn drop(&mut self) {
        if self.owner {
            let _ = CURRENT.try_with(|c| c.borrow_mut().take());
        }
    }
}

/// Begins an operation that must hear from a daemon at least every
/// `timeout`, unless this thread is already inside one.
pub(crate) fn begin(timeout: Duration) -> Operation {
    CURRENT
        .try_with(|c| {
            let mut current = c.borrow_mut();
            let owner = current.is_none();
            if owner {
                let deadline = Deadline { start: Instant::now(), timeout, until: AtomicU64::new(0) };
                deadline.extend();
                *current = Some(Arc::new(deadline));
            }
            Operation { owner }
        })
        .unwrap_or(Operation { owner: false })
}

/// This thread's deadline, to hand to helper threads.
pub(crate) fn current() -> Option<Arc<Deadline>> {
    CURRENT.try_with(|c| c.borrow().clone()).ok().flatten()
}

/// Runs `work` under `deadline` (from another thread's [`current`]).
pub(crate) fn within<T>(deadline: Option<Arc<Deadline>>, work: impl FnOnce() -> T) -> T {
    let previous = CURRENT.try_with(|c| c.replace(deadline)).ok().flatten();
    let out = work();
    let _ = CURRENT.try_with(|c| c.replace(previous));
    out
}

/// A daemon answered: the operation has a full timeout again.
pub(crate) fn progressed() {
    let _ = CURRENT.try_with(|c| {
        if let Some(deadline) = &*c.borrow() {
            deadline.extend();
        }
    });
}

/// How long the next wait may take: `cap`, or less when the operation's
/// deadline is nearer; `None` once the deadline has passed.
pub(crate) fn time_left(cap: Duration) -> Option<Duration> {
    match current() {
        None => Some(cap),
        Some(deadline) => {
            let left = deadline.left();
            (!left.is_zero()).then(|| left.min(cap))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outermost_operation_sets_the_deadline_and_inner_ones_keep_it() {
        assert_eq!(time_left(Duration::from_secs(9)), Some(Duration::from_secs(9)));
        let outer = begin(Duration::from_millis(300));
        let deadline = current().unwrap();
        {
            let _inner = begin(Duration::from_secs(60));
            assert!(Arc::ptr_eq(&current().unwrap(), &deadline));
        }
        assert!(current().is_some_and(|d| Arc::ptr_eq(&d, &deadline)), "the inner operation ended the outer one's");
        assert!(time_left(Duration::from_secs(9)).unwrap() <= Duration::from_millis(300));
        let shared = Arc::clone(&deadline);
        let elsewhere = std::thread::spawn(move || within(Some(shared), || current().is_some())).join().unwrap();
        assert!(elsewhere);
        drop(outer);
        assert!(current().is_none());
    }

    #[test]
    fn time_runs_out_unless_a_daemon_answers() {
        let _op = begin(Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(time_left(Duration::from_secs(9)), None);
        progressed();
        assert!(time_left(Duration::from_secs(9)).is_some_and(|left| left > Duration::from_millis(10)));
    }
}
