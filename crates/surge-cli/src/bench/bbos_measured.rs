//! `surge bench bbos` (measured part): the drain policies run for real in
//! the daemons. A local cluster whose buffer holds less than the
//! checkpoints written per period (DWPP > S) and whose PFS is on the disk;
//! several applications (threads, each a job of its own through the client
//! library) write numbered checkpoint versions on a schedule; the daemons'
//! data manager drains the buffer by the policy under test, at the device
//! rates given with `--drain-rates` (the evaluation's ratios of [Sung20,
//! §5.3.1] scaled down, enforced by the daemons' token buckets). Measured
//! per checkpoint: latency from its scheduled arrival to its close,
//! throughput while writing, failures (ENOSPC above all); per run: the
//! bytes demoted and the restart hit ratio (an application's latest
//! version still in the buffer at the end). Policies take turns run by
//! run, as every benchmark here alternates its sides. The direct part
//! (`run_direct`) runs BBOS without and with direct-to-PFS placement on
//! that schedule and compares the data demoted. Where a case runs is a
//! [`Place`]: [`Localhost`] here, with `--testbed` the multi-host test bed
//! (`super::bbos_testbed`: a host per daemon and per application, links
//! shaped). The restart runs (`super::bbos_restarts`) extend [`Place`].

use super::{rotated, show, show_ratio, verdict};
use crate::drain_settings::{DirectPlacement, DrainArgs};
use crate::launch::{self, LaunchPlan, Rank};
use clap::{Args, ValueEnum};
use std::fs;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};
use surge_bbos::sim::PolicyKind;
use surge_client::{Client, ClientConfig, JobIdentity};
use surge_proto::drain::{DrainReplicas, DrainReport};
use surge_proto::{Layout, Tier};

#[derive(Args, Debug, Clone)]
pub struct MeasuredArgs {
    /// Runs of every case (policies alternate run by run).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub runs: u32,
    /// Length of a drain period in seconds (the scaled 3800 s of the evaluation).
    #[arg(long = "period-secs", default_value_t = 16, value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub period: u64,
    /// Periods each run writes checkpoints for.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub measured_periods: u32,
    /// Checkpointing applications (jobs) writing at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub apps: u32,
    /// Size of one checkpoint, MiB.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub checkpoint_mib: u64,
    /// Buffer capacity S of the whole cluster (two daemons), MiB.
    #[arg(long, default_value_t = 192, value_parser = clap::value_parser!(u64).range(16..))]
    pub capacity_mib: u64,
    /// Where the cluster's PFS goes: a directory on a disk.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp")]
    pub scratch: PathBuf,
    /// Where the cluster's buffer goes: fast storage (memory here).
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub buffer_dir: PathBuf,
    /// The device rates the daemons enforce and the model plans with, MB/s: the evaluation's
    /// 3.56, 3.0, 1.6, 0.08 GB/s divided by 50.
    #[arg(long, value_name = "BWMAX,BWMIN,BRMAX,BRMIN", default_value = "71.2,60,32,1.6")]
    pub rates: String,
    /// DWPP of the over-subscribing policies (MaxEff, MaxBW, BBOS), in units of S; dedicated
    /// allocation runs at 1 S, its maximum. The default, 2, is the utilisation target's; at lower
    /// DWPP BBOS's schedule keeps checkpoints at Bwmax longer than MaxEff's (try 1.3 with
    /// --measured-periods 3: the first period has no DWPP to predict from).
    #[arg(long = "dwpp", value_name = "SHARE", default_value_t = 2.0, value_parser = parse_dwpp)]
    pub oversubscribed: f64,
    /// Run the measured, direct and restart parts on the multi-host test bed (needs root): a host
    /// per daemon and per application (a process of its own), each link shaped to --link-rate, so
    /// the network is the bottleneck as on a cluster; without root it says why and exits 2.
    #[arg(long)]
    pub testbed: bool,
    /// Link rate of each test-bed host, in tc syntax (with --testbed).
    #[arg(long, value_name = "RATE", default_value = "400mbit")]
    pub link_rate: String,
    /// The daemons' `--drain-replica` (the replica part sets it per side).
    #[arg(skip)]
    pub replica: Option<PathBuf>,
}

