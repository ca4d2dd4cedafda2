//! `surge bench autotune`: does `surge run --autotune` make a job's second
//! run faster than its first, when the first used a poor layout?
//!
//! The job: W writers (`mpirun`, one per client host) write their own
//! blocks of one shared file, `dd` at their offsets, under `surge run
//! --autotune` joining a cluster of D daemons. Before every first run the
//! output directory is set to one stripe (all writers queue on one daemon)
//! and the history is emptied, so the first run finds no history, keeps
//! the poor layout and is recorded; the second run gets the tuner's layout
//! (DCA-IO's rule for a shared file: one stripe per writer, capped by the
//! daemons). First and second runs alternate, run by run. The figure of a
//! run is the throughput the tuner records from its profile (bytes over
//! the slowest writer's I/O time), so the tuner's own start-up and
//! mpirun's are not in it; the wall time of the whole `surge run` is
//! printed too.
//!
//! On the test bed (root) each daemon and each writer has a host of its own
//! behind a link shaped to --link-rate, as on a cluster: one stripe is one
//! daemon's link for every writer. On localhost, for comparison, the same
//! job runs against D local daemons, where every byte moves through memory
//! and the layout matters little.

use super::{ratios, show, show_ratio, verdict, Setup};
use crate::cmd::CmdResult;
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;
use surge_testbed::{Spec, Testbed};

#[derive(Args, Debug)]
#[command(after_help = "Needs root for the test bed (network namespaces); without it only localhost is \
    measured. Needs Open MPI and the tuner (python3 -m surge_tune). Example:\n  \
    surge bench autotune --runs 3 --link-rate 400mbit")]
pub struct AutotuneBenchArgs {
    /// Writers (MPI ranks), one client host each on the test bed.
    #[arg(long, default_value_t = 4)]
    pub writers: u32,
    /// Daemons, one host each on the test bed.
    #[arg(long, default_value_t = 4)]
    pub daemons: u32,
    /// MiB each writer writes.
    #[arg(long, default_value_t = 32)]
    pub mib: u32,
    /// MiB per write call (a divisor of --mib): larger than a stripe, one call keeps several
    /// daemons busy, as an application's large checkpoint writes do.
    #[arg(long, default_value_t = 4)]
    pub xfer_mib: u32,
    /// Pairs of runs (first, then second with the tuned layout); medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Link rate of each test-bed host, in tc syntax.
    #[arg(long, value_name = "RATE", default_value = "400mbit")]
    pub link_rate: String,
    /// Where to measure.
    #[arg(long, value_delimiter = ',', default_values = ["testbed", "localhost"])]
    pub on: Vec<Place>,
    /// Scratch directory for the local cluster, histories, mounts and profiles.
    #[arg(long, value_name = "DIR", default_value_os_t = std::env::temp_dir())]
    pub scratch: PathBuf,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum Place {
    Testbed,
    Localhost,
}

/// The cluster a place's jobs join, and how to start a command there.
enum Cluster {
    Bed(Testbed),
    Local(Setup),
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Cluster::Bed(tb) = self {
            if let Err(e) = surge_testbed::down(&tb.name, Some(&tb.state_dir)) {
                note!("surge bench autotune: {e}; run `surge testbed down --name {}`", tb.name);
            }
        }
    }
}

impl Cluster {
    fn up(place: Place, a: &AutotuneBenchArgs, exe: &Path) -> Result<Cluster, String> {
        match place {
            Place::Localhost => Setup::start(&a.scratch, a.daemons, &Default::default()).map(Cluster::Local),
            Place::Testbed => {
                surge_testbed::check_host(true).map_err(|e| format!("the test bed cannot run here: {e}"))?;
                let mut spec = Spec::new(&format!("ba{}", std::process::id() % 1_000_000), a.daemons + a.writers, exe);
                spec.daemon_hosts = a.daemons;
                spec.rate = Some(a.link_rate.parse().map_err(|e: surge_testbed::Error| e.to_string())?);
                surge_testbed::up(&spec).map(Cluster::Bed).map_err(|e| e.to_string())
            }
        }
    }

    /// `surge ARGS` on the first client host (the test bed) or here.
    fn surge(&self, exe: &Path) -> Command {
        match self {
            Cluster::Bed(tb) => tb.command(tb.client_hosts().next().map_or(0, |h| h.index), exe),
            Cluster::Local(setup) => {
                let mut cmd = Command::new(exe);
                cmd.env("SURGE_CLUSTER", &setup.cluster_file);
                cmd
            }
        }
    }

    /// mpirun's placement of the writers: one per client host, or all here.
    fn placement(&self, writers: u32) -> String {
        match self {
            Cluster::Bed(tb) => {
                let hosts: Vec<String> = tb.client_hosts().map(|h| format!("{}:1", h.ip)).collect();
                format!("--host {} -np {writers}", hosts.join(","))
            }
            Cluster::Local(_) => format!("--oversubscribe -np {writers}"),
        }
    }

    fn describe(&self, a: &AutotuneBenchArgs) -> String {
        match self {
            Cluster::Bed(_) => format!("test bed, {} links", a.link_rate),
            Cluster::Local(_) => "localhost".into(),
        }
    }
}

/// The bench's histories, mounts and profiles, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// One `surge run --autotune` of the job: MiB/s the tuner recorded, wall seconds, the file's stripe count.
struct Job {
    mib_s: f64,
    wall: f64,
    stripes: u32,
}

