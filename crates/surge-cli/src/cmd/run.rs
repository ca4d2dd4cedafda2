//! `surge run`: the main job. Brings up a job-scoped cluster (or joins the
//! running one), runs the command with the interposer, stages out what it
//! wrote, stops what it started and prints a summary.

use super::mount::{refuse_to_hide, MountArgs, Mounted, ServerLife};
use super::orphans;
use super::signals::{self, Interrupts};
use super::stage_out::{collect, stage_directories, stage_files, Report};
use super::staging::{self, Direction, Directive, Staged};
use super::{CmdResult, Ctx};
use crate::allocation::{self, Allocation};
use crate::autotune::AutotuneArgs;
use crate::drain_settings::{self, DrainArgs};
use crate::launch::{self, LaunchPlan, Rank};
use crate::launch::{default_buffer, default_pfs};
use crate::node_daemons::{self, Launcher, NodeDaemons, NodePlan};
use crate::stage_settings::StageArgs;
use crate::supervise::Supervisor;
use crate::units::{human, mbps};
use clap::Args;
use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use surge_bbos_state::RedisServer;
use surge_client::{Client, ClusterFile};
use surge_cluster::NamespacePolicy;
use surge_fuse::mountpoint::{self, State};
use surge_proto::layout::LayoutPlacement;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  surge run -- ./app --out /surge/ckpt\n  surge run --daemons 4 -- mpirun -np 8 ./app\n\n\
    Surge is mounted at --mount (default /surge) through FUSE for the length of the job, so every \
    program sees it as a file system; LD_PRELOAD=libsurge_preload.so is added after any library \
    already preloaded, as a fast path for reads and writes. Without FUSE (no /dev/fuse, or --no-fuse) \
    only the interposer serves /surge: see docs/interposer.md for what works in that mode. Every file \
    written under the mount is staged out to the PFS with verification after the command ends. \
    SIGINT, SIGTERM and SIGHUP are passed to the command's process group; it has --grace seconds to \
    end before it is killed, then what it wrote is staged out, the cluster stopped, and surge run exits \
    128+signal. A second signal kills the job at once and skips the stage-out (the buffer is kept). \
    Job clusters left by a surge run that was killed outright are wound down by the next surge run on \
    the node (or `surge stop --orphans`). Diagnostics and the summary go to stderr; stdout is the \
    command's."
)]
pub struct RunArgs {
    /// Daemons of the job-scoped cluster on each node (when no cluster is running).
    #[arg(long, short = 'n', default_value_t = 2)]
    pub daemons: u32,
    /// The job's nodes in Slurm's host-list syntax (`node[01-04],gpu3`); with more than one, the
    /// cluster spans them (see docs/slurm.md). Default: SLURM_JOB_NODELIST, else the Open MPI
    /// hostfile the environment names, else this host.
    #[arg(long, value_name = "HOSTS", conflicts_with = "hostfile")]
    pub hosts: Option<String>,
    /// The job's nodes from an Open MPI hostfile (`host slots=N` lines).
    #[arg(long, value_name = "FILE")]
    pub hostfile: Option<PathBuf>,
    /// Buffer directory of the job-scoped cluster (default: a fresh run-<id> directory under
    /// the `surge start` default), removed after a complete stage-out.
    #[arg(long, value_name = "DIR")]
    pub buffer: Option<PathBuf>,
    /// PFS directory of the job-scoped cluster.
    #[arg(long, value_name = "DIR", default_value_os_t = default_pfs())]
    pub pfs: PathBuf,
    /// Where the program sees Surge.
    #[arg(long, value_name = "DIR", env = "SURGE_MOUNT", default_value = "/surge")]
    pub mount: String,
    /// Mount over a --mount directory that holds files (hidden for the length of the job).
    #[arg(long)]
    pub force_mount: bool,
    /// Do not mount through FUSE: the interposer alone serves the mount prefix.
    #[arg(long, conflicts_with = "no_preload")]
    pub no_fuse: bool,
    /// Do not preload the interposer: every call goes through the FUSE mount.
    #[arg(long)]
    pub no_preload: bool,
    /// Leave the files in the buffer only (no stage-out).
    #[arg(long)]
    pub no_stage_out: bool,
    /// Where new files go: auto (each file striped over every daemon, its first spread by inode
    /// number) or local (each file whole on one daemon of its writer's node, the node's daemons
    /// taken in turn: file-per-process output never crosses the network; give a shared file's
    /// directory `surge setstripe -c -1` to stripe it over every daemon).
    #[arg(long, default_value = "auto", value_name = "PLACEMENT", value_parser = str::parse::<LayoutPlacement>)]
    pub placement: LayoutPlacement,
    /// Where the namespace is kept: one (daemon 0 keeps it all) or hashed (spread over every
    /// daemon by a hash of each name's directory: a directory's entries are on one daemon, so
    /// per-process directories spread; a rename of a directory, and a rename or hard link
    /// between directories on different daemons, fails with EXDEV, which mv turns into a copy).
    /// Recorded in the cluster file, so every client routes alike.
    #[arg(long, env = "SURGE_NAMESPACE", default_value = "one", value_name = "POLICY", value_parser = str::parse::<NamespacePolicy>)]
    pub namespace: NamespacePolicy,
    /// Keep the job-scoped buffer directory after the run (for a following job: start a
    /// cluster on it with `surge start --buffer DIR`).
    #[arg(long, alias = "keep-buffer")]
    pub keep: bool,
    /// Seconds the job has to end after the first SIGINT, SIGTERM or SIGHUP before it is
    /// killed (keep it well under the batch system's own grace, Slurm's KillWait, so the
    /// stage-out fits in).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub grace: u64,
    /// Before the job, copy host file or directory SRC into Surge at DST (a path under the
    /// mount, or surge:/...), verified; the job does not start if a copy fails. Repeatable.
    #[arg(long, value_name = "SRC:DST")]
    pub stage_in: Vec<String>,
    /// After the job, copy Surge file or directory SRC to host path DST, verified, instead
    /// of to its own PFS path. Repeatable.
    #[arg(long, value_name = "SRC:DST")]
    pub stage_out: Vec<String>,
    /// Stage-in and stage-out directives, one per line: `stage_in SRC DST`, `stage_out SRC
    /// DST`, or DataWarp's `#DW stage_in source=SRC destination=DST` (docs/interposer.md).
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Also write the job's summary to FILE (it always goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// The job's I/O profile (JSON lines, one per process, each with the job's id), appended to: the summary and
    /// the autotune record read this job's lines only; `surge tune analyze --job ID` picks one job of a reused file
    /// [default: ~/.surge/profiles/JOB.jsonl]
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    #[command(flatten)]
    pub drain: DrainArgs,
    #[command(flatten)]
    pub stages: StageArgs,
    #[command(flatten)]
    pub autotune: AutotuneArgs,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Exit status when the command succeeded but its files could not all be staged out.
const STAGE_OUT_FAILED: u8 = 75;

/// The cluster the job runs on.
struct JobCluster {
    file: PathBuf,
    /// Started by this run (and stopped by it), with its buffer directory (on each node).
    started: Option<PathBuf>,
    /// The other nodes' daemons under their launcher, when the job spans several
    /// nodes: dropped after the tear-down, which waits for the launcher to end.
    nodes: Option<NodeDaemons>,
    /// The job's own Redis for the drain state (`--drain-state redis`), stopped after the daemons.
    redis: Option<RedisServer>,
    /// Restarts this host's daemons that die during the job (a cluster this run started on one node).
    supervisor: Option<Supervisor>,
    /// What the supervisor did, for the summary (filled in by the tear-down).
    daemon_events: Vec<String>,
}

/// The job cluster's root layout for `--placement`: (stripe count, placement).
/// Local placement keeps each file whole (one stripe) so all of it stays on
/// its writer's node; auto stripes over every daemon as before.
fn root_layout(placement: LayoutPlacement) -> (i64, LayoutPlacement) {
    match placement {
        LayoutPlacement::Auto => (-1, LayoutPlacement::Auto),
        LayoutPlacement::Local => (1, LayoutPlacement::Local),
    }
}

fn bring_up(ctx: &Ctx, a: &RunArgs, job: &str) -> Result<JobCluster, String> {
    if launch::cluster_alive(&ctx.cluster_file) {
        note!("surge: joining the running cluster of {}", ctx.cluster_file.display());
        if a.drain.drain.is_some() || a.drain.drain_state.is_some() {
            note!("surge: the running cluster keeps the drain settings it was started with (--drain* ignored)");
        }
        if !a.stages.flags().is_empty() {
            note!("surge: the running cluster keeps the stages it was started with (--scheduler, --checksum, --cache, --store, --commit-interval ignored)");
        }
        return Ok(JobCluster {
            file: ctx.cluster_file.clone(),
            started: None,
            nodes: None,
            redis: None,
            supervisor: None,
            daemon_events: Vec::new(),
        });
    }
    if a.daemons == 0 {
        return Err("--daemons must be at least 1".into());
    }
    let buffer = match &a.buffer {
        Some(dir) => dir.clone(),
        None => {
            // Whoever owns the default directory could swap the job's directory inside it.
            surge_cluster::private_dir(&default_buffer(), "buffer directory").map_err(|e| e.to_string())?;
            default_buffer().join(job)
        }
    };
    let allocation = Allocation::detect(a.hosts.as_deref(), a.hostfile.as_deref())?;
    surge_cluster::private_dir(&buffer, "buffer directory").map_err(|e| e.to_string())?;
    if allocation.is_multi_node() {
        if a.drain.drain.is_some() {
            return Err("--drain on a job spanning several nodes is not supported yet: start the cluster with \
                        `surge start --drain POLICY` on the allocation, then surge run joins it"
                .into());
        }
        a.stages.check(&crate::install::surged()?)?;
        let absolute = |dir: &Path| std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()));
        let (buffer, pfs) = (absolute(&buffer)?, absolute(&a.pfs)?);
        let plan = NodePlan {
            nodes: &allocation.nodes,
            // On the PFS: every node's `surge start` meets there, and the job's processes find it.
            job_dir: pfs.join(".surge").join(job),
            daemons_per_node: a.daemons,
            buffer: &buffer,
            pfs: &pfs,
            stages: &a.stages,
            root_layout: root_layout(a.placement),
            namespace: a.namespace,
        };
        orphans::claim(&buffer, &plan.cluster_file(), &default_buffer())?;
        let nodes = node_daemons::start(&plan, Launcher::detect())?;
        note!(
            "surge: started a job-scoped cluster of {} daemon(s) on each of {} (from {}), buffer {} on each node, \
             PFS {}, cluster file {}",
            a.daemons,
            nodes.describe(),
            allocation.source,
            buffer.display(),
            pfs.display(),
            plan.cluster_file().display()
        );
        return Ok(JobCluster {
            file: plan.cluster_file(),
            started: Some(buffer),
            nodes: Some(nodes),
            redis: None,
            supervisor: None,
            daemon_events: Vec::new(),
        });
    }
    let mut plan = LaunchPlan::local(buffer.join("cluster.toml"), a.daemons, buffer.clone(), a.pfs.clone());
    let rank = Rank { rank: 0, size: 1, launch_id: job.to_string() };
    orphans::claim(&buffer, &plan.cluster_file, &default_buffer())?;
    let redis = match a.drain.wants_own_redis() {
        true => Some(drain_settings::start_own_redis(&buffer.join("drain-redis"), &plan.listen)?),
        false => None,
    };
    plan.drain = match &redis {
        Some(server) => a.drain.with_state(server.url()),
        None => a.drain.clone(),
    };
    plan.stages = a.stages.clone();
    (plan.stripe_count, plan.placement) = root_layout(a.placement);
    plan.namespace = a.namespace;
    launch::start(&plan, &rank)?;
    note!(
        "surge: started a job-scoped cluster of {} daemon(s), buffer {}, PFS {}",
        a.daemons,
        buffer.display(),
        a.pfs.display()
    );
    let supervisor = Some(Supervisor::watch(plan.cluster_file.clone()));
    Ok(JobCluster {
        file: plan.cluster_file,
        started: Some(buffer),
        nodes: None,
        redis,
        supervisor,
        daemon_events: Vec::new(),
    })
}

