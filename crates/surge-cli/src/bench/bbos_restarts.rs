//! `surge bench bbos` (measured restarts): the restart hit ratio of the
//! daemons' eviction orders, BBOS against the LRU and FIFO baselines
//! [Sung20, §5.3.4, Fig. 5.7], measured. A 2-daemon cluster draining with
//! BBOS whose buffer holds fewer checkpoints than the applications' newest
//! versions; applications (each a job of its own through the client
//! library) with MTBFs of high variance (uniform up to `--mtbf-max-secs`,
//! told to daemon 0 as `surge ckpt mtbf` does) write a checkpoint every
//! period, staggered over it, and fail as Poisson processes of their MTBFs
//! (drawn as the simulator draws them, `surge_bbos::sim::draw_failures`).
//! At a failure the application reads its newest checkpoint back, a
//! restart: a hit when the file is still in the buffer. The orders see the
//! same MTBFs and failures (the run's seed) and take turns run by run.
//!
//! Where a case runs is a [`RestartPlace`], the restart runs' extension of
//! `bbos_measured::Place`: [`Localhost`] here (the applications threads),
//! with `--testbed` the multi-host test bed (`super::bbos_testbed`: a host
//! per daemon and per application, each application a process). Both run
//! [`run_app`] for every application, so they share the schedule, the
//! failure draws and the hit counting; this module prints the tables.

use super::bbos_measured::{
    checkpoint_pattern, client_config, write_checkpoint, CaseCluster, Localhost, MeasuredArgs, Place,
};
use super::{ratios, rotated, show, show_ratio, verdict};
use crate::drain_settings::{DrainArgs, DrainPolicyKind, EvictOrder};
use clap::Args;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};
use surge_bbos::sim::draw_failures;
use surge_client::{Client, ClientConfig, JobIdentity};
use surge_proto::Tier;

#[derive(Args, Debug, Clone)]
pub struct RestartArgs {
    /// Restart runs: applications checkpointing and failing.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub restart_apps: u32,
    /// Buffer capacity S of the restart runs' cluster (two daemons), MiB.
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u64).range(16..))]
    pub restart_capacity_mib: u64,
    /// Restart runs: seconds between an application's checkpoints.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub restart_period_secs: u64,
    /// Restart runs: periods during which applications fail (after one period that writes the
    /// first checkpoints).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub restart_periods: u32,
    /// Restart runs: MTBFs are uniform between 1 s and this (high variance: 1.6 periods, as
    /// 0–100 min is to the evaluation's hour).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(2..=86_400))]
    pub mtbf_max_secs: u64,
}

/// The orders compared, BBOS's first.
const ORDERS: [EvictOrder; 3] = [EvictOrder::Bbos, EvictOrder::Lru, EvictOrder::Fifo];

fn order_name(order: EvictOrder) -> &'static str {
    match order {
        EvictOrder::Bbos => "BBOS",
        EvictOrder::Lru => "LRU",
        EvictOrder::Fifo => "FIFO",
    }
}

/// What happens to an application, in time order.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    /// Writes its next checkpoint.
    Checkpoint,
    /// Fails and restarts from its newest checkpoint.
    Failure,
}

/// An application's events (seconds from the start): a checkpoint every
/// period, the applications staggered evenly over it, and its failures.
fn events(r: &RestartArgs, app: u32, failures: &[(f64, usize)]) -> Vec<(f64, Event)> {
    let period = r.restart_period_secs as f64;
    let offset = period * f64::from(app) / f64::from(r.restart_apps);
    let mut events: Vec<(f64, Event)> =
        (0..=r.restart_periods).map(|k| (offset + f64::from(k) * period, Event::Checkpoint)).collect();
    events.extend(failures.iter().filter(|f| f.1 == app as usize).map(|f| (f.0, Event::Failure)));
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    events
}

/// Every application's MTBF (seconds) and all the failures of run `seed`:
/// the same for every order and every place.
fn failures(r: &RestartArgs, seed: u64) -> (Vec<f64>, Vec<(f64, usize)>) {
    let period = r.restart_period_secs as f64;
    let window = (period, period * f64::from(r.restart_periods + 1));
    draw_failures(seed, r.restart_apps as usize, (1.0, r.mtbf_max_secs as f64), window.0, window.1)
}

