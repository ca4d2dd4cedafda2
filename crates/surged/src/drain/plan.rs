//! What the throttler decided last (`Plan`): the rates and the wait it
//! sent the daemons, their space, the period and its thresholds. The
//! report shows it; the demoters and the evicter follow it.

use std::collections::BTreeSet;
use std::time::Instant;
use surge_bbos::placement::ColdCut;
use surge_bbos::thresholds::{Bandwidths, SolveError, Thresholds};
use surge_proto::drain::DrainTrim;

/// A daemon this full (used / capacity) has its demoted files evicted...
pub const HIGH_WATERMARK: f64 = 0.90;
/// ...until it is this full.
pub const LOW_WATERMARK: f64 = 0.80;

/// Where the rates came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateSource {
    Given,
    Stored,
    Measured,
    /// Measured on a machine too noisy for consistent figures, repaired
    /// (`calibrate::repaired`) after several tries.
    Noisy,
}

impl RateSource {
    pub fn name(self) -> &'static str {
        match self {
            RateSource::Given => "given",
            RateSource::Stored => "stored",
            RateSource::Measured => "measured",
            RateSource::Noisy => "measured on a noisy machine, repaired",
        }
    }
}

/// One daemon's space, from its last tick reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub used: u64,
    pub capacity: u64,
}

impl Usage {
    pub fn above(&self, share: f64) -> bool {
        self.used as f64 > share * self.capacity as f64
    }
}

/// The rates and the wait sent in a tick (bytes/s per daemon; 0: unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickOrder {
    pub checkpoint_bps: u64,
    pub demote_bps: u64,
    /// Writes to files placed on the PFS directly (daemon 0's `PfsWrite`s).
    pub direct_bps: u64,
    pub wait_for_space_ms: u32,
}

/// What the throttler decided last: the report shows it, the demoters and
/// the evicter follow it.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub period_index: u64,
    pub period_started: Option<Instant>,
    /// Per daemon, from the last tick each answered.
    pub usage: Vec<Usage>,
    pub dwsf: u64,
    pub dwpp_last: u64,
    pub dwpp_predicted: u64,
    /// With direct placement on: which jobs' new checkpoints are cold this period.
    pub cold: Option<ColdCut>,
    /// BBOS only: this period's thresholds, or why there are none.
    pub schedule: Option<Result<Thresholds, SolveError>>,
    pub order: TickOrder,
    /// The policy's demotion rate for the whole buffer, bytes/s (0: none now).
    pub demotion_rate: f64,
    /// Jobs that wrote since the previous tick.
    pub writing: BTreeSet<u64>,
    /// The rates planned with (per daemon) and where they came from.
    pub rates: Option<(Bandwidths, RateSource)>,
    /// What holds demotion to its rate in each daemon (`demotion_control`), from its last tick.
    pub rate_controls: Vec<String>,
    /// Each daemon's trimmer (`trimmer`), from its last tick.
    pub trims: Vec<DrainTrim>,
}

impl Plan {
    pub fn capacity(&self) -> u64 {
        self.usage.iter().map(|u| u.capacity).sum()
    }

    pub fn used(&self) -> u64 {
        self.usage.iter().map(|u| u.used).sum()
    }

    /// The demotion rate controls in force: one name when every daemon that
    /// answered uses it, else each with its daemons.
    pub fn rate_control(&self) -> String {
        per_daemon(self.rate_controls.iter().map(String::as_str))
    }

    /// The trimmers summed over the daemons, their states as `rate_control` lists them.
    pub fn trim(&self) -> DrainTrim {
        DrainTrim {
            state: per_daemon(self.trims.iter().map(|t| t.state.as_str())),
            trims: self.trims.iter().map(|t| t.trims).sum(),
            bytes: self.trims.iter().map(|t| t.bytes).sum(),
            last_unix_s: self.trims.iter().map(|t| t.last_unix_s).max().unwrap_or(0),
        }
    }
}

/// Daemons' answers (by index; empty: none yet): the one answer when they
/// all agree, else each with its daemons.
fn per_daemon<'a>(answers: impl Iterator<Item = &'a str>) -> String {
    let mut daemons: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (index, answer) in answers.enumerate().filter(|(_, a)| !a.is_empty()) {
        daemons.entry(answer).or_default().push(index.to_string());
    }
    match daemons.len() {
        0 => "not known yet".into(),
        1 => daemons.into_keys().collect(),
        _ => daemons
            .iter()
            .map(|(answer, on)| format!("{answer} on daemons {}", on.join(", ")))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_control_is_one_name_when_all_daemons_agree_else_listed_per_daemon() {
        let plan = |controls: &[&str]| Plan {
            rate_controls: controls.iter().map(|c| c.to_string()).collect(),
            ..Plan::default()
        };
        assert_eq!(plan(&[]).rate_control(), "not known yet");
        assert_eq!(plan(&["blkio", "", "blkio"]).rate_control(), "blkio");
        assert_eq!(plan(&["blkio", "token", "blkio"]).rate_control(), "blkio on daemons 0, 2; token on daemons 1");
    }

    #[test]
    fn the_trimmers_are_summed_and_their_states_listed_per_daemon_when_they_differ() {
        let trim =
            |state: &str, trims, last_unix_s| DrainTrim { state: state.into(), trims, bytes: trims * 10, last_unix_s };
        let plan = Plan {
            trims: vec![trim("on", 2, 50), trim("unsupported (ENOTTY)", 0, 0), trim("on", 1, 70)],
            ..Plan::default()
        };
        let sum = plan.trim();
        assert_eq!(sum.state, "on on daemons 0, 2; unsupported (ENOTTY) on daemons 1");
        assert_eq!((sum.trims, sum.bytes, sum.last_unix_s), (3, 30, 70));
        assert_eq!(Plan::default().trim().state, "not known yet");
    }

    #[test]
    fn a_daemon_is_above_a_watermark_only_past_its_share() {
        let usage = Usage { used: 91, capacity: 100 };
        assert!(usage.above(HIGH_WATERMARK) && !Usage { used: 90, ..usage }.above(HIGH_WATERMARK));
    }
}
