//! The throttler [Sung20, §5.2.3]: every `TICK` it sends each daemon the
//! checkpoint and demotion rates in force (`DrainTick`, enforced there by
//! token buckets) and learns from the replies what every job wrote, how
//! full each daemon is and its capacity. It adds the bytes written to DWSF,
//! closes the periods (DWSF becomes DWPP, the predictor's history), and asks
//! the policy (`surge_bbos::policy`, the objects the simulator drives) for
//! the next rates. It wakes the demoters while the policy demotes, and the
//! evicter. While checkpoints placed on the PFS directly are written,
//! demotion waits and they have the PFS's rate (Bdmax) to themselves, as
//! in the simulator. With direct placement on, each tick also sets the cold cut
//! (`surge_bbos::placement::ColdCut`) for the predicted DWPP and the MTBFs
//! of the jobs seen: which jobs' new checkpoints go to the PFS directly
//! once DWSF passes S.
//!
//! Rates: the policy plans the whole buffer, the sum of the daemons, with
//! each daemon's rates (calibrated or `--drain-rates`) times the number of
//! daemons and S the summed capacities; each daemon gets an even share.
//! The wire's 0 means unlimited, so a rate of none is never sent as 0:
//! while the policy demotes nothing, a copy already under way finishes at
//! Brmin and no new one starts.

use super::books::FileStatus;
use super::config::Placement;
use super::manager::DrainManager;
use super::plan::{Plan, TickOrder, Usage};
use crate::background::{Backoff, Context, Task, Wake};
use crate::failure::Failure;
use crate::locking::lock;
use crate::logging::log;
use crate::rates::WAIT_FOR_SPACE;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_bbos::model::PeriodModel;
use surge_bbos::placement::ColdCut;
use surge_bbos::policy::{DrainPolicy, Drive, PeriodStart, View};
use surge_bbos::thresholds::{self, Bandwidths, Interference};
use surge_bbos_state::Bytes;
use surge_proto::drain::DrainTrim;
use surge_proto::msg::DrainTickReply;
use surge_proto::Request;

/// Time between ticks. The rates answer the bytes written two ticks late
/// (`Drive::reaction`), and a burst of checkpoints can fill a small buffer
/// within a few seconds: 250 ms let BBOS fall behind its schedule at high
/// congestion (`surge bench bbos --part measured --dwpp 1.3`, docs/bbos.md).
pub const TICK: Duration = Duration::from_millis(100);
/// Least time between two log lines about daemons that do not answer a tick.
const QUIET_LOG: Duration = Duration::from_secs(60);
/// Longest time between two ticks sent to a daemon that does not answer
/// them: one back gets its rates within this, and one stopped (whose every
/// call waits for the peer timeout) does not hold up the others' ticks.
const SILENT_RETRY_CAP: Duration = Duration::from_secs(5);
/// Time between two tries to measure the rates (a noisy machine can give
/// figures the model cannot use).
const RATES_RETRY: Duration = Duration::from_secs(10);
/// Tries that may fail so before the figures are repaired and used.
const RATES_TRIES: u32 = 3;

/// The whole buffer as the policy plans it: `daemons` devices of `rates`
/// each, holding `capacity` bytes in all.
pub fn drive_of(rates: &Bandwidths, daemons: u32, capacity: u64, largest_file: u64) -> Drive {
    let n = daemons as f64;
    let bandwidths = Bandwidths {
        write_max: rates.write_max * n,
        write_min: rates.write_min * n,
        read_max: rates.read_max * n,
        read_min: rates.read_min * n,
    };
    // Bdmax of Eq. 5.3 is Brmax (docs/bbos.md, errata).
    Drive {
        bandwidths,
        line: Interference::through(&bandwidths),
        drain_rate: bandwidths.read_max,
        capacity,
        largest_file,
        // A tick's replies carry the bytes written; the rates they call for go out with the next.
        reaction: 2.0 * TICK.as_secs_f64(),
    }
}