/// How the checkpoints of a period arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Arrivals {
    /// Spread evenly over the whole period.
    Low,
    /// All within the first tenth of the period.
    High,
}

fn parse_dwpp(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if (1.0..=4.0).contains(&share) => Ok(share),
        _ => Err(format!("{text:?} is not a DWPP from 1 to 4 (in units of S)")),
    }
}

#[derive(Default)]
struct Outcome {
    latencies: Vec<f64>,
    /// The period each of `latencies` was due in (0: the first).
    latency_periods: Vec<u32>,
    mbps: Vec<f64>,
    failures: Vec<String>,
    demoted_mib: f64,
    /// Still in the buffer undemoted when the run ended: demoted later.
    pending_mib: f64,
    direct_mib: f64,
    hit_ratio: f64,
    infeasible: bool,
    /// Replicas made and verified, and files still waiting for one, when the run ended.
    replicated_mib: f64,
    replicas_waiting: u64,
}

/// The MTBF the direct part gives application `app` of `apps`: spread
/// evenly over 0–600 s, the high MTBF variance of the simulated runs.
pub(super) fn app_mtbf(app: u32, apps: u32) -> u64 {
    u64::from(600 * (app + 1) / apps)
}

pub(super) fn dwpp(a: &MeasuredArgs, policy: PolicyKind) -> f64 {
    policy.dwpp(a.oversubscribed)
}

/// One cluster for one case, stopped and removed on drop.
pub(super) struct CaseCluster {
    /// The cluster file and the PFS, on the disk.
    root: PathBuf,
    buffer: PathBuf,
    pub cluster_file: PathBuf,
}

impl CaseCluster {
    /// Two daemons sharing `capacity_mib`, their buffer in `--buffer-dir`
    /// and their PFS in `--scratch`, draining by `drain`.
    pub fn start(a: &MeasuredArgs, capacity_mib: u64, drain: DrainArgs, tag: &str) -> Result<CaseCluster, String> {
        CaseCluster::start_daemons(a, 2, capacity_mib, drain, tag)
    }

    /// [`CaseCluster::start`] with `daemons` daemons.
    pub fn start_daemons(
        a: &MeasuredArgs,
        daemons: u32,
        capacity_mib: u64,
        drain: DrainArgs,
        tag: &str,
    ) -> Result<CaseCluster, String> {
        let name = format!("surge-bench-bbos-{}-{tag}", std::process::id());
        let root = a.scratch.join(&name);
        fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let cluster = CaseCluster { cluster_file: root.join("cluster.toml"), buffer: a.buffer_dir.join(name), root };
        let (buffer, pfs) = (cluster.buffer.clone(), cluster.root.join("pfs"));
        let plan = LaunchPlan {
            capacity: Some((capacity_mib << 20) / u64::from(daemons)),
            timeout: Duration::from_secs(30),
            drain,
            ..LaunchPlan::local(cluster.cluster_file.clone(), daemons, buffer, pfs)
        };
        let rank = Rank { rank: 0, size: 1, launch_id: format!("bench-bbos.{}.{tag}", std::process::id()) };
        launch::start(&plan, &rank)?;
        Ok(cluster)
    }
}

impl Drop for CaseCluster {
    fn drop(&mut self) {
        launch::stop(&self.cluster_file, Duration::from_secs(10)).ok();
        fs::remove_dir_all(&self.root).ok();
        fs::remove_dir_all(&self.buffer).ok();
    }
}

/// When each of an application's checkpoints is due, seconds from the start.
fn schedule(a: &MeasuredArgs, arrivals: Arrivals, share: f64, app: u32) -> Vec<f64> {
    let per_period = ((share * a.capacity_mib as f64) / a.checkpoint_mib as f64).round().max(1.0) as u32;
    let window = match arrivals {
        Arrivals::Low => a.period as f64,
        Arrivals::High => a.period as f64 / 10.0,
    };
    let spacing = window / f64::from(per_period);
    (0..a.measured_periods)
        .flat_map(|p| {
            (0..per_period)
                .filter(move |k| k % a.apps == app)
                .map(move |k| p as f64 * a.period as f64 + f64::from(k) * spacing)
        })
        .collect()
}

