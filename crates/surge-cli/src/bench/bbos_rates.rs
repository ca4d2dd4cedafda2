//! `surge bench bbos --part rates`: how closely each demotion rate control
//! (`surged --drain-rate-control`: the daemons' token bucket, or cgroup
//! blkio with O_DIRECT copies [Sung20, §5.2.4]) holds demotion to the rate
//! the policy sets, and what checkpoint writes see meanwhile. A local
//! cluster (two daemons) with its buffer and its PFS on the disk of
//! `--scratch` (blkio throttles block devices, not memory) drains with
//! MaxEff, which demotes at Brmax whenever there is work: each daemon is
//! held to `--demote-mbps`. A run writes `FILES` checkpoints, then
//! measures the demotion rate between the first and the last file
//! demoted after that (`surge drain status` polled), while a checkpoint
//! writer times its 1 MiB writes. The controls take turns run by run.

use super::bbos_measured::{checkpoint_pattern, client_config, write_checkpoint, CaseCluster, MeasuredArgs};
use super::{rotated, show};
use crate::drain_settings::{DrainArgs, DrainPolicyKind, RateControl};
use clap::Args;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use surge_client::{Client, ClientConfig, JobIdentity};
use surge_proto::Layout;

#[derive(Args, Debug, Clone)]
pub struct RateArgs {
    /// Rates part: the demotion rate each daemon is held to, MB/s (MaxEff's Brmax).
    #[arg(long, default_value_t = 16.0, value_parser = parse_mbps)]
    pub demote_mbps: f64,
}

fn parse_mbps(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(mbps) if (0.5..=2000.0).contains(&mbps) => Ok(mbps),
        _ => Err(format!("expected MB/s between 0.5 and 2000, not {text:?}")),
    }
}

/// Checkpoints demoted in a run, and their size (MiB).
const FILES: u64 = 24;
const FILE_MIB: u64 = 8;
/// Daemons of the run's cluster (`CaseCluster`).
const DAEMONS: f64 = 2.0;
/// Time between two looks at the report.
const POLL: Duration = Duration::from_millis(50);
/// Pause of the checkpoint writer between its 1 MiB writes, and the span of the file it rewrites.
const WRITER_PAUSE: Duration = Duration::from_millis(20);
const WRITER_SPAN: u64 = 16 << 20;

const CONTROLS: [RateControl; 2] = [RateControl::Token, RateControl::Blkio];

fn control_name(control: RateControl) -> &'static str {
    match control {
        RateControl::Token => "token",
        RateControl::Blkio => "blkio",
        RateControl::Auto => "auto",
    }
}

/// One run of one control.
struct RunFigures {
    /// The control the daemons said was in force.
    in_force: String,
    /// Demotion rate achieved over the rate set, and the rate (MB/s).
    precision: f64,
    achieved_mbps: f64,
    /// The checkpoint writer's 1 MiB writes while demotion ran: median and 95th percentile, ms.
    write_median_ms: f64,
    write_p95_ms: f64,
}

pub(super) fn run(a: &MeasuredArgs, r: &RateArgs) -> Result<(), String> {
    let mut figures: Vec<(RateControl, RunFigures)> = Vec::new();
    for run in 0..a.runs as usize {
        for control in rotated(&CONTROLS, run) {
            note!("surge bench bbos: rates, run {} of {}, {}…", run + 1, a.runs, control_name(control));
            figures.push((control, run_case(a, r, control, run)?));
        }
    }
    println!(
        "surge bench bbos --part rates: MEASURED, two daemons, buffer and PFS under {} (a disk), MaxEff holding \
         each daemon's demotion to {} MB/s ({} MB/s in all), {FILES} checkpoints of {FILE_MIB} MiB demoted per \
         run, a checkpoint writer's 1 MiB writes timed meanwhile; {} run(s) per control, alternating; \
         median (min–max) over runs",
        a.scratch.display(),
        r.demote_mbps,
        r.demote_mbps * DAEMONS,
        a.runs
    );
    println!("| control (in force) | achieved / set rate | achieved MB/s | write latency median (ms) | p95 (ms) |");
    println!("|---|---:|---:|---:|---:|");
    for control in CONTROLS {
        let runs: Vec<&RunFigures> = figures.iter().filter(|(c, _)| *c == control).map(|(_, f)| f).collect();
        let mut in_force: Vec<&str> = runs.iter().map(|f| f.in_force.as_str()).collect();
        in_force.dedup();
        let column = |pick: fn(&RunFigures) -> f64| runs.iter().map(|f| pick(f)).collect::<Vec<f64>>();
        println!(
            "| {} ({}) | {} | {} | {} | {} |",
            control_name(control),
            in_force.join(", "),
            show(&column(|f| f.precision), 1.0, 3),
            show(&column(|f| f.achieved_mbps), 1.0, 1),
            show(&column(|f| f.write_median_ms), 1.0, 1),
            show(&column(|f| f.write_p95_ms), 1.0, 1),
        );
    }
    Ok(())
}

