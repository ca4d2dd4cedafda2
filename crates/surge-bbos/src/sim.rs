//! A simulator of checkpointing applications sharing one burst buffer and
//! one PFS under a drain policy, at the evaluation setup of [Sung20,
//! §5.3.1] scaled down (capacity ÷1000, bandwidths ÷100, hence times ÷10).
//!
//! Time advances in fixed steps ([`Setup::step`]); bytes are whole numbers
//! so that the books balance exactly. Each period every application
//! submits one checkpoint; arrivals are spaced evenly over the period
//! (low congestion), half that (medium) or a tenth (high), in a shuffled
//! order, each up to a quarter interval late. Failures arrive per application as a Poisson
//! process with its MTBF; a failure restarts from the application's latest
//! checkpoint, a hit when that copy is still in the buffer. Restart reads
//! take no bandwidth here (the evaluation measures where they are served).
//! Everything random is drawn up front from a ChaCha generator seeded with
//! [`Setup::seed`], so every policy sees the same arrivals and failures.

use crate::model::{Application, Arrival, PeriodModel};
use crate::placement::{CachePolicy, Candidate};
use crate::policy::{Bbos, DrainPolicy, DrainPolicyKind, Drive, PeriodStart, View};
use crate::thresholds::{Bandwidths, Interference};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

/// How closely checkpoint requests follow each other ([Sung20, §5.3.1]; erratum 8 of docs/bbos.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Congestion {
    Low,
    Medium,
    High,
}

impl Congestion {
    pub const ALL: [Congestion; 3] = [Congestion::Low, Congestion::Medium, Congestion::High];

    /// The arrival interval as a share of the even spread over the period.
    fn interval_share(self) -> f64 {
        match self {
            Congestion::Low => 1.0,
            Congestion::Medium => 0.5,
            Congestion::High => 0.1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Congestion::Low => "low",
            Congestion::Medium => "medium",
            Congestion::High => "high",
        }
    }
}

/// The policies the simulator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    Dedicated,
    MaxEff,
    MaxBw,
    Bbos,
    /// BBOS with cold checkpoints written straight to the PFS.
    BbosDirect,
}

impl PolicyKind {
    /// The four policies compared; [`PolicyKind::BbosDirect`] is BBOS with one option on.
    pub const COMPARED: [PolicyKind; 4] =
        [PolicyKind::Dedicated, PolicyKind::MaxEff, PolicyKind::MaxBw, PolicyKind::Bbos];

    /// The name reports and benchmarks give the policy.
    pub fn label(self) -> &'static str {
        match self {
            PolicyKind::Dedicated => "Dedicated",
            PolicyKind::MaxEff => "MaxEff",
            PolicyKind::MaxBw => "MaxBW",
            PolicyKind::Bbos => "BBOS",
            PolicyKind::BbosDirect => "BBOS+direct",
        }
    }

    /// The DWPP (in units of S) a comparison runs the policy at when the
    /// others run at `share`: dedicated allocation holds at most 1 S.
    pub fn dwpp(self, share: f64) -> f64 {
        if self == PolicyKind::Dedicated {
            1.0
        } else {
            share
        }
    }

    /// The registered policy this run is of (BBOS+direct is BBOS with `--drain-direct cold`).
    pub fn policy(self) -> DrainPolicyKind {
        match self {
            PolicyKind::Dedicated => DrainPolicyKind::Dedicated,
            PolicyKind::MaxEff => DrainPolicyKind::MaxEff,
            PolicyKind::MaxBw => DrainPolicyKind::MaxBw,
            PolicyKind::Bbos | PolicyKind::BbosDirect => DrainPolicyKind::Bbos,
        }
    }

    pub fn build(self, drive: Drive) -> Box<dyn DrainPolicy> {
        match self {
            PolicyKind::BbosDirect => Box::new(Bbos::new(drive, true)),
            registered => registered.policy().build(drive).expect("the simulator runs no policy `off`"),
        }
    }
}

