//! Write stamps: after every change to an object (write, truncate) the
//! daemon sets the object file's modification time to a stamp it never gave
//! before. Clients digest their objects' sizes and times into a file's
//! version (`surge_proto::msg::objects_version`); a stage-out records the
//! version it copied, so any later change shows as a new version. The file
//! system's own mtime cannot serve: it has the granularity of a clock tick,
//! and two writes in one tick would leave it unchanged.
//!
//! The stamp is set after the change is in the file, so a version read
//! while a change is under way is never the version after it. Stamps live
//! in the object file itself and so survive restarts.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Hands out strictly increasing stamps close to the wall clock (in ns), so
/// object modification times stay meaningful to users.
#[derive(Debug, Default)]
pub struct WriteClock {
    last: AtomicI64,
}

impl WriteClock {
    /// A stamp later than every one handed out before by this clock.
    pub fn next(&self) -> i64 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
        let previous = self
            .last
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| Some(now.max(last + 1)))
            .expect("the update always succeeds");
        now.max(previous + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_strictly_increase_across_threads() {
        let clock = WriteClock::default();
        let stamps: Vec<Vec<i64>> = std::thread::scope(|s| {
            let workers: Vec<_> =
                (0..4).map(|_| s.spawn(|| (0..10_000).map(|_| clock.next()).collect::<Vec<_>>())).collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let mut all: Vec<i64> = stamps.concat();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "a stamp was handed out twice");
        assert!(stamps.iter().all(|run| run.windows(2).all(|w| w[0] < w[1])));
    }
}