pub struct Throttler {
    manager: Arc<DrainManager>,
    demoters: Vec<Wake>,
    evicter: Wake,
    rates: Option<Bandwidths>,
    policy: Option<Box<dyn DrainPolicy + Send>>,
    model: PeriodModel,
    /// The capacity the policy was built for (it is built again when it changes).
    planned_capacity: u64,
    /// Bytes written per (daemon, job) as of the last reply: replies carry totals.
    seen: HashMap<(u32, u64), u64>,
    /// Daemons whose counts `seen` holds.
    baselined: BTreeSet<u32>,
    usage: Vec<Usage>,
    /// Each daemon's demotion rate control, from its last reply.
    rate_controls: Vec<String>,
    /// Each daemon's trimmer, from its last reply.
    trims: Vec<DrainTrim>,
    order: TickOrder,
    last_quiet_log: Option<Instant>,
    /// Each daemon's back-off while it does not answer ticks, and when it is tried next.
    silent: Vec<(Backoff, Option<Instant>)>,
    /// When measuring the rates last failed (nothing moves until they are known), and how often.
    rates_failed: Option<Instant>,
    rates_tries: u32,
    /// Bytes written to files placed on the PFS directly, as of the last tick.
    direct_seen: u64,
    /// Bytes demoted before the current period began, as DWSF counts from
    /// then (BBOS compares this period's with its schedule). Daemon 0
    /// restarted within a period counts from 0, so BBOS then errs towards
    /// demoting sooner.
    demoted_before_period: u64,
}

impl Throttler {
    pub fn new(manager: Arc<DrainManager>, demoters: Vec<Wake>, evicter: Wake) -> Throttler {
        let daemons = manager.setting.daemons as usize;
        let model = manager.period_model();
        Throttler {
            manager,
            demoters,
            evicter,
            rates: None,
            policy: None,
            model,
            planned_capacity: 0,
            seen: HashMap::new(),
            baselined: BTreeSet::new(),
            usage: vec![Usage::default(); daemons],
            rate_controls: vec![String::new(); daemons],
            trims: vec![DrainTrim::default(); daemons],
            order: TickOrder::default(),
            last_quiet_log: None,
            silent: (0..daemons).map(|_| (Backoff::new(TICK, SILENT_RETRY_CAP), None)).collect(),
            rates_failed: None,
            rates_tries: 0,
            direct_seen: 0,
            demoted_before_period: 0,
        }
    }

    /// Sends the current order to every daemon; the replies of those that answered.
    fn tick(&mut self) -> Vec<(u32, DrainTickReply)> {
        let order = self.order;
        let request = Request::DrainTick {
            checkpoint_bps: order.checkpoint_bps,
            demote_bps: order.demote_bps,
            direct_bps: order.direct_bps,
            wait_for_space_ms: order.wait_for_space_ms,
        };
        let mut replies = Vec::new();
        let mut silent = Vec::new();
        for daemon in 0..self.manager.setting.daemons {
            let (backoff, next_try) = &mut self.silent[daemon as usize];
            if next_try.is_some_and(|at| Instant::now() < at) {
                continue;
            }
            match self.manager.setting.peers.call::<DrainTickReply>(daemon, &request) {
                Ok(reply) => {
                    if let Some((failures, over)) = backoff.succeeded() {
                        log!(
                            Info,
                            0,
                            "the throttler reaches daemon {daemon} again ({failures} tick(s) failed over {over:.1?})"
                        );
                    }
                    *next_try = None;
                    replies.push((daemon, reply));
                }
                Err(failure) => {
                    *next_try = Some(Instant::now() + backoff.failed(failure.errno).delay);
                    silent.push(format!("daemon {daemon}: {}", failure.text()));
                }
            }
        }
        if !silent.is_empty() && self.last_quiet_log.is_none_or(|at| at.elapsed() >= QUIET_LOG) {
            self.last_quiet_log = Some(Instant::now());
            self.manager.note_error(&format!(
                "the throttler cannot reach every daemon (their rates stay as they were): {}",
                silent.join("; ")
            ));
        }
        replies
    }

    /// The bytes written since the last tick, and the jobs that wrote them.
    fn count_written(&mut self, replies: &[(u32, DrainTickReply)]) -> (u64, BTreeSet<u64>) {
        let (mut total, mut writing) = (0, BTreeSet::new());
        for (daemon, reply) in replies {
            self.usage[*daemon as usize] = Usage { used: reply.used, capacity: reply.capacity };
            self.rate_controls[*daemon as usize].clone_from(&reply.rate_control);
            self.trims[*daemon as usize].clone_from(&reply.trim);
            // A daemon's first reply sets where its counts start: what it took
            // before this daemon 0 started belongs to periods already closed.
            let first = self.baselined.insert(*daemon);
            for &(job, bytes) in &reply.written {
                let before = self.seen.insert((*daemon, job), bytes).unwrap_or(0);
                // A daemon that restarted counts from 0 again.
                let delta = if bytes >= before { bytes - before } else { bytes };
                if !first && delta > 0 && job != crate::peers::BACKGROUND_JOB {
                    total += delta;
                    writing.insert(job);
                }
            }
        }
        (total, writing)
    }