/// One simulated run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Setup {
    pub drive: Drive,
    pub checkpoint_bytes: u64,
    /// Seconds per period.
    pub period: f64,
    pub periods: u32,
    pub apps: usize,
    pub congestion: Congestion,
    /// Application MTBFs are drawn uniformly from (0, mtbf_max] seconds.
    pub mtbf_max: f64,
    pub cache: CachePolicy,
    /// Seconds per simulation step.
    pub step: f64,
    pub seed: u64,
}

const MB: f64 = 1e6;

impl Setup {
    /// [Sung20, §5.3.1] scaled: S 3.2 TB → 3.2 GB, 80-GB checkpoints → 80 MB,
    /// Bwmax 3.56 / Bwmin 3 / Brmax 1.6 / Brmin 0.08 GB/s → ÷100, period
    /// 3800 s → 380 s, MTBF up to 100 min → 600 s; Bdmax = Brmax (erratum 13).
    pub fn scaled(seed: u64) -> Setup {
        let bandwidths =
            Bandwidths { write_max: 35.6 * MB, write_min: 30.0 * MB, read_max: 16.0 * MB, read_min: 0.8 * MB };
        let step = 0.05;
        let drive = Drive {
            bandwidths,
            line: Interference::through(&bandwidths),
            drain_rate: 16.0 * MB,
            capacity: 3_200_000_000,
            largest_file: 80_000_000,
            // A step's rates answer the DWSF at its start.
            reaction: step,
        };
        Setup {
            drive,
            checkpoint_bytes: 80_000_000,
            period: 380.0,
            periods: 3,
            apps: 40,
            congestion: Congestion::Low,
            mtbf_max: 600.0,
            cache: CachePolicy::Bbos,
            step,
            seed,
        }
    }

    /// The same setup with as many applications as write `share` × S per period.
    pub fn at_dwpp(self, share: f64) -> Setup {
        let apps = (share * self.drive.capacity as f64 / self.checkpoint_bytes as f64).round() as usize;
        Setup { apps, ..self }
    }

