//! `surge run`: the main job. Brings up a job-scoped cluster (or joins the
//! running one), runs the command with the interposer, stages out what it
//! wrote, stops what it started and prints a summary.

use super::stage::{collect, stage_files};
use super::{CmdResult, Ctx};
use crate::args::{default_buffer, RunArgs};
use crate::launch::{self, LaunchPlan, Rank};
use crate::units::{human, mbps};
use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use surge_client::Client;

/// Exit status when the command succeeded but its files could not all be staged out.
const STAGE_OUT_FAILED: u8 = 75;
/// Variables every rank of an mpirun needs (Open MPI forwards those named here).
const FORWARDED: [&str; 6] = ["LD_PRELOAD", "SURGE_CLUSTER", "SURGE_MOUNT", "SURGE_JOB_ID", "SURGE_JOB_START", "SURGE_PROFILE"];

/// The cluster the job runs on.
struct JobCluster {
    file: PathBuf,
    /// Started by this run (and stopped by it), with its buffer directory.
    started: Option<PathBuf>,
}

fn bring_up(ctx: &Ctx, a: &RunArgs, job: &str) -> Result<JobCluster, String> {
    if launch::cluster_alive(&ctx.cluster_file) {
        println!("surge: joining the running cluster of {}", ctx.cluster_file.display());
        return Ok(JobCluster { file: ctx.cluster_file.clone(), started: None });
    }
    if a.daemons == 0 {
        return Err("--daemons must be at least 1".into());
    }
    let buffer = a.buffer.clone().unwrap_or_else(|| default_buffer().join(job));
    let plan = LaunchPlan {
        cluster_file: buffer.join("cluster.toml"),
        daemons_per_host: a.daemons,
        buffer: buffer.clone(),
        pfs: a.pfs.clone(),
        listen: "127.0.0.1".into(),
        capacity: None,
        stripe_count: -1,
        stripe_size: 1 << 20,
        timeout: Duration::from_secs(60),
        connections: Default::default(),
        conn_rate: None,
    };
    let rank = Rank { rank: 0, size: 1, launch_id: job.to_string() };
    launch::start(&plan, &rank)?;
    println!("surge: started a job-scoped cluster of {} daemon(s), buffer {}, PFS {}", a.daemons, buffer.display(), a.pfs.display());
    Ok(JobCluster { file: plan.cluster_file, started: Some(buffer) })
}

/// Totals over the job's profile (one JSON line per process).
#[derive(Default)]
struct ProfileSummary {
    processes: usize,
    pids: BTreeSet<u64>,
    bytes_read: u64,
    bytes_written: u64,
    io_seconds: f64,
    written: BTreeSet<String>,
}

fn read_profile(path: &Path) -> Result<ProfileSummary, String> {
    let mut s = ProfileSummary::default();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(s),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    for (n, line) in text.lines().enumerate() {
        let rec: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{} line {}: {e}", path.display(), n + 1))?;
        s.processes += 1;
        s.pids.extend(rec["pid"].as_u64());
        for f in rec["files"].as_array().into_iter().flatten() {
            let c = |k: &str| f["counters"][k].as_u64().unwrap_or(0);
            let t = |k: &str| f["fcounters"][k].as_f64().unwrap_or(0.0);
            s.bytes_read += c("POSIX_BYTES_READ");
            s.bytes_written += c("POSIX_BYTES_WRITTEN");
            s.io_seconds += t("POSIX_F_READ_TIME") + t("POSIX_F_WRITE_TIME") + t("POSIX_F_META_TIME");
            if c("POSIX_BYTES_WRITTEN") > 0 {
                s.written.extend(f["path"].as_str().map(String::from));
            }
        }
    }
    Ok(s)
}

/// Files opened for writing by a process that left no profile record: it
/// did not exit cleanly, so they hold what it wrote until then.
fn possibly_incomplete(profile: &Path, summary: &ProfileSummary) -> Vec<String> {
    let journal = std::fs::read_to_string(surge_cluster::writers_journal(profile)).unwrap_or_default();
    let mut files = BTreeSet::new();
    for line in journal.lines() {
        if let Some((pid, path)) = line.split_once(' ') {
            if pid.parse().is_ok_and(|pid: u64| !summary.pids.contains(&pid)) {
                files.insert(path.to_string());
            }
        }
    }
    files.into_iter().collect()
}

/// The files to stage: every buffer file of a job-scoped cluster; on a
/// shared cluster, the files this job wrote.
fn files_to_stage(client: &Client, job_scoped: bool, mount: &str, written: &BTreeSet<String>) -> Result<Vec<(String, u64)>, String> {
    let mut files = Vec::new();
    if job_scoped {
        collect(client, "/", false, &mut files).map_err(|e| format!("listing the buffer: {e}"))?;
        return Ok(files);
    }
    for host_path in written {
        let Some(path) = host_path.strip_prefix(mount) else { continue };
        match collect(client, path, false, &mut files) {
            Ok(()) => {}
            Err(e) if e.errno() == libc::ENOENT => {} // removed or renamed by the job
            Err(e) => return Err(format!("{path}: {e}")),
        }
    }
    Ok(files)
}

