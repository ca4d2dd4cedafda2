//! Command-line grammar.

use crate::units::parse_size;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use surge_cluster::{ConnCount, ConnPolicy};

#[derive(Parser)]
#[command(
    name = "surge",
    version,
    about = "Surge: a user-space burst-buffer file system for HPC clusters",
    long_about = "Surge: a user-space burst-buffer file system for HPC clusters.\n\n\
        Start a cluster with `surge start`, move files with `surge cp`, copy them to the \
        parallel file system with `surge stage-out`, and stop it with `surge stop`. Paths inside \
        Surge are written either as namespace paths (/ckpt/a) or under the mount prefix \
        (SURGE_MOUNT, default /surge: /surge/ckpt/a); `surge cp` needs one of those forms, or \
        `surge:/ckpt/a`, to tell them from local paths."
)]
pub struct Cli {
    /// Cluster file to use (default: $SURGE_CLUSTER, else ~/.surge/cluster.toml).
    #[arg(long, global = true, env = "SURGE_CLUSTER", value_name = "FILE")]
    pub cluster: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Launch daemons on this host (one `surge start` per host under mpirun for many hosts) and write the cluster file.
    Start(StartArgs),
    /// Shut every daemon of the cluster down and remove the cluster file.
    Stop(StopArgs),
    /// Show each daemon's state, capacity used, files and bytes, and each job's requests at its scheduling point.
    Status(StatusArgs),
    /// List directories or show files.
    Ls(LsArgs),
    /// Write files to standard output.
    Cat(PathsArgs),
    /// Copy files between local paths and Surge (either direction, or within Surge).
    Cp(CpArgs),
    /// Remove files (and directories with -r).
    Rm(RmArgs),
    /// Create directories.
    Mkdir(MkdirArgs),
    /// Set a directory's default layout, or create an empty file with a layout.
    Setstripe(SetstripeArgs),
    /// Show the layout of a file or directory.
    Getstripe(PathsArgs),
    /// Copy files from the buffer to the same path on the PFS, verifying every copy.
    StageOut(StageOutArgs),
    /// Re-check every block of files (directories recursively) against the checksums the daemons
    /// keep beside the data; list each damaged block with its file offset and daemon, and exit 1
    /// if any is damaged (files only on the PFS have nothing in the buffer to check).
    Scrub(PathsArgs),
    /// Mount Surge at a directory through FUSE (default SURGE_MOUNT, else /surge), so every
    /// program sees it as a file system; a background server process serves it.
    Mount(MountArgs),
    /// Unmount a Surge mount (a stale one, whose server died, too).
    Umount(UmountArgs),
    /// Run a program (or an mpirun command line) on Surge: bring up a job-scoped cluster (or
    /// join a running one), run it with the interposer, stage out what it wrote, summarize.
    Run(RunArgs),
    /// The tuner (Python package surge_tune): root causes of slow I/O from Darshan logs and Surge
    /// profiles, DCA-IO layouts, ML predictions. `surge tune --help` lists its commands.
    #[command(disable_help_flag = true)]
    Tune(TuneArgs),
    /// A multi-host test bed on this machine: network namespaces joined by veth pairs (link
    /// rate set with tc when asked), daemons on some hosts, clients on the others (needs root).
    #[command(subcommand)]
    Testbed(surge_testbed::cli::TestbedCommand),
    /// Benchmarks that run Surge and its baseline in the same run and print the ratios.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// (internal) one benchmark client process.
    #[command(hide = true)]
    BenchWorker(crate::bench::worker::WorkerArgs),
}

