//! The data manager's settings on `surge start` and `surge run` (which
//! pass them to the daemons), and `surge run`'s Redis of its own.
//!
//! The data manager [Sung20, ch. 5] drains the buffer to the PFS while
//! jobs run (docs/bbos.md). Its state lives in the embedded store of
//! daemon 0, or in a Redis: `--drain-state redis://HOST:PORT` names one;
//! `surge run --drain-state redis` starts one for the job
//! (`surge_bbos_state::RedisServer`) and stops it after. The Redis address
//! reaches the daemons in their environment (`SURGE_DRAIN_STATE`), not on
//! their command line, where every local user could read its password.

use clap::{Args, ValueEnum};
use std::path::Path;
use std::process::Command;
/// The drain policies by name, the daemons' own list (`surge_bbos::policy`).
pub use surge_bbos::policy::DrainPolicyKind;
use surge_bbos::thresholds::Bandwidths;
use surge_bbos_state::RedisServer;

/// What `surged` reads the Redis address from.
const STATE_ENV: &str = "SURGE_DRAIN_STATE";

/// The order the data manager evicts demoted checkpoints in (`surged --drain-evict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EvictOrder {
    /// BBOS's: outdated versions first, then the coldest jobs' (highest MTBF first).
    Bbos,
    /// Least recently opened first (a restart-cache baseline).
    Lru,
    /// Oldest written first (a restart-cache baseline).
    Fifo,
}

/// What holds demotion copies to the demotion rate in every daemon (`surged --drain-rate-control`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RateControl {
    /// The daemon's token bucket.
    Token,
    /// cgroup-v1 blkio throttling of the buffer's and PFS's disks, with O_DIRECT copies [Sung20, §5.2.4].
    Blkio,
    /// blkio where it can be had, else the token bucket.
    Auto,
}

/// Where the data manager places new checkpoints (`surged --drain-direct`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DirectPlacement {
    /// Every checkpoint is written into the buffer.
    Off,
    /// New checkpoints the placement policy finds cold are written to the PFS directly [Sung20, §5.2.2].
    Cold,
}

/// Whether the daemons trim their buffers' file systems after deletions (`surged --drain-trim`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Trim {
    /// Never.
    Off,
    /// FITRIM where the buffer's file system takes it (root, a device with discard) [Sung20, §5.2.4].
    Auto,
}

#[derive(Args, Clone, Default)]
pub struct DrainArgs {
    /// Drain the buffer to the PFS while jobs run, by this policy (docs/bbos.md); `off` (the
    /// default) leaves data in the buffer until it is staged out.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub drain: Option<DrainPolicyKind>,
    /// Length of the data manager's period in seconds (daemon default: 600).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub drain_period: Option<u64>,
    /// The rates the drain model uses, in MB/s: checkpoint writes alone and beside full-speed
    /// demotion, demotion alone and beside full-speed writes (default: measured when the
    /// daemons start).
    #[arg(long, value_name = "BWMAX,BWMIN,BRMAX,BRMIN", value_parser = parse_rates)]
    pub drain_rates: Option<String>,
    /// Keep the data manager's state in this Redis (redis://HOST:PORT or
    /// redis://:PASSWORD@HOST:PORT) instead of the embedded store of daemon 0. `surge run`
    /// also takes `redis`: a redis-server of the job's own, stopped after it.
    #[arg(long, value_name = "URL")]
    pub drain_state: Option<String>,
    /// The order in which demoted checkpoints are evicted when the buffer needs space: bbos (the
    /// default: outdated versions, then the coldest jobs, highest MTBF first), or the baselines lru
    /// (least recently opened) and fifo (oldest written).
    #[arg(long, value_enum, value_name = "ORDER")]
    pub drain_evict: Option<EvictOrder>,
    /// Where new checkpoints go: `cold` writes a new file the placement policy finds cold (past the
    /// buffer's capacity this period, of a job among the highest MTBFs) to the PFS directly, so it
    /// is never demoted; `off` (the default) writes every file into the buffer.
    #[arg(long, value_enum, value_name = "PLACEMENT")]
    pub drain_direct: Option<DirectPlacement>,
    /// Keep a second copy of every demoted file in this directory (absolute; another device or a
    /// mounted remote file system), under the file's path, verified by CRC-32C (docs/bbos.md,
    /// "Replicators"). Off by default.
    #[arg(long, value_name = "DIR", value_parser = parse_replica_dir)]
    pub drain_replica: Option<std::path::PathBuf>,
    /// Cap on the replicator's copies, bytes/s such as 100M (default: unlimited).
    #[arg(long, value_name = "RATE", value_parser = surge_cluster::parse_rate)]
    pub drain_replica_rate: Option<u64>,
    /// What holds demotion copies to the demotion rate: token (the default, each daemon's token
    /// bucket), blkio (the kernel's cgroup-v1 blkio throttling, with O_DIRECT copies; needs root,
    /// /sys/fs/cgroup/blkio and the buffer and PFS on block devices, else the token bucket with a
    /// warning) or auto (blkio where it can be had). `surge drain status` shows the one in force.
    #[arg(long, value_enum, value_name = "CONTROL")]
    pub drain_rate_control: Option<RateControl>,
    /// TRIM after deletions: auto (the default) has every daemon issue FITRIM on its buffer's file
    /// system, at most once per drain period, after deletions freed 1/16 of its buffer (at most 64
    /// MiB), so that the SSD's garbage collection does not slow later checkpoints; it needs root and
    /// a device with discard, else `surge drain status` shows it unsupported. off never trims.
    #[arg(long, value_enum, value_name = "MODE")]
    pub drain_trim: Option<Trim>,
    /// Cap on a TRIM pass, in MB/s of the file system's byte ranges the trimmer asks to trim (used or
    /// free), one 128 MiB range at a time, so that a pass does not slow the checkpoints written
    /// meanwhile; 0 is unlimited (daemon default: 1000, a pass over 600 GB within the default period).
    /// `surge drain status` shows the cap in force.
    #[arg(long, value_name = "MB/s", value_parser = parse_trim_rate, allow_negative_numbers = true)]
    pub drain_trim_rate: Option<String>,
}

