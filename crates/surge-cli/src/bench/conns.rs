//! `surge bench conns`: the shape of Mulconn's experiment ([Sung20,
//! Figs. 4.7-4.9], docs/references.md) on the test bed. One client host runs 16 threads of
//! synchronous writes, then reads, each on a file of its own, against a
//! daemon on another host; for 1, 2, 4 and 8 connections per daemon and
//! each policy, with the daemon's per-connection rate cap off and on. It
//! prints throughput and the ratio to one connection as medians with
//! their min–max over runs, checks the targets by the whole range, and
//! draws the curves (through the tuner's Python, for matplotlib).

use super::worker::Workload;
use super::{median, ratios, show, spread};
use crate::cmd::CmdResult;
use crate::units::parse_size;
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};
use surge_cluster::{parse_rate, ConnCount, ConnPolicy};
use surge_testbed::{Spec, Testbed};

/// A connection policy and count measured together.
type Setting = (ConnPolicy, ConnCount);
/// MB/s of the runs of one setting: (writes, reads).
type Samples = (Vec<f64>, Vec<f64>);

#[derive(Args, Debug)]
#[command(after_help = "Needs root (the test bed uses network namespaces). Example:\n  \
    surge bench conns --runs 3 --plot docs/figures/conns.png")]
pub struct ConnsArgs {
    /// Client threads; each writes, then reads, a file of its own.
    #[arg(long, default_value_t = 16)]
    pub threads: u32,
    /// Connections per daemon to measure (1-16, or auto).
    #[arg(long, value_delimiter = ',', default_values = ["1", "2", "4", "8", "auto"])]
    pub conns: Vec<ConnCount>,
    /// Connection policies to measure.
    #[arg(long, value_delimiter = ',', default_values = ["ttos", "ttom", "auto"])]
    pub policies: Vec<ConnPolicy>,
    /// The daemon's per-connection rate cap in the capped runs (e.g. 50M = 50 MB/s).
    #[arg(long, value_parser = parse_rate, default_value = "50M")]
    pub cap: u64,
    /// Bytes each thread writes, then reads (enough that start-up and the
    /// last thread's tail do not weigh on the fastest configurations).
    #[arg(long, value_parser = parse_size, default_value = "32M")]
    pub bytes: u64,
    /// Transfer size of each write and read call.
    #[arg(long, value_parser = parse_size, default_value = "1M")]
    pub xfer: u64,
    /// Repetitions; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Link rate of each test-bed host, in tc syntax (e.g. 10gbit); unshaped by default.
    #[arg(long, value_name = "RATE")]
    pub link_rate: Option<String>,
    /// Where to draw the curves (PNG).
    #[arg(long, default_value = "surge-bench-conns.png")]
    pub plot: PathBuf,
    /// Also write the medians as JSON (the plot's input) here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One measured point, bytes/s: the medians (what the plot draws) and
/// every run's figure.
#[derive(Debug, Clone, Serialize)]
struct Point {
    capped: bool,
    policy: String,
    conns: String,
    write: f64,
    read: f64,
    write_runs: Vec<f64>,
    read_runs: Vec<f64>,
    /// Per-run ratios to one connection under the same policy and cap
    /// setting (run i against run i).
    write_vs_one: Vec<f64>,
    read_vs_one: Vec<f64>,
    /// Capped runs: 0.9 × min(N × cap, the median uncapped rate at N connections).
    write_target: Option<f64>,
    read_target: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    threads: u32,
    bytes_per_thread: u64,
    xfer: u64,
    cap: u64,
    runs: u32,
    points: Vec<Point>,
}

/// The test bed of one cap setting, taken down when dropped.
struct Bed(Testbed);

impl Drop for Bed {
    fn drop(&mut self) {
        if let Err(e) = surge_testbed::down(&self.0.name, Some(&self.0.state_dir)) {
            note!("surge bench conns: {e}; run `surge testbed down --name {}`", self.0.name);
        }
    }
}

fn bring_up(a: &ConnsArgs, cap: Option<u64>) -> Result<Bed, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let name = format!("bc{}", std::process::id() % 1_000_000);
    let mut spec = Spec::new(&name, 2, exe);
    spec.rate = a.link_rate.as_deref().map(str::parse).transpose().map_err(|e: surge_testbed::Error| e.to_string())?;
    if let Some(cap) = cap {
        spec.start_args = vec!["--conn-rate".into(), cap.to_string()];
    }
    surge_testbed::up(&spec).map(Bed).map_err(|e| e.to_string())
}