/// How the job sees Surge.
enum JobMount {
    /// A FUSE mount of this job's, unmounted when it ends.
    Fuse(Mounted),
    /// The cluster's own live mount at the same place, left as it is.
    Shared,
    /// No kernel mount: the interposer alone serves the mount prefix.
    PreloadOnly,
}

fn mount_for_job(cluster: &JobCluster, a: &RunArgs, mount: &str, journal: &Path) -> Result<JobMount, String> {
    if a.no_fuse {
        return preload_only(mount, a.force_mount);
    }
    let cluster_id = ClusterFile::load(&cluster.file).map_err(|e| e.to_string())?.cluster_id;
    if let Ok(State::Live { cluster_id: served, .. }) = mountpoint::state(Path::new(mount)) {
        if served == cluster_id {
            note!("surge: using the cluster's mount at {mount}");
            return Ok(JobMount::Shared);
        }
    }
    if let Some(why) = mountpoint::unavailable() {
        if a.no_preload {
            return Err(format!("--no-preload needs FUSE, which is unavailable here: {why}"));
        }
        note!("surge: FUSE is unavailable ({why}): the interposer alone serves {mount} (see docs/interposer.md for what works then)");
        return preload_only(mount, a.force_mount);
    }
    let _ = std::fs::remove_file(journal);
    if let Some(dir) = journal.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let args = MountArgs { writers_journal: Some(journal.to_path_buf()), force: a.force_mount, ..MountArgs::default() };
    Mounted::start(&cluster.file, Path::new(mount), &args, ServerLife::EndsWithCaller).map(JobMount::Fuse)
}

