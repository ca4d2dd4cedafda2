//! The drain state's operations ([`DrainState`]) and the values they take:
//! one group of operations per key of Table 5.1 [Sung20, ch. 5], exactly
//! those that the checkpoint path (Algorithm 5.1) and the demoters
//! (Algorithm 5.2) use, plus a [`Snapshot`] of everything for status
//! displays, tests and the failover's resynchronisation.
//!
//! To plug in another backend, implement [`DrainState`] so that it passes
//! the crate's shared suite (`tests/common/suite.rs`, instantiated per
//! backend with `drain_state_suite!`): every operation is atomic on its own,
//! lists are first in first out, and sorted sets keep one score per member
//! as Redis's do.

use crate::error::StateError;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

pub type Result<T> = std::result::Result<T, StateError>;

/// An application (a job) whose checkpoints the buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AppId(pub u64);

/// A buffer device (one demoter drains each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceId(pub u32);

/// A checkpoint version of one application; older versions are evicted
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u64);

/// Mean time between failures of an application, in seconds: the longer,
/// the colder its latest checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mtbf(pub u64);

/// A byte count (DWSF, DWPP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes(pub u64);

/// One read for a restart: when it happened (Unix time in milliseconds, the
/// member of the Redis sorted set) and the MTBF estimated then (its score).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Restart {
    pub at_ms: u64,
    pub mtbf: Mtbf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    Buffer,
    Pfs,
}

/// Where a checkpoint file's current copy is: its tier and its path there.
/// Stored as `buffer:PATH` or `pfs:PATH`, which redis-cli shows as is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    pub tier: Tier,
    pub path: String,
}

impl Location {
    pub fn buffer(path: &str) -> Location {
        Location { tier: Tier::Buffer, path: path.to_string() }
    }

    pub fn pfs(path: &str) -> Location {
        Location { tier: Tier::Pfs, path: path.to_string() }
    }

    /// The stored form's inverse; `None` for a value no backend writes.
    pub fn parse(stored: &str) -> Option<Location> {
        match stored.split_once(':')? {
            ("buffer", path) => Some(Location::buffer(path)),
            ("pfs", path) => Some(Location::pfs(path)),
            _ => None,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tier = match self.tier {
            Tier::Buffer => "buffer",
            Tier::Pfs => "pfs",
        };
        write!(f, "{tier}:{}", self.path)
    }
}

/// The buffer's rates measured at start (or given), bytes/s: the end points
/// (Brmin, Bwmax) and (Brmax, Bwmin) of the interference line of Eq. 5.1,
/// which gives its slope m and intercept b. Kept so that a restarted daemon
/// 0 plans with the same figures without measuring again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Calibration {
    pub write_max: u64,
    pub write_min: u64,
    pub read_max: u64,
    pub read_min: u64,
}

impl Calibration {
    /// The stored form, `BWMAX,BWMIN,BRMAX,BRMIN` in bytes/s.
    pub fn parse(stored: &str) -> Option<Calibration> {
        let figures: Vec<u64> = stored.split(',').map(|f| f.parse().ok()).collect::<Option<_>>()?;
        let [write_max, write_min, read_max, read_min] = figures[..] else { return None };
        Some(Calibration { write_max, write_min, read_max, read_min })
    }
}

impl fmt::Display for Calibration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{},{},{}", self.write_max, self.write_min, self.read_max, self.read_min)
    }
}

/// Everything a store holds, in a canonical order (so two stores with the
/// same state give equal snapshots).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Table 5.1 #1 `V-order`, by application.
    pub victims: BTreeMap<AppId, Mtbf>,
    /// #2 `Clean`, head first.
    pub clean: Vec<AppId>,
    /// #3 `APPID:restart`, each in time order.
    pub restarts: BTreeMap<AppId, Vec<Restart>>,
    /// #4 `APPID:dev:DEVICE`, each by version then file name.
    pub checkpoints: BTreeMap<(AppId, DeviceId), Vec<(Version, String)>>,
    /// #5 `file:FILENAME`.
    pub locations: BTreeMap<String, Location>,
    /// #6 `APPID:BB`.
    pub in_buffer: BTreeSet<AppId>,
    /// #7 `E-order`, head first.
    pub evict_order: Vec<AppId>,
    /// #8 `DWSF`.
    pub written_so_far: Bytes,
    /// #9 `R-order`, head first.
    pub replicate_order: Vec<String>,
    /// #10 `DWPP`.
    pub last_period: Bytes,
    /// `Calibration`, Surge's key beyond the table.
    pub calibration: Option<Calibration>,
}

