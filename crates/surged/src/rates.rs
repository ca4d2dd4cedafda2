//! Rate enforcement in every daemon, for the data manager (docs/bbos.md,
//! "Enforcement"). BBOS throttles checkpoint writes and demotion reads with
//! cgroup blkio [Sung20, §5.2.4]; here token buckets in the daemon do
//! it, whatever the device: one for checkpoint writes (the `Write` data of
//! jobs, every job but the daemons' own [`BACKGROUND_JOB`]) and one for the
//! writes to checkpoints placed on the PFS directly (`PfsWrite`); demotion
//! copies (the object bytes an `ObjStage` of the background job reads) go
//! at the pace of the daemon's demotion control (`demotion_control`), a
//! bucket too, or blkio. Daemon 0's throttler sets them with every `DrainTick`, with the
//! time a write that finds the device full may wait for space (see
//! `space_wait`; the pipelined writes of a connection share one wait,
//! [`SpaceWait`]);
//! 0 is unlimited, the default, so nothing changes while the
//! drain is off. The tick's reply carries what the daemon counted: bytes
//! written per job and bytes demoted since it started.
//!
//! A bucket is a pipe like the per-connection cap's (`throttle`), shared by
//! every connection: a request's bytes are promised to it when its work
//! begins, and the request returns once the pipe has carried them, so the
//! time the work takes counts (the cap is a ceiling, not a delay on top).
//! Short idle gaps are forgiven as there: [`CHECKPOINT_BURST`] for
//! checkpoint writes (what a write does outside the pace: its arrival and
//! check, the reply, the client's turnaround), `DEMOTION_BURST`
//! (`demotion_control`) for demotion copies (the flush and re-read of each copied chunk). That pipe keeps the time its bytes are carried until, which holds
//! only while the rate stays; a tick changes the rate several times a
//! second, so a bucket keeps its books in bytes: what was promised so far,
//! and what the pipe carried so far, which grows at the rate in force. A
//! new rate applies at once to the requests already waiting. Copies are
//! paced in pieces ([`Bucket::piece`]), so the rate holds over windows of
//! 100 ms, within a piece. The trimmer paces its FITRIM ranges through a
//! bucket of its own, whose wait a stop cuts short ([`Bucket::carry_unless`]).

