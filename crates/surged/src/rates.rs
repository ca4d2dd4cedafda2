//! Rate enforcement in every daemon, for the data manager (docs/bbos.md,
//! "Enforcement"). BBOS throttles checkpoint writes and demotion reads with
//! cgroup blkio [Sung20, §5.2.4]; here two token buckets in the daemon do
//! it, whatever the device: one for checkpoint writes (the `Write` data of
//! jobs, every job but the daemons' own [`BACKGROUND_JOB`]) and one for
//! demotion copies (the object bytes an `ObjStage` of the background job
//! reads). Daemon 0's throttler sets both with every `DrainTick`, with the
//! time a write that finds the device full may wait for space (see
//! `space_wait`); 0 is unlimited, the default, so nothing changes while the
//! drain is off. The tick's reply carries what the daemon counted: bytes
//! written per job and bytes demoted since it started.
//!
//! A bucket is a pipe like the per-connection cap's (`throttle`), shared by
//! every connection, with the same forgiveness of short idle gaps, so that
//! the cap is a ceiling and not a delay on top of the time the work between
//! two paced pieces takes: [`BURST`] for checkpoint writes (a client's
//! turnaround between requests), [`DEMOTION_BURST`] for demotion copies
//! (the flush and re-read of each copied chunk, tens of milliseconds here).
//! That pipe keeps the time its bytes are carried until, which
//! holds only while the rate stays; a tick changes the rate several times a
//! second, so a bucket keeps its books in bytes: what was promised to
//! requests so far, and what the pipe carried so far, which grows at the
//! rate in force. A request waits until the pipe has carried its bytes, and
//! a new rate applies at once to the requests already waiting. Requests
//! large enough to wait long are paced in pieces ([`Bucket::piece`]), so the
//! rate holds over windows of about 100 ms.

use crate::lock;
use crate::peers::BACKGROUND_JOB;
use crate::throttle::BURST;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Time's worth of bytes a paced copy moves at once.
const PIECE_TIME: Duration = Duration::from_millis(20);
/// Least bytes a paced copy moves at once (four checksum blocks).
const MIN_PIECE: usize = 16 << 10;
/// Idle time of the demotion bucket that still counts as busy: a
/// demotion's flush and re-read of a 4 MiB chunk, between its paced reads.
const DEMOTION_BURST: Duration = Duration::from_millis(100);

/// A shared pipe of a rate that may change (see the module doc).
pub struct Bucket {
    /// Bytes/s, 0 for unlimited: the pipe's, read without its lock.
    rate: AtomicU64,
    pipe: Mutex<Pipe>,
    /// Tells waiting requests that the rate changed.
    rate_changed: Condvar,
}

struct Pipe {
    /// Idle time that still counts as busy.
    burst: Duration,
    /// Bytes/s; 0: unlimited.
    rate: u64,
    /// Bytes promised to requests so far.
    promised: f64,
    /// Bytes the pipe carried by `at`: at most `burst`'s worth ahead of
    /// `promised` (the credit an idle pipe keeps).
    carried: f64,
    at: Option<Instant>,
}

impl Pipe {
    /// Brings `carried` up to `now` at the rate in force.
    fn flow(&mut self, now: Instant) {
        let rate = self.rate as f64;
        let elapsed = self.at.map_or(0.0, |at| now.saturating_duration_since(at).as_secs_f64());
        self.carried = (self.carried + rate * elapsed).min(self.promised + rate * self.burst.as_secs_f64());
        self.at = Some(now);
    }
}

impl Bucket {
    /// An unlimited bucket that forgives idle gaps up to `burst`.
    pub fn new(burst: Duration) -> Bucket {
        let pipe = Pipe { burst, rate: 0, promised: 0.0, carried: 0.0, at: None };
        Bucket { rate: AtomicU64::new(0), pipe: Mutex::new(pipe), rate_changed: Condvar::new() }
    }