    pub fn dwpp_share(&self) -> f64 {
        (self.apps as u64 * self.checkpoint_bytes) as f64 / self.drive.capacity as f64
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub completed: usize,
    /// Checkpoints that ended after their period, or never.
    pub late: usize,
    /// Bytes/s of each checkpoint while it wrote (waits excluded).
    pub throughputs: Vec<f64>,
    /// Seconds from each checkpoint's arrival to its end (queue wait, stops for space, writing).
    pub latencies: Vec<f64>,
    /// The period each of `latencies` arrived in (0: the first).
    pub latency_periods: Vec<u32>,
    pub written: u64,
    pub demoted: u64,
    pub direct: u64,
    pub restarts: u64,
    pub restart_hits: u64,
    /// Restarts that the best order could have served with the buffer
    /// holding as many newest versions as it did: a hit when the
    /// application is among that many with the lowest MTBF.
    pub restart_best_hits: u64,
    /// Sum over restarts of the share of applications whose newest
    /// version was in the buffer: what an order blind to failures serves.
    pub restart_blind_hits: f64,
    /// Bytes still only in the buffer at the end (not demoted).
    pub only_in_buffer: u64,
    /// The most bytes one application held in the buffer at once.
    pub max_app_resident: u64,
    pub max_resident: u64,
    /// Whether demotion ever ran in a step where a checkpoint wrote to the buffer.
    pub demoted_beside_checkpoint: bool,
    /// Steps in which a checkpoint waited for space while the policy's schedule promised it would not.
    pub broken_promises: u32,
    /// Steps in which a checkpoint waited for space.
    pub space_waits: u32,
    /// Whether any byte was demoted twice or a copy left the buffer before its PFS copy was whole.
    pub accounting_error: Option<String>,
}

impl Report {
    pub fn mean_throughput(&self) -> f64 {
        mean(&self.throughputs)
    }
    pub fn mean_latency(&self) -> f64 {
        mean(&self.latencies)
    }
    pub fn max_latency(&self) -> f64 {
        self.latencies.iter().copied().fold(0.0, f64::max)
    }
    /// The largest latency of a checkpoint that arrived once a previous
    /// period's DWPP was known (from the second period on).
    pub fn max_latency_predicted(&self) -> f64 {
        self.latencies.iter().zip(&self.latency_periods).filter(|(_, p)| **p > 0).map(|(l, _)| *l).fold(0.0, f64::max)
    }
    pub fn hit_ratio(&self) -> f64 {
        self.restart_hits as f64 / (self.restarts as f64).max(1.0)
    }
    /// The hit ratio of the best order at the buffer's occupancy of this run.
    pub fn best_hit_ratio(&self) -> f64 {
        self.restart_best_hits as f64 / (self.restarts as f64).max(1.0)
    }
    /// The hit ratio an order unrelated to failures expects at this run's occupancy.
    pub fn blind_hit_ratio(&self) -> f64 {
        self.restart_blind_hits / (self.restarts as f64).max(1.0)
    }
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / (xs.len() as f64).max(1.0)
}

/// A checkpoint copy: in the buffer, on the PFS, or both.
struct Copy {
    app: usize,
    size: u64,
    written: u64,
    /// Bytes on the PFS (demoted, or written there directly).
    on_pfs: u64,
    in_buffer: bool,
    complete: bool,
    outdated: bool,
    written_at: f64,
    last_use: f64,
}

impl Copy {
    fn pending(&self) -> bool {
        self.in_buffer && self.complete && self.on_pfs < self.size
    }
    fn clean(&self) -> bool {
        self.in_buffer && self.complete && self.on_pfs == self.size
    }
    fn candidate(&self, apps: &[Application]) -> Candidate {
        Candidate {
            outdated: self.outdated,
            mtbf: apps[self.app].mtbf,
            written_at: self.written_at,
            last_use: self.last_use,
        }
    }
}

struct Job {
    arrival: Arrival,
    deadline: f64,
    copy: Option<usize>,
    direct: bool,
    started: f64,
    stopped: f64,
}

/// An application's failures before `end`: a Poisson process of mean
/// interval `mtbf` (the failure-process choice of docs/bbos.md).
fn failure_times(rng: &mut ChaCha8Rng, mtbf: f64, end: f64) -> Vec<f64> {
    let mut times = Vec::new();
    let mut t = 0.0;
    loop {
        t += -rng.gen_range(f64::EPSILON..1.0f64).ln() * mtbf;
        if t >= end {
            return times;
        }
        times.push(t);
    }
}

/// The failures of a measured restart run (`surge bench bbos`), drawn as
/// the simulator draws them: `apps` MTBFs uniform in `mtbf` (seconds),
/// then each application's failures from `begin` until `end`. Returns the
/// MTBFs and the failures (time, application) in time order.
pub fn draw_failures(seed: u64, apps: usize, mtbf: (f64, f64), begin: f64, end: f64) -> (Vec<f64>, Vec<(f64, usize)>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mtbfs: Vec<f64> = (0..apps).map(|_| rng.gen_range(mtbf.0..=mtbf.1.max(mtbf.0))).collect();
    let mut failures: Vec<(f64, usize)> = mtbfs
        .iter()
        .enumerate()
        .flat_map(|(app, &m)| failure_times(&mut rng, m, end - begin).into_iter().map(move |t| (begin + t, app)))
        .collect();
    failures.sort_by(|a, b| a.0.total_cmp(&b.0));
    (mtbfs, failures)
}

/// Everything random in a run, drawn before it starts.
struct Draws {
    apps: Vec<Application>,
    arrivals: Vec<Vec<Arrival>>,
    failures: Vec<f64>,
    failure_apps: Vec<usize>,
}

fn draw(setup: &Setup) -> Draws {
    let mut rng = ChaCha8Rng::seed_from_u64(setup.seed);
    let apps: Vec<Application> = (0..setup.apps)
        .map(|id| Application {
            id,
            mtbf: rng.gen_range(setup.step..=setup.mtbf_max.max(setup.step)),
            checkpoint_bytes: setup.checkpoint_bytes,
        })
        .collect();
    let interval = setup.period / setup.apps.max(1) as f64 * setup.congestion.interval_share();
    let arrivals = (0..setup.periods)
        .map(|p| {
            let mut order: Vec<usize> = (0..setup.apps).collect();
            order.shuffle(&mut rng);
            let begin = f64::from(p) * setup.period;
            order
                .into_iter()
                .enumerate()
                .map(|(i, app)| Arrival { at: begin + (i as f64 + rng.gen_range(0.0..0.25)) * interval, app })
                .collect()
        })
        .collect();
    let end = f64::from(setup.periods) * setup.period;
    let mut failures: Vec<(f64, usize)> =
        apps.iter().flat_map(|app| failure_times(&mut rng, app.mtbf, end).into_iter().map(|t| (t, app.id))).collect();
    failures.sort_by(|a, b| a.0.total_cmp(&b.0));
    Draws {
        apps,
        arrivals,
        failure_apps: failures.iter().map(|f| f.1).collect(),
        failures: failures.into_iter().map(|f| f.0).collect(),
    }
}

/// The simulation state of one run.
struct World<'a> {
    setup: &'a Setup,
    policy: Box<dyn DrainPolicy>,
    apps: Vec<Application>,
    copies: Vec<Copy>,
    queue: VecDeque<Job>,
    model: PeriodModel,
    reserved: Vec<bool>,
    report: Report,
    /// Bytes demoted before the current period began.
    demoted_before_period: u64,
}