/// One checkpoint: create, write in 1 MiB pieces, fsync, close.
pub(super) fn write_checkpoint(client: &Client, path: &str, bytes: u64, data: &[u8]) -> Result<(), String> {
    let file = client.create(path, 0o644, Layout::INHERIT).map_err(|e| format!("{path}: {e}"))?;
    let mut off = 0;
    while off < bytes {
        let n = (bytes - off).min(data.len() as u64) as usize;
        let wrote = file.write_at(&data[..n], off).map_err(|e| format!("{path} at {off}: {e}"))?;
        off += wrote as u64;
    }
    file.fsync().map_err(|e| format!("{path}: fsync: {e}"))
}

/// What one application saw.
#[derive(Default)]
pub(super) struct AppRun {
    pub latencies: Vec<f64>,
    /// The period each of `latencies` was due in (0: the first).
    pub periods: Vec<u32>,
    pub mbps: Vec<f64>,
    pub failures: Vec<String>,
}

/// One application: its checkpoints (`share` S per period), each at its
/// due time (or at once when the previous one ran late), as job `ckpt-appN`.
pub(super) fn run_app(
    a: &MeasuredArgs,
    cluster_file: &std::path::Path,
    share: f64,
    arrivals: Arrivals,
    app: u32,
    start: Instant,
) -> Result<AppRun, String> {
    let config = ClientConfig { job: JobIdentity::named(&format!("ckpt-app{app}")), ..client_config()? };
    let client = Client::connect_with(cluster_file, config).map_err(|e| e.to_string())?;
    let dir = format!("/app{app}");
    client.mkdir(&dir, 0o755).map_err(|e| format!("{dir}: {e}"))?;
    let (bytes, data) = (a.checkpoint_mib << 20, checkpoint_pattern(1 << 20));
    let mut seen = AppRun::default();
    for (version, due_secs) in schedule(a, arrivals, share, app).into_iter().enumerate() {
        let due = start + Duration::from_secs_f64(due_secs);
        thread::sleep(due.saturating_duration_since(Instant::now()));
        let began = Instant::now();
        match write_checkpoint(&client, &format!("{dir}/ckpt_{version:05}.dat"), bytes, &data) {
            Ok(()) => {
                seen.latencies.push(due.elapsed().as_secs_f64());
                seen.periods.push((due_secs / a.period as f64) as u32);
                seen.mbps.push(bytes as f64 / 1e6 / began.elapsed().as_secs_f64());
            }
            Err(e) => seen.failures.push(e),
        }
    }
    Ok(seen)
}

/// `--drain` and its companions for one policy of the comparison.
pub(super) fn drain_args(a: &MeasuredArgs, policy: PolicyKind) -> DrainArgs {
    DrainArgs {
        drain: Some(policy.policy()),
        drain_period: Some(a.period),
        drain_rates: Some(a.rates.clone()),
        drain_state: None,
        drain_evict: None,
        drain_direct: (policy == PolicyKind::BbosDirect).then_some(DirectPlacement::Cold),
        drain_replica: a.replica.clone(),
        ..DrainArgs::default()
    }
}

/// What the daemons hold when a run's applications are done.
#[derive(Default)]
pub(super) struct Tally {
    pub demoted_bytes: u64,
    /// Still in the buffer undemoted: demoted later.
    pub pending_bytes: u64,
    pub direct_bytes: u64,
    /// The model found the period infeasible.
    pub infeasible: bool,
    /// Applications whose latest checkpoint is still in the buffer.
    pub hits: u32,
    /// The replicator's figures (`--drain-replica`).
    pub replicas: DrainReplicas,
}

/// The drain report and each application's latest checkpoint, read after the run.
pub(super) fn tally(cluster_file: &std::path::Path, apps: u32) -> Result<Tally, String> {
    let client = Client::connect(cluster_file).map_err(|e| e.to_string())?;
    let report: DrainReport = client.drain_status().map_err(|e| format!("drain status: {e}"))?;
    let mut hits = 0;
    for app in 0..apps {
        if let Some(latest) = latest_version(&client, &format!("/app{app}"))? {
            hits += u32::from(latest != Tier::Pfs);
        }
    }
    Ok(Tally {
        demoted_bytes: report.demoted_bytes,
        pending_bytes: report.apps.iter().map(|app| app.pending_bytes).sum(),
        direct_bytes: report.direct_bytes,
        infeasible: report.pattern == "infeasible",
        hits,
        replicas: report.replicas,
    })
}