    /// Begins a period: the policy is built for the current capacity and
    /// solves the period for the room left (the backlog not yet demoted).
    fn begin_period(&mut self, rates: &Bandwidths, plan: &mut Plan) {
        let capacity: u64 = self.usage.iter().map(|u| u.capacity).sum();
        let (largest, backlog) = self.manager.buffer_figures(self.usage.iter().map(|u| u.used).sum());
        let drive = drive_of(rates, self.manager.setting.daemons, capacity, largest);
        // `off` starts no throttler, so every policy here builds one.
        let Some(mut policy) = self.manager.setting.config.policy.build(drive) else { return };
        let mtbfs = self.manager.mtbfs();
        policy.begin_period(&PeriodStart { model: &self.model, mtbfs: &mtbfs, backlog });
        plan.schedule = policy.thresholds().cloned();
        let cautious = thresholds::max_dwpp(&drive.bandwidths, capacity as f64);
        plan.dwpp_predicted = self.model.predicted_dwpp(cautious) as u64;
        plan.period_started = Some(Instant::now());
        (self.policy, self.planned_capacity) = (Some(policy), capacity);
    }

    /// The order for the next tick.
    fn decide(&mut self, rates: &Bandwidths, writing: &BTreeSet<u64>, plan: &mut Plan) -> TickOrder {
        let daemons = self.manager.setting.daemons as f64;
        let to_demote = self.manager.has_files_to_demote();
        // A direct write holds the PFS, so demotion waits for it (as in the simulator).
        let (direct_bytes, demoted_bytes) = {
            let totals = &lock(&self.manager.books).totals;
            (totals.direct_bytes, totals.demoted_bytes)
        };
        let writing_direct = direct_bytes > std::mem::replace(&mut self.direct_seen, direct_bytes);
        let demoted = demoted_bytes.saturating_sub(self.demoted_before_period);
        let view = View { dwsf: self.model.dwsf(), writing: !writing.is_empty(), demoted };
        let Some(policy) = self.policy.as_deref() else { return TickOrder::default() };
        let demotion_rate = if to_demote && !writing_direct { policy.demotion_rate(&view) } else { 0.0 };
        let write_rate = policy.write_rate(demotion_rate, writing.len().max(1));
        plan.demotion_rate = demotion_rate;
        let demote = if demotion_rate > 0.0 { demotion_rate } else { rates.read_min * daemons };
        // Direct writes (all through daemon 0) get what demotion leaves of the PFS's rate, Bdmax:
        // all of it while they write, as demotion then waits.
        let direct = (rates.read_max * daemons - demotion_rate).max(rates.read_min * daemons);
        TickOrder {
            checkpoint_bps: ((write_rate / daemons) as u64).max(1),
            demote_bps: ((demote / daemons) as u64).max(1),
            direct_bps: (direct as u64).max(1),
            // Always, not only while the books hold work: a burst of new
            // checkpoints fills the buffer within one tick, before any of
            // its files is in the books, and becomes work a moment later.
            wait_for_space_ms: WAIT_FOR_SPACE.as_millis() as u32,
        }
    }
}

