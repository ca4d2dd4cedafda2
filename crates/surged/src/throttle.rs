//! The per-connection rate cap (`surged --conn-rate`): models a file system
//! whose single-connection path is the bottleneck ([Sung20, Fig. 1.1] in
//! docs/references.md: one GlusterFS socket delivers 600 MB/s of a 2.6 GB/s server), so connection
//! policies can be measured on a machine whose loopback is never that slow.
//!
//! Each connection is a pipe of the given rate: a request's data bytes
//! occupy it for `bytes / rate`, from when the request began to arrive or
//! when the previous request's bytes left, whichever is later, and the
//! reply waits until they have. Time the bytes really spent arriving counts
//! towards that, so the cap is a ceiling and not an extra delay on top of
//! the network. Like a token bucket, the pipe forgives gaps of up to
//! [`BURST`]: without that, the turnaround between requests would cost a
//! saturated connection 10-20% of its rate (measured here: 0.1-0.4 ms
//! between pipelined requests, 3.7-4.1 ms between one synchronous call's
//! last reply and the next call's first request, one 250 Hz kernel tick).
//! tc's tbf asks for the same: a bucket of at least rate/HZ. Connections
//! do not share the budget, so N connections carry up to N times the rate.

use std::time::{Duration, Instant};

/// Idle time on a connection that still counts as busy (the bucket's depth).
pub const BURST: Duration = Duration::from_millis(5);

pub struct ConnThrottle {
    bytes_per_s: u64,
    /// When the pipe finishes carrying what it was given so far.
    free_at: Instant,
}

impl ConnThrottle {
    pub fn new(bytes_per_s: u64) -> ConnThrottle {
        ConnThrottle { bytes_per_s: bytes_per_s.max(1), free_at: Instant::now() }
    }

    /// How long, from `now`, the reply to a request moving `bytes` that
    /// began to arrive at `arrived` must wait.
    pub fn delay(&mut self, bytes: u64, arrived: Instant, now: Instant) -> Duration {
        if bytes == 0 {
            return Duration::ZERO;
        }
        let start = self.free_at.max(arrived.checked_sub(BURST).unwrap_or(arrived));
        self.free_at = start + Duration::from_nanos(bytes.saturating_mul(1_000_000_000) / self.bytes_per_s);
        self.free_at.saturating_duration_since(now)
    }

    /// Waits until `bytes` of a request that began to arrive at `arrived`
    /// have passed through the pipe.
    pub fn pace(&mut self, bytes: u64, arrived: Instant) {
        let wait = self.delay(bytes, arrived, Instant::now());
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
        assert_eq!(pipe.delay(0, t0, t0), Duration::ZERO);
        // 1 MB at 1 MB/s: one second; a second request right after waits for both.
        assert_eq!(pipe.delay(1_000_000, t0, t0), Duration::from_secs(1));
        assert_eq!(pipe.delay(500_000, t0, t0), Duration::from_millis(1500));
        // After an idle spell the pipe starts afresh: only BURST of it is banked.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(pipe.delay(250_000, later, later), Duration::from_millis(245));
        // A gap shorter than BURST is forgiven entirely.
        let soon = t0 + Duration::from_millis(10_249);
        assert_eq!(pipe.delay(100_000, soon, soon), Duration::from_millis(96));
        // Time spent arriving counts: a request that took 100 ms to come in
        // over a free pipe waits only the rest of its 250 ms.
        let arrived = t0 + Duration::from_secs(20);
        let now = arrived + Duration::from_millis(100);
        assert_eq!(pipe.delay(250_000, arrived, now), Duration::from_millis(145));
        // One that took longer than the pipe needs does not wait at all.
        let arrived = t0 + Duration::from_secs(30);
        assert_eq!(pipe.delay(1_000, arrived, arrived + Duration::from_secs(1)), Duration::ZERO);
    }

    #[test]
    fn pace_sleeps_for_the_transfer_time() {
        let mut pipe = ConnThrottle::new(10_000_000);
        let started = Instant::now();
        pipe.pace(1_000_000, started);
        assert!(started.elapsed() >= Duration::from_millis(100));
    }
}