impl World<'_> {
    fn resident(&self) -> u64 {
        self.copies.iter().filter(|c| c.in_buffer).map(|c| c.written).sum()
    }

    /// The coldest copy satisfying `which`, by the cache policy.
    fn coldest(&self, which: impl Fn(&Copy) -> bool) -> Option<usize> {
        let cache = self.setup.cache;
        (0..self.copies.len())
            .filter(|&i| which(&self.copies[i]))
            .min_by(|&a, &b| cache.colder(&self.copies[a].candidate(&self.apps), &self.copies[b].candidate(&self.apps)))
    }

    /// Whether the app's next checkpoint may start: always, unless capacity
    /// is reserved, when its reservation must exist and its previous copy be staged out.
    fn may_start(&mut self, app: usize) -> bool {
        if !self.policy.reserves_capacity() {
            return true;
        }
        if !self.reserved[app] {
            let granted = self.reserved.iter().filter(|r| **r).count() as u64 + 1;
            if granted * self.setup.checkpoint_bytes > self.setup.drive.capacity {
                return false;
            }
            self.reserved[app] = true;
        }
        let staged_out = !self.copies.iter().any(|c| c.app == app && c.in_buffer && !c.clean());
        if staged_out {
            // The new checkpoint takes the reservation's place.
            self.copies.iter_mut().filter(|c| c.app == app).for_each(|c| c.in_buffer = false);
        }
        staged_out
    }

    fn start(&mut self, job: usize, now: f64) {
        if self.queue[job].copy.is_some() {
            return;
        }
        let app = self.queue[job].arrival.app;
        if !self.may_start(app) {
            return;
        }
        let direct = self.policy.writes_direct(self.apps[app].mtbf, self.model.dwsf());
        self.copies.push(Copy {
            app,
            size: self.setup.checkpoint_bytes,
            written: 0,
            on_pfs: 0,
            in_buffer: !direct,
            complete: false,
            outdated: false,
            written_at: now,
            last_use: now,
        });
        let j = &mut self.queue[job];
        j.copy = Some(self.copies.len() - 1);
        j.direct = direct;
        j.started = now;
    }

    /// Frees `want` bytes by evicting clean copies, coldest first; returns the free bytes.
    fn make_room(&mut self, want: u64) -> u64 {
        loop {
            let free = self.setup.drive.capacity.saturating_sub(self.resident());
            if free >= want {
                return free;
            }
            match self.coldest(Copy::clean) {
                Some(i) => self.copies[i].in_buffer = false,
                None => return free,
            }
        }
    }

    fn step(&mut self, now: f64) {
        let step = self.setup.step;
        let active: Vec<usize> = if self.policy.schedules_checkpoints() {
            (0..self.queue.len().min(1)).collect()
        } else {
            (0..self.queue.len()).collect()
        };
        for &j in &active {
            self.start(j, now);
        }
        let running: Vec<usize> = active.into_iter().filter(|&j| self.queue[j].copy.is_some()).collect();
        let (direct, buffered): (Vec<usize>, Vec<usize>) = running.iter().partition(|&&j| self.queue[j].direct);
        let quantum = (self.setup.drive.bandwidths.write_max * step).round() as u64;
        let free = if buffered.is_empty() { 0 } else { self.make_room(quantum) };
        let writing = !buffered.is_empty() && free > 0;
        if !buffered.is_empty() && !writing {
            for &j in &buffered {
                self.queue[j].stopped += step;
            }
            self.report.space_waits += 1;
            if self.policy.promises_space() {
                self.report.broken_promises += 1;
            }
        }
        let has_pending = self.copies.iter().any(Copy::pending);
        // A direct write holds the PFS, so demotion waits for it.
        let demotion_rate = if has_pending && direct.is_empty() {
            let demoted = self.report.demoted - self.demoted_before_period;
            self.policy.demotion_rate(&View { dwsf: self.model.dwsf(), writing, demoted })
        } else {
            0.0
        };
        if writing {
            let rate = self.policy.write_rate(demotion_rate, buffered.len());
            let budget = ((rate * step).round() as u64).min(free);
            let taken = self.write(&buffered, budget);
            self.model.wrote(taken);
        }
        let direct_budget = (self.setup.drive.drain_rate * step).round() as u64;
        self.report.direct += self.write(&direct, direct_budget);
        let demoted = self.demote((demotion_rate * step).round() as u64);
        if demoted > 0 && writing {
            self.report.demoted_beside_checkpoint = true;
        }
        self.finish(now + step);
        self.observe();
    }

    /// Shares `budget` bytes among the jobs evenly; returns the bytes written.
    fn write(&mut self, jobs: &[usize], mut budget: u64) -> u64 {
        let mut total = 0;
        for (k, &j) in jobs.iter().enumerate() {
            let share = budget / (jobs.len() - k) as u64;
            let copy = &mut self.copies[self.queue[j].copy.expect("running jobs have a copy")];
            let n = share.min(copy.size - copy.written);
            copy.written += n;
            if !copy.in_buffer {
                copy.on_pfs += n;
            }
            budget -= n;
            total += n;
        }
        total
    }

    fn demote(&mut self, mut budget: u64) -> u64 {
        let mut total = 0;
        while budget > 0 {
            // A demoter finishes the file it started before it takes the next one.
            let started = self.coldest(|c| c.pending() && c.on_pfs > 0);
            let Some(i) = started.or_else(|| self.coldest(Copy::pending)) else { break };
            let copy = &mut self.copies[i];
            let n = budget.min(copy.size - copy.on_pfs);
            copy.on_pfs += n;
            // An outdated version is never restarted from: it leaves as soon as its PFS copy is whole.
            if copy.on_pfs == copy.size && copy.outdated {
                copy.in_buffer = false;
            }
            budget -= n;
            total += n;
        }
        self.report.demoted += total;
        total
    }

    fn finish(&mut self, now: f64) {
        while let Some(k) =
            self.queue.iter().position(|j| j.copy.is_some_and(|c| self.copies[c].written == self.copies[c].size))
        {
            let job = self.queue.remove(k).expect("position is in range");
            let c = job.copy.expect("finished jobs have a copy");
            let app = self.copies[c].app;
            for (i, other) in self.copies.iter_mut().enumerate() {
                if other.app == app && i != c {
                    other.outdated = true;
                    if other.clean() {
                        other.in_buffer = false;
                    }
                }
            }
            let copy = &mut self.copies[c];
            copy.complete = true;
            copy.written_at = now;
            copy.last_use = now;
            self.report.written += copy.size;
            self.report.completed += 1;
            self.report.latencies.push(now - job.arrival.at);
            self.report.latency_periods.push((job.arrival.at / self.setup.period) as u32);
            self.report.throughputs.push(copy.size as f64 / (now - job.started - job.stopped).max(self.setup.step));
            if now > job.deadline + 1e-9 {
                self.report.late += 1;
            }
        }
    }

    fn observe(&mut self) {
        let mut held = vec![0u64; self.apps.len()];
        for c in self.copies.iter().filter(|c| c.in_buffer) {
            held[c.app] += c.written;
        }
        self.report.max_resident = self.report.max_resident.max(held.iter().sum());
        self.report.max_app_resident = self.report.max_app_resident.max(held.into_iter().max().unwrap_or(0));
        if let Some(c) = self.copies.iter().find(|c| !c.in_buffer && c.on_pfs < c.written) {
            self.report.accounting_error = Some(format!(
                "a copy of app {} left the buffer with {} of {} bytes on the PFS",
                c.app, c.on_pfs, c.written
            ));
        }
    }

    /// The index of `app`'s newest complete checkpoint; `None` before its first.
    fn newest_copy(&self, app: usize) -> Option<usize> {
        self.copies.iter().rposition(|c| c.app == app && c.complete)
    }

    fn restart(&mut self, app: usize, now: f64) {
        let Some(latest) = self.newest_copy(app) else { return };
        self.report.restarts += 1;
        // Per application: whether its newest checkpoint is in the buffer; `None` before its first.
        let newest: Vec<Option<bool>> =
            (0..self.apps.len()).map(|a| self.newest_copy(a).map(|c| self.copies[c].in_buffer)).collect();
        let held = newest.iter().filter(|n| **n == Some(true)).count();
        let with_checkpoint = newest.iter().filter(|n| n.is_some()).count();
        // Applications with a checkpoint that the best order would keep before this one.
        let mtbf = self.apps[app].mtbf;
        let hotter =
            (0..self.apps.len()).filter(|&a| newest[a].is_some() && (self.apps[a].mtbf, a) < (mtbf, app)).count();
        self.report.restart_best_hits += u64::from(hotter < held);
        self.report.restart_blind_hits += held as f64 / with_checkpoint as f64;
        if self.copies[latest].in_buffer {
            self.report.restart_hits += 1;
            self.copies[latest].last_use = now;
        }
    }
}

