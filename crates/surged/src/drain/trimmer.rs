//! The trimmer: a periodic TRIM of the buffer's device after deletions, as
//! the seed does after its deleters remove files [Sung20, §5.2.4], so that
//! the SSD's garbage collection does not slow the checkpoints written
//! later. Every daemon with the data manager on runs one (`--drain-trim
//! auto`, the default) on its own buffer directory.
//!
//! The buffer is a directory on some file system, so the trimmer asks the
//! file system: FITRIM on a descriptor of the directory makes it send the
//! device a discard for its free blocks in a byte range. It trims once the
//! objects removed since its last trim took [`threshold`] bytes (1/16 of
//! the buffer, at most 64 MiB: less is not worth a pass over the free
//! space maps), and at most once per drain period. A pass goes in ranges of
//! [`RANGE`] bytes, one FITRIM each, so that no single call keeps the
//! device busy for long (the file system locks each block group it trims,
//! and the device queues the discards of one call together).
//!
//! The seed holds the TRIM's throughput down with blkio [Sung20, §5.2.4],
//! but block throttling counts a discard as one small write whatever its
//! length, so here the trimmer paces itself (`--drain-trim-rate`): each
//! range goes through a token bucket of its own (`rates::Bucket`, the
//! demotion's kind) at that many bytes/s of the ranges asked, used or free,
//! so that a pass of N bytes takes at least N / rate. A range is promised
//! to the bucket before its FITRIM, so the call's own time counts towards
//! the pace, and the bucket forgives no idle time: a pass starts paced. A
//! stop waits for one FITRIM at most: the bucket's wait ends when the
//! daemon stops.
//!
//! A pass starts with syncfs: ext4 and XFS free a deleted file's blocks
//! for reuse (and for FITRIM) only when the journal transaction that
//! deleted it commits, up to 5 s later.
//!
//! At start the trimmer probes the file system with an empty range: a file
//! system that would trim checks the range and says EINVAL; EPERM (no
//! CAP_SYS_ADMIN), EOPNOTSUPP (a device without discard) and ENOTTY (tmpfs
//! and other file systems without FITRIM) turn the trimmer off for this
//! daemon, with one log line, and the report says `unsupported (reason)`.
//! The same errors from a later trim do the same. A [`Trim`] is the file
//! system seam: [`Fitrim`] the real one.

use super::config::{DrainConfig, TrimMode};
use crate::background::{Context, Registration, Task, Wake};
use crate::failure::Failure;
use crate::locking::lock;
use crate::logging::log;
use crate::rates::Bucket;
use crate::store::SpaceFreed;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use surge_proto::drain::DrainTrim;
use surge_proto::Errno;

/// Bytes one FITRIM covers: one ext4 block group (32768 blocks of 4 KiB),
/// the unit ext4 trims under one lock and remembers as trimmed (a range
/// that covers part of a group leaves it unmarked, to be trimmed again on
/// every pass); on an SSD tens of ms of discards at most, and 134 ms of
/// pace at the default rate.
pub const RANGE: u64 = 128 << 20;
/// The most removed bytes a trim waits for.
const MOST_BEFORE_TRIM: u64 = 64 << 20;
/// Longest time between two looks at the bytes removed.
const LOOK_EVERY: Duration = Duration::from_secs(5);

/// Bytes the objects removed since the last trim must reach before the
/// next: 1/16 of the buffer's capacity, at most 64 MiB.
pub fn threshold(capacity: u64) -> u64 {
    match capacity {
        0 => MOST_BEFORE_TRIM,
        _ => (capacity / 16).clamp(1, MOST_BEFORE_TRIM),
    }
}

/// A file system that can be told to discard its free blocks.
pub trait Trim: Send {
    /// The file system's size in bytes: what a pass covers.
    fn size(&self) -> io::Result<u64>;
    /// Commits what the file system has pending, so that the blocks of
    /// files deleted in its running journal transaction are free to trim.
    fn sync(&self) -> io::Result<()>;
    /// Discards the free blocks in `len` bytes from `start` (`len` 0: only
    /// checks that the file system trims); the bytes it discarded.
    fn trim(&mut self, start: u64, len: u64) -> io::Result<u64>;
}

/// FITRIM on the file system of a directory.
pub struct Fitrim {
    dir: File,
}

