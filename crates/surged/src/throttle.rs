//! The per-connection rate cap (`surged --conn-rate`): models a file system
//! whose single-connection path is the bottleneck (seed 004 Fig. 1.1: one
//! GlusterFS socket delivers 600 MB/s of a 2.6 GB/s server), so connection
//! policies can be measured on a machine whose loopback is never that slow.
//!
//! Each connection is a pipe of the given rate: a request's data bytes
//! occupy it for `bytes / rate` after the previous request's bytes left,
//! and the reply waits until they have. Connections do not share the
//! budget, so N connections carry up to N times the rate.

use std::time::{Duration, Instant};

pub struct ConnThrottle {
    bytes_per_s: u64,
    /// When the pipe finishes carrying what it was given so far.
    free_at: Instant,
}

impl ConnThrottle {
    pub fn new(bytes_per_s: u64) -> ConnThrottle {
        ConnThrottle { bytes_per_s: bytes_per_s.max(1), free_at: Instant::now() }
    }

    /// How long the reply to a request moving `bytes` must wait, from `now`.
    pub fn delay(&mut self, bytes: u64, now: Instant) -> Duration {
        if bytes == 0 {
            return Duration::ZERO;
        }
        let start = self.free_at.max(now);
        self.free_at = start + Duration::from_nanos(bytes.saturating_mul(1_000_000_000) / self.bytes_per_s);
        self.free_at - now
    }

    /// Waits until `bytes` have passed through the pipe.
    pub fn pace(&mut self, bytes: u64) {
        let wait = self.delay(bytes, Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_queue_behind_each_other_at_the_rate() {
        let t0 = Instant::now();
        let mut pipe = ConnThrottle { bytes_per_s: 1_000_000, free_at: t0 };
        assert_eq!(pipe.delay(0, t0), Duration::ZERO);
        // 1 MB at 1 MB/s: one second; a second request right after waits for both.
        assert_eq!(pipe.delay(1_000_000, t0), Duration::from_secs(1));
        assert_eq!(pipe.delay(500_000, t0), Duration::from_millis(1500));
        // After an idle spell the pipe starts afresh: idle time is not banked.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(pipe.delay(250_000, later), Duration::from_millis(250));
    }

    #[test]
    fn pace_sleeps_for_the_transfer_time() {
        let mut pipe = ConnThrottle::new(10_000_000);
        let started = Instant::now();
        pipe.pace(1_000_000);
        assert!(started.elapsed() >= Duration::from_millis(100));
    }
}