/// Where a case's cluster and applications run.
pub(super) trait Place {
    /// For the tables' captions.
    fn describe(&self, a: &MeasuredArgs) -> String;

    /// One run of `policy` on a cluster of its own (`tag` tells it apart):
    /// what each application saw, and what the daemons held afterwards.
    /// `mtbfs`: the applications get the MTBFs of `app_mtbf` first (the
    /// direct part; otherwise they share the default).
    fn run_case(
        &self,
        a: &MeasuredArgs,
        policy: PolicyKind,
        arrivals: Arrivals,
        tag: &str,
        mtbfs: bool,
    ) -> Result<(Vec<AppRun>, Tally), String>;
}

/// The default place: a 2-daemon cluster on this machine, the applications threads.
pub(super) struct Localhost;

impl Place for Localhost {
    fn describe(&self, _: &MeasuredArgs) -> String {
        "on this machine (localhost, applications as threads)".into()
    }

    fn run_case(
        &self,
        a: &MeasuredArgs,
        policy: PolicyKind,
        arrivals: Arrivals,
        tag: &str,
        mtbfs: bool,
    ) -> Result<(Vec<AppRun>, Tally), String> {
        let cluster = CaseCluster::start(a, a.capacity_mib, drain_args(a, policy), tag)?;
        if mtbfs {
            let client = Client::connect(&cluster.cluster_file).map_err(|e| e.to_string())?;
            for app in 0..a.apps {
                let job = JobIdentity::named(&format!("ckpt-app{app}")).id;
                client.set_mtbf(job, app_mtbf(app, a.apps)).map_err(|e| format!("ckpt mtbf: {e}"))?;
            }
        }
        let start = Instant::now() + Duration::from_millis(300);
        let cluster_file = cluster.cluster_file.as_path();
        let share = dwpp(a, policy);
        let per_app: Vec<Result<AppRun, String>> = thread::scope(|s| {
            let handles: Vec<_> =
                (0..a.apps).map(|app| s.spawn(move || run_app(a, cluster_file, share, arrivals, app, start))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a checkpoint thread panicked".into())))
                .collect()
        });
        let per_app = per_app.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok((per_app, tally(cluster_file, a.apps)?))
    }
}

/// One run of `policy` at `place`, its figures.
fn run_case(
    place: &dyn Place,
    a: &MeasuredArgs,
    policy: PolicyKind,
    arrivals: Arrivals,
    tag: &str,
    mtbfs: bool,
) -> Result<Outcome, String> {
    let (per_app, tally) = place.run_case(a, policy, arrivals, tag, mtbfs)?;
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    let mut outcome = Outcome {
        demoted_mib: mib(tally.demoted_bytes),
        pending_mib: mib(tally.pending_bytes),
        direct_mib: mib(tally.direct_bytes),
        infeasible: tally.infeasible,
        hit_ratio: f64::from(tally.hits) / f64::from(a.apps),
        replicated_mib: mib(tally.replicas.bytes),
        replicas_waiting: tally.replicas.pending,
        ..Outcome::default()
    };
    for seen in per_app {
        outcome.latencies.extend(seen.latencies);
        outcome.latency_periods.extend(seen.periods);
        outcome.mbps.extend(seen.mbps);
        outcome.failures.extend(seen.failures);
    }
    Ok(outcome)
}

pub(super) fn client_config() -> Result<ClientConfig, String> {
    ClientConfig::from_env().map_err(|e| e.to_string())
}

/// A fixed, incompressible-enough pattern (the checkpoints' contents do not matter here).
pub(super) fn checkpoint_pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2]).collect()
}

/// The tier of the newest checkpoint in `dir`, a restart's read.
fn latest_version(client: &Client, dir: &str) -> Result<Option<Tier>, String> {
    let entries = client.readdir(dir).map_err(|e| format!("{dir}: {e}"))?;
    let Some(newest) = entries.iter().map(|e| e.name.clone()).max() else { return Ok(None) };
    let path = format!("{dir}/{newest}");
    Ok(Some(client.stat(&path).map_err(|e| format!("{path}: {e}"))?.tier))
}