/// `struct fstrim_range` of linux/fs.h.
#[repr(C)]
struct FstrimRange {
    start: u64,
    len: u64,
    minlen: u64,
}

/// `_IOWR('X', 121, struct fstrim_range)` (libc does not name it).
const FITRIM: libc::c_ulong = 0xc018_5879;

impl Fitrim {
    pub fn open(dir: &Path) -> io::Result<Fitrim> {
        Ok(Fitrim { dir: File::open(dir)? })
    }
}

impl Trim for Fitrim {
    fn size(&self) -> io::Result<u64> {
        // SAFETY: statvfs is plain data; fstatvfs fills it or fails.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: the descriptor is open for the call; `stat` is writable.
        if unsafe { libc::fstatvfs(self.dir.as_raw_fd(), &mut stat) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stat.f_blocks * stat.f_frsize)
    }

    fn sync(&self) -> io::Result<()> {
        // SAFETY: the descriptor is open for the call.
        match unsafe { libc::syncfs(self.dir.as_raw_fd()) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }

    fn trim(&mut self, start: u64, len: u64) -> io::Result<u64> {
        // minlen 0: the file system's own minimum (the device's discard granularity).
        let mut range = FstrimRange { start, len, minlen: 0 };
        // SAFETY: FITRIM reads and writes one fstrim_range, which `range` is.
        if unsafe { libc::ioctl(self.dir.as_raw_fd(), FITRIM as _, &mut range) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(range.len)
    }
}

/// Why a trim error means the file system cannot be trimmed here at all.
fn unsupported(error: &io::Error) -> Option<&'static str> {
    match error.raw_os_error()? {
        libc::EPERM => Some("EPERM: FITRIM needs CAP_SYS_ADMIN"),
        libc::EOPNOTSUPP => Some("EOPNOTSUPP: the device does not discard"),
        libc::ENOTTY => Some("ENOTTY: the file system has no FITRIM"),
        _ => None,
    }
}

/// What a daemon's trimmer did, for its tick replies (`DrainTick`).
pub struct TrimStatus {
    state: Mutex<String>,
    trims: AtomicU64,
    bytes: AtomicU64,
    last_unix_s: AtomicU64,
}

impl TrimStatus {
    fn new(state: &str) -> TrimStatus {
        TrimStatus {
            state: Mutex::new(state.into()),
            trims: AtomicU64::default(),
            bytes: AtomicU64::default(),
            last_unix_s: AtomicU64::default(),
        }
    }

    pub fn report(&self) -> DrainTrim {
        DrainTrim {
            state: lock(&self.state).clone(),
            trims: self.trims.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            last_unix_s: self.last_unix_s.load(Ordering::Relaxed),
        }
    }

    fn trimmed(&self, bytes: u64) {
        self.trims.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        self.last_unix_s.store(now, Ordering::Relaxed);
    }
}

/// When the next trim is due.
#[derive(Debug)]
struct Schedule {
    threshold: u64,
    period: Duration,
    /// Bytes removed as of the last trim.
    removed_then: u64,
    last: Option<Instant>,
}

impl Schedule {
    fn due(&self, removed: u64, now: Instant) -> bool {
        removed.saturating_sub(self.removed_then) >= self.threshold
            && self.last.is_none_or(|last| now.duration_since(last) >= self.period)
    }

    fn done(&mut self, removed: u64, now: Instant) {
        (self.removed_then, self.last) = (removed, Some(now));
    }
}

/// A daemon's trimmer task.
pub struct Trimmer {
    index: u32,
    fs: Box<dyn Trim>,
    /// The store's count of bytes removed.
    freed: Arc<SpaceFreed>,
    schedule: Schedule,
    status: Arc<TrimStatus>,
    /// Paces the ranges asked (`--drain-trim-rate`; unlimited at 0).
    pace: Bucket,
    /// False once the file system refused: nothing more is tried.
    on: bool,
}

impl Trimmer {
    /// Probes `fs` (see the module); the trimmer, on or unsupported, that
    /// trims at most once per `period` and asks `rate` bytes/s (0: unlimited).
    fn new(
        index: u32,
        mut fs: Box<dyn Trim>,
        freed: Arc<SpaceFreed>,
        capacity: u64,
        period: Duration,
        rate: u64,
    ) -> Trimmer {
        let refused = fs.trim(0, 0).err().as_ref().and_then(unsupported);
        let removed_then = freed.released_bytes();
        let schedule = Schedule { threshold: threshold(capacity), period, removed_then, last: None };
        let status = Arc::new(TrimStatus::new("on"));
        // No idle time forgiven: the ranges follow one another, and a pass starts paced.
        let pace = Bucket::new(Duration::ZERO);
        pace.set_rate(rate);
        let mut trimmer = Trimmer { index, fs, freed, schedule, status, pace, on: true };
        if let Some(reason) = refused {
            trimmer.turn_off(reason);
        }
        trimmer
    }

