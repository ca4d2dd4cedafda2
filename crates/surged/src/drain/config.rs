//! How the data manager is set up (`surged --drain ...`): the drain policy
//! of [Sung20, ch. 5] or one of the baselines it is compared with, the
//! period, the buffer rates the policy plans with, and where the drain
//! state lives. The default is `off`: nothing moves on its own.

use clap::ValueEnum;
use std::fmt;
use std::time::Duration;
use surge_bbos::thresholds::Bandwidths;

/// Which policy demotes the buffer to the PFS (`surge_bbos::policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum DrainPolicyKind {
    /// Nothing is demoted on its own (stage-out stays a command)
    #[default]
    Off,
    /// BBOS: adaptive thresholds solved each period for the predicted data written
    Bbos,
    /// Demote always at full speed, checkpoints throttled meanwhile (Harmonia's efficiency policy)
    #[value(name = "maxeff")]
    MaxEff,
    /// Demote only while no checkpoint writes (Harmonia's bandwidth policy)
    #[value(name = "maxbw")]
    MaxBw,
    /// DataWarp-style: demote while no checkpoint writes, unscheduled writers
    Dedicated,
}

impl DrainPolicyKind {
    /// The name `--drain` takes and the report shows.
    pub fn name(self) -> &'static str {
        match self {
            DrainPolicyKind::Off => "off",
            DrainPolicyKind::Bbos => "bbos",
            DrainPolicyKind::MaxEff => "maxeff",
            DrainPolicyKind::MaxBw => "maxbw",
            DrainPolicyKind::Dedicated => "dedicated",
        }
    }
}

impl fmt::Display for DrainPolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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
}

/// The default period, [Sung20, §5.3.1]'s order of magnitude for a checkpoint interval.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(600);

impl Default for DrainConfig {
    fn default() -> DrainConfig {
        DrainConfig { policy: DrainPolicyKind::Off, period: DEFAULT_PERIOD, rates: None, state: None }
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
            check_rates(rates)?;
        }
        if let Some(url) = &self.state {
            check_redis_url(url)?;
        }
        Ok(())
    }
}

const MB: f64 = 1e6;

/// Parses `--drain-rates BWMAX,BWMIN,BRMAX,BRMIN` (MB/s, 1 MB = 10^6 bytes).
pub fn parse_rates(text: &str) -> Result<Bandwidths, String> {
    let usage = "expected BWMAX,BWMIN,BRMAX,BRMIN in MB/s, such as 40,30,16,1";
    let figures: Vec<f64> = text
        .split(',')
        .map(|part| part.trim().parse::<f64>().map_err(|_| format!("{usage}: {:?} is not a number", part.trim())))
        .collect::<Result<_, _>>()?;
    let [write_max, write_min, read_max, read_min] = figures[..] else {
        return Err(format!("{usage}: got {} figure(s)", figures.len()));
    };
    let rates = Bandwidths {
        write_max: write_max * MB,
        write_min: write_min * MB,
        read_max: read_max * MB,
        read_min: read_min * MB,
    };
    check_rates(&rates).map(|()| rates)
}

/// The rates describe an interference line (Eq. 5.1): writes lose speed as demotion reads faster.
fn check_rates(r: &Bandwidths) -> Result<(), String> {
    let all = [r.write_max, r.write_min, r.read_max, r.read_min];
    if all.iter().any(|v| !v.is_finite() || *v <= 0.0) {
        return Err("every drain rate must be a positive number of MB/s".into());
    }
    if r.write_min > r.write_max {
        return Err(format!(
            "BWMIN ({} MB/s, writes beside a full-speed demotion) cannot exceed BWMAX ({} MB/s, writes alone)",
            r.write_min / MB,
            r.write_max / MB
        ));
    }
    if r.read_min >= r.read_max {
        return Err(format!(
            "BRMIN ({} MB/s, demotion beside full-speed writes) must be below BRMAX ({} MB/s, demotion alone)",
            r.read_min / MB,
            r.read_max / MB
        ));
    }
    Ok(())
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
    fn rates_are_read_in_megabytes_per_second() {
        let r = parse_rates("40, 30,16,1.5").unwrap();
        assert_eq!((r.write_max, r.write_min, r.read_max, r.read_min), (40e6, 30e6, 16e6, 1.5e6));
    }

    #[test]
    fn bad_rates_say_what_is_wrong() {
        for (text, says) in [
            ("40,30,16", "got 3 figure(s)"),
            ("40,30,x,1", "\"x\" is not a number"),
            ("40,30,16,0", "positive"),
            ("30,40,16,1", "BWMIN (40 MB/s"),
            ("40,30,16,16", "BRMIN (16 MB/s"),
            ("", "is not a number"),
        ] {
            let error = parse_rates(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

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
    }
}