impl DrainArgs {
    /// Refuses settings that make no sense together, before anything starts.
    pub fn check(&self, own_redis_allowed: bool) -> Result<(), String> {
        if let Some(state) = &self.drain_state {
            let own = state == "redis";
            if own && !own_redis_allowed {
                return Err("--drain-state redis (a Redis of the job's own) is for surge run; surge start takes \
                            the address of a running Redis: --drain-state redis://HOST:PORT"
                    .into());
            }
            if !own && !state.starts_with("redis://") {
                return Err(format!(
                    "--drain-state {state:?} is not a Redis address: give redis://HOST:PORT{}",
                    if own_redis_allowed { ", or redis for a Redis of the job's own" } else { "" }
                ));
            }
            if self.policy() == DrainPolicyKind::Off {
                return Err(format!(
                    "--drain-state needs a drain policy: add --drain {}",
                    DrainPolicyKind::suggestion()
                ));
            }
        }
        if self.policy() == DrainPolicyKind::Off
            && (self.drain_period.is_some()
                || self.drain_rates.is_some()
                || self.drain_evict.is_some()
                || self.drain_rate_control.is_some()
                || self.drain_trim.is_some()
                || self.drain_trim_rate.is_some())
        {
            return Err("--drain-period, --drain-rates, --drain-evict, --drain-rate-control, --drain-trim and \
                        --drain-trim-rate need a drain policy: add --drain bbos"
                .into());
        }
        if self.drain_trim == Some(Trim::Off) && self.drain_trim_rate.is_some() {
            return Err("--drain-trim-rate paces the trimmer, which --drain-trim off turns off: drop one".into());
        }
        if self.policy() == DrainPolicyKind::Off && self.drain_direct == Some(DirectPlacement::Cold) {
            return Err("--drain-direct cold needs a drain policy: add --drain bbos".into());
        }
        if self.policy() == DrainPolicyKind::Off && (self.drain_replica.is_some() || self.drain_replica_rate.is_some())
        {
            return Err("--drain-replica and --drain-replica-rate need a drain policy: add --drain bbos".into());
        }
        if self.drain_replica_rate.is_some() && self.drain_replica.is_none() {
            return Err("--drain-replica-rate caps the replicator: give its directory with --drain-replica DIR".into());
        }
        Ok(())
    }

    pub fn policy(&self) -> DrainPolicyKind {
        self.drain.unwrap_or(DrainPolicyKind::Off)
    }