    fn turn_off(&mut self, reason: &str) {
        log!(Info, self.index, "trimmer: the buffer's file system cannot be trimmed ({reason}); TRIM is off");
        *lock(&self.status.state) = format!("unsupported ({reason})");
        self.on = false;
    }

    /// A pass over the file system in ranges of [`RANGE`], at the pace; the bytes trimmed.
    fn pass(&mut self, stopping: &dyn Fn() -> bool) -> io::Result<u64> {
        self.fs.sync()?;
        let size = self.fs.size()?;
        let mut trimmed = 0;
        let mut start = 0;
        while start < size && !stopping() {
            let len = RANGE.min(size - start);
            let fs = &mut self.fs;
            trimmed += self.pace.carry_unless(len, || fs.trim(start, len), stopping)?;
            start += len;
        }
        Ok(trimmed)
    }

    /// Trims if due (see the module).
    fn round(&mut self, now: Instant, stopping: &dyn Fn() -> bool) -> Result<(), Failure> {
        let removed = self.freed.released_bytes();
        if !self.on || !self.schedule.due(removed, now) {
            return Ok(());
        }
        match self.pass(stopping) {
            Ok(bytes) => {
                self.status.trimmed(bytes);
                self.schedule.done(removed, now);
                Ok(())
            }
            Err(error) => match unsupported(&error) {
                Some(reason) => {
                    self.turn_off(reason);
                    Ok(())
                }
                None => {
                    Err(Failure::new(Errno::from_io(&error), format!("trimming the buffer's file system: {error}")))
                }
            },
        }
    }
}

impl Task for Trimmer {
    fn name(&self) -> &'static str {
        "trimmer"
    }

    fn period(&self) -> Duration {
        self.schedule.period.min(LOOK_EVERY)
    }

    fn run_once(&mut self, cx: &Context) -> Result<(), Failure> {
        self.round(Instant::now(), &|| cx.stopping())
    }
}