/// The interposer alone serves `mount`: it hides what is there as a mount would.
fn preload_only(mount: &str, force: bool) -> Result<JobMount, String> {
    refuse_to_hide(Path::new(mount), force)?;
    Ok(JobMount::PreloadOnly)
}

/// What the FUSE mount's journal says: the files opened for writing (as
/// mount paths) and the bytes the kernel moved through the mount.
#[derive(Default)]
struct FuseJournal {
    written_files: Vec<String>,
    bytes_written: u64,
    bytes_read: u64,
}

fn read_fuse_journal(journal: &Path, mount: &str) -> FuseJournal {
    let text = std::fs::read_to_string(journal).unwrap_or_default();
    let _ = std::fs::remove_file(journal);
    let mut read = FuseJournal::default();
    for line in text.lines() {
        if line.starts_with('/') {
            read.written_files.push(format!("{mount}{line}"));
        } else if let Some(counts) = line.strip_prefix("bytes ") {
            let mut counts = counts.split(' ').map(|n| n.parse::<u64>().unwrap_or(0));
            read.bytes_written += counts.next().unwrap_or(0);
            read.bytes_read += counts.next().unwrap_or(0);
        }
    }
    read
}

/// Totals over the job's records in its profile (one JSON line per
/// process; a profile file an earlier run wrote holds that run's too).
#[derive(Default)]
struct ProfileSummary {
    processes: usize,
    pids: BTreeSet<u64>,
    bytes_read: u64,
    bytes_written: u64,
    io_seconds: f64,
    written: BTreeSet<String>,
}