fn run_case(a: &MeasuredArgs, r: &RateArgs, control: RateControl, run: usize) -> Result<RunFigures, String> {
    let on_disk = MeasuredArgs { buffer_dir: a.scratch.clone(), ..a.clone() };
    let brmax = r.demote_mbps;
    let drain = DrainArgs {
        drain: Some(DrainPolicyKind::MaxEff),
        drain_period: Some(3600),
        // Checkpoint writes nearly unthrottled, so that their latency shows the demotion's interference.
        drain_rates: Some(format!("1000,900,{brmax},{}", brmax / 4.0)),
        drain_rate_control: Some(control),
        ..DrainArgs::default()
    };
    let capacity_mib = 4 * FILES * FILE_MIB;
    let cluster = CaseCluster::start(&on_disk, capacity_mib, drain, &format!("rates-{run}-{}", control_name(control)))?;
    let client = Client::connect_with(&cluster.cluster_file, client_config()?).map_err(|e| e.to_string())?;
    let data = checkpoint_pattern(1 << 20);
    client.mkdir("/rates", 0o755).map_err(|e| format!("/rates: {e}"))?;
    for k in 0..FILES {
        write_checkpoint(&client, &format!("/rates/ckpt_{k:03}"), FILE_MIB << 20, &data)?;
    }
    let total = FILES * (FILE_MIB << 20);
    let demoting = AtomicBool::new(true);
    let writer_config = ClientConfig { job: JobIdentity::named("rates-writer"), ..client_config()? };
    let (window, latencies) = thread::scope(|s| {
        let writer = s.spawn(|| time_writes(&cluster.cluster_file, writer_config, &data, &demoting));
        let window = watch_demotion(&client, total);
        demoting.store(false, Ordering::Relaxed);
        let latencies = writer.join().unwrap_or_else(|_| Err("the checkpoint writer panicked".into()));
        (window, latencies)
    });
    let (demoted, seconds) = window?;
    let mut latencies = latencies?;
    if latencies.is_empty() {
        return Err("the checkpoint writer wrote nothing while demotion ran".into());
    }
    latencies.sort_by(f64::total_cmp);
    let report = client.drain_status().map_err(|e| format!("drain status: {e}"))?;
    let set = report.demote_bps as f64 * DAEMONS;
    let achieved = demoted as f64 / seconds;
    Ok(RunFigures {
        in_force: report.rate_control,
        precision: achieved / set,
        achieved_mbps: achieved / 1e6,
        write_median_ms: super::median(latencies.clone()) * 1e3,
        write_p95_ms: latencies[(latencies.len() * 95 / 100).min(latencies.len() - 1)] * 1e3,
    })
}

/// Polls the report until `total` bytes are demoted: the bytes demoted
/// between the first file seen demoted from now on and the last, and the
/// seconds between them (files are counted whole when demoted, so the
/// window runs from one file's end to another's).
fn watch_demotion(client: &Client, total: u64) -> Result<(u64, f64), String> {
    let demoted = || client.drain_status().map(|r| r.demoted_bytes).map_err(|e| format!("drain status: {e}"));
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last = demoted()?;
    let mut first: Option<(Instant, u64)> = None;
    while Instant::now() < deadline {
        thread::sleep(POLL);
        let now = demoted()?;
        if now > last {
            let at = Instant::now();
            let (since, from) = *first.get_or_insert((at, now));
            if now >= total && at > since {
                return Ok((now - from, (at - since).as_secs_f64()));
            }
        }
        last = now;
    }
    Err(format!("demotion did not finish within 10 minutes ({last} of {total} bytes)"))
}

/// A checkpoint writer rewriting a file in 1 MiB writes while `demoting`:
/// the seconds each write took.
fn time_writes(
    cluster_file: &std::path::Path,
    config: ClientConfig,
    data: &[u8],
    demoting: &AtomicBool,
) -> Result<Vec<f64>, String> {
    let client = Client::connect_with(cluster_file, config).map_err(|e| e.to_string())?;
    let path = "/rates-writer";
    let file = client.create(path, 0o644, Layout::INHERIT).map_err(|e| format!("{path}: {e}"))?;
    let (mut latencies, mut offset) = (Vec::new(), 0);
    while demoting.load(Ordering::Relaxed) {
        let began = Instant::now();
        file.write_at(data, offset).map_err(|e| format!("{path} at {offset}: {e}"))?;
        latencies.push(began.elapsed().as_secs_f64());
        offset = (offset + data.len() as u64) % WRITER_SPAN;
        thread::sleep(WRITER_PAUSE);
    }
    Ok(latencies)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_demotion_rate_is_a_number_of_mb_s_in_range() {
        assert_eq!(super::parse_mbps("16"), Ok(16.0));
        for bad in ["0", "0.1", "5000", "fast", ""] {
            assert!(super::parse_mbps(bad).unwrap_err().contains("between 0.5 and 2000"), "{bad:?}");
        }
    }
}
