//! Calibration of the buffer's rates for the data manager: the four end
//! points of the read/write interference line of Eq. 5.1 [Sung20, ch. 5],
//! BW_w = m·BW_r + b, measured on this daemon's buffer and the PFS in a
//! couple of seconds at its start.
//!
//! Three runs, each a third of the budget, through the daemon's own code:
//! checkpoint writes go through the object store (block checksums and
//! all), demotion copies through `stage_out::stage_object` (copy, flush,
//! drop from the cache, re-read and compare):
//! 1. writes alone: Bwmax;
//! 2. demotion copies alone: Brmax;
//! 3. writes and copies at once, both at full speed: the write rate is
//!    Bwmin (writes beside a full-speed demotion) and the copy rate Brmin
//!    (demotion beside full-speed writes).
//!
//! The line then passes through (Brmin, Bwmax) and (Brmax, Bwmin). Writes
//! are flushed at the end of their run, so a rate is the device's, not the
//! page cache's. The files are removed afterwards, whatever happened.

use crate::checksum::InlineCrc32c;
use crate::failure::Failure;
use crate::pfs::Pfs;
use crate::stage_out::{stage_object, StageOrder};
use crate::store::{DirStore, ObjectStore};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use surge_bbos::thresholds::Bandwidths;
use surge_proto::Layout;

/// Free space the buffer needs for a calibration: two objects of
/// `MOST_PER_RUN` and room to spare.
pub const NEEDED_FREE: u64 = 256 << 20;
/// Most bytes one run writes (runs end at this or their time, whichever first).
const MOST_PER_RUN: u64 = 64 << 20;
/// Bytes per write, as a client sends them.
const WRITE_PIECE: usize = 256 << 10;
/// Object bytes per copy, as a demotion asks for them.
const COPY_CHUNK: u64 = 4 << 20;
/// The inodes of the two objects (the store is a private one).
const WRITTEN_ALONE: u64 = 1;
const WRITTEN_BESIDE_COPIES: u64 = 2;

/// Why the rates could not be measured.
#[derive(Debug)]
pub enum CalibrationError {
    /// The buffer device has less than [`NEEDED_FREE`] free.
    TooLittleSpace { free: u64 },
    /// A write, copy or clean-up failed.
    Failed(String),
    /// The figures cannot describe the buffer (the model needs Bwmax ≥
    /// Bwmin and Brmax > Brmin, all above zero): a noisy machine.
    Unusable { rates: Bandwidths, why: &'static str },
}

impl fmt::Display for CalibrationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mb = |rate: f64| rate / 1e6;
        match self {
            CalibrationError::TooLittleSpace { free } => write!(
                f,
                "calibration skipped: the buffer device has {} MiB free, measuring its rates needs {} MiB",
                free >> 20,
                NEEDED_FREE >> 20
            ),
            CalibrationError::Failed(why) => write!(f, "calibration failed: {why}"),
            CalibrationError::Unusable { rates, why } => write!(
                f,
                "calibration measured rates the model cannot use ({why}): writes {:.1} MB/s alone, {:.1} beside \
                 demotion; demotion {:.1} MB/s alone, {:.1} beside writes",
                mb(rates.write_max),
                mb(rates.write_min),
                mb(rates.read_max),
                mb(rates.read_min)
            ),
        }
    }
}

impl std::error::Error for CalibrationError {}

impl From<Failure> for CalibrationError {
    fn from(failure: Failure) -> CalibrationError {
        CalibrationError::Failed(failure.to_string())
    }
}

/// Measures Bwmax, Bwmin, Brmax and Brmin (bytes/s) of checkpoint writes to
/// `buffer_dir` and demotion copies from it to `pfs_dir`, in about `budget`.
pub fn calibrate(buffer_dir: &Path, pfs_dir: &Path, budget: Duration) -> Result<Bandwidths, CalibrationError> {
    let free = surge_cluster::fs_space(buffer_dir).map_err(|e| CalibrationError::Failed(e.to_string()))?.1;
    if free < NEEDED_FREE {
        return Err(CalibrationError::TooLittleSpace { free });
    }
    let bench = Bench::new(buffer_dir, pfs_dir)?;
    let run = budget / 3;
    let write_max = bench.write(WRITTEN_ALONE, run)?;
    let read_max = bench.copy(run, &AtomicBool::new(false))?;
    let writing_done = AtomicBool::new(false);
    let (write_min, read_min) = thread::scope(|scope| {
        let copies = scope.spawn(|| bench.copy(run * 2, &writing_done));
        let writes = bench.write(WRITTEN_BESIDE_COPIES, run);
        writing_done.store(true, Ordering::Relaxed);
        let copies = copies.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok::<_, CalibrationError>((writes?, copies?))
    })?;
    let rates = Bandwidths { write_max, write_min, read_max, read_min };
    bench.clean()?;
    usable(rates)
}