/// Runs `kind` over the setup's periods.
pub fn run(setup: &Setup, kind: PolicyKind) -> Report {
    let draws = draw(setup);
    let mtbfs: Vec<f64> = draws.apps.iter().map(|a| a.mtbf).collect();
    let mut world = World {
        setup,
        policy: kind.build(setup.drive),
        reserved: vec![false; draws.apps.len()],
        apps: draws.apps,
        copies: Vec::new(),
        queue: VecDeque::new(),
        model: PeriodModel::default(),
        report: Report::default(),
        demoted_before_period: 0,
    };
    let steps = (setup.period / setup.step).round() as u64;
    let mut next_failure = 0;
    for (p, arrivals) in draws.arrivals.iter().enumerate() {
        if p > 0 {
            world.model.end_period();
        }
        world.demoted_before_period = world.report.demoted;
        let backlog = world.copies.iter().filter(|c| c.in_buffer).map(|c| c.written - c.on_pfs).sum();
        world.policy.begin_period(&PeriodStart { model: &world.model, mtbfs: &mtbfs, backlog });
        let begin = p as f64 * setup.period;
        let mut arrivals = arrivals.iter().peekable();
        for s in 0..steps {
            let now = begin + s as f64 * setup.step;
            while let Some(a) = arrivals.next_if(|a| a.at <= now) {
                let deadline = begin + setup.period;
                world.queue.push_back(Job {
                    arrival: *a,
                    deadline,
                    copy: None,
                    direct: false,
                    started: now,
                    stopped: 0.0,
                });
            }
            while next_failure < draws.failures.len() && draws.failures[next_failure] <= now {
                world.restart(draws.failure_apps[next_failure], now);
                next_failure += 1;
            }
            world.step(now);
        }
    }
    let mut report = world.report;
    report.late += world.queue.len();
    report.only_in_buffer = world.copies.iter().filter(|c| c.in_buffer).map(|c| c.written - c.on_pfs).sum();
    report.written += world.copies.iter().filter(|c| !c.complete).map(|c| c.written).sum::<u64>();
    report
}