    /// Whether `surge run` is to start a Redis of the job's own.
    pub fn wants_own_redis(&self) -> bool {
        self.drain_state.as_deref() == Some("redis")
    }

    /// The settings with the Redis address `url` in place of `redis`.
    pub fn with_state(&self, url: String) -> DrainArgs {
        DrainArgs { drain_state: Some(url), ..self.clone() }
    }

    /// Passes the settings to a `surged` command.
    pub fn apply(&self, surged: &mut Command) {
        let Some(policy) = self.drain else { return };
        surged.arg("--drain").arg(policy.name());
        if let Some(secs) = self.drain_period {
            surged.arg("--drain-period").arg(secs.to_string());
        }
        if let Some(rates) = &self.drain_rates {
            surged.arg("--drain-rates").arg(rates);
        }
        if let Some(order) = self.drain_evict {
            let name = order.to_possible_value().expect("every order has a name");
            surged.arg("--drain-evict").arg(name.get_name());
        }
        if let Some(direct) = self.drain_direct {
            let name = direct.to_possible_value().expect("every placement has a name");
            surged.arg("--drain-direct").arg(name.get_name());
        }
        if let Some(dir) = &self.drain_replica {
            surged.arg("--drain-replica").arg(dir);
        }
        if let Some(rate) = self.drain_replica_rate {
            surged.arg("--drain-replica-rate").arg(rate.to_string());
        }
        if let Some(control) = self.drain_rate_control {
            let name = control.to_possible_value().expect("every control has a name");
            surged.arg("--drain-rate-control").arg(name.get_name());
        }
        if let Some(trim) = self.drain_trim {
            let name = trim.to_possible_value().expect("every trim mode has a name");
            surged.arg("--drain-trim").arg(name.get_name());
        }
        if let Some(rate) = &self.drain_trim_rate {
            surged.arg("--drain-trim-rate").arg(rate);
        }
        if let Some(url) = &self.drain_state {
            surged.env(STATE_ENV, url);
        }
    }
}

/// Starts a Redis for a job's drain state in `dir`, listening on `listen`.
pub fn start_own_redis(dir: &Path, listen: &str) -> Result<RedisServer, String> {
    let ip = listen.parse().map_err(|_| format!("--drain-state redis: {listen:?} is not an IP to run Redis on"))?;
    let server = RedisServer::start(dir, ip).map_err(|e| format!("--drain-state redis: {e}"))?;
    note!("surge: the drain state is in a redis-server of the job's own on {} (pid {})", server.addr(), server.pid());
    Ok(server)
}

/// The replica directory, made absolute (the daemons do not run where `surge` does).
fn parse_replica_dir(text: &str) -> Result<std::path::PathBuf, String> {
    std::path::absolute(text).map_err(|e| format!("--drain-replica {text:?}: {e}"))
}

/// A TRIM rate in MB/s, checked as the daemons will
/// (`surge_cluster::parse_mbps_limit`) and passed on as given.
fn parse_trim_rate(text: &str) -> Result<String, String> {
    surge_cluster::parse_mbps_limit(text).map(|_| text.trim().to_string())
}