pub fn run(ctx: &Ctx, a: RunArgs) -> CmdResult {
    let preload = super::preload_library()?;
    let mount = super::validated_mount(&a.mount)?;
    let unix_now = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?;
    let job = format!("run-{}-{}", unix_now.as_secs(), std::process::id());
    let profile = a.profile.clone().unwrap_or_else(|| home_dir().join(".surge/profiles").join(format!("{job}.jsonl")));
    let cluster = bring_up(ctx, &a, &job)?;

    let mut cmd = Command::new(&a.command[0]);
    cmd.args(&a.command[1..]);
    let preload_list = match std::env::var("LD_PRELOAD") {
        Ok(existing) if !existing.is_empty() => format!("{}:{existing}", preload.display()),
        _ => preload.display().to_string(),
    };
    let forwarded = match std::env::var("OMPI_MCA_mca_base_env_list") {
        Ok(existing) if !existing.is_empty() => format!("{existing};{}", FORWARDED.join(";")),
        _ => FORWARDED.join(";"),
    };
    cmd.env("LD_PRELOAD", preload_list)
        .env("SURGE_CLUSTER", &cluster.file)
        .env("SURGE_MOUNT", &mount)
        .env("SURGE_JOB_ID", &job)
        .env("SURGE_JOB_START", format!("{:.6}", unix_now.as_secs_f64()))
        .env("SURGE_PROFILE", &profile)
        .env("OMPI_MCA_mca_base_env_list", forwarded);
    println!("surge: running {} (job {job}, Surge at {mount})", a.command.join(" "));
    let started = Instant::now();
    let status = cmd.status();
    let wall = started.elapsed().as_secs_f64();
    let code: u8 = match &status {
        Ok(s) => s.code().map(|c| c as u8).or_else(|| s.signal().map(|sig| 128 + sig as u8)).unwrap_or(1),
        Err(e) => {
            eprintln!("surge: cannot run {}: {e}", a.command[0]);
            127
        }
    };
    if code != 0 {
        eprintln!("surge: {} exited with status {code}", a.command[0]);
    }

    let summary = read_profile(&profile).unwrap_or_else(|e| {
        eprintln!("surge: the profile is unreadable: {e}");
        ProfileSummary::default()
    });
    let incomplete = possibly_incomplete(&profile, &summary);
    if !incomplete.is_empty() {
        eprintln!(
            "surge: {} file(s) may be incomplete (a writer did not exit cleanly; they hold what it wrote until then): {}",
            incomplete.len(),
            incomplete.join(", ")
        );
    }
    let staged = stage_out(&cluster, &a, &mount, &summary);
    let stage_failed = !matches!(staged, Ok((_, _, 0)));
    let teardown = tear_down(&cluster, &a, stage_failed);

    println!("surge: summary of job {job}");
    println!("  command        {} (exit status {code}, {wall:.2} s)", a.command.join(" "));
    println!("  processes      {} with Surge I/O", summary.processes);
    println!("  written        {} ({:.0} MB/s over the run)", human(summary.bytes_written), mbps(summary.bytes_written, wall));
    println!("  read           {} ({:.0} MB/s over the run)", human(summary.bytes_read), mbps(summary.bytes_read, wall));
    println!("  time in I/O    {:.2} s summed over processes", summary.io_seconds);
    match &staged {
        Ok((files, bytes, failed)) => println!("  staged out     {files} file(s), {} ({failed} failed)", human(*bytes)),
        Err(e) => println!("  staged out     no: {e}"),
    }
    println!("  profile        {}", profile.display());
    if let Err(e) = teardown {
        eprintln!("surge: {e}");
    }
    Ok(ExitCode::from(if code == 0 && stage_failed && !a.no_stage_out { STAGE_OUT_FAILED } else { code }))
}

/// (files staged, bytes, failures), or why nothing was staged.
fn stage_out(cluster: &JobCluster, a: &RunArgs, mount: &str, summary: &ProfileSummary) -> Result<(usize, u64, usize), String> {
    if a.no_stage_out {
        return Err("--no-stage-out".into());
    }
    let client = Client::connect(&cluster.file).map_err(|e| e.to_string())?;
    let files = files_to_stage(&client, cluster.started.is_some(), mount, &summary.written)?;
    let report = stage_files(&client, &files, a.quiet);
    Ok((report.staged, report.bytes, report.failures.len()))
}

/// Stops a cluster this run started; its buffer goes unless a file in it
/// has no verified PFS copy (or --keep-buffer / --no-stage-out).
fn tear_down(cluster: &JobCluster, a: &RunArgs, stage_failed: bool) -> Result<(), String> {
    let Some(buffer) = &cluster.started else { return Ok(()) };
    for note in launch::stop(&cluster.file, Duration::from_secs(10))? {
        eprintln!("surge: {note}");
    }
    if a.keep_buffer || a.no_stage_out || stage_failed {
        println!("surge: the buffer stays at {} (restart on it with `surge start --buffer {0}`)", buffer.display());
        return Ok(());
    }
    std::fs::remove_dir_all(buffer).map_err(|e| format!("could not remove the job's buffer {}: {e}", buffer.display()))
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from)
}