/// `rates`, if the threshold solver can use them.
fn usable(rates: Bandwidths) -> Result<Bandwidths, CalibrationError> {
    let all = [rates.write_max, rates.write_min, rates.read_max, rates.read_min];
    let why = if all.iter().any(|r| !r.is_finite() || *r <= 0.0) {
        "a rate of zero"
    } else if rates.write_max < rates.write_min {
        "writes were faster beside demotion than alone"
    } else if rates.read_max <= rates.read_min {
        "demotion was not slower beside writes than alone"
    } else {
        return Ok(rates);
    };
    Err(CalibrationError::Unusable { rates, why })
}

/// Share of the alone rate a demotion is taken to lose beside writes when
/// none was measured: the line of Eq. 5.1 needs Brmax > Brmin.
const LEAST_SLOWDOWN: f64 = 0.01;

/// The figures of a calibration the model could not use (`Unusable`), made
/// physically possible: a stream is never faster beside the other than
/// alone, so a rate measured faster there is noise and taken as the alone
/// rate (a demotion then loses [`LEAST_SLOWDOWN`]). `None` when a rate is
/// zero: nothing was measured.
pub fn repaired(rates: Bandwidths) -> Option<Bandwidths> {
    let all = [rates.write_max, rates.write_min, rates.read_max, rates.read_min];
    if all.iter().any(|r| !r.is_finite() || *r <= 0.0) {
        return None;
    }
    Some(Bandwidths {
        write_min: rates.write_min.min(rates.write_max),
        read_min: rates.read_min.min(rates.read_max * (1.0 - LEAST_SLOWDOWN)),
        ..rates
    })
}

/// A private object store in the buffer and a stage temp on the PFS,
/// removed when dropped.
struct Bench {
    store_dir: PathBuf,
    store: DirStore,
    pfs: Pfs,
    temp: String,
}

impl Bench {
    fn new(buffer_dir: &Path, pfs_dir: &Path) -> Result<Bench, CalibrationError> {
        let failed = |what: &str, e: &dyn fmt::Display| CalibrationError::Failed(format!("{what}: {e}"));
        let store_dir = buffer_dir.join("calibration.tmp");
        // A calibration killed half way left this behind.
        let _ = std::fs::remove_dir_all(&store_dir);
        let store = DirStore::open(&store_dir, None).map_err(|e| failed(&format!("{}", store_dir.display()), &e))?;
        let pfs = Pfs::open(pfs_dir).map_err(|e| failed(&format!("{}", pfs_dir.display()), &e))?;
        let temp = pfs
            .create_stage_temp("/surge-calibration", WRITTEN_ALONE, MOST_PER_RUN)
            .map_err(|e| failed("creating a copy on the PFS", &e))?;
        Ok(Bench { store_dir, store, pfs, temp })
    }