use crate::locking::lock;
use crate::peers::BACKGROUND_JOB;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Time's worth of bytes a paced copy moves at once.
const PIECE_TIME: Duration = Duration::from_millis(20);
/// Least bytes a paced copy moves at once (four checksum blocks).
const MIN_PIECE: usize = 16 << 10;
/// Idle time of the checkpoint bucket that still counts as busy: what a
/// 256 KiB write does outside the pace took 5-6 ms here (debug build,
/// `cargo test -p surged --test enforce`), more on a loaded machine.
const CHECKPOINT_BURST: Duration = Duration::from_millis(20);

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

    /// Promises `bytes` more at `now`, behind those promised before: the
    /// count the pipe must have carried for them to be through.
    fn promise(&mut self, bytes: u64, now: Instant) -> f64 {
        self.flow(now);
        self.promised += bytes as f64;
        self.promised
    }

    /// How long from `now` until the pipe has carried `mine` bytes at the
    /// rate in force; `None` once it has (or is unlimited now).
    fn until_carried(&mut self, mine: f64, now: Instant) -> Option<Duration> {
        self.flow(now);
        let rate = self.rate as f64;
        (rate > 0.0 && self.carried < mine).then(|| Duration::from_secs_f64((mine - self.carried) / rate))
    }

    fn set_rate(&mut self, bytes_per_s: u64, now: Instant) {
        if self.rate == 0 {
            // From unlimited: nothing owed, no credit.
            self.carried = self.promised;
            self.at = Some(now);
        } else {
            self.flow(now);
        }
        self.rate = bytes_per_s;
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
        pipe.set_rate(bytes_per_s, Instant::now());
        self.rate.store(bytes_per_s, Ordering::Relaxed);
        self.rate_changed.notify_all();
    }

    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Runs `work`, which moves `bytes`, and returns once the pipe has
    /// carried them behind the bytes promised before: the time `work` takes
    /// counts towards the wait, so the cap is a ceiling and not a delay on
    /// top of the work. Unlimited: just runs `work`.
    pub fn carry<R>(&self, bytes: u64, work: impl FnOnce() -> R) -> R {
        self.carry_unless(bytes, work, &|| false)
    }

    /// [`Bucket::carry`], but the wait ends early once `stopping` says so
    /// (looked at every [`PIECE_TIME`]): a daemon that stops does not wait
    /// for a long promise to be carried.
    pub fn carry_unless<R>(&self, bytes: u64, work: impl FnOnce() -> R, stopping: &dyn Fn() -> bool) -> R {
        if bytes == 0 || self.rate() == 0 {
            return work();
        }
        let mine = {
            let mut pipe = lock(&self.pipe);
            (pipe.rate > 0).then(|| pipe.promise(bytes, Instant::now()))
        };
        let done = work();
        if let Some(mine) = mine {
            let mut pipe = lock(&self.pipe);
            // Woken early when the rate changes: the rest goes at the new one.
            while let Some(wait) = pipe.until_carried(mine, Instant::now()) {
                if stopping() {
                    break;
                }
                let wait = wait.min(PIECE_TIME);
                pipe = self.rate_changed.wait_timeout(pipe, wait).unwrap_or_else(PoisonError::into_inner).0;
            }
        }
        done
    }

    /// How many of `most` bytes to move in one [`Bucket::carry`]:
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
    /// Writes to checkpoints placed on the PFS directly (`PfsWrite`, daemon 0):
    /// they share the PFS with demotion, so the throttler gives them what
    /// demotion leaves of the PFS's rate.
    pub direct: Bucket,
    /// How long, in ms, a write that finds the device full waits for space.
    space_wait_ms: AtomicU32,
    /// Checkpoint bytes written per job since the daemon started.
    written: Mutex<BTreeMap<u64, u64>>,
    /// Object bytes demotion copies read since the daemon started.
    demoted: AtomicU64,
}

/// How long a writer that finds its daemon full waits for the space demotion
/// frees: below the client library's I/O timeout (30 s), so that the client
/// sees ENOSPC rather than a timeout when nothing frees space.
pub const WAIT_FOR_SPACE: Duration = Duration::from_secs(20);

impl Default for Rates {
    fn default() -> Rates {
        Rates::until_first_tick(false)
    }
}

impl Rates {
    /// Unlimited rates until daemon 0's first `DrainTick`; with the data
    /// manager on (`drain_on`), a writer that finds the device full waits
    /// for space meanwhile: a burst of checkpoints right after the start
    /// must not get ENOSPC before the throttler's first tick says whether
    /// demotion can free space.
    pub fn until_first_tick(drain_on: bool) -> Rates {
        let wait = if drain_on { WAIT_FOR_SPACE.as_millis() as u32 } else { 0 };
        Rates {
            checkpoint: Bucket::new(CHECKPOINT_BURST),
            direct: Bucket::new(CHECKPOINT_BURST),
            space_wait_ms: AtomicU32::new(wait),
            written: Mutex::default(),
            demoted: AtomicU64::new(0),
        }
    }

    /// What a `DrainTick` orders, but for the demotion rate (the demotion control's).
    pub fn set(&self, checkpoint_bps: u64, direct_bps: u64, wait_for_space_ms: u32) {
        self.checkpoint.set_rate(checkpoint_bps);
        self.direct.set_rate(direct_bps);
        self.space_wait_ms.store(wait_for_space_ms, Ordering::Relaxed);
    }

    /// Is a write of `job` a checkpoint write (not the daemons' own)?
    fn is_checkpoint(job: u64) -> bool {
        job != BACKGROUND_JOB
    }

