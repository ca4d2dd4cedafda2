//! Drain policies: when the buffer demotes to the PFS, at which rate, and
//! at which rate checkpoints may write meanwhile. Four side by side:
//! - [`Dedicated`]: DataWarp-style allocation, capacity reserved per job,
//!   no I/O scheduling, stage-out only while no checkpoint writes;
//! - [`MaxEff`]: Harmonia's buffer-efficiency policy, demotion always at
//!   Brmax (threshold 0), checkpoints throttled to Bwmin meanwhile;
//! - [`MaxBw`]: Harmonia's bandwidth policy, demotion never alongside a
//!   checkpoint, checkpoints at Bwmax and stopped when the buffer is full;
//! - [`Bbos`]: the thresholds of [`crate::thresholds`] solved each period
//!   for the predicted DWPP [Sung20, §5.2.3].
//!
//! [`DrainPolicyKind`] is the registry of them by name: the one list that
//! `surged --drain`, `surge start --drain` and `surge run --drain` take, that
//! their `--help` describes and that `surge drain status` reports.
//!
//! To add a policy:
//! 1. implement [`DrainPolicy`] for it here (the defaults are the
//!    scheduled, unreserved, buffer-only case that most policies share;
//!    keep the shared device description in a [`Drive`]);
//! 2. add a variant to [`DrainPolicyKind`]: its doc comment is its `--help`
//!    line, `#[value(name = "...")]` its name when the variant's kebab-case
//!    is not the one wanted, and its arm in [`DrainPolicyKind::build`] its
//!    constructor (the compiler points there).
//!
//! That is all the daemons and the command line need: both take the name
//! from this enum, and the data manager runs whatever `build` returns. To
//! have `surge bench bbos` compare it too, add it to
//! [`crate::sim::PolicyKind`] (the simulator's runs, which include
//! BBOS with direct placement).

use crate::model::PeriodModel;
use crate::placement::ColdCut;
use crate::thresholds::{self, Bandwidths, Interference, SolveError, Thresholds};
use clap::ValueEnum;
use std::fmt;

/// The drain policies by name (the registry; see the module doc to add one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum DrainPolicyKind {
    /// Nothing is demoted on its own (stage-out stays a command: `surge stage-out`, the end of `surge run`)
    #[default]
    Off,
    /// BBOS: demotion rates solved each period for the predicted data written, so that checkpoints do not stall
    Bbos,
    /// Harmonia's MaxEff: demote always at full speed, checkpoints throttled meanwhile
    #[value(name = "maxeff")]
    MaxEff,
    /// Harmonia's MaxBW: demote only while no checkpoint writes
    #[value(name = "maxbw")]
    MaxBw,
    /// DataWarp-style dedicated allocation: demote while no checkpoint writes, checkpoints unscheduled
    Dedicated,
}

impl DrainPolicyKind {
    /// The policy over `drive`; `None` for `off`, which runs none.
    pub fn build(self, drive: Drive) -> Option<Box<dyn DrainPolicy + Send>> {
        match self {
            DrainPolicyKind::Off => None,
            DrainPolicyKind::Bbos => Some(Box::new(Bbos::new(drive, false))),
            DrainPolicyKind::MaxEff => Some(Box::new(MaxEff(drive))),
            DrainPolicyKind::MaxBw => Some(Box::new(MaxBw(drive))),
            DrainPolicyKind::Dedicated => Some(Box::new(Dedicated(drive))),
        }
    }

    /// The name `--drain` takes and `surge drain status` shows.
    pub fn name(self) -> String {
        self.to_possible_value().expect("every policy has a name").get_name().to_string()
    }

    /// The policies an error suggests when a setting needs one on:
    /// "bbos (or maxeff, maxbw, dedicated)".
    pub fn suggestion() -> String {
        let on: Vec<String> =
            Self::value_variants().iter().filter(|p| **p != DrainPolicyKind::Off).map(|p| p.name()).collect();
        match on.split_first() {
            Some((first, [])) => first.clone(),
            Some((first, rest)) => format!("{first} (or {})", rest.join(", ")),
            None => String::new(),
        }
    }
}