/// The job application `app` runs as, whose MTBF daemon 0 is told.
pub(super) fn job_label(app: u32) -> String {
    format!("restart-app{app}")
}

/// Restarts and hits of one application.
#[derive(Default, Clone, Copy, Debug, PartialEq)]
pub(super) struct Tally {
    pub restarts: u32,
    pub hits: u32,
}

/// Application `app` of run `seed`: its checkpoints and restarts, each at
/// its time from `start` (late when the previous ran late).
pub(super) fn run_app(
    a: &MeasuredArgs,
    r: &RestartArgs,
    cluster_file: &Path,
    seed: u64,
    app: u32,
    start: Instant,
) -> Result<Tally, String> {
    let events = events(r, app, &failures(r, seed).1);
    let config = ClientConfig { job: JobIdentity::named(&job_label(app)), ..client_config()? };
    let client = Client::connect_with(cluster_file, config).map_err(|e| e.to_string())?;
    let dir = format!("/app{app}");
    client.mkdir(&dir, 0o755).map_err(|e| format!("{dir}: {e}"))?;
    let (bytes, data) = (a.checkpoint_mib << 20, checkpoint_pattern(1 << 20));
    let mut newest: Option<String> = None;
    let mut tally = Tally::default();
    let mut buf = vec![0u8; 1 << 20];
    for (version, &(at, event)) in events.iter().enumerate() {
        let due = start + Duration::from_secs_f64(at);
        thread::sleep(due.saturating_duration_since(Instant::now()));
        match (event, &newest) {
            (Event::Checkpoint, _) => {
                let path = format!("{dir}/ckpt_{version:05}.dat");
                write_checkpoint(&client, &path, bytes, &data)?;
                newest = Some(path);
            }
            (Event::Failure, Some(path)) => {
                let tier = client.stat(path).map_err(|e| format!("{path}: {e}"))?.tier;
                tally.restarts += 1;
                tally.hits += u32::from(tier != Tier::Pfs);
                let file = client.open(path, libc::O_RDONLY, 0).map_err(|e| format!("{path}: {e}"))?;
                let mut offset = 0;
                while offset < bytes {
                    let n = file.read_at(&mut buf, offset).map_err(|e| format!("{path} at {offset}: {e}"))?;
                    if n == 0 {
                        return Err(format!("{path}: a restart read ended at {offset} of {bytes} bytes"));
                    }
                    offset += n as u64;
                }
            }
            // Failed before its first checkpoint: nothing to restart from.
            (Event::Failure, None) => {}
        }
    }
    Ok(tally)
}

/// One run of one eviction order, as a place gets it.
pub(super) struct RestartCase {
    /// The daemons' drain options: BBOS, evicting in the order under test.
    pub drain: DrainArgs,
    /// Application N's MTBF in seconds, told to daemon 0 for job [`job_label`].
    pub mtbfs: Vec<u64>,
    /// The run's seed: every application draws its failures from it.
    pub seed: u64,
    /// Tells the case's cluster apart.
    pub tag: String,
}

/// Where a restart case's cluster and applications run.
pub(super) trait RestartPlace: Place {
    /// One run on a cluster of its own: S = `--restart-capacity-mib` over
    /// two daemons draining by `case.drain`, the MTBFs told to daemon 0,
    /// then every application's [`run_app`] of `case.seed` from a common
    /// start. What each application counted.
    fn run_restarts(&self, a: &MeasuredArgs, r: &RestartArgs, case: &RestartCase) -> Result<Vec<Tally>, String>;
}

impl RestartPlace for Localhost {
    fn run_restarts(&self, a: &MeasuredArgs, r: &RestartArgs, case: &RestartCase) -> Result<Vec<Tally>, String> {
        let cluster = CaseCluster::start(a, r.restart_capacity_mib, case.drain.clone(), &case.tag)?;
        let admin = Client::connect(&cluster.cluster_file).map_err(|e| e.to_string())?;
        for (app, &mtbf) in (0..).zip(&case.mtbfs) {
            let job = JobIdentity::named(&job_label(app)).id;
            admin.set_mtbf(job, mtbf).map_err(|e| format!("setting an MTBF: {e}"))?;
        }
        let start = Instant::now() + Duration::from_millis(300);
        let (cluster_file, seed) = (cluster.cluster_file.as_path(), case.seed);
        let per_app: Vec<Result<Tally, String>> = thread::scope(|s| {
            let handles: Vec<_> =
                (0..r.restart_apps).map(|app| s.spawn(move || run_app(a, r, cluster_file, seed, app, start))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("an application thread panicked".into())))
                .collect()
        });
        per_app.into_iter().collect()
    }
}