/// Figures of one case over the runs.
#[derive(Default)]
struct Case {
    avg_latency: Vec<f64>,
    max_latency: Vec<f64>,
    /// The largest latency from the second period on, once the daemons predict DWPP.
    max_latency_predicted: Vec<f64>,
    mbps: Vec<f64>,
    failed: Vec<f64>,
    demoted_mib: Vec<f64>,
    hit_ratio: Vec<f64>,
    infeasible_runs: u32,
    first_failure: Option<String>,
}

impl Case {
    fn add(&mut self, o: Outcome) {
        let n = o.latencies.len().max(1) as f64;
        self.avg_latency.push(o.latencies.iter().sum::<f64>() / n);
        self.max_latency.push(o.latencies.iter().copied().fold(0.0, f64::max));
        let predicted = o.latencies.iter().zip(&o.latency_periods).filter(|(_, p)| **p > 0).map(|(l, _)| *l);
        self.max_latency_predicted.push(predicted.fold(0.0, f64::max));
        self.mbps.push(o.mbps.iter().sum::<f64>() / o.mbps.len().max(1) as f64);
        self.failed.push(o.failures.len() as f64);
        self.demoted_mib.push(o.demoted_mib);
        self.hit_ratio.push(o.hit_ratio);
        self.infeasible_runs += u32::from(o.infeasible);
        if self.first_failure.is_none() {
            self.first_failure = o.failures.into_iter().next();
        }
    }
}

pub(super) fn run(a: &MeasuredArgs, place: &dyn Place) -> Result<(), String> {
    let arrivals = [Arrivals::Low, Arrivals::High];
    let mut cases: Vec<((Arrivals, PolicyKind), Case)> = Vec::new();
    for run in 0..a.runs as usize {
        for &arrival in &arrivals {
            for policy in rotated(&PolicyKind::COMPARED, run) {
                note!(
                    "surge bench bbos (measured): run {}/{}, {arrival:?} congestion, {}…",
                    run + 1,
                    a.runs,
                    policy.label()
                );
                let outcome =
                    run_case(place, a, policy, arrival, &format!("{run}-{arrival:?}-{}", policy.label()), false)?;
                let slot = match cases.iter().position(|(key, _)| *key == (arrival, policy)) {
                    Some(i) => i,
                    None => {
                        cases.push(((arrival, policy), Case::default()));
                        cases.len() - 1
                    }
                };
                cases[slot].1.add(outcome);
            }
        }
    }
    let case = |arrival: Arrivals, policy: PolicyKind| {
        &cases.iter().find(|(key, _)| *key == (arrival, policy)).expect("every case ran").1
    };
    println!(
        "\nsurge bench bbos: MEASURED through the daemons {}: S {} MiB over 2 daemons, {} MiB \
         checkpoints from {} applications, rates {} MB/s (Bwmax,Bwmin,Brmax,Brmin, enforced by the daemons), period \
         {} s, {} period(s), PFS in {}, {} run(s), median (min–max over runs)",
        place.describe(a),
        a.capacity_mib,
        a.checkpoint_mib,
        a.apps,
        a.rates,
        a.period,
        a.measured_periods,
        a.scratch.display(),
        a.runs
    );
    println!(
        "| congestion | policy | DWPP (S) | MB/s | avg latency (s) | max latency (s) | max from period 2 (s) | failed | \
         demoted (MiB) | restart hits |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &arrival in &arrivals {
        for policy in PolicyKind::COMPARED {
            let c = case(arrival, policy);
            println!(
                "| {arrival:?} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                policy.label(),
                dwpp(a, policy),
                show(&c.mbps, 1.0, 1),
                show(&c.avg_latency, 1.0, 2),
                show(&c.max_latency, 1.0, 2),
                show(&c.max_latency_predicted, 1.0, 2),
                show(&c.failed, 1.0, 0),
                show(&c.demoted_mib, 1.0, 0),
                show(&c.hit_ratio, 1.0, 2),
            );
            if let Some(failure) = &c.first_failure {
                println!("|  | first failure: {failure} | | | | | | | | |");
            }
        }
    }
    let bbos_high = case(Arrivals::High, PolicyKind::Bbos);
    let ratio = |other: PolicyKind| super::ratios(&case(Arrivals::High, other).max_latency, &bbos_high.max_latency);
    let predicted = |other: PolicyKind| {
        super::ratios(&case(Arrivals::High, other).max_latency_predicted, &bbos_high.max_latency_predicted)
    };
    let feasible_failures: Vec<f64> =
        arrivals.iter().flat_map(|&arr| case(arr, PolicyKind::Bbos).failed.clone()).collect();
    println!("\nTargets (issue 15), measured\n| target | wanted | measured | verdict |\n|---|---|---:|---|");
    for (what, wanted, xs, at_least) in [
        ("MaxBW max latency / BBOS's, high congestion", "> 1", ratio(PolicyKind::MaxBw), 1.0 + 1e-9),
        ("MaxEff max latency / BBOS's, high congestion", "> 1", ratio(PolicyKind::MaxEff), 1.0 + 1e-9),
        ("the same from the second period on (DWPP predicted)", "> 1", predicted(PolicyKind::MaxEff), 1.0 + 1e-9),
    ] {
        println!("| {what} | {wanted} | {} | {} |", show_ratio(&xs), verdict(&xs, at_least));
    }
    // Utilisation: the DWPP a policy absorbed in a run with no failed checkpoint (0 when one failed).
    let absorbed = |policy: PolicyKind| -> Vec<f64> {
        let (low, high) = (&case(Arrivals::Low, policy).failed, &case(Arrivals::High, policy).failed);
        low.iter().zip(high).map(|(l, h)| if l + h == 0.0 { dwpp(a, policy) } else { 0.0 }).collect()
    };
    let utilisation = super::ratios(&absorbed(PolicyKind::Bbos), &absorbed(PolicyKind::Dedicated));
    println!(
        "| BBOS buffer utilisation / Dedicated's (DWPP absorbed with no failed checkpoint) | ≥ 2 | {} | {} |",
        show_ratio(&utilisation),
        verdict(&utilisation, 2.0)
    );
    let infeasible: u32 = arrivals.iter().map(|&arr| case(arr, PolicyKind::Bbos).infeasible_runs).sum();
    let never = feasible_failures.iter().all(|&f| f == 0.0);
    println!(
        "| BBOS checkpoints failing (ENOSPC or other) while the model finds the period feasible | 0 | {} | {} |",
        show(&feasible_failures, 1.0, 0),
        match (never, infeasible) {
            (true, _) => "met",
            (false, 0) => "not met",
            (false, _) => "not met (some runs found the period infeasible)",
        }
    );
    Ok(())
}