impl fmt::Display for DrainPolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The devices every policy drives: buffer rates, their interference line,
/// the PFS's demotion rate when the buffer is otherwise idle (Bdmax), and the capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drive {
    pub bandwidths: Bandwidths,
    pub line: Interference,
    pub drain_rate: f64,
    pub capacity: u64,
    /// The largest file a demoter copies: it keeps its whole size in the
    /// buffer until its PFS copy is complete, so schedules leave that much aside.
    pub largest_file: u64,
    /// Seconds from checkpoint bytes written to the rates that answer them
    /// taking effect (the controller's lag): schedules leave aside what
    /// checkpoints write at Bwmax meanwhile.
    pub reaction: f64,
}

impl Drive {
    /// The write rate one checkpoint gets while demotion reads at `demotion_rate` (Eq. 5.1).
    pub fn write_rate_beside(&self, demotion_rate: f64) -> f64 {
        if demotion_rate > 0.0 {
            self.line.write_rate(demotion_rate).min(self.bandwidths.write_max)
        } else {
            self.bandwidths.write_max
        }
    }
}

/// What a policy sees each time it decides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct View {
    /// Checkpoint bytes the buffer took this period.
    pub dwsf: u64,
    /// Whether a checkpoint is writing into the buffer right now.
    pub writing: bool,
    /// Bytes demoted this period (whole verified copies).
    pub demoted: u64,
}

/// What a policy learns when a period begins.
#[derive(Clone, Copy, Debug)]
pub struct PeriodStart<'a> {
    /// The DWPP of the previous periods.
    pub model: &'a PeriodModel,
    /// The MTBF of each application that will checkpoint.
    pub mtbfs: &'a [f64],
    /// Bytes in the buffer not yet demoted (the previous period's drain fell short by this much).
    pub backlog: u64,
}

pub trait DrainPolicy {
    fn name(&self) -> &'static str;
    fn begin_period(&mut self, _start: &PeriodStart) {}
    /// The demotion rate now (bytes/s; 0: none), given there is data to demote.
    fn demotion_rate(&self, view: &View) -> f64;
    /// The aggregate rate of `writers` concurrent checkpoints beside a demotion at `demotion_rate`.
    fn write_rate(&self, demotion_rate: f64, _writers: usize) -> f64 {
        self.drive().write_rate_beside(demotion_rate)
    }
    /// Whether the I/O scheduler runs one checkpoint at a time (true) or all at once.
    fn schedules_checkpoints(&self) -> bool {
        true
    }
    /// Whether each application owns a reservation of one checkpoint's size
    /// that its next checkpoint may use only once the previous one is staged out.
    fn reserves_capacity(&self) -> bool {
        false
    }
    /// Whether a checkpoint of an application with this MTBF goes straight to the PFS.
    fn writes_direct(&self, _mtbf: f64, _dwsf: u64) -> bool {
        false
    }
    /// Whether this period's schedule promises checkpoints never wait for space.
    fn promises_space(&self) -> bool {
        false
    }
    /// The thresholds this period's schedule solved, for the report; `None`
    /// for a policy that solves none.
    fn thresholds(&self) -> Option<&Result<Thresholds, SolveError>> {
        None
    }
    fn drive(&self) -> &Drive;
}

pub struct Dedicated(pub Drive);

impl DrainPolicy for Dedicated {
    fn name(&self) -> &'static str {
        "Dedicated"
    }
    fn demotion_rate(&self, view: &View) -> f64 {
        if view.writing {
            0.0
        } else {
            self.0.drain_rate
        }
    }
    /// Without I/O scheduling, concurrent checkpoints interleave on the
    /// devices; the model charges them as much as a concurrent demotion
    /// at full speed costs (Bwmin in aggregate).
    fn write_rate(&self, demotion_rate: f64, writers: usize) -> f64 {
        let alone = self.0.write_rate_beside(demotion_rate);
        if writers > 1 {
            alone.min(self.0.bandwidths.write_min)
        } else {
            alone
        }
    }
    fn schedules_checkpoints(&self) -> bool {
        false
    }
    fn reserves_capacity(&self) -> bool {
        true
    }
    fn drive(&self) -> &Drive {
        &self.0
    }
}

pub struct MaxEff(pub Drive);

impl DrainPolicy for MaxEff {
    fn name(&self) -> &'static str {
        "MaxEff"
    }
    fn demotion_rate(&self, view: &View) -> f64 {
        if view.writing {
            self.0.bandwidths.read_max
        } else {
            self.0.drain_rate
        }
    }
    fn drive(&self) -> &Drive {
        &self.0
    }
}

pub struct MaxBw(pub Drive);