impl Task for Throttler {
    fn name(&self) -> &'static str {
        "throttler"
    }

    fn period(&self) -> Duration {
        TICK
    }

    fn run_once(&mut self, _cx: &Context) -> Result<(), Failure> {
        let manager = Arc::clone(&self.manager);
        let rates = match self.rates {
            Some(rates) => rates,
            None if self.rates_failed.is_some_and(|at| at.elapsed() < RATES_RETRY) => return Ok(()),
            None => match manager.rates(self.rates_tries + 1 >= RATES_TRIES) {
                Ok((rates, source)) => {
                    lock(&manager.plan).rates = Some((rates, source));
                    *self.rates.insert(rates)
                }
                Err(failure) => {
                    self.rates_failed = Some(Instant::now());
                    self.rates_tries += 1;
                    manager.note_error(&format!(
                        "drain: nothing moves until the buffer's rates are known: {}",
                        failure.text()
                    ));
                    return Ok(());
                }
            },
        };
        let replies = self.tick();
        let (written, writing) = self.count_written(&replies);
        let mut plan = lock(&manager.plan).clone();
        if written > 0 {
            self.model.wrote(written);
            manager.with_state("add to DWSF", |s| s.add_written(Bytes(written)));
        }
        let capacity: u64 = self.usage.iter().map(|u| u.capacity).sum();
        let period_over = plan.period_started.is_some_and(|at| at.elapsed() >= manager.setting.config.period);
        if period_over {
            plan.dwpp_last = self.model.end_period();
            // Counted with DWSF: a plan made again within the period (the capacity changed) keeps it.
            self.demoted_before_period = lock(&manager.books).totals.demoted_bytes;
            manager.with_state("close the period (DWSF to DWPP)", |s| s.end_period());
            plan.period_index += 1;
        }
        if capacity > 0 && (period_over || capacity != self.planned_capacity) {
            self.begin_period(&rates, &mut plan);
        }
        // Every tick: jobs appear and their MTBFs change within a period.
        plan.cold = (manager.setting.config.direct == Placement::Cold)
            .then(|| ColdCut::new(&manager.mtbfs(), capacity as f64, plan.dwpp_predicted as f64));
        self.order = self.decide(&rates, &writing, &mut plan);
        plan.dwsf = self.model.dwsf();
        plan.usage = self.usage.clone();
        plan.rate_controls.clone_from(&self.rate_controls);
        plan.trims.clone_from(&self.trims);
        plan.order = self.order;
        plan.writing = writing;
        if plan.demotion_rate > 0.0 {
            self.demoters.iter().for_each(Wake::wake);
        }
        // Each tick: outdated demoted files go at once, and room is made above the high watermark.
        self.evicter.wake();
        *lock(&manager.plan) = plan;
        Ok(())
    }
}

impl DrainManager {
    /// The largest demoted file, and the bytes of the buffer's `used` that
    /// are not demoted (the backlog).
    fn buffer_figures(&self, used: u64) -> (u64, u64) {
        let books = lock(&self.books);
        let kept = books.files.values().filter_map(|f| match f.status {
            FileStatus::Demoted { bytes, .. } => Some(bytes),
            FileStatus::Pending | FileStatus::Demoting => None,
        });
        let (largest, demoted) = kept.fold((0, 0), |(largest, sum), bytes| (largest.max(bytes), sum + bytes));
        (largest, used.saturating_sub(demoted))
    }

    /// The MTBF of each job seen checkpointing (or with checkpoints in the buffer).
    fn mtbfs(&self) -> Vec<f64> {
        let books = lock(&self.books);
        let mut jobs = books.jobs_in_buffer();
        jobs.extend(books.jobs.keys());
        jobs.into_iter().map(|job| books.mtbf(job) as f64).collect()
    }

    /// Whether some file in the buffer waits for its demotion.
    fn has_files_to_demote(&self) -> bool {
        let books = lock(&self.books);
        books.files.values().any(|f| !matches!(f.status, FileStatus::Demoted { .. }))
    }

    /// Resumes the period model from the state: DWSF so far, and the last
    /// DWPP as the predictor's history.
    pub(super) fn period_model(&self) -> PeriodModel {
        let mut model = PeriodModel::default();
        if let Some(last) = self.with_state("read DWPP", |s| s.last_period()).filter(|b| b.0 > 0) {
            model.wrote(last.0);
            model.end_period();
        }
        if let Some(so_far) = self.with_state("read DWSF", |s| s.written_so_far()) {
            model.wrote(so_far.0);
        }
        log!(Debug, 0, "drain: period model resumed at DWSF {} bytes", model.dwsf());
        model
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_plans_the_sum_of_the_daemons() {
        let rates = Bandwidths { write_max: 40e6, write_min: 30e6, read_max: 16e6, read_min: 1e6 };
        let drive = drive_of(&rates, 2, 1000, 10);
        assert_eq!((drive.bandwidths.write_max, drive.bandwidths.read_min), (80e6, 2e6));
        assert_eq!((drive.drain_rate, drive.capacity, drive.largest_file), (32e6, 1000, 10));
        // The line passes through (Brmin, Bwmax) and (Brmax, Bwmin).
        assert!((drive.line.write_rate(2e6) - 80e6).abs() < 1.0);
        assert!((drive.line.write_rate(32e6) - 60e6).abs() < 1.0);
    }
}