fn read_profile(path: &Path, job: &str) -> Result<ProfileSummary, String> {
    let mut s = ProfileSummary::default();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(s),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    for (n, line) in text.lines().enumerate() {
        let rec: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{} line {}: {e}", path.display(), n + 1))?;
        if rec["job_id"].as_str() != Some(job) {
            continue;
        }
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

/// What the interposer noted in the writers journal beside the profile.
struct Suspects {
    /// Opened for writing by a process that left no profile record: it did
    /// not exit cleanly, so they hold what it wrote until then.
    incomplete: Vec<String>,
    /// On a standard stream (descriptor 0-2) of a program in
    /// interposer-only mode, where its stdio reads and writes reach the
    /// placeholder and fail: they may lack what the program meant to write.
    on_streams: Vec<String>,
}

/// Reads the journal from `start` (its length when the job began, as it is
/// appended to like the profile): "pid path" for a file opened for writing,
/// "stream pid path" for one on a standard stream (crates/surge-preload/src/profile.rs).
fn suspects(profile: &Path, start: u64, summary: &ProfileSummary) -> Suspects {
    let journal = std::fs::read(surge_cluster::writers_journal(profile)).unwrap_or_default();
    let journal = String::from_utf8_lossy(journal.get(start as usize..).unwrap_or_default());
    let (mut incomplete, mut on_streams) = (BTreeSet::new(), BTreeSet::new());
    for line in journal.lines() {
        if let Some(noted) = line.strip_prefix("stream ") {
            on_streams.extend(noted.split_once(' ').map(|(_, path)| path.to_string()));
        } else if let Some((pid, path)) = line.split_once(' ') {
            if pid.parse().is_ok_and(|pid: u64| !summary.pids.contains(&pid)) {
                incomplete.insert(path.to_string());
            }
        }
    }
    Suspects { incomplete: incomplete.into_iter().collect(), on_streams: on_streams.into_iter().collect() }
}

/// The files to stage: every buffer file of a job-scoped cluster; on a
/// shared cluster, the files this job wrote.
fn files_to_stage(
    client: &Client,
    job_scoped: bool,
    mount: &str,
    written: &BTreeSet<String>,
) -> Result<Vec<(String, u64)>, String> {
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

/// `cmd` run as `/bin/sh PROGRAM ARGS...`, with its environment: what
/// execvp does with a file the kernel refuses with ENOEXEC. A program named
/// without a slash is the one the PATH search found.
fn through_shell(cmd: &Command) -> Command {
    let program = Path::new(cmd.get_program());
    let searched = std::env::var_os("PATH").filter(|_| !program.as_os_str().as_bytes().contains(&b'/'));
    let script = searched
        .and_then(|dirs| std::env::split_paths(&dirs).map(|d| d.join(program)).find(|p| is_executable(p)))
        .unwrap_or_else(|| program.to_path_buf());
    let mut shell = Command::new("/bin/sh");
    shell.arg(script).args(cmd.get_args());
    for (name, value) in cmd.get_envs() {
        match value {
            Some(value) => shell.env(name, value),
            None => shell.env_remove(name),
        };
    }
    shell
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

pub fn run(ctx: &Ctx, a: RunArgs) -> CmdResult {
    // First: from here on a signal winds the job down instead of killing surge run.
    let interrupts = signals::watch().map_err(|e| format!("cannot take SIGINT, SIGTERM and SIGHUP: {e}"))?;
    a.drain.check(true)?;
    let mount = super::validated_mount(&a.mount)?;
    let directives = directives(&a, &mount)?;
    let mut autotune = a.autotune.plan(&a.command, &mount)?;
    let preload = if a.no_preload { None } else { Some(super::preload_library()?) };
    let unix_now = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?;
    let job = allocation::job_id(unix_now)?;
    let profile = a.profile.clone().unwrap_or_else(|| home_dir().join(".surge/profiles").join(format!("{job}.jsonl")));
    for abandoned in orphans::find(&default_buffer()) {
        match orphans::clean(&abandoned, a.quiet) {
            Ok(note) | Err(note) => note!("surge: {note}"),
        }
    }
    let mut cluster = bring_up(ctx, &a, &job)?;
    if let Err(e) = stage_in(&cluster, &directives, a.quiet) {
        let _ = tear_down(&mut cluster, &a, false);
        return Err(e);
    }
    if let Some(tuning) = autotune.as_mut() {
        tuning.before(&cluster.file);
    }
    let fuse_journal = PathBuf::from(format!("{}.fuse-writers", profile.display()));
    let journal_start = std::fs::metadata(surge_cluster::writers_journal(&profile)).map_or(0, |m| m.len());
    let job_mount = match mount_for_job(&cluster, &a, &mount, &fuse_journal) {
        Ok(m) => m,
        Err(e) => {
            let _ = tear_down(&mut cluster, &a, false);
            return Err(e);
        }
    };

    let mut cmd = Command::new(&a.command[0]);
    cmd.args(&a.command[1..]);
    if let Some(preload) = &preload {
        // After what is preloaded already: a profiler such as Darshan sees
        // the job's calls first and passes them on to the interposer.
        let preload_list = match std::env::var("LD_PRELOAD") {
            Ok(existing) if !existing.is_empty() => format!("{existing}:{}", preload.display()),
            _ => preload.display().to_string(),
        };
        cmd.env("LD_PRELOAD", preload_list);
    }
    cmd.env("SURGE_CLUSTER", &cluster.file)
        .env("SURGE_MOUNT", &mount)
        .env("SURGE_JOB_ID", &job)
        .env("SURGE_JOB_START", format!("{:.6}", unix_now.as_secs_f64()))
        .env("SURGE_PROFILE", &profile);
    let mode = match (&job_mount, preload.is_some()) {
        (JobMount::PreloadOnly, _) => "the interposer only",
        (_, true) => "FUSE with the interposer",
        (_, false) => "FUSE only",
    };
    let started = Instant::now();
    let status = if interrupts.count() > 0 {
        note!("surge: interrupted before the job started: not running {}", a.command.join(" "));
        None
    } else {
        note!("surge: running {} (job {job}, Surge at {mount} through {mode})", a.command.join(" "));
        let grace = Duration::from_secs(a.grace);
        Some(match signals::run_job(&mut cmd, &interrupts, grace) {
            // An executable without `#!`: a shell script, which /bin/sh runs
            // (as shells, execvp, srun and mpirun do).
            Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
                signals::run_job(&mut through_shell(&cmd), &interrupts, grace)
            }
            status => status,
        })
    };
    let wall = started.elapsed().as_secs_f64();
    let command_code: u8 = match &status {
        Some(Ok(s)) => s.code().map(|c| c as u8).or_else(|| s.signal().map(|sig| 128 + sig as u8)).unwrap_or(1),
        Some(Err(e)) => {
            note!("surge: cannot run {}: {e}", a.command[0]);
            127
        }
        None => 0,
    };
    if command_code != 0 {
        note!("surge: {} exited with status {command_code}", a.command[0]);
    }
    // Every file the job had open is closed (or detached) before stage-out reads it.
    if let JobMount::Fuse(mounted) = job_mount {
        if let Err(e) = mounted.unmount() {
            note!("surge: {e}");
        }
    }

    let summary = read_profile(&profile, &job).unwrap_or_else(|e| {
        note!("surge: the profile is unreadable: {e}");
        ProfileSummary::default()
    });
    let mut summary = summary;
    let through_fuse = read_fuse_journal(&fuse_journal, &mount);
    summary.written.extend(through_fuse.written_files.iter().cloned());
    if let Some(tuning) = autotune.as_mut() {
        let unfinished = match interrupts.first() {
            Some(sig) => Some(format!("interrupted by signal {sig}")),
            None => (command_code != 0).then(|| format!("the job failed (exit status {command_code})")),
        };
        tuning.after(&cluster.file, &profile, &job, unfinished);
    }
    let Suspects { incomplete, on_streams } = suspects(&profile, journal_start, &summary);
    if !on_streams.is_empty() {
        note!(
            "surge: {} file(s) were read or written on a standard stream (a shell redirection) through a stdio stream the interposer could not take over (the program printed the error); they are staged out as they are, possibly empty or short; FUSE (not --no-fuse) serves such programs: {}",
            on_streams.len(),
            on_streams.join(", ")
        );
    }
    if !incomplete.is_empty() {
        note!(
            "surge: {} file(s) may be incomplete (a writer did not exit cleanly; they hold what it wrote until then, and are staged out as they are): {}",
            incomplete.len(),
            incomplete.join(", ")
        );
    }
    // They hold every byte the writer was told was written: stage them too
    // (a job-scoped cluster stages every file anyway).
    summary.written.extend(incomplete.iter().cloned());
    let staged = stage_out(&cluster, &a, &mount, &summary, &directives, &interrupts);
    let stage_failed = !matches!(staged, Ok((_, _, 0)));
    let teardown = tear_down(&mut cluster, &a, stage_failed);

    let code = match interrupts.first() {
        Some(sig) => 128 + sig as u8,
        None if command_code == 0 && stage_failed && !a.no_stage_out => STAGE_OUT_FAILED,
        None => command_code,
    };
    let mut report = format!("surge: summary of job {job}\n");
    report += &format!("  command        {} (exit status {command_code}, {wall:.2} s)\n", a.command.join(" "));
    if let Some(sig) = interrupts.first() {
        report +=
            &format!("  interrupted    by signal {sig} ({} received); surge run exits {code}\n", interrupts.count());
    }
    report += &format!("  processes      {} with Surge I/O\n", summary.processes);
    for (what, interposed, kernel) in [
        ("written", summary.bytes_written, through_fuse.bytes_written),
        ("read   ", summary.bytes_read, through_fuse.bytes_read),
    ] {
        let total = interposed + kernel;
        let by_kernel = if kernel > 0 { format!("; {} through the FUSE mount", human(kernel)) } else { String::new() };
        report +=
            &format!("  {what}        {} ({:.0} MB/s over the run{by_kernel})\n", human(total), mbps(total, wall));
    }
    report += &format!("  time in I/O    {:.2} s summed over processes\n", summary.io_seconds);
    report += &match &staged {
        Ok((files, bytes, failed)) => {
            format!("  staged out     {files} file(s), {} ({failed} failed)\n", human(*bytes))
        }
        Err(e) => format!("  staged out     no: {e}\n"),
    };
    if !incomplete.is_empty() {
        report += &format!(
            "  suspect        {} file(s) from a writer that did not exit cleanly: {}\n",
            incomplete.len(),
            incomplete.join(", ")
        );
    }
    if !on_streams.is_empty() {
        report += &format!(
            "  suspect        {} file(s) read or written through a standard stream without the FUSE mount: {}\n",
            on_streams.len(),
            on_streams.join(", ")
        );
    }
    for event in &cluster.daemon_events {
        report += &format!("  daemons        {event}\n");
    }
    for line in autotune.iter().flat_map(|tuning| tuning.summary()) {
        report += &format!("  autotune       {line}\n");
    }
    report += &format!("  profile        {}\n", profile.display());
    note!("{}", report.trim_end());
    if let Some(path) = &a.summary {
        if let Err(e) = std::fs::write(path, &report) {
            note!("surge: cannot write the summary to {}: {e}", path.display());
        }
    }
    if let Err(e) = teardown {
        note!("surge: {e}");
    }
    Ok(ExitCode::from(code))
}

/// (files staged, bytes, failures), or why nothing was staged.
fn stage_out(
    cluster: &JobCluster,
    a: &RunArgs,
    mount: &str,
    summary: &ProfileSummary,
    directives: &[Directive],
    interrupts: &Interrupts,
) -> Result<(usize, u64, usize), String> {
    if a.no_stage_out {
        return Err("--no-stage-out".into());
    }
    if interrupts.hurry() {
        return Err("skipped after a second signal (the buffer is kept)".into());
    }
    if let Some(supervisor) = &cluster.supervisor {
        supervisor.settle();
    }
    let client = Client::connect(&cluster.file).map_err(|e| e.to_string())?;
    // Directed copies first; the files they cover need no copy at their own PFS path.
    let directed = staging::stage_out(&client, directives, a.quiet, &|| interrupts.hurry());
    report_staged("to the stage-out destinations", &directed);
    let mut files = files_to_stage(&client, cluster.started.is_some(), mount, &summary.written)?;
    files.retain(|(path, _)| !directed.done.contains(path));
    let report = stage_files(&client, &files, a.quiet, Report::Stderr, &|| interrupts.hurry());
    let mut failed = report.failures.len() + directed.failures.len();
    if cluster.started.is_some() {
        // The buffer goes only if every file's PFS copy is current: one
        // written after its stage-out (by a process the job left running)
        // keeps it.
        let mut stale = Vec::new();
        collect(&client, "/", false, &mut stale).map_err(|e| format!("listing the buffer: {e}"))?;
        stale.retain(|(path, _)| !report.failures.contains(path) && !directed.done.contains(path));
        if !stale.is_empty() {
            let paths: Vec<&str> = stale.iter().map(|(path, _)| path.as_str()).collect();
            note!(
                "surge: {} file(s) have no current PFS copy (changed after their stage-out, or not staged): {}",
                paths.len(),
                paths.join(", ")
            );
            failed += stale.len();
        }
        // The directories last, each after its contents (and after the
        // listing above, which would move their atimes on): their modes and
        // times, and the directories the job left empty (the buffer goes).
        let elsewhere = |dir: &str| {
            directives.iter().any(|d| {
                d.direction == Direction::Out
                    && (d.surge == dir || dir.strip_prefix(d.surge.as_str()).is_some_and(|rest| rest.starts_with('/')))
            })
        };
        let (_, unmade) = stage_directories(&client, "/", &elsewhere);
        if !unmade.is_empty() {
            note!("surge: {} directory(ies) could not be staged out: {}", unmade.len(), unmade.join(", "));
            failed += unmade.len();
        }
    }
    Ok((report.staged + directed.files, report.bytes + directed.bytes, failed))
}

/// The staging directives of the command line and the manifest, checked before anything starts.
fn directives(a: &RunArgs, mount: &str) -> Result<Vec<Directive>, String> {
    let mut all = Vec::new();
    for (direction, specs) in [(Direction::In, &a.stage_in), (Direction::Out, &a.stage_out)] {
        for spec in specs {
            all.push(Directive::parse(direction, spec, mount)?);
        }
    }
    if let Some(manifest) = &a.manifest {
        all.extend(staging::read_manifest(manifest, mount)?);
    }
    // A missing input is found before a cluster is started for nothing.
    for d in all.iter().filter(|d| d.direction == Direction::In) {
        std::fs::metadata(&d.host).map_err(|e| format!("stage-in source {}: {e}", d.host.display()))?;
    }
    if a.no_stage_out && all.iter().any(|d| d.direction == Direction::Out) {
        return Err("--no-stage-out contradicts the stage-out directives given".into());
    }
    Ok(all)
}

/// Copies the stage-in directives into the job's cluster; any failure stops the job before it starts.
fn stage_in(cluster: &JobCluster, directives: &[Directive], quiet: bool) -> Result<(), String> {
    if !directives.iter().any(|d| d.direction == Direction::In) {
        return Ok(());
    }
    let client = Client::connect(&cluster.file).map_err(|e| e.to_string())?;
    let not_started = |e| format!("stage-in failed, the job was not started: {e}");
    let staged = staging::stage_in(&client, directives, quiet).map_err(not_started)?;
    report_staged("into Surge", &staged);
    if staged.failures.is_empty() {
        Ok(())
    } else {
        Err(not_started(staged.failures.join("; ")))
    }
}

fn report_staged(where_to: &str, staged: &Staged) {
    if staged.files > 0 || !staged.failures.is_empty() {
        note!("surge: staged {} file(s), {}, {where_to}, every copy verified", staged.files, staged.took);
    }
    for failure in &staged.failures {
        note!("surge: staging {where_to} failed: {failure}");
    }
}

/// Stops a cluster this run started; its buffer goes unless a file in it
/// has no verified PFS copy (or --keep / --no-stage-out).
fn tear_down(cluster: &mut JobCluster, a: &RunArgs, stage_failed: bool) -> Result<(), String> {
    if let Some(supervisor) = cluster.supervisor.take() {
        cluster.daemon_events = supervisor.stop();
    }
    let Some(buffer) = &cluster.started else { return Ok(()) };
    // The lock files of its files (the interposer's `locks`): no process of the job holds them now.
    if let Ok(file) = surge_cluster::ClusterFile::load(&cluster.file) {
        let _ = std::fs::remove_dir_all(surge_cluster::lock_dir(&file.cluster_id));
    }
    let stopped = launch::stop(&cluster.file, Duration::from_secs(10));
    if let Some(redis) = cluster.redis.as_mut() {
        redis.stop();
    }
    for note in stopped? {
        note!("surge: {note}");
    }
    if a.keep || a.no_stage_out || stage_failed {
        // Kept on purpose: not an abandoned cluster for the next run to wind down.
        std::fs::remove_file(buffer.join(orphans::OWNER_FILE)).ok();
        match &cluster.nodes {
            // Said for every node when their daemons' launcher has ended (NodeDaemons).
            Some(_) => {}
            None => note!(
                "surge: the buffer stays at {} (start a cluster on it with `surge start --buffer {0} --pfs {}`)",
                buffer.display(),
                a.pfs.display()
            ),
        }
        return Ok(());
    }
    std::fs::remove_dir_all(buffer).map_err(|e| format!("could not remove the job's buffer {}: {e}", buffer.display()))
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from)
}