/// The captions' cluster: where it runs and what writes into it.
fn cluster_caption(a: &MeasuredArgs, place: &dyn Place) -> String {
    let (capacity, size, apps) = (a.capacity_mib, a.checkpoint_mib, a.apps);
    format!("{}: S {capacity} MiB over 2 daemons, {size} MiB checkpoints from {apps} applications", place.describe(a))
}

/// The captions' rates, periods and runs.
fn runs_caption(a: &MeasuredArgs) -> String {
    format!(
        "rates {} MB/s, period {} s, {} period(s), PFS in {}, {} run(s), median (min–max over runs)",
        a.rates,
        a.period,
        a.measured_periods,
        a.scratch.display(),
        a.runs
    )
}

/// `surge bench bbos --part direct`: BBOS with and without direct-to-PFS
/// placement, taking turns run by run, on the schedule of the measured
/// part at low congestion, the applications' MTBFs spread over 0–600 s:
/// the data demoted each way, and how much less with direct placement.
pub(super) fn run_direct(a: &MeasuredArgs, place: &dyn Place) -> Result<(), String> {
    let sides = [PolicyKind::Bbos, PolicyKind::BbosDirect];
    let mut outcomes: Vec<Vec<Outcome>> = vec![Vec::new(), Vec::new()];
    for run in 0..a.runs as usize {
        for policy in rotated(&sides, run) {
            note!("surge bench bbos (direct): run {}/{}, {}…", run + 1, a.runs, policy.label());
            let outcome = run_case(place, a, policy, Arrivals::Low, &format!("{run}-direct-{}", policy.label()), true)?;
            outcomes[usize::from(policy == PolicyKind::BbosDirect)].push(outcome);
        }
    }
    let figure = |side: usize, f: fn(&Outcome) -> f64| -> Vec<f64> { outcomes[side].iter().map(f).collect() };
    println!(
        "\nsurge bench bbos --part direct: MEASURED through the daemons {} (MTBFs {} s), DWPP {} S, low congestion, {}",
        cluster_caption(a, place),
        (0..a.apps).map(|app| app_mtbf(app, a.apps).to_string()).collect::<Vec<_>>().join(", "),
        a.oversubscribed,
        runs_caption(a)
    );
    println!(
        "| placement | demoted (MiB) | still to demote at the end (MiB) | demoted or to demote (MiB) | written to \
         the PFS directly (MiB) | failed checkpoints | avg latency (s) | max latency (s) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let to_demote = |o: &Outcome| o.demoted_mib + o.pending_mib;
    for (side, name) in [(0, "buffer only (BBOS)"), (1, "direct-to-PFS for cold checkpoints (BBOS+direct)")] {
        let latency = |o: &Outcome| o.latencies.iter().sum::<f64>() / o.latencies.len().max(1) as f64;
        let max_latency = |o: &Outcome| o.latencies.iter().copied().fold(0.0, f64::max);
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} |",
            show(&figure(side, |o| o.demoted_mib), 1.0, 0),
            show(&figure(side, |o| o.pending_mib), 1.0, 0),
            show(&figure(side, to_demote), 1.0, 0),
            show(&figure(side, |o| o.direct_mib), 1.0, 0),
            show(&figure(side, |o| o.failures.len() as f64), 1.0, 0),
            show(&figure(side, latency), 1.0, 2),
            show(&figure(side, max_latency), 1.0, 2),
        );
    }
    // Run by run (the two sides of a run ran back to back): 1 − with / without. Data
    // still in the buffer at the end is demoted later, so it counts here: a demotion
    // that paused cannot pass for placement.
    let reduction = |f: fn(&Outcome) -> f64| -> Vec<f64> {
        super::ratios(&figure(1, f), &figure(0, f)).iter().map(|r| 1.0 - r).collect()
    };
    let (overall, within) = (reduction(to_demote), reduction(|o| o.demoted_mib));
    println!("\n| target (issue 15) | wanted | measured | verdict |\n|---|---|---:|---|");
    println!(
        "| less data demoted or to demote with direct-to-PFS | ≥ 0.30 | {} | {} |",
        show_ratio(&overall),
        verdict(&overall, 0.30)
    );
    println!("| (less data demoted within the run, for reference) | | {} | |", show_ratio(&within));
    if let Some(failure) = outcomes.iter().flatten().flat_map(|o| o.failures.first()).next() {
        println!("first failed checkpoint: {failure}");
    }
    Ok(())
}