/// What a daemon starts for `--drain-trim`: its trimmer task, with a policy
/// on and `auto`, and the status its tick replies give (`off` without one).
/// `freed` counts the bytes its store removes; `capacity` is the buffer's
/// (`--capacity`, else the device's size).
pub fn start(
    config: &DrainConfig,
    index: u32,
    buffer: &Path,
    freed: &Arc<SpaceFreed>,
    capacity: u64,
) -> (Option<Registration>, Arc<TrimStatus>) {
    if !config.is_on() || config.trim == TrimMode::Off {
        return (None, Arc::new(TrimStatus::new("off")));
    }
    match Fitrim::open(buffer) {
        Ok(fs) => {
            let trimmer =
                Trimmer::new(index, Box::new(fs), Arc::clone(freed), capacity, config.period, config.trim_rate);
            let status = Arc::clone(&trimmer.status);
            (Some(Registration::new(trimmer, Wake::default())), status)
        }
        Err(error) => {
            log!(Warn, index, "trimmer: cannot open the buffer directory {}: {error}; TRIM is off", buffer.display());
            (None, Arc::new(TrimStatus::new(&format!("unsupported (cannot open the buffer directory: {error})"))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The (start, len) ranges asked for, in order.
    type Ranges = Arc<Mutex<Vec<(u64, u64)>>>;
    /// When each range was asked for.
    type Times = Arc<Mutex<Vec<Instant>>>;

    /// A file system of `size` bytes that records the ranges it is asked to
    /// trim and when, and says each was free, or fails with `errno`.
    struct Recording {
        size: u64,
        ranges: Ranges,
        times: Times,
        errno: Option<i32>,
    }

    impl Trim for Recording {
        fn size(&self) -> io::Result<u64> {
            Ok(self.size)
        }
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
        fn trim(&mut self, start: u64, len: u64) -> io::Result<u64> {
            if let Some(errno) = self.errno {
                return Err(io::Error::from_raw_os_error(errno));
            }
            lock(&self.ranges).push((start, len));
            lock(&self.times).push(Instant::now());
            Ok(len)
        }
    }

    const MIB: u64 = 1 << 20;

    /// A trimmer of a 256 MiB buffer on a recording file system, trimming
    /// at most once a minute at `rate` bytes/s.
    fn paced_trimmer(size: u64, errno: Option<i32>, rate: u64) -> (Trimmer, Arc<SpaceFreed>, Ranges, Times) {
        let (freed, ranges, times) = (Arc::new(SpaceFreed::default()), Ranges::default(), Times::default());
        let fs = Recording { size, ranges: Arc::clone(&ranges), times: Arc::clone(&times), errno };
        let trimmer = Trimmer::new(0, Box::new(fs), Arc::clone(&freed), 256 * MIB, Duration::from_secs(60), rate);
        (trimmer, freed, ranges, times)
    }

    /// An unlimited trimmer (see [`paced_trimmer`]).
    fn trimmer(size: u64, errno: Option<i32>) -> (Trimmer, Arc<SpaceFreed>, Ranges) {
        let (trimmer, freed, ranges, _) = paced_trimmer(size, errno, 0);
        (trimmer, freed, ranges)
    }

    #[test]
    fn the_threshold_is_a_sixteenth_of_the_buffer_and_at_most_64_mib() {
        assert_eq!(threshold(256 * MIB), 16 * MIB);
        assert_eq!(threshold(1 << 40), 64 * MIB);
        assert_eq!(threshold(0), 64 * MIB, "a capacity not known");
        assert_eq!(threshold(5), 1);
    }

    #[test]
    fn a_trim_waits_for_the_threshold_then_comes_at_most_once_a_period() {
        let (mut trimmer, freed, ranges) = trimmer(3 * RANGE + 5, None);
        assert_eq!(*lock(&ranges), [(0, 0)], "the probe only");
        lock(&ranges).clear();
        let start = Instant::now();
        freed.released(16 * MIB - 1);
        trimmer.round(start, &|| false).unwrap();
        assert!(lock(&ranges).is_empty(), "below the threshold");
        freed.released(1);
        trimmer.round(start, &|| false).unwrap();
        assert_eq!(*lock(&ranges), [(0, RANGE), (RANGE, RANGE), (2 * RANGE, RANGE), (3 * RANGE, 5)]);
        let report = trimmer.status.report();
        assert_eq!((report.state.as_str(), report.trims, report.bytes), ("on", 1, 3 * RANGE + 5));
        assert!(report.last_unix_s > 0);
        freed.released(100 * MIB);
        trimmer.round(start + Duration::from_secs(59), &|| false).unwrap();
        assert_eq!(trimmer.status.report().trims, 1, "a second trim within the period");
        trimmer.round(start + Duration::from_secs(60), &|| false).unwrap();
        assert_eq!(trimmer.status.report().trims, 2, "the next period, with enough removed");
        trimmer.round(start + Duration::from_secs(200), &|| false).unwrap();
        assert_eq!(trimmer.status.report().trims, 2, "nothing removed since");
    }

    #[test]
    fn a_stop_ends_a_pass_between_two_ranges() {
        let (mut trimmer, freed, ranges) = trimmer(4 * RANGE, None);
        freed.released(64 * MIB);
        let asked = std::cell::Cell::new(0);
        let stopping = || {
            asked.set(asked.get() + 1);
            asked.get() > 2
        };
        trimmer.round(Instant::now(), &stopping).unwrap();
        assert_eq!(lock(&ranges).len(), 1 + 2, "the probe and two ranges");
    }

    #[test]
    fn a_paced_pass_asks_each_range_once_the_ranges_before_it_are_carried_at_the_rate() {
        // Ten ranges a second: range k is asked k × 100 ms into the pass, the pass takes 400 ms.
        let (mut trimmer, freed, ranges, times) = paced_trimmer(4 * RANGE, None, 10 * RANGE);
        freed.released(64 * MIB);
        let began = Instant::now();
        trimmer.round(began, &|| false).unwrap();
        let took = began.elapsed();
        assert_eq!(*lock(&ranges), [(0, 0), (0, RANGE), (RANGE, RANGE), (2 * RANGE, RANGE), (3 * RANGE, RANGE)]);
        // A loaded machine can only make a pass slower; 1 ms for the clock's rounding.
        let asked: Vec<Duration> = lock(&times)[1..].iter().map(|at| at.duration_since(began)).collect();
        for (k, at) in asked.iter().enumerate() {
            let due = Duration::from_millis(100 * k as u64).saturating_sub(Duration::from_millis(1));
            assert!(*at >= due, "range {k} asked {at:?} into the pass, before {due:?}: {asked:?}");
        }
        assert!(took >= Duration::from_millis(399), "4 ranges at 10 a second took {took:?}");
        assert_eq!(trimmer.status.report().bytes, 4 * RANGE);
    }

    #[test]
    fn an_unlimited_pass_is_not_paced() {
        // 1 TiB: 8192 ranges, 1100 s at the default rate.
        let (mut trimmer, freed, ranges) = trimmer(1 << 40, None);
        freed.released(64 * MIB);
        let began = Instant::now();
        trimmer.round(began, &|| false).unwrap();
        assert_eq!(lock(&ranges).len(), 1 + 8192);
        assert!(began.elapsed() < Duration::from_secs(10), "{:?}", began.elapsed());
    }

    #[test]
    fn a_stop_does_not_wait_for_the_pace_of_the_range_under_way() {
        // One range every 100 s; the daemon stops 100 ms into the pass.
        let (mut trimmer, freed, ranges, _) = paced_trimmer(4 * RANGE, None, RANGE / 100);
        freed.released(64 * MIB);
        let began = Instant::now();
        let stop_at = began + Duration::from_millis(100);
        trimmer.round(began, &|| Instant::now() >= stop_at).unwrap();
        assert_eq!(lock(&ranges).len(), 1 + 1, "the probe and the first range");
        assert!(began.elapsed() < Duration::from_secs(10), "{:?}", began.elapsed());
    }

    #[test]
    fn a_file_system_that_refuses_turns_the_trimmer_off_and_says_why() {
        for (errno, why) in [(libc::ENOTTY, "ENOTTY"), (libc::EPERM, "EPERM"), (libc::EOPNOTSUPP, "EOPNOTSUPP")] {
            let (mut trimmer, freed, ranges) = trimmer(RANGE, Some(errno));
            freed.released(64 * MIB);
            trimmer.round(Instant::now(), &|| false).unwrap();
            let report = trimmer.status.report();
            assert!(report.state.starts_with(&format!("unsupported ({why}")), "{}", report.state);
            assert_eq!((report.trims, lock(&ranges).len()), (0, 0));
        }
    }

    #[test]
    fn another_trim_error_is_a_failed_round_and_the_next_round_tries_again() {
        let (mut trimmer, freed, _) = trimmer(RANGE, None);
        let failing = Recording { size: RANGE, ranges: Arc::default(), times: Arc::default(), errno: Some(libc::EIO) };
        trimmer.fs = Box::new(failing);
        freed.released(64 * MIB);
        assert_eq!(trimmer.round(Instant::now(), &|| false).unwrap_err().errno, Errno(libc::EIO));
        assert_eq!(trimmer.status.report().state, "on");
        trimmer.fs = Box::new(Recording { size: RANGE, ranges: Arc::default(), times: Arc::default(), errno: None });
        trimmer.round(Instant::now(), &|| false).unwrap();
        assert_eq!(trimmer.status.report().trims, 1);
    }

    #[test]
    fn the_trimmer_runs_only_with_a_policy_on_and_trim_auto() {
        let dir = tempfile::tempdir().unwrap();
        let freed = Arc::new(SpaceFreed::default());
        let on = DrainConfig { policy: super::super::config::DrainPolicyKind::Bbos, ..DrainConfig::default() };
        for config in [DrainConfig::default(), DrainConfig { trim: TrimMode::Off, ..on.clone() }] {
            let (task, status) = start(&config, 0, dir.path(), &freed, 0);
            assert!(task.is_none());
            assert_eq!(status.report().state, "off");
        }
        let (task, status) = start(&on, 0, dir.path(), &freed, 0);
        assert!(task.is_some());
        assert!(status.report().state == "on" || status.report().state.starts_with("unsupported ("));
    }
}