fn run_job(cluster: &Cluster, a: &AutotuneBenchArgs, exe: &Path, dir: &Path) -> Result<Job, String> {
    let mount = dir.join("mnt").display().to_string();
    let (xfer, calls) = (a.xfer_mib, a.mib / a.xfer_mib);
    // Open MPI passes on no environment unless told; the ranks reach Surge through the interposer.
    let writers = format!(
        "mkdir -p $M/out && rm -f $M/out/shared && : > $M/out/shared && \
         mpirun {} --bind-to none -x LD_PRELOAD -x SURGE_CLUSTER -x SURGE_MOUNT -x SURGE_JOB_ID -x SURGE_JOB_START \
         -x SURGE_PROFILE sh -c 'exec dd if=/dev/zero of=$0 bs={xfer}M count={calls} seek=$((OMPI_COMM_WORLD_RANK*{calls})) \
         conv=notrunc status=none' $M/out/shared",
        cluster.placement(a.writers)
    );
    // Profiles are appended to: a run's own file, so its record holds only its processes.
    let profile = dir.join("profile.jsonl");
    std::fs::remove_file(&profile).ok();
    let started = Instant::now();
    let out = cluster
        .surge(exe)
        .args(["run", "--quiet", "--no-stage-out", "--mount", &mount, "--autotune", "--autotune-app", "bench-writers"])
        .arg("--autotune-dir")
        .arg(format!("{mount}/out"))
        .arg("--tune-db")
        .arg(dir.join("tune.db"))
        .arg("--profile")
        .arg(&profile)
        .args(["--", "sh", "-c", &writers])
        .env("M", &mount)
        .envs([("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run surge run: {e}"))?;
    let wall = started.elapsed().as_secs_f64();
    let said = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || said.contains("autotune: FAILED") {
        return Err(format!("the job failed ({}):\n{said}", out.status));
    }
    let mib_s = said
        .lines()
        .find_map(|l| l.strip_prefix("surge: autotune: recorded bench-writers write run #"))
        .and_then(|rest| rest.split_once(": ")?.1.split_once(" MiB/s").map(|(v, _)| v.parse::<f64>()))
        .ok_or_else(|| format!("the tuner recorded no throughput:\n{said}"))?
        .map_err(|e| e.to_string())?;
    let stripes = cluster.surge(exe).args(["getstripe", "-c", "/out/shared"]).output().map_err(|e| e.to_string())?;
    let stripes = String::from_utf8_lossy(&stripes.stdout).trim().parse().map_err(|_| "no stripe count".to_string())?;
    Ok(Job { mib_s, wall, stripes })
}

/// Every pair: the history emptied and one stripe set, then the first and the second run.
fn measure(cluster: &Cluster, a: &AutotuneBenchArgs, exe: &Path, dir: &Path) -> Result<(Vec<Job>, Vec<Job>), String> {
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for run in 0..a.runs {
        note!("surge bench autotune: {}, pair {}/{}", cluster.describe(a), run + 1, a.runs);
        std::fs::remove_file(dir.join("tune.db")).ok();
        for step in [&["mkdir", "-p", "/out"][..], &["setstripe", "-c", "1", "/out"]] {
            let done = cluster.surge(exe).args(step).output().map_err(|e| e.to_string())?;
            if !done.status.success() {
                return Err(format!("surge {}: {}", step.join(" "), String::from_utf8_lossy(&done.stderr)));
            }
        }
        first.push(run_job(cluster, a, exe, dir)?);
        second.push(run_job(cluster, a, exe, dir)?);
    }
    Ok((first, second))
}

pub fn run(a: AutotuneBenchArgs) -> CmdResult {
    if a.writers == 0 || a.daemons < 2 || a.runs == 0 || a.xfer_mib == 0 || !a.mib.is_multiple_of(a.xfer_mib) {
        return Err("--writers and --runs must be positive, --daemons at least 2, --xfer-mib a divisor of --mib".into());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = Scratch(a.scratch.join(format!("surge-bench-autotune-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).map_err(|e| format!("{}: {e}", dir.0.display()))?;
    println!(
        "surge bench autotune: {} writers x {} MiB ({} MiB writes) into one shared file, {} daemons; the first run \
         on one stripe, the second with surge run --autotune; {} pairs, medians (min–max)",
        a.writers, a.mib, a.xfer_mib, a.daemons, a.runs
    );
    println!(
        "{:<24} {:>22} {:>22} {:>18} {:>8} {:>18}",
        "where", "first MiB/s", "second MiB/s", "second/first", "stripes", "wall first/second"
    );
    for &place in &a.on {
        let cluster = match Cluster::up(place, &a, &exe) {
            Ok(c) => c,
            Err(e) => {
                println!("{:<24} not measured: {e}", format!("{place:?}").to_lowercase());
                continue;
            }
        };
        let (first, second) = measure(&cluster, &a, &exe, &dir.0)?;
        let rate = |jobs: &[Job]| jobs.iter().map(|j| j.mib_s).collect::<Vec<_>>();
        let wall = |jobs: &[Job]| jobs.iter().map(|j| j.wall).collect::<Vec<_>>();
        let stripes: Vec<String> = second.iter().map(|j| j.stripes.to_string()).collect();
        println!(
            "{:<24} {:>22} {:>22} {:>18} {:>8} {:>18}",
            cluster.describe(&a),
            show(&rate(&first), 1.0, 1),
            show(&rate(&second), 1.0, 1),
            show_ratio(&ratios(&rate(&second), &rate(&first))),
            format!("{}->{}", first.first().map_or(0, |j| j.stripes), stripes.join("/")),
            show_ratio(&ratios(&wall(&first), &wall(&second))),
        );
        let faster = ratios(&rate(&second), &rate(&first));
        println!("{:<24} the second run faster (ratio > 1): {}", "", verdict(&faster, 1.0 + f64::EPSILON));
    }
    Ok(ExitCode::SUCCESS)
}