/// Runs the threads once on the client host; bytes/s.
fn measure(
    bed: &Testbed,
    a: &ConnsArgs,
    workload: Workload,
    count: ConnCount,
    policy: ConnPolicy,
) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let client = bed.client_hosts().next().ok_or("the test bed has no client host")?;
    let go = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?.as_nanos() + 150_000_000;
    let amount = a.bytes / a.xfer * a.xfer;
    let child = bed
        .command(client.index, &exe)
        .arg("bench-worker")
        .args(["--target", "surge", "--workload", &format!("{workload:?}").to_lowercase()])
        .arg("--location")
        .arg(&bed.cluster_file)
        .args(["--rank", "0", "--xfer", &a.xfer.to_string(), "--amount", &amount.to_string()])
        .args(["--go-at-ns", &go.to_string(), "--threads", &a.threads.to_string()])
        .env("SURGE_CONNS", count.to_string())
        .env("SURGE_CONN_POLICY", policy.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run the benchmark client in the test bed: {e}"))?;
    super::overall_rate(vec![child])
}

pub fn run(a: ConnsArgs) -> CmdResult {
    if a.threads == 0 || a.bytes < a.xfer || a.xfer == 0 || a.runs == 0 {
        return Err("--threads, --xfer and --runs must be positive and --bytes at least --xfer".into());
    }
    let mut points = Vec::new();
    for capped in [false, true] {
        let bed = bring_up(&a, capped.then_some(a.cap))?;
        let mut samples: Vec<(Setting, Samples)> = Vec::new();
        for run in 0..a.runs {
            note!("surge bench conns: cap {}, run {}/{}", if capped { "on" } else { "off" }, run + 1, a.runs);
            for &policy in &a.policies {
                for &count in &a.conns {
                    let write = measure(&bed.0, &a, Workload::Write, count, policy)?;
                    let read = measure(&bed.0, &a, Workload::Read, count, policy)?;
                    match samples.iter_mut().find(|(key, _)| *key == (policy, count)) {
                        Some((_, (w, r))) => {
                            w.push(write);
                            r.push(read);
                        }
                        None => samples.push(((policy, count), (vec![write], vec![read]))),
                    }
                }
            }
        }
        drop(bed);
        for ((policy, count), (w, r)) in samples {
            points.push(Point {
                capped,
                policy: policy.to_string(),
                conns: count.to_string(),
                write: median(w.clone()),
                read: median(r.clone()),
                write_runs: w,
                read_runs: r,
                write_vs_one: Vec::new(),
                read_vs_one: Vec::new(),
                write_target: None,
                read_target: None,
            });
        }
    }
    judge(&mut points, a.cap);
    let report =
        Report { threads: a.threads, bytes_per_thread: a.bytes, xfer: a.xfer, cap: a.cap, runs: a.runs, points };
    print_table(&report);
    let json = a.json.clone().unwrap_or_else(|| a.plot.with_extension("json"));
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&json, text).map_err(|e| format!("cannot write {}: {e}", json.display()))?;
    draw(&json, &a.plot);
    Ok(ExitCode::SUCCESS)
}

/// Fills in the ratios to one connection and the capped targets.
fn judge(points: &mut [Point], cap: u64) {
    let snapshot = points.to_vec();
    let find = |capped: bool, policy: &str, conns: &str| {
        snapshot.iter().find(|p| p.capped == capped && p.policy == policy && p.conns == conns)
    };
    for p in points.iter_mut() {
        if let Some(one) = find(p.capped, &p.policy, "1") {
            p.write_vs_one = ratios(&p.write_runs, &one.write_runs);
            p.read_vs_one = ratios(&p.read_runs, &one.read_runs);
        }
        let Ok(n) = p.conns.parse::<u32>() else { continue };
        if let (true, Some(free)) = (p.capped, find(false, &p.policy, &p.conns)) {
            let ceiling = f64::from(n) * cap as f64;
            p.write_target = Some(0.9 * ceiling.min(free.write));
            p.read_target = Some(0.9 * ceiling.min(free.read));
        }
    }
}