    /// Writes object `ino` from its start for `time` (at most
    /// `MOST_PER_RUN`), then flushes it: the rate, bytes/s.
    fn write(&self, ino: u64, time: Duration) -> Result<f64, CalibrationError> {
        // Bytes no file system stores as a hole or compresses away.
        let data: Vec<u8> = (0..WRITE_PIECE as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let started = Instant::now();
        let mut written = 0;
        while written < MOST_PER_RUN && started.elapsed() < time {
            written += self.store.write_at(ino, written, &data).map_err(Failure::from)?.bytes as u64;
        }
        self.store.sync(ino).map_err(Failure::from)?;
        Ok(written as f64 / started.elapsed().as_secs_f64())
    }

    /// Copies the object written alone to the PFS over and over, chunk by
    /// chunk as a demotion does, for `time` or until `stop`: the rate, bytes/s.
    fn copy(&self, time: Duration, stop: &AtomicBool) -> Result<f64, CalibrationError> {
        let size = self.store.stat(WRITTEN_ALONE)?.size;
        let layout = Layout { stripe_count: 1, stripe_size: MOST_PER_RUN, first: 0 };
        let started = Instant::now();
        let mut copied = 0;
        while started.elapsed() < time && !stop.load(Ordering::Relaxed) {
            let order = StageOrder {
                ino: WRITTEN_ALONE,
                layout,
                stripe: 0,
                temp: &self.temp,
                object_offset: copied % size.max(1),
                len: COPY_CHUNK,
            };
            let staged = stage_object(&self.store, &self.pfs, &InlineCrc32c, &order, None)?;
            if staged.bytes == 0 {
                return Err(CalibrationError::Failed("the object to copy is empty".into()));
            }
            copied += staged.bytes;
        }
        Ok(copied as f64 / started.elapsed().as_secs_f64())
    }

    /// Removes the store and the PFS copy, saying so if it cannot.
    fn clean(&self) -> Result<(), CalibrationError> {
        self.pfs.remove_stage_temp(&self.temp)?;
        std::fs::remove_dir_all(&self.store_dir)
            .map_err(|e| CalibrationError::Failed(format!("removing {}: {e}", self.store_dir.display())))
    }
}

impl Drop for Bench {
    /// After a failure: what `clean` would do (a success cleaned already).
    fn drop(&mut self) {
        let _ = self.pfs.remove_stage_temp(&self.temp);
        let _ = std::fs::remove_dir_all(&self.store_dir);
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_noisy_calibration_is_repaired_to_what_a_device_can_do() {
        let noisy = Bandwidths { write_max: 173.5e6, write_min: 520.6e6, read_max: 22.2e6, read_min: 37.2e6 };
        let r = repaired(noisy).unwrap();
        assert_eq!((r.write_max, r.write_min, r.read_max), (173.5e6, 173.5e6, 22.2e6));
        assert!((r.read_min - 22.2e6 * 0.99).abs() < 1.0);
        assert!(usable(r).is_ok(), "the threshold solver takes it");
        let slower = Bandwidths { write_max: 50e6, write_min: 30e6, read_max: 20e6, read_min: 5e6 };
        assert_eq!(repaired(slower), Some(slower), "consistent figures stay as measured");
        assert_eq!(repaired(Bandwidths { read_min: 0.0, ..slower }), None);
    }
    use super::*;

    #[test]
    fn calibration_gives_four_positive_rates_ordered_as_the_model_needs_and_leaves_no_file() {
        let t = tempfile::tempdir().unwrap();
        let (buffer, pfs) = (t.path().join("buffer"), t.path().join("pfs"));
        std::fs::create_dir_all(&buffer).unwrap();
        std::fs::create_dir_all(&pfs).unwrap();
        let started = Instant::now();
        match calibrate(&buffer, &pfs, Duration::from_millis(1500)) {
            Ok(rates) => {
                let mb = |rate: f64| rate / 1e6;
                eprintln!(
                    "calibrated (MB/s): Bwmax {:.0}, Bwmin {:.0}, Brmax {:.0}, Brmin {:.0}",
                    mb(rates.write_max),
                    mb(rates.write_min),
                    mb(rates.read_max),
                    mb(rates.read_min)
                );
                assert!(rates.write_min > 0.0 && rates.read_min > 0.0, "{rates:?}");
                assert!(rates.write_max >= rates.write_min && rates.read_max > rates.read_min, "{rates:?}");
                let line = surge_bbos::thresholds::Interference::through(&rates);
                assert!(line.m < 0.0, "demotion slows writes down: {line:?}");
            }
            // A machine too busy to measure on: the error must say so, with the figures.
            Err(e @ CalibrationError::Unusable { .. }) => assert!(e.to_string().contains("MB/s"), "{e}"),
            Err(e) => panic!("{e}"),
        }
        assert!(started.elapsed() < Duration::from_secs(4), "within its budget: {:?}", started.elapsed());
        assert_eq!(std::fs::read_dir(&buffer).unwrap().count(), 0, "the store is removed");
        assert_eq!(std::fs::read_dir(&pfs).unwrap().count(), 0, "the PFS copy is removed");
    }

    #[test]
    fn rates_the_solver_cannot_use_are_refused_with_the_reason() {
        let good = Bandwidths { write_max: 40e6, write_min: 30e6, read_max: 16e6, read_min: 1e6 };
        assert_eq!(usable(good).unwrap(), good);
        let why = |rates| match usable(rates) {
            Err(CalibrationError::Unusable { why, .. }) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(why(Bandwidths { read_min: 0.0, ..good }), "a rate of zero");
        assert_eq!(why(Bandwidths { write_min: 50e6, ..good }), "writes were faster beside demotion than alone");
        assert_eq!(why(Bandwidths { read_min: 16e6, ..good }), "demotion was not slower beside writes than alone");
    }
}