/// `BWMAX,BWMIN,BRMAX,BRMIN` in MB/s, checked as the daemons will
/// (`Bandwidths::parse_mbps`) and passed on as given.
fn parse_rates(text: &str) -> Result<String, String> {
    Bandwidths::parse_mbps(text).map(|_| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arguments `args` give surged.
    fn surged_line(args: DrainArgs) -> Vec<String> {
        let mut surged = Command::new("surged");
        args.apply(&mut surged);
        surged.get_args().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn a_state_or_rates_without_a_policy_and_a_job_redis_on_start_are_refused() {
        let args = |policy, state: &str| DrainArgs {
            drain: policy,
            drain_state: Some(state.to_string()),
            ..DrainArgs::default()
        };
        assert!(args(Some(DrainPolicyKind::Bbos), "redis").check(true).is_ok());
        assert!(args(Some(DrainPolicyKind::Bbos), "redis").check(false).unwrap_err().contains("for surge run"));
        assert!(args(Some(DrainPolicyKind::Bbos), "127.0.0.1:6379").check(false).unwrap_err().contains("redis://"));
        assert!(args(None, "redis://127.0.0.1:6379").check(false).unwrap_err().contains("--drain bbos"));
        let rates = DrainArgs { drain_rates: Some("4,3,2,1".into()), ..DrainArgs::default() };
        assert!(rates.check(true).unwrap_err().contains("need a drain policy"));
        let direct = DrainArgs { drain_direct: Some(DirectPlacement::Cold), ..DrainArgs::default() };
        assert!(direct.check(true).unwrap_err().contains("--drain-direct cold needs a drain policy"));
        let args = surged_line(DrainArgs { drain: Some(DrainPolicyKind::Bbos), ..direct });
        assert_eq!(args, ["--drain", "bbos", "--drain-direct", "cold"]);
        let evict = DrainArgs { drain_evict: Some(EvictOrder::Lru), ..DrainArgs::default() };
        assert!(evict.check(true).unwrap_err().contains("--drain-rate-control, --drain-trim and"));
    }

    #[test]
    fn a_rate_control_needs_a_policy_and_reaches_the_daemons_command_line() {
        let alone = DrainArgs { drain_rate_control: Some(RateControl::Blkio), ..DrainArgs::default() };
        assert!(alone.check(true).unwrap_err().contains("--drain-rate-control, --drain-trim and"));
        let args = DrainArgs { drain: Some(DrainPolicyKind::Bbos), ..alone };
        let line = surged_line(args);
        assert_eq!(line, ["--drain", "bbos", "--drain-rate-control", "blkio"]);
    }

    #[test]
    fn a_trim_mode_needs_a_policy_and_reaches_the_daemons_command_line() {
        let alone = DrainArgs { drain_trim: Some(Trim::Off), ..DrainArgs::default() };
        assert!(alone.check(true).unwrap_err().contains("--drain-trim-rate need a drain policy"));
        let args = DrainArgs { drain: Some(DrainPolicyKind::Bbos), ..alone };
        let line = surged_line(args);
        assert_eq!(line, ["--drain", "bbos", "--drain-trim", "off"]);
    }

    #[test]
    fn a_trim_rate_is_mb_s_zero_or_more_needs_a_policy_and_the_trimmer_and_reaches_the_daemons() {
        assert_eq!(parse_trim_rate(" 0.5 ").unwrap(), "0.5");
        assert!(parse_trim_rate("-1").unwrap_err().contains("not 0 or more"));
        assert!(parse_trim_rate("fast").unwrap_err().contains("not a number"));
        let alone = DrainArgs { drain_trim_rate: Some("200".into()), ..DrainArgs::default() };
        assert!(alone.check(true).unwrap_err().contains("--drain-trim-rate need a drain policy"));
        let off = DrainArgs { drain: Some(DrainPolicyKind::Bbos), drain_trim: Some(Trim::Off), ..alone.clone() };
        assert!(off.check(true).unwrap_err().contains("--drain-trim off"));
        let args = DrainArgs { drain: Some(DrainPolicyKind::Bbos), ..alone };
        assert!(args.check(true).is_ok());
        assert_eq!(surged_line(args), ["--drain", "bbos", "--drain-trim-rate", "200"]);
    }

    #[test]
    fn a_replica_directory_reaches_the_daemons_absolute_and_needs_a_policy() {
        let replica = DrainArgs { drain_replica: Some(parse_replica_dir("rep").unwrap()), ..DrainArgs::default() };
        assert!(replica.check(true).unwrap_err().contains("--drain-replica and --drain-replica-rate need"));
        let rate_alone =
            DrainArgs { drain: Some(DrainPolicyKind::Bbos), drain_replica_rate: Some(5), ..DrainArgs::default() };
        assert!(rate_alone.check(true).unwrap_err().contains("--drain-replica DIR"));
        let args = DrainArgs { drain: Some(DrainPolicyKind::Bbos), drain_replica_rate: Some(1_000_000), ..replica };
        assert!(args.check(true).is_ok());
        let line = surged_line(args);
        let dir = std::env::current_dir().unwrap().join("rep").display().to_string();
        assert_eq!(line, ["--drain", "bbos", "--drain-replica", &dir, "--drain-replica-rate", "1000000"]);
    }

    #[test]
    fn an_eviction_order_reaches_the_daemons_command_line() {
        let args = DrainArgs {
            drain: Some(DrainPolicyKind::Bbos),
            drain_evict: Some(EvictOrder::Fifo),
            ..DrainArgs::default()
        };
        let line = surged_line(args);
        assert_eq!(line, ["--drain", "bbos", "--drain-evict", "fifo"]);
    }
}