/// The ten keys of Table 5.1 [Sung20, ch. 5], as the I/O workers, the
/// throttler, the demoters, the deleters and the replicators use them, and
/// one of Surge's own: `Calibration`, the buffer's measured rates.
/// Each operation is atomic; pops return `None` on an empty key.
pub trait DrainState: Send + Sync {
    /// #1 `V-order`: records (or updates) an application as a demotion
    /// victim with its MTBF.
    fn add_victim(&self, app: AppId, mtbf: Mtbf) -> Result<()>;
    /// #1: takes the victim with the highest MTBF (the coldest; [Sung20,
    /// §5.2.1] says "highest failure rates", an erratum: see docs/bbos-state.md).
    fn pop_victim(&self) -> Result<Option<(AppId, Mtbf)>>;

    /// #2 `Clean`: an application with demotion-finished files the deleters
    /// may remove from the buffer.
    fn push_clean(&self, app: AppId) -> Result<()>;
    fn pop_clean(&self) -> Result<Option<AppId>>;

    /// #3 `APPID:restart`: a read for a restart and the MTBF estimated then.
    fn record_restart(&self, app: AppId, restart: Restart) -> Result<()>;
    /// #3: the application's restarts, oldest first.
    fn restarts(&self, app: AppId) -> Result<Vec<Restart>>;

    /// #4 `APPID:dev:DEVICE`: a checkpoint file of `version` on `device`
    /// (a file added again moves to the new version).
    fn add_checkpoint(&self, app: AppId, device: DeviceId, version: Version, file: &str) -> Result<()>;
    /// #4: takes all files of the application's oldest version on `device`,
    /// in name order.
    fn pop_oldest_version(&self, app: AppId, device: DeviceId) -> Result<Option<(Version, Vec<String>)>>;

    /// #4 and #5: forgets a checkpoint file that was removed or renamed
    /// (its entry in `APPID:dev:DEVICE` and its location).
    fn forget_file(&self, app: AppId, device: DeviceId, file: &str) -> Result<()>;

    /// #5 `file:FILENAME`: where the file's current copy is.
    fn set_location(&self, file: &str, location: &Location) -> Result<()>;
    fn location(&self, file: &str) -> Result<Option<Location>>;

    /// #6 `APPID:BB`: whether the application has checkpoint files in the
    /// buffer.
    fn set_in_buffer(&self, app: AppId, in_buffer: bool) -> Result<()>;
    fn is_in_buffer(&self, app: AppId) -> Result<bool>;

    /// #7 `E-order`: an application whose older checkpoint versions are
    /// outdated, demoted and evicted before any victim.
    fn push_evict(&self, app: AppId) -> Result<()>;
    fn pop_evict(&self) -> Result<Option<AppId>>;

    /// #8 `DWSF`: adds a written checkpoint's size; returns the new total.
    fn add_written(&self, bytes: Bytes) -> Result<Bytes>;
    fn written_so_far(&self) -> Result<Bytes>;

    /// #9 `R-order`: a demoted file to replicate to its group's nodes; a
    /// file listed already moves to the tail (a file is listed once).
    fn push_replication(&self, file: &str) -> Result<()>;
    /// #9: the file at the head, moved to the tail in the same step
    /// (Redis's `LMOVE` of the list onto itself). Unlike the LPOP of
    /// [Sung20, Alg. 5.2], the file stays listed until
    /// [`DrainState::remove_replication`], so a replicator killed
    /// mid-copy loses nothing, and one whose copy failed meets it again
    /// after the others.
    fn next_replication(&self) -> Result<Option<String>>;
    /// #9: drops `file` from the list (its replica is verified, or the file is gone).
    fn remove_replication(&self, file: &str) -> Result<()>;
    /// #9: the files listed, head first.
    fn replications(&self) -> Result<Vec<String>>;

    /// #10 `DWPP`: closes the period: DWPP takes DWSF's value, DWSF restarts
    /// from 0, in one step. Returns the period's DWPP.
    fn end_period(&self) -> Result<Bytes>;
    fn last_period(&self) -> Result<Bytes>;

    /// `Calibration` (beyond Table 5.1): the buffer's measured rates.
    fn set_calibration(&self, calibration: &Calibration) -> Result<()>;
    fn calibration(&self) -> Result<Option<Calibration>>;

    /// All the keys at once.
    fn snapshot(&self) -> Result<Snapshot>;
}