    /// Runs `write`, a write of `bytes` by `job`, at the checkpoint rate
    /// if it is a checkpoint write.
    pub fn checkpoint_write<R>(&self, job: u64, bytes: u64, write: impl FnOnce() -> R) -> R {
        match Rates::is_checkpoint(job) {
            true => self.checkpoint.carry(bytes, write),
            false => write(),
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

/// The wait for space of one connection's writes. A client cuts a call
/// into pieces and pipelines them, so a wait per piece would add up (eight
/// pieces in flight: eight times `Rates::space_wait`); here the pieces of
/// a burst share one wait, which the first of them to find the device full
/// begins. A request whose first bytes had arrived when the reply before
/// it was sent was sent without waiting for that reply: it belongs to the
/// burst, and waits at most until the burst's wait ends (after it, not at
/// all). Any other request begins a new burst: the client's next call.
///
/// Over the node-local data path a call is a row of grants, each a burst
/// of its own (sent behind the commit before it, whose reply the client
/// does not wait for, yet after that grant's reply); a grant refused for want of space is tried again
/// at once in smaller grants over the same range, one after another (the
/// commits of those that fit between them), and those belong to its burst
/// too. The row ends at the range's end or with a retry refused in turn:
/// the grants after it begin new bursts, even where they start at the
/// same place and are as small as a retry.
#[derive(Debug, Default)]
pub struct SpaceWait {
    /// When the burst's wait ends, once a write of it found the device full.
    until: Cell<Option<Instant>>,
    /// The range of a node-local write grant refused for want of space
    /// still to be tried again: (inode, where the next retry starts, end).
    retrying: Cell<Option<(u64, u64, u64)>>,
}

impl SpaceWait {
    /// `next_request` for a node-local write grant of `len` bytes at
    /// `offset` of object `ino`; whether it is a retry of a refused grant
    /// (the next piece of its range), which is in that call's burst. Any
    /// other grant begins a burst, even one sent before the reply to the
    /// commit before it (a client does not wait for that reply).
    pub fn next_grant(&self, ino: u64, offset: u64, len: u64) -> bool {
        let retry = self.retrying.get().is_some_and(|(i, next, end)| {
            i == ino && offset == next && offset.checked_add(len).is_some_and(|stop| stop <= end)
        });
        if !retry {
            self.retrying.set(None);
        }
        self.next_request(retry);
        retry
    }

    /// What became of the node-local write grant of `len` bytes at
    /// `offset` of `ino` just served (`retry`: as `next_grant` said):
    /// `refused` for want of space, or granted.
    pub fn answered_grant(&self, ino: u64, offset: u64, len: u64, retry: bool, refused: bool) {
        let end = offset.saturating_add(len);
        let rest = match (retry, refused) {
            // A first refusal: the client tries the range again in smaller grants.
            (false, true) => Some((ino, offset, end)),
            // A retry refused: the client gives up on the call.
            (true, true) | (false, false) => None,
            // A retry that fit: the next one starts where it ended.
            (true, false) => {
                self.retrying.get().map(|(i, _, stop)| (i, end, stop)).filter(|&(_, next, stop)| next < stop)
            }
        };
        self.retrying.set(rest);
    }

    /// The connection turns to its next request; `queued`: it was sent
    /// before the reply to the one before.
    pub fn next_request(&self, queued: bool) {
        if !queued {
            self.until.set(None);
        }
    }

    /// Until when the write being served, which found the device full, may
    /// wait for space, given the wait the data manager asks for (`None`:
    /// not at all).
    pub fn deadline(&self, wait: Duration) -> Option<Instant> {
        if wait.is_zero() {
            return None;
        }
        let until = self.until.get().unwrap_or_else(|| Instant::now() + wait);
        self.until.set(Some(until));
        Some(until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throttle::BURST;
    use std::sync::Arc;
    use std::thread;

    /// A stream of `piece`-byte requests through a pipe of `rate` bytes/s,
    /// each taking `work` itself and sent as soon as the one before is
    /// through, on a clock of its own (so the machine's load does not
    /// matter): when each request was through, from the start.
    fn stream(rate: u64, burst: Duration, piece: u64, work: Duration, time: Duration) -> Vec<Duration> {
        let t0 = Instant::now();
        let mut pipe = Pipe { burst, rate: 0, promised: 0.0, carried: 0.0, at: None };
        pipe.set_rate(rate, t0);
        let (mut now, mut through) = (t0, Vec::new());
        while now - t0 < time {
            let mine = pipe.promise(piece, now);
            now += work;
            now += pipe.until_carried(mine, now).unwrap_or_default();
            through.push(now - t0);
        }
        through
    }

    /// Bytes through in each 100 ms window of `through`.
    fn per_window(through: &[Duration], piece: u64, windows: u64) -> Vec<u64> {
        (0..windows)
            .map(|w| {
                let (from, to) = (Duration::from_millis(w * 100), Duration::from_millis(w * 100 + 100));
                through.iter().filter(|&&t| t >= from && t < to).count() as u64 * piece
            })
            .collect()
    }

    #[test]
    fn every_100_ms_window_carries_the_rate_within_a_piece_whatever_the_work_takes() {
        // 20 MB/s: 2 MB per window, in 64 KiB requests or 400 kB pieces, taking no time or up to nearly their share.
        for (piece, work) in [(65_536, 0), (65_536, 3), (400_000, 0), (400_000, 15), (1_000_000, 40)] {
            let through = stream(20_000_000, BURST, piece, Duration::from_millis(work), Duration::from_secs(1));
            for (w, bytes) in per_window(&through, piece, 10).into_iter().enumerate() {
                assert!(
                    bytes.abs_diff(2_000_000) <= piece,
                    "{piece}-byte pieces, {work} ms of work, window {w}: {bytes}"
                );
            }
        }
    }

    #[test]
    fn gaps_up_to_the_burst_are_forgiven_and_longer_ones_are_not_banked() {
        let t0 = Instant::now();
        let mut pipe = Pipe { burst: Duration::from_millis(100), rate: 0, promised: 0.0, carried: 0.0, at: None };
        pipe.set_rate(1_000_000, t0);
        let mine = pipe.promise(100_000, t0);
        assert_eq!(pipe.until_carried(mine, t0), Some(Duration::from_millis(100)));
        // Carried by 100 ms; idle 80 ms more: those 80 ms are banked for the next request.
        let at = t0 + Duration::from_millis(180);
        let mine = pipe.promise(100_000, at);
        assert_eq!(pipe.until_carried(mine, at), Some(Duration::from_millis(20)));
        // Idle for ten seconds: no more than the burst is banked.
        let at = t0 + Duration::from_secs(10);
        let mine = pipe.promise(300_000, at);
        assert_eq!(pipe.until_carried(mine, at), Some(Duration::from_millis(200)));
    }

    #[test]
    fn a_new_rate_applies_to_the_bytes_already_promised() {
        let t0 = Instant::now();
        let mut pipe = Pipe { burst: BURST, rate: 0, promised: 0.0, carried: 0.0, at: None };
        pipe.set_rate(1_000_000, t0);
        let mine = pipe.promise(2_000_000, t0);
        let at = t0 + Duration::from_millis(100); // 100 kB carried
        pipe.set_rate(19_000_000, at);
        assert_eq!(pipe.until_carried(mine, at), Some(Duration::from_millis(100)));
        pipe.set_rate(0, at);
        assert_eq!(pipe.until_carried(mine, at), None, "unlimited: through at once");
    }

    #[test]
    fn a_bucket_is_never_faster_than_its_rate_from_many_threads_and_wakes_its_waiters_on_a_new_rate() {
        let bucket = Arc::new(Bucket::new(BURST));
        bucket.set_rate(20_000_000);
        let started = Instant::now();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let bucket = Arc::clone(&bucket);
                thread::spawn(move || (0..16).for_each(|_| bucket.carry(62_500, || ())))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        // 4 MB at 20 MB/s, less the 5 ms burst: a loaded machine can only make it slower.
        assert!(started.elapsed() >= Duration::from_millis(190), "{:?}", started.elapsed());

        bucket.set_rate(1_000);
        let waiter = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || bucket.carry(1_000_000, || ())) // 1000 s at this rate
        };
        thread::sleep(Duration::from_millis(50));
        let unlimited = Instant::now();
        bucket.set_rate(0);
        waiter.join().unwrap();
        assert!(unlimited.elapsed() < Duration::from_secs(5), "the waiter went on at the new rate");
    }

    #[test]
    fn a_stop_ends_the_wait_for_a_long_promise() {
        let bucket = Bucket::new(BURST);
        bucket.set_rate(1_000);
        let started = Instant::now();
        let stop_at = started + Duration::from_millis(100);
        let ran = bucket.carry_unless(1_000_000, || true, &|| Instant::now() >= stop_at); // 1000 s at this rate
        assert!(ran);
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }

    #[test]
    fn an_unlimited_bucket_costs_one_load_and_runs_the_work() {
        let bucket = Bucket::new(BURST);
        let started = Instant::now();
        let mut ran = 0;
        for _ in 0..100_000 {
            bucket.carry(1 << 20, || ran += 1);
        }
        assert_eq!(ran, 100_000);
        // Well under 1 µs each, even in a debug build on a loaded machine.
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
    fn a_bursts_writes_share_one_wait_for_space_and_the_next_burst_begins_another() {
        let wait = SpaceWait::default();
        assert_eq!(wait.deadline(Duration::ZERO), None, "no wait unless the data manager asks for one");
        wait.next_request(false);
        let until = wait.deadline(Duration::from_millis(200)).unwrap();
        thread::sleep(Duration::from_millis(50));
        wait.next_request(true);
        assert_eq!(wait.deadline(Duration::from_millis(200)), Some(until), "a piece of the burst waits no longer");
        thread::sleep(until.saturating_duration_since(Instant::now()));
        wait.next_request(true);
        assert_eq!(wait.deadline(Duration::from_millis(200)), Some(until), "after the wait: it fails at once");
        wait.next_request(false);
        let next = wait.deadline(Duration::from_millis(200)).unwrap();
        assert!(next >= until + Duration::from_millis(190), "the next call waits anew");
    }

    #[test]
    fn a_refused_grants_retries_share_its_wait_and_any_grant_after_the_row_waits_anew() {
        let wait = SpaceWait::default();
        let limit = Duration::from_millis(200);
        assert!(!wait.next_grant(7, 0, 1 << 20));
        let until = wait.deadline(limit).unwrap();
        wait.answered_grant(7, 0, 1 << 20, false, true);
        // The first retry fits, its commit goes by, the second is refused: one wait.
        assert!(wait.next_grant(7, 0, 256 << 10));
        wait.answered_grant(7, 0, 256 << 10, true, false);
        assert!(wait.next_grant(7, 256 << 10, 256 << 10));
        assert_eq!(wait.deadline(limit), Some(until), "a retry is the same call");
        wait.answered_grant(7, 256 << 10, 256 << 10, true, true);
        thread::sleep(Duration::from_millis(20));
        // The next call, however small and wherever it starts, waits anew.
        assert!(!wait.next_grant(7, 256 << 10, 64 << 10));
        assert!(wait.deadline(limit).unwrap() > until, "after a refused retry: the next call");
        wait.answered_grant(7, 256 << 10, 64 << 10, false, true);
        assert!(!wait.next_grant(8, 256 << 10, 4096), "another object's grant is another call");
    }

    #[test]
    fn only_the_jobs_writes_are_checkpoint_writes_and_counted() {
        let rates = Rates::default();
        rates.set(1, 1, 0);
        let started = Instant::now();
        rates.checkpoint_write(BACKGROUND_JOB, 1 << 30, || ());
        assert!(started.elapsed() < Duration::from_millis(100), "the daemons' own writes are not paced");
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