#[derive(Args)]
pub struct StartArgs {
    /// Daemons to start on this host.
    #[arg(long, short = 'n', default_value_t = 2)]
    pub daemons: u32,
    /// Start daemon N of the running cluster again after it died, on its own address and
    /// directories (it comes back with its objects; clients reconnect). The other options
    /// are ignored: the daemon gets the settings it was first started with.
    #[arg(long, value_name = "N")]
    pub daemon: Option<u32>,
    /// Buffer-tier directory on fast local storage (each daemon uses BUFFER/daemon-<index>);
    /// created mode 700, and refused if another user owns it or may write to it.
    #[arg(long, value_name = "DIR", default_value_os_t = default_buffer())]
    pub buffer: PathBuf,
    /// Parallel-file-system tier: a directory shared by all hosts (Lustre in production).
    #[arg(long, value_name = "DIR", default_value_os_t = default_pfs())]
    pub pfs: PathBuf,
    /// Address the daemons listen on: an IP, or `hostname` for the address this host's name
    /// resolves to (what a multi-host `mpirun ... surge start` wants).
    #[arg(long, default_value = "127.0.0.1", value_name = "IP")]
    pub listen: String,
    /// Capacity limit per daemon (e.g. 10G); writes beyond it fail with ENOSPC. Default: an equal
    /// share of the buffer device among this host's daemons.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    pub capacity: Option<u64>,
    /// Default stripe count of the root directory (-1 = every daemon).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub stripe_count: i64,
    /// Default stripe size of the root directory.
    #[arg(long, value_parser = parse_size, default_value = "1M", value_name = "BYTES")]
    pub stripe_size: u64,
    /// Seconds to wait for every daemon (on every host) to come up.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Connections each client opens to each daemon: 1-16, or auto (as many as the measured
    /// store rate over the measured per-connection rate calls for). Written to the cluster
    /// file; a client's SURGE_CONNS overrides it.
    #[arg(long, default_value = "auto", value_name = "N")]
    pub conns: ConnCount,
    /// How clients spread requests over those connections: ttos (a file stays on its opening
    /// thread's connection), ttom (requests take the connections in turn), auto (ttos for
    /// writes, ttom for reads). A client's SURGE_CONN_POLICY overrides it.
    #[arg(long, default_value = "auto", value_name = "POLICY")]
    pub conn_policy: ConnPolicy,
    /// Cap each daemon connection's data rate (e.g. 600M or 600MB/s), to model a file system
    /// whose single-connection path is the bottleneck. Off by default.
    #[arg(long, value_parser = surge_cluster::parse_rate, value_name = "RATE")]
    pub conn_rate: Option<u64>,
}

#[derive(Args)]
pub struct StopArgs {
    /// Seconds to wait for each daemon to exit before killing it (local daemons only).
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
}

#[derive(Args)]
pub struct StatusArgs {
    /// Print machine-readable TOML instead of a table.
    #[arg(long)]
    pub toml: bool,
}

#[derive(Args)]
pub struct LsArgs {
    /// Long listing: kind, mode, size, tier, layout, modification time.
    #[arg(short = 'l')]
    pub long: bool,
    #[arg(default_value = "/")]
    pub paths: Vec<String>,
}

#[derive(Args)]
pub struct PathsArgs {
    #[arg(required = true)]
    pub paths: Vec<String>,
}

#[derive(Args)]
pub struct CpArgs {
    /// Copy directories recursively.
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Sources, then the destination (a directory when there are several sources).
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<String>,
}

#[derive(Args)]
pub struct RmArgs {
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Ignore paths that do not exist.
    #[arg(short = 'f', long)]
    pub force: bool,
    #[arg(required = true)]
    pub paths: Vec<String>,
}

#[derive(Args)]
pub struct MkdirArgs {
    /// Create parents as needed; no error if the directory exists.
    #[arg(short = 'p', long)]
    pub parents: bool,
    #[arg(required = true)]
    pub paths: Vec<String>,
}

#[derive(Args)]
pub struct SetstripeArgs {
    /// Stripe count (-1 = every daemon, 0 = inherit).
    #[arg(short = 'c', long = "stripe-count", allow_negative_numbers = true, default_value_t = 0)]
    pub count: i64,
    /// Stripe size, a multiple of 64K (0 = inherit).
    #[arg(short = 'S', long = "stripe-size", value_parser = parse_size, default_value = "0")]
    pub size: u64,
    /// First daemon (-1 = spread automatically).
    #[arg(short = 'i', long = "stripe-index", allow_negative_numbers = true, default_value_t = -1)]
    pub first: i64,
    pub path: String,
}

#[derive(Args)]
pub struct StageOutArgs {
    /// Every file in the namespace.
    #[arg(long, conflicts_with = "paths")]
    pub all: bool,
    /// Copy again files that already have a verified PFS copy.
    #[arg(long)]
    pub force: bool,
    /// No progress bar (files that fail are still named, with the reason, on stderr).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Files or directories (recursively).
    #[arg(required_unless_present = "all")]
    pub paths: Vec<String>,
}