impl DrainPolicy for MaxBw {
    fn name(&self) -> &'static str {
        "MaxBW"
    }
    fn demotion_rate(&self, view: &View) -> f64 {
        if view.writing {
            0.0
        } else {
            self.0.drain_rate
        }
    }
    fn drive(&self) -> &Drive {
        &self.0
    }
}

/// BBOS: per period, the thresholds for the predicted DWPP; with
/// `direct_to_pfs`, cold checkpoints skip the buffer once DWSF passes S.
pub struct Bbos {
    drive: Drive,
    direct_to_pfs: bool,
    schedule: Result<Thresholds, SolveError>,
    cold: Option<ColdCut>,
}

impl Bbos {
    pub fn new(drive: Drive, direct_to_pfs: bool) -> Bbos {
        let schedule = Err(SolveError::InvalidInput("no period has begun".into()));
        Bbos { drive, direct_to_pfs, schedule, cold: None }
    }
}

impl DrainPolicy for Bbos {
    fn name(&self) -> &'static str {
        if self.direct_to_pfs {
            "BBOS+direct"
        } else {
            "BBOS"
        }
    }
    /// Solves the period for the room really free: the capacity less the
    /// file a demoter holds, less what the last period left undemoted and
    /// less what checkpoints write before the controller reacts.
    fn begin_period(&mut self, start: &PeriodStart) {
        let lag = (self.drive.bandwidths.write_max * self.drive.reaction) as u64;
        let room = self
            .drive
            .capacity
            .saturating_sub(self.drive.largest_file)
            .saturating_sub(start.backlog)
            .saturating_sub(lag) as f64;
        let cautious = thresholds::max_dwpp(&self.drive.bandwidths, room).min(4.0 * self.drive.capacity as f64);
        let predicted = start.model.predicted_dwpp(cautious);
        self.schedule = thresholds::solve(predicted, room, &self.drive.bandwidths);
        self.cold = self.direct_to_pfs.then(|| ColdCut::new(start.mtbfs, self.drive.capacity as f64, predicted));
    }
    /// Without a feasible schedule it demotes at Brmax throughout, as MaxEff does.
    /// Behind its schedule (less demoted than the schedule had by this DWSF,
    /// beyond the file a demoter holds) it catches up at Brmax: the schedule
    /// leaves no slack, and rates applied a tick late or files verified whole
    /// would otherwise make the period's last checkpoints wait for space.
    fn demotion_rate(&self, view: &View) -> f64 {
        match (&self.schedule, view.writing) {
            (_, false) => self.drive.drain_rate,
            (Ok(t), true) => {
                let dwsf = view.dwsf as f64;
                let planned = t.demoted_by(dwsf, &self.drive.line, self.drive.bandwidths.write_max);
                if ((view.demoted + self.drive.largest_file) as f64) < planned {
                    self.drive.bandwidths.read_max
                } else {
                    t.demotion_rate(dwsf)
                }
            }
            (Err(_), true) => self.drive.bandwidths.read_max,
        }
    }
    fn writes_direct(&self, mtbf: f64, dwsf: u64) -> bool {
        self.cold.is_some_and(|c| c.goes_direct(mtbf, dwsf, self.drive.capacity))
    }
    fn promises_space(&self) -> bool {
        self.schedule.is_ok()
    }
    fn thresholds(&self) -> Option<&Result<Thresholds, SolveError>> {
        Some(&self.schedule)
    }
    fn drive(&self) -> &Drive {
        &self.drive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    fn drive() -> Drive {
        let bandwidths =
            Bandwidths { write_max: 35.6 * MB, write_min: 30.0 * MB, read_max: 16.0 * MB, read_min: 0.8 * MB };
        Drive {
            bandwidths,
            line: Interference::through(&bandwidths),
            drain_rate: 16.0 * MB,
            capacity: 3_200_000_000,
            largest_file: 80_000_000,
            reaction: 0.0,
        }
    }

    #[test]
    fn every_registered_policy_but_off_builds_and_an_error_suggests_each_by_name() {
        for kind in DrainPolicyKind::value_variants() {
            assert_eq!(kind.build(drive()).is_none(), *kind == DrainPolicyKind::Off, "{kind}");
            assert_eq!(DrainPolicyKind::from_str(&kind.name(), false), Ok(*kind), "the name parses back");
        }
        assert_eq!(DrainPolicyKind::suggestion(), "bbos (or maxeff, maxbw, dedicated)");
    }

    const WRITING: View = View { dwsf: 0, writing: true, demoted: 0 };
    const IDLE: View = View { dwsf: 0, writing: false, demoted: 0 };

    #[test]
    fn harmonia_maxbw_never_demotes_beside_a_checkpoint_and_maxeff_always_does() {
        assert_eq!(MaxBw(drive()).demotion_rate(&WRITING), 0.0);
        assert_eq!(MaxBw(drive()).demotion_rate(&IDLE), 16.0 * MB);
        let eff = MaxEff(drive());
        assert_eq!(eff.demotion_rate(&WRITING), 16.0 * MB);
        assert!((eff.write_rate(16.0 * MB, 1) - 30.0 * MB).abs() < 1.0);
    }

    #[test]
    fn dedicated_allocation_reserves_runs_unscheduled_and_pays_for_concurrency() {
        let d = Dedicated(drive());
        assert!(d.reserves_capacity() && !d.schedules_checkpoints());
        assert_eq!(d.write_rate(0.0, 1), 35.6 * MB);
        assert_eq!(d.write_rate(0.0, 3), 30.0 * MB);
    }

    #[test]
    fn bbos_follows_the_solved_ramp_and_falls_back_to_full_speed_when_infeasible() {
        let mut b = Bbos::new(drive(), false);
        let mut model = PeriodModel::default();
        model.wrote(5_120_000_000); // 1.6 S: pattern 3, ramp from the first byte.
        model.end_period();
        b.begin_period(&PeriodStart { model: &model, mtbfs: &[], backlog: 0 });
        assert!(b.promises_space());
        assert!((b.demotion_rate(&WRITING) - 0.8 * MB).abs() < 1.0);
        let mut crowded = PeriodModel::default();
        crowded.wrote(8_000_000_000); // 2.5 S: more than any schedule absorbs.
        crowded.end_period();
        b.begin_period(&PeriodStart { model: &crowded, mtbfs: &[], backlog: 0 });
        assert!(!b.promises_space());
        assert_eq!(b.demotion_rate(&WRITING), 16.0 * MB);
        // 1.6 S fits an empty buffer but not one still holding 0.5 S from the last period.
        b.begin_period(&PeriodStart { model: &model, mtbfs: &[], backlog: 1_600_000_000 });
        assert!(!b.promises_space());
    }

    #[test]
    fn bbos_behind_its_schedule_catches_up_at_full_speed_and_goes_back_to_the_ramp_once_level() {
        let mut b = Bbos::new(drive(), false);
        let mut model = PeriodModel::default();
        model.wrote(4_160_000_000); // 1.3 S: pattern 2, Bwmax first, then a ramp.
        model.end_period();
        b.begin_period(&PeriodStart { model: &model, mtbfs: &[], backlog: 0 });
        let Some(Ok(t)) = b.thresholds().cloned() else { panic!("1.3 S is feasible") };
        let d = drive();
        let dwsf = 3_000_000_000;
        let planned = t.demoted_by(dwsf as f64, &d.line, d.bandwidths.write_max) as u64;
        let on_plan = t.demotion_rate(dwsf as f64);
        assert!(on_plan < 16.0 * MB && planned > d.largest_file, "mid-ramp: {on_plan}, {planned}");
        let at = |demoted: u64| b.demotion_rate(&View { dwsf, writing: true, demoted });
        assert_eq!(at(0), 16.0 * MB, "nothing demoted yet: behind");
        assert_eq!(at(planned - d.largest_file / 2), on_plan, "within the file a demoter holds: on plan");
        assert_eq!(at(planned), on_plan);
    }

    #[test]
    fn only_bbos_with_direct_placement_sends_cold_checkpoints_to_the_pfs() {
        let mut model = PeriodModel::default();
        model.wrote(6_400_000_000);
        model.end_period();
        let mtbfs = [10.0, 20.0, 30.0, 40.0];
        let mut with = Bbos::new(drive(), true);
        let mut without = Bbos::new(drive(), false);
        let start = PeriodStart { model: &model, mtbfs: &mtbfs, backlog: 0 };
        with.begin_period(&start);
        without.begin_period(&start);
        assert!(with.writes_direct(40.0, 3_300_000_000));
        assert!(!without.writes_direct(40.0, 3_300_000_000));
        assert!(!MaxEff(drive()).writes_direct(40.0, 3_300_000_000));
    }
}