/// A capped point must reach its target, an uncapped one 0.95 × one
/// connection: met when every run does, "median only" when the median does.
fn verdict(p: &Point, runs: &[f64], vs_one: &[f64], target: Option<f64>) -> String {
    let judged = match (p.capped, target) {
        (true, Some(t)) => Some((spread(runs), t, format!("≥ {:.0}", t / 1e6))),
        (false, _) if p.conns != "1" => Some((spread(vs_one), 0.95, "≥ 0.95 ×1".into())),
        _ => None,
    };
    match judged {
        Some((Some((_, lo, _)), at_least, what)) if lo >= at_least => format!("met {what}"),
        Some((Some((m, _, _)), at_least, what)) if m >= at_least => format!("median only {what}"),
        Some((_, _, what)) => format!("MISSED {what}"),
        None => "-".into(),
    }
}

fn print_table(r: &Report) {
    println!(
        "surge bench conns: {} threads, {} MiB each in {} KiB calls, 1 client host and 1 daemon host, cap {} MB/s, \
         median (min–max) of {} run(s); MB/s",
        r.threads,
        r.bytes_per_thread >> 20,
        r.xfer >> 10,
        r.cap as f64 / 1e6,
        r.runs
    );
    println!("| cap | policy | conns | write | ×1 conn | target | read | ×1 conn | target |");
    println!("|---|---|---:|---:|---:|---|---:|---:|---|");
    let ratio = |xs: &[f64]| if xs.is_empty() { "-".into() } else { show(xs, 1.0, 2) };
    for p in &r.points {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            if p.capped { "on" } else { "off" },
            p.policy,
            p.conns,
            show(&p.write_runs, 1e6, 0),
            ratio(&p.write_vs_one),
            verdict(p, &p.write_runs, &p.write_vs_one, p.write_target),
            show(&p.read_runs, 1e6, 0),
            ratio(&p.read_vs_one),
            verdict(p, &p.read_runs, &p.read_vs_one, p.read_target),
        );
    }
}

/// Draws the curves with the tuner's plotting (matplotlib); a missing
/// Python only costs the picture.
fn draw(json: &std::path::Path, png: &std::path::Path) {
    let python = std::env::var("SURGE_PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&python).args(["-m", "surge_tune.benchplot", "conns"]).arg(json).arg(png).status();
    match status {
        Ok(s) if s.success() => println!("curves: {}  (data: {})", png.display(), json.display()),
        _ => note!(
            "surge bench conns: could not draw {} with {python} -m surge_tune.benchplot (install the tuner: \
             scripts/setup.sh); the data is in {}",
            png.display(),
            json.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(capped: bool, conns: &str, write_runs: &[f64]) -> Point {
        Point {
            capped,
            policy: "ttos".into(),
            conns: conns.into(),
            write: median(write_runs.to_vec()),
            read: 0.0,
            write_runs: write_runs.to_vec(),
            read_runs: Vec::new(),
            write_vs_one: Vec::new(),
            read_vs_one: Vec::new(),
            write_target: None,
            read_target: None,
        }
    }

    #[test]
    fn a_target_is_met_only_when_every_run_clears_it() {
        let mut points = [
            point(false, "1", &[100e6, 100e6, 100e6]),
            point(false, "2", &[90e6, 200e6, 210e6]),
            point(true, "2", &[100e6, 99e6, 98e6]),
            point(true, "1", &[50e6, 50e6, 50e6]),
        ];
        judge(&mut points, 50_000_000);
        let two = &points[1];
        assert_eq!(two.write_vs_one, [0.9, 2.0, 2.1]);
        assert_eq!(verdict(two, &two.write_runs, &two.write_vs_one, None), "median only ≥ 0.95 ×1");
        let capped = &points[2];
        // 0.9 × min(2 × 50, 200) = 90 MB/s: every run clears it.
        assert_eq!(capped.write_target, Some(90e6));
        assert_eq!(verdict(capped, &capped.write_runs, &capped.write_vs_one, capped.write_target), "met ≥ 90");
        let missed = point(true, "2", &[80e6, 85e6, 95e6]);
        assert_eq!(verdict(&missed, &missed.write_runs, &[], Some(90e6)), "MISSED ≥ 90");
    }
}