#[derive(Args)]
#[command(after_help = "Examples:\n  surge run -- ./app --out /surge/ckpt\n  surge run --daemons 4 -- mpirun -np 8 ./app\n\n\
    Surge is mounted at --mount (default /surge) through FUSE for the length of the job, so every \
    program sees it as a file system; LD_PRELOAD=libsurge_preload.so is added after any library \
    already preloaded, as a fast path for reads and writes. Without FUSE (no /dev/fuse, or --no-fuse) \
    only the interposer serves /surge: see docs/interposer.md for what works in that mode. Every file \
    written under the mount is staged out to the PFS with verification after the command ends. \
    SIGINT, SIGTERM and SIGHUP are passed to the command, and the job is then wound down in order.")]
pub struct RunArgs {
    /// Daemons of the job-scoped cluster (when no cluster is running).
    #[arg(long, short = 'n', default_value_t = 2)]
    pub daemons: u32,
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
    /// Do not mount through FUSE: the interposer alone serves the mount prefix.
    #[arg(long, conflicts_with = "no_preload")]
    pub no_fuse: bool,
    /// Do not preload the interposer: every call goes through the FUSE mount.
    #[arg(long)]
    pub no_preload: bool,
    /// Leave the files in the buffer only (no stage-out).
    #[arg(long)]
    pub no_stage_out: bool,
    /// Keep the job-scoped buffer directory after the run.
    #[arg(long)]
    pub keep_buffer: bool,
    /// The job's I/O profile (JSON lines).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args)]
pub struct MountArgs {
    /// Where to mount (default: $SURGE_MOUNT, else /surge); created when missing, refused when it holds files.
    #[arg(value_name = "DIR")]
    pub mountpoint: Option<PathBuf>,
    /// Serve in this process until unmounted or signalled, instead of starting a server.
    #[arg(long)]
    pub foreground: bool,
    /// Threads serving kernel requests at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// Cache file data in the kernel's page cache instead of direct I/O (faster small
    /// rereads; bytes written by the interposer or another node show after reopening).
    #[arg(long)]
    pub page_cache: bool,
    /// Let other users use the mount (needs user_allow_other in /etc/fuse.conf unless root).
    #[arg(long)]
    pub allow_other: bool,
    /// The server's log (default: mount.log next to the cluster file).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Append the Surge path of each file opened for writing to FILE (what `surge run` stages out).
    #[arg(long, value_name = "FILE")]
    pub writers_journal: Option<PathBuf>,
}

impl MountArgs {
    pub fn config(&self) -> surge_fuse::MountConfig {
        surge_fuse::MountConfig {
            threads: self.threads as usize,
            direct_io: !self.page_cache,
            allow_other: self.allow_other,
            writers_journal: self.writers_journal.clone(),
            ..Default::default()
        }
    }

    /// The serving options, for the server process's command line.
    pub fn forwarded(&self) -> Vec<String> {
        let mut args = vec![format!("--threads={}", self.threads)];
        if self.page_cache {
            args.push("--page-cache".into());
        }
        if self.allow_other {
            args.push("--allow-other".into());
        }
        if let Some(journal) = &self.writers_journal {
            args.push(format!("--writers-journal={}", journal.display()));
        }
        args
    }
}

impl Default for MountArgs {
    fn default() -> Self {
        MountArgs {
            mountpoint: None,
            foreground: false,
            threads: 8,
            page_cache: false,
            allow_other: false,
            log: None,
            writers_journal: None,
        }
    }
}

#[derive(Args)]
pub struct UmountArgs {
    /// The mount (default: $SURGE_MOUNT, else /surge).
    #[arg(value_name = "DIR")]
    pub mountpoint: Option<PathBuf>,
}

#[derive(Args)]
pub struct TuneArgs {
    /// Passed to `python3 -m surge_tune` as they are.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Client library against direct I/O on the buffer directory: sequential write/read and creates.
    Core(crate::bench::core::CoreArgs),
    /// fio through the interposer against fio on the buffer's device; and the interposer's cost outside the mount.
    Fio(crate::bench::fio::FioArgs),
    /// Connections per daemon and their policies (Mulconn) on the test bed: 16 threads, 1-8
    /// connections, TtoS/TtoM/auto, with the daemon's per-connection cap off and on (needs root).
    Conns(crate::bench::conns::ConnsArgs),
}

pub fn default_buffer() -> PathBuf {
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() { shm.join(format!("surge-{user}")) } else { std::env::temp_dir().join(format!("surge-{user}")) }
}

pub fn default_pfs() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    home.join(".surge").join("pfs")
}
