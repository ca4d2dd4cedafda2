//! Measures the object store's rate: data bytes moved over the time the
//! store was busy (at least one call in progress). Concurrent calls
//! overlap, so this is the rate the store delivers as loaded, not the
//! per-call rate. Clients with `auto` connection counts read it from
//! `Status` and open as many connections as it takes to keep up with it.

use crate::locking::lock;
use std::sync::Mutex;
use std::time::Instant;

#[derive(Default)]
pub struct StoreMeter {
    state: Mutex<Busy>,
}

#[derive(Default)]
struct Busy {
    in_progress: u32,
    since: Option<Instant>,
    busy_ns: u64,
    bytes: u64,
}

/// One store call in progress; `done` says how many bytes it moved.
pub struct Timing<'a> {
    meter: &'a StoreMeter,
    bytes: u64,
}

impl StoreMeter {
    pub fn begin(&self) -> Timing<'_> {
        let mut busy = lock(&self.state);
        if busy.in_progress == 0 {
            busy.since = Some(Instant::now());
        }
        busy.in_progress += 1;
        Timing { meter: self, bytes: 0 }
    }

    /// Bytes moved and busy nanoseconds so far (an ongoing busy spell counts up to now).
    pub fn totals(&self) -> (u64, u64) {
        let busy = lock(&self.state);
        let ongoing = busy.since.map_or(0, |since| since.elapsed().as_nanos() as u64);
        (busy.bytes, busy.busy_ns + ongoing)
    }
}

impl Timing<'_> {
    pub fn done(mut self, bytes: u64) {
        self.bytes = bytes;
    }
}

impl Drop for Timing<'_> {
    fn drop(&mut self) {
        let mut busy = lock(&self.meter.state);
        busy.bytes += self.bytes;
        busy.in_progress -= 1;
        if busy.in_progress == 0 {
            if let Some(since) = busy.since.take() {
                busy.busy_ns += since.elapsed().as_nanos() as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn overlapping_calls_count_their_busy_time_once() {
        let meter = StoreMeter::default();
        let a = meter.begin();
        let b = meter.begin();
        std::thread::sleep(Duration::from_millis(50));
        a.done(1000);
        b.done(3000);
        let (bytes, busy) = meter.totals();
        assert_eq!(bytes, 4000);
        assert!((50_000_000..1_000_000_000).contains(&busy), "{busy}");
        // Idle time between calls is not busy time.
        std::thread::sleep(Duration::from_millis(100));
        meter.begin().done(1);
        let (bytes, later) = meter.totals();
        assert_eq!(bytes, 4001);
        assert!(later - busy < 50_000_000, "{}", later - busy);
    }
}