/// When a DWPP counts as absorbed, for [`utilisation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Absorbed {
    /// Every checkpoint ends within its period (the evaluation's "apps that finish within the period").
    WithinPeriod,
    /// And no checkpoint ever waits for space.
    WithoutWaiting,
}

/// Buffer utilisation: the largest DWPP, as a share of S, that the policy
/// absorbs when checkpoints arrive back to back (high congestion, one
/// period from an empty buffer).
pub fn utilisation(setup: &Setup, kind: PolicyKind, absorbed: Absorbed) -> f64 {
    let trial = Setup { periods: 1, congestion: Congestion::High, ..*setup };
    let fits = |apps: usize| {
        let r = run(&Setup { apps, ..trial }, kind);
        r.late == 0 && (absorbed == Absorbed::WithinPeriod || r.space_waits == 0)
    };
    let (mut lo, mut hi) = (0, (4 * setup.drive.capacity / setup.checkpoint_bytes) as usize);
    // Invariant: `lo` apps fit (or lo = 0), `hi` apps do not.
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Setup { apps: lo, ..trial }.dwpp_share()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick(seed: u64) -> Setup {
        Setup { periods: 2, ..Setup::scaled(seed) }
    }

    #[test]
    fn measured_failures_follow_each_mtbf_within_the_window_and_a_seed_repeats_them() {
        let (mtbfs, failures) = draw_failures(3, 4, (1.0, 20.0), 10.0, 4010.0);
        assert!(mtbfs.iter().all(|m| (1.0..=20.0).contains(m)), "{mtbfs:?}");
        assert!(
            failures.windows(2).all(|w| w[0].0 <= w[1].0) && failures.iter().all(|f| (10.0..4010.0).contains(&f.0))
        );
        for (app, mtbf) in mtbfs.iter().enumerate() {
            // Over 4000 s a Poisson process of mean interval `mtbf` fails about 4000 / mtbf times.
            let n = failures.iter().filter(|f| f.1 == app).count() as f64;
            assert!((n - 4000.0 / mtbf).abs() < 5.0 * (4000.0 / mtbf).sqrt(), "app {app}: {n} failures, MTBF {mtbf}");
        }
        assert_eq!(draw_failures(3, 4, (1.0, 20.0), 10.0, 4010.0), (mtbfs, failures));
    }

    #[test]
    fn no_order_beats_the_best_one_at_its_occupancy_and_bbos_beats_a_blind_one() {
        for cache in CachePolicy::ALL {
            let r = run(&Setup { cache, mtbf_max: 600.0, ..quick(5).at_dwpp(1.9) }, PolicyKind::Bbos);
            assert!(r.restarts > 0);
            assert!(r.restart_hits <= r.restart_best_hits, "{cache:?}: {} > {}", r.restart_hits, r.restart_best_hits);
            assert!(r.blind_hit_ratio() > 0.0 && r.blind_hit_ratio() < 1.0, "{cache:?}: {}", r.blind_hit_ratio());
            if cache == CachePolicy::Bbos {
                assert!(r.hit_ratio() > r.blind_hit_ratio(), "{} <= {}", r.hit_ratio(), r.blind_hit_ratio());
            }
        }
    }

    #[test]
    fn every_checkpoint_byte_ends_on_the_pfs_or_in_the_buffer_and_none_twice() {
        for kind in
            [PolicyKind::Dedicated, PolicyKind::MaxEff, PolicyKind::MaxBw, PolicyKind::Bbos, PolicyKind::BbosDirect]
        {
            let setup = quick(7).at_dwpp(if kind == PolicyKind::Dedicated { 1.0 } else { 1.6 });
            let r = run(&setup, kind);
            assert_eq!(r.accounting_error, None, "{kind:?}");
            assert!(r.written > 0);
            // Demoted plus direct is what reached the PFS; the rest is only in the buffer.
            assert_eq!(r.demoted + r.direct + r.only_in_buffer, r.written, "{kind:?}");
        }
    }

    #[test]
    fn dedicated_allocation_never_exceeds_its_reservation() {
        let r = run(&quick(3).at_dwpp(1.0), PolicyKind::Dedicated);
        assert!(r.max_app_resident <= 80_000_000);
        assert!(r.max_resident <= 3_200_000_000);
        // Beyond the capacity the reservations run out and checkpoints never start.
        assert!(run(&quick(3).at_dwpp(1.2), PolicyKind::Dedicated).late > 0);
    }

    #[test]
    fn maxbw_never_demotes_while_a_checkpoint_writes() {
        for congestion in Congestion::ALL {
            let r = run(&Setup { congestion, ..quick(5).at_dwpp(1.9) }, PolicyKind::MaxBw);
            assert!(!r.demoted_beside_checkpoint, "{congestion:?}");
            assert!(r.demoted > 0);
        }
        assert!(run(&quick(5).at_dwpp(1.9), PolicyKind::MaxEff).demoted_beside_checkpoint);
    }

    #[test]
    fn bbos_never_makes_a_checkpoint_wait_for_space_when_its_schedule_is_feasible() {
        for congestion in Congestion::ALL {
            for share in [1.3, 1.6, 1.9, 2.1] {
                let r = run(&Setup { congestion, periods: 3, ..quick(11).at_dwpp(share) }, PolicyKind::Bbos);
                assert_eq!(r.broken_promises, 0, "at {share} S, {congestion:?} congestion");
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_figures_and_another_seed_other_ones() {
        let a = run(&quick(1).at_dwpp(1.6), PolicyKind::Bbos);
        assert_eq!(a, run(&quick(1).at_dwpp(1.6), PolicyKind::Bbos));
        assert_ne!(a.latencies, run(&quick(2).at_dwpp(1.6), PolicyKind::Bbos).latencies);
    }

    #[test]
    fn over_subscription_at_least_doubles_what_dedicated_allocation_holds() {
        let setup = Setup::scaled(1);
        assert_eq!(utilisation(&setup, PolicyKind::Dedicated, Absorbed::WithinPeriod), 1.0);
        let bbos = utilisation(&setup, PolicyKind::Bbos, Absorbed::WithoutWaiting);
        // The solver's bound, S/(1 − Brmax/Bwmin) = 2.14 S, less the file a demoter holds.
        assert!((2.0..=2.15).contains(&bbos), "BBOS utilisation {bbos}");
    }
}