/// `surge bench bbos --part replica`: BBOS without and with the replicator
/// (`--drain-replica` in a directory beside the PFS, unlimited), taking
/// turns run by run, on the measured part's schedule at high congestion:
/// what replicating costs the checkpoints and the demotion, and how much
/// the replicator copied meanwhile.
pub(super) fn run_replica(a: &MeasuredArgs, place: &dyn Place) -> Result<(), String> {
    let dir = a.scratch.join(format!("surge-bench-bbos-{}-replica", std::process::id()));
    let mut outcomes: Vec<Vec<Outcome>> = vec![Vec::new(), Vec::new()];
    for run in 0..a.runs as usize {
        for replicated in rotated(&[false, true], run) {
            let name = if replicated { "with replicas" } else { "without" };
            note!("surge bench bbos (replica): run {}/{}, {name}…", run + 1, a.runs);
            let args = MeasuredArgs { replica: replicated.then(|| dir.clone()), ..a.clone() };
            if replicated {
                fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            let tag = format!("{run}-replica-{}", u8::from(replicated));
            let outcome = run_case(place, &args, PolicyKind::Bbos, Arrivals::High, &tag, false);
            fs::remove_dir_all(&dir).ok();
            outcomes[usize::from(replicated)].push(outcome?);
        }
    }
    let figure = |side: usize, f: &dyn Fn(&Outcome) -> f64| -> Vec<f64> { outcomes[side].iter().map(f).collect() };
    println!(
        "\nsurge bench bbos --part replica: MEASURED through the daemons {}, BBOS, DWPP {} S, high congestion, \
         replicas beside the PFS, replicator unlimited, {}",
        cluster_caption(a, place),
        dwpp(a, PolicyKind::Bbos),
        runs_caption(a)
    );
    println!(
        "| replicas | MB/s | avg latency (s) | max latency (s) | failed | demoted (MiB) | replicated (MiB) | waiting for \
         a replica at the end (files) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let latency = |o: &Outcome| o.latencies.iter().sum::<f64>() / o.latencies.len().max(1) as f64;
    for (side, name) in [(0, "off"), (1, "on (--drain-replica)")] {
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} |",
            show(&figure(side, &|o| o.mbps.iter().sum::<f64>() / o.mbps.len().max(1) as f64), 1.0, 1),
            show(&figure(side, &latency), 1.0, 2),
            show(&figure(side, &|o| o.latencies.iter().copied().fold(0.0, f64::max)), 1.0, 2),
            show(&figure(side, &|o| o.failures.len() as f64), 1.0, 0),
            show(&figure(side, &|o| o.demoted_mib), 1.0, 0),
            show(&figure(side, &|o| o.replicated_mib), 1.0, 0),
            show(&figure(side, &|o| o.replicas_waiting as f64), 1.0, 0),
        );
    }
    // Run by run (the two sides of a run ran back to back): with / without.
    println!(
        "\n| ratio, with replicas / without (per run) | measured |\n|---|---:|\n| avg checkpoint latency | {} |\n\
         | data demoted | {} |",
        show_ratio(&super::ratios(&figure(1, &latency), &figure(0, &latency))),
        show_ratio(&super::ratios(&figure(1, &|o| o.demoted_mib), &figure(0, &|o| o.demoted_mib)))
    );
    if let Some(failure) = outcomes.iter().flatten().flat_map(|o| o.failures.first()).next() {
        println!("first failed checkpoint: {failure}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> MeasuredArgs {
        MeasuredArgs {
            runs: 1,
            period: 10,
            measured_periods: 2,
            apps: 4,
            checkpoint_mib: 8,
            capacity_mib: 160,
            scratch: PathBuf::from("/var/tmp"),
            buffer_dir: PathBuf::from("/dev/shm"),
            rates: "71.2,60,32,1.6".into(),
            testbed: false,
            link_rate: "400mbit".into(),
            replica: None,
            oversubscribed: 2.0,
        }
    }

    #[test]
    fn the_schedule_writes_dwpp_per_period_spread_over_the_apps() {
        let a = args();
        // 1.9 x 160 MiB = 304 MiB = 38 checkpoints of 8 MiB per period, over 4 apps.
        let total: usize = (0..4).map(|app| schedule(&a, Arrivals::Low, 1.9, app).len()).sum();
        assert_eq!(total, 2 * 38);
        assert_eq!(dwpp(&a, PolicyKind::Bbos), 2.0 * dwpp(&a, PolicyKind::Dedicated), "the utilisation target's ratio");
        let high = schedule(&a, Arrivals::High, 1.9, 0);
        assert!(high.iter().all(|t| t % 10.0 < 1.0), "high congestion arrives in the first tenth: {high:?}");
        let low = schedule(&a, Arrivals::Low, 1.9, 0);
        assert!(low.iter().any(|t| t % 10.0 > 5.0), "low congestion spreads over the period: {low:?}");
    }

    #[test]
    fn a_dwpp_outside_1_to_4_s_is_refused_with_the_range() {
        assert_eq!(parse_dwpp("1.3"), Ok(1.3));
        for bad in ["0.5", "5", "x", ""] {
            assert!(parse_dwpp(bad).unwrap_err().contains("from 1 to 4"), "{bad}");
        }
    }

    #[test]
    fn the_largest_latency_from_the_second_period_leaves_the_first_out() {
        let mut case = Case::default();
        case.add(Outcome { latencies: vec![9.0, 2.0, 3.0], latency_periods: vec![0, 1, 2], ..Outcome::default() });
        assert_eq!((case.max_latency[0], case.max_latency_predicted[0]), (9.0, 3.0));
    }

    #[test]
    fn the_direct_part_spreads_the_mtbfs_up_to_600_s() {
        assert_eq!((0..4).map(|app| app_mtbf(app, 4)).collect::<Vec<_>>(), [150, 300, 450, 600]);
    }
}