/// One run of one order at `place`: the applications' restarts and hits.
fn run_case(
    place: &dyn RestartPlace,
    a: &MeasuredArgs,
    r: &RestartArgs,
    order: EvictOrder,
    seed: u64,
) -> Result<Tally, String> {
    let mtbfs: Vec<u64> = failures(r, seed).0.iter().map(|mtbf| mtbf.round().max(1.0) as u64).collect();
    let drain = DrainArgs {
        drain: Some(DrainPolicyKind::Bbos),
        drain_period: Some(r.restart_period_secs),
        drain_rates: Some(a.rates.clone()),
        drain_state: None,
        drain_evict: Some(order),
        drain_direct: None,
        ..DrainArgs::default()
    };
    let tag = format!("restarts-{seed}-{}", order_name(order));
    let per_app = place.run_restarts(a, r, &RestartCase { drain, mtbfs, seed, tag })?;
    Ok(per_app
        .iter()
        .fold(Tally::default(), |sum, app| Tally { restarts: sum.restarts + app.restarts, hits: sum.hits + app.hits }))
}

pub(super) fn run(a: &MeasuredArgs, r: &RestartArgs, place: &dyn RestartPlace) -> Result<(), String> {
    let mut hit_ratios: Vec<Vec<f64>> = vec![Vec::new(); ORDERS.len()];
    let mut restarts: Vec<Vec<f64>> = vec![Vec::new(); ORDERS.len()];
    for run in 0..a.runs as usize {
        for order in rotated(&ORDERS, run) {
            note!(
                "surge bench bbos (measured restarts): run {}/{}, eviction order {}…",
                run + 1,
                a.runs,
                order_name(order)
            );
            let tally = run_case(place, a, r, order, run as u64 + 1)?;
            let slot = ORDERS.iter().position(|o| *o == order).expect("a compared order");
            restarts[slot].push(f64::from(tally.restarts));
            hit_ratios[slot].push(f64::from(tally.hits) / f64::from(tally.restarts.max(1)));
        }
    }
    println!(
        "\nsurge bench bbos: MEASURED restart hit ratio through the daemons {}: S {} MiB over 2 \
         daemons draining with BBOS, {} applications writing a {} MiB checkpoint every {} s, MTBF uniform in 1–{} s \
         (high variance), failures over {} period(s), rates {} MB/s, {} run(s) (seeds 1–{}), median (min–max over runs)",
        place.describe(a),
        r.restart_capacity_mib,
        r.restart_apps,
        a.checkpoint_mib,
        r.restart_period_secs,
        r.mtbf_max_secs,
        r.restart_periods,
        a.rates,
        a.runs,
        a.runs
    );
    println!("| eviction order | restarts | hit ratio |\n|---|---:|---:|");
    for (slot, order) in ORDERS.iter().enumerate() {
        println!(
            "| {} | {} | {} |",
            order_name(*order),
            show(&restarts[slot], 1.0, 0),
            show(&hit_ratios[slot], 1.0, 2)
        );
    }
    let over_lru = ratios(&hit_ratios[0], &hit_ratios[1]);
    println!(
        "\nTarget (issue 15), measured\n| target | wanted | measured | verdict |\n|---|---|---:|---|\n\
         | BBOS restart hit ratio / LRU's, high MTBF variance | ≥ 2 | {} | {} |",
        show_ratio(&over_lru),
        verdict(&over_lru, 2.0)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> RestartArgs {
        RestartArgs {
            restart_apps: 4,
            restart_capacity_mib: 48,
            restart_period_secs: 10,
            restart_periods: 2,
            mtbf_max_secs: 16,
        }
    }

    #[test]
    fn an_application_checkpoints_every_period_at_its_offset_and_fails_at_its_own_failures() {
        let failures = [(12.0, 1), (15.0, 2), (25.5, 1)];
        let e = events(&args(), 1, &failures);
        let expect = [
            (2.5, Event::Checkpoint),
            (12.0, Event::Failure),
            (12.5, Event::Checkpoint),
            (22.5, Event::Checkpoint),
            (25.5, Event::Failure),
        ];
        assert_eq!(e, expect);
    }
}