    /// Sets the rate in bytes/s (0: unlimited); requests waiting go on at it.
    pub fn set_rate(&self, bytes_per_s: u64) {
        let mut pipe = lock(&self.pipe);
        if pipe.rate == bytes_per_s {
            return;
        }
        let now = Instant::now();
        if pipe.rate == 0 {
            // From unlimited: nothing owed, no credit.
            pipe.carried = pipe.promised;
            pipe.at = Some(now);
        } else {
            pipe.flow(now);
        }
        pipe.rate = bytes_per_s;
        self.rate.store(bytes_per_s, Ordering::Relaxed);
        self.rate_changed.notify_all();
    }

    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Waits until the pipe has carried `bytes` more, behind the bytes
    /// promised before them. Unlimited: returns at once.
    pub fn pass(&self, bytes: u64) {
        if bytes == 0 || self.rate() == 0 {
            return;
        }
        let mut pipe = lock(&self.pipe);
        if pipe.rate == 0 {
            return;
        }
        pipe.flow(Instant::now());
        pipe.promised += bytes as f64;
        let mine = pipe.promised;
        loop {
            let rate = pipe.rate as f64;
            if rate == 0.0 || pipe.carried >= mine {
                return;
            }
            let wait = Duration::from_secs_f64((mine - pipe.carried) / rate);
            pipe = self.rate_changed.wait_timeout(pipe, wait).unwrap_or_else(|e| e.into_inner()).0;
            pipe.flow(Instant::now());
        }
    }

    /// How many of `most` bytes to move before the next [`Bucket::pass`]:
    /// all of them when unlimited, else [`PIECE_TIME`]'s worth at the rate
    /// (at least [`MIN_PIECE`], whole 4 KiB blocks).
    pub fn piece(&self, most: usize) -> usize {
        match self.rate() {
            0 => most,
            rate => {
                let worth = (rate as f64 * PIECE_TIME.as_secs_f64()) as usize / 4096 * 4096;
                worth.max(MIN_PIECE).min(most)
            }
        }
    }
}

/// A daemon's buckets, its wait for space, and what they counted.
pub struct Rates {
    /// Checkpoint writes: the `Write` data of every job but the background one.
    pub checkpoint: Bucket,
    /// Demotion copies: the object bytes an `ObjStage` of the background job reads.
    pub demotion: Bucket,
    /// How long, in ms, a write that finds the device full waits for space.
    space_wait_ms: AtomicU32,
    /// Checkpoint bytes written per job since the daemon started.
    written: Mutex<BTreeMap<u64, u64>>,
    /// Object bytes demotion copies read since the daemon started.
    demoted: AtomicU64,
}

impl Default for Rates {
    fn default() -> Rates {
        Rates {
            checkpoint: Bucket::new(BURST),
            demotion: Bucket::new(DEMOTION_BURST),
            space_wait_ms: AtomicU32::new(0),
            written: Mutex::default(),
            demoted: AtomicU64::new(0),
        }
    }
}

impl Rates {
    /// What a `DrainTick` orders.
    pub fn set(&self, checkpoint_bps: u64, demote_bps: u64, wait_for_space_ms: u32) {
        self.checkpoint.set_rate(checkpoint_bps);
        self.demotion.set_rate(demote_bps);
        self.space_wait_ms.store(wait_for_space_ms, Ordering::Relaxed);
    }

    /// Is a write of `job` a checkpoint write (not the daemons' own)?
    fn is_checkpoint(job: u64) -> bool {
        job != BACKGROUND_JOB
    }

    /// Paces a write of `bytes` by `job` (before it reaches the store).
    pub fn before_write(&self, job: u64, bytes: u64) {
        if Rates::is_checkpoint(job) {
            self.checkpoint.pass(bytes);
        }
    }

    /// Counts the bytes a write by `job` wrote.
    pub fn wrote(&self, job: u64, bytes: u64) {
        if Rates::is_checkpoint(job) && bytes > 0 {
            *lock(&self.written).entry(job).or_default() += bytes;
        }
    }

