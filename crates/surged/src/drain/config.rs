//! How the data manager is set up (`surged --drain ...`): the drain policy
//! of [Sung20, ch. 5] or one of the baselines it is compared with, the
//! period, the buffer rates the policy plans with, where the drain state
//! lives, and whether cold checkpoints are placed on the PFS directly. The
//! default is `off`: nothing moves on its own.

use super::evict_order::EvictOrderKind;
use crate::demotion_control::RateControlKind;
use clap::ValueEnum;
use std::path::PathBuf;
use std::time::Duration;
/// Which policy demotes the buffer to the PFS: the registry of drain policies (`surge_bbos::policy`).
pub use surge_bbos::policy::DrainPolicyKind;
use surge_bbos::thresholds::Bandwidths;

/// Where the data manager places a new checkpoint (`--drain-direct`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Placement {
    /// Every checkpoint is written into the buffer
    #[default]
    Off,
    /// A new checkpoint the placement policy finds cold is written to the PFS directly [Sung20, §5.2.2]
    Cold,
}

impl Placement {
    /// The name `--drain-direct` takes and the report shows.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Off => "off",
            Placement::Cold => "cold",
        }
    }
}

/// Whether every daemon trims its buffer's file system after deletions (`--drain-trim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum TrimMode {
    /// Never trim
    Off,
    /// Trim where the buffer's file system accepts FITRIM [Sung20, §5.2.4]
    #[default]
    Auto,
}

/// The data manager's settings (`DaemonConfig::drain`; daemon 0 runs it).
#[derive(Debug, Clone, PartialEq)]
pub struct DrainConfig {
    pub policy: DrainPolicyKind,
    /// Length of a period: DWSF restarts and the thresholds are solved again at each.
    pub period: Duration,
    /// The buffer's rates in bytes/s; `None`: measured at start (calibration).
    pub rates: Option<Bandwidths>,
    /// A Redis URL (`redis://HOST:PORT`) for the drain state; `None`: the
    /// embedded store `drain.redb` in daemon 0's buffer directory.
    pub state: Option<String>,
    /// The order the evicter takes demoted files in.
    pub evict: EvictOrderKind,
    /// Direct-to-PFS placement of cold checkpoints.
    pub direct: Placement,
    /// Where the replicator puts a second copy of every demoted file (`replicator`); `None`: off.
    pub replica: Option<PathBuf>,
    /// The replicator's cap in bytes/s; 0: unlimited.
    pub replica_rate: u64,
    /// What holds every daemon's demotion copies to the rate (`--drain-rate-control`).
    pub rate_control: RateControlKind,
    /// Whether the trimmers run (`drain::trimmer`).
    pub trim: TrimMode,
    /// Bytes/s of the file system's byte ranges a trimmer asks to trim (`--drain-trim-rate`); 0: unlimited.
    pub trim_rate: u64,
}

/// The default period, [Sung20, §5.3.1]'s order of magnitude for a checkpoint interval.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(600);

/// The default TRIM rate, 1000 MB/s: a pass over a buffer of up to 600 GB
/// (a node-local SSD's size) still ends within a default period, so that
/// passes keep up with one a period, while an SSD that discards a few GB/s
/// when unthrottled gets its discards spread over a few times as long
/// (docs/bbos.md, "TRIM").
pub const DEFAULT_TRIM_RATE: u64 = 1_000_000_000;

impl Default for DrainConfig {
    fn default() -> DrainConfig {
        DrainConfig {
            policy: DrainPolicyKind::Off,
            period: DEFAULT_PERIOD,
            rates: None,
            state: None,
            evict: EvictOrderKind::default(),
            direct: Placement::Off,
            replica: None,
            replica_rate: 0,
            rate_control: RateControlKind::default(),
            trim: TrimMode::default(),
            trim_rate: DEFAULT_TRIM_RATE,
        }
    }
}

impl DrainConfig {
    /// Whether a policy is on.
    pub fn is_on(&self) -> bool {
        self.policy != DrainPolicyKind::Off
    }

    /// Why these settings cannot work, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.period.is_zero() {
            return Err("the drain period must be positive (--drain-period SECONDS)".into());
        }
        if let Some(rates) = &self.rates {
            rates.check()?;
        }
        if let Some(url) = &self.state {
            check_redis_url(url)?;
        }
        if self.direct != Placement::Off && !self.is_on() {
            return Err(format!(
                "--drain-direct cold needs a drain policy: add --drain {}",
                DrainPolicyKind::suggestion()
            ));
        }
        match &self.replica {
            Some(_) if !self.is_on() => {
                Err(format!("--drain-replica needs a drain policy: add --drain {}", DrainPolicyKind::suggestion()))
            }
            Some(dir) if !dir.is_absolute() => {
                Err(format!("--drain-replica takes an absolute directory, not {}", dir.display()))
            }
            _ => Ok(()),
        }
    }
}

/// `redis://HOST:PORT` (or `rediss://`, or `redis+unix://`), the forms the redis crate takes.
fn check_redis_url(url: &str) -> Result<(), String> {
    let known = ["redis://", "rediss://", "redis+unix://", "unix://"];
    match known.iter().find(|scheme| url.starts_with(*scheme)) {
        Some(scheme) if url.len() > scheme.len() => Ok(()),
        _ => Err(format!("--drain-state takes a Redis URL such as redis://127.0.0.1:6379, not {url:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_off_and_a_redis_url_must_be_one() {
        let config = DrainConfig::default();
        assert!(!config.is_on() && config.check().is_ok());
        let redis = |url: &str| DrainConfig { state: Some(url.into()), ..DrainConfig::default() }.check();
        assert!(redis("redis://127.0.0.1:6379").is_ok());
        assert!(redis("127.0.0.1:6379").unwrap_err().contains("redis://127.0.0.1:6379"));
        assert!(redis("redis://").is_err());
        let zero = DrainConfig { period: Duration::ZERO, ..DrainConfig::default() };
        assert!(zero.check().unwrap_err().contains("--drain-period"));
        let direct = DrainConfig { direct: Placement::Cold, ..DrainConfig::default() };
        assert!(direct.check().unwrap_err().contains("--drain bbos"));
        assert!(DrainConfig { policy: DrainPolicyKind::Bbos, ..direct }.check().is_ok());
        let replica = |dir: &str| DrainConfig { replica: Some(dir.into()), ..DrainConfig::default() };
        assert!(replica("/replica").check().unwrap_err().contains("--drain bbos"));
        let relative = DrainConfig { policy: DrainPolicyKind::Bbos, ..replica("replica") };
        assert!(relative.check().unwrap_err().contains("absolute"));
        assert!(DrainConfig { policy: DrainPolicyKind::Bbos, ..replica("/replica") }.check().is_ok());
    }
}