    /// Counts the object bytes a demotion copy read.
    pub fn demoted(&self, bytes: u64) {
        self.demoted.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Checkpoint bytes written per job since start, in job order.
    pub fn written(&self) -> Vec<(u64, u64)> {
        lock(&self.written).iter().map(|(&job, &bytes)| (job, bytes)).collect()
    }

    pub fn demoted_bytes(&self) -> u64 {
        self.demoted.load(Ordering::Relaxed)
    }

    /// How long a write that finds the device full may wait for space now.
    pub fn space_wait(&self) -> Duration {
        Duration::from_millis(self.space_wait_ms.load(Ordering::Relaxed).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    /// Passes `total` bytes in pieces of `piece` from `threads` threads at once; the seconds it took.
    fn timed(bucket: &Arc<Bucket>, threads: u64, total: u64, piece: u64) -> f64 {
        let started = Instant::now();
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let bucket = Arc::clone(bucket);
                thread::spawn(move || {
                    for _ in 0..total / threads / piece {
                        bucket.pass(piece);
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        started.elapsed().as_secs_f64()
    }

    #[test]
    fn a_bucket_holds_its_rate_over_a_fifth_of_a_second_whatever_the_piece_and_the_concurrency() {
        let bucket = Arc::new(Bucket::new(BURST));
        bucket.set_rate(20_000_000);
        // 4 MB in 0.2 s, from one thread or four, in 64 KiB or 1 MB pieces.
        for (threads, piece) in [(1, 65_536), (4, 65_536), (1, 1_000_000), (4, 250_000)] {
            let took = timed(&bucket, threads, 4_000_000, piece);
            assert!((0.17..0.23).contains(&took), "{threads} thread(s) of {piece}-byte pieces: {took:.3} s");
            // Idle between runs: only BURST's worth is banked, so the next run is paced again.
            thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn a_new_rate_applies_to_the_requests_already_waiting() {
        let bucket = Arc::new(Bucket::new(BURST));
        bucket.set_rate(1_000_000);
        let waiter = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                let started = Instant::now();
                bucket.pass(2_000_000); // 2 s at the first rate
                started.elapsed()
            })
        };
        thread::sleep(Duration::from_millis(100));
        bucket.set_rate(20_000_000); // ~0.1 MB carried: the rest takes another ~0.1 s
        let took = waiter.join().unwrap();
        assert!(took < Duration::from_millis(400), "{took:?}");
        bucket.set_rate(0);
        let started = Instant::now();
        bucket.pass(u64::MAX / 2);
        assert!(started.elapsed() < Duration::from_millis(5), "unlimited never waits");
    }

    #[test]
    fn an_unlimited_bucket_costs_nothing_measurable() {
        let bucket = Bucket::new(BURST);
        let started = Instant::now();
        for _ in 0..1_000_000 {
            bucket.pass(1 << 20);
        }
        // One relaxed load per request: well under 10 ns each, even in a debug build.
        assert!(started.elapsed() < Duration::from_millis(100), "{:?}", started.elapsed());
    }

    #[test]
    fn pieces_are_20_ms_at_the_rate_in_whole_blocks() {
        let bucket = Bucket::new(BURST);
        assert_eq!(bucket.piece(4 << 20), 4 << 20);
        bucket.set_rate(20_000_000);
        assert_eq!(bucket.piece(4 << 20), 397_312); // 400 kB, down to whole 4 KiB blocks
        assert_eq!(bucket.piece(10_000), 10_000);
        bucket.set_rate(100_000);
        assert_eq!(bucket.piece(4 << 20), MIN_PIECE);
    }

    #[test]
    fn only_the_jobs_writes_are_checkpoint_writes_and_counted() {
        let rates = Rates::default();
        rates.set(1, 1, 0);
        let started = Instant::now();
        rates.before_write(BACKGROUND_JOB, 1 << 30);
        assert!(started.elapsed() < Duration::from_millis(5), "the daemons' own writes are not paced");
        rates.wrote(BACKGROUND_JOB, 10);
        rates.wrote(9, 5);
        rates.wrote(7, 1);
        rates.wrote(9, 5);
        rates.demoted(3);
        assert_eq!(rates.written(), [(7, 1), (9, 10)]);
        assert_eq!(rates.demoted_bytes(), 3);
        rates.set(0, 0, 1500);
        assert_eq!(rates.space_wait(), Duration::from_millis(1500));
    }
}
