//! The top-level command-line grammar: `Cli` and the `Command` enum. Each
//! command's own arguments are defined beside the function that runs it
//! (cmd/<group>.rs, bench/<name>.rs), which this file names.

use crate::bench::{
    autotune::AutotuneBenchArgs, bbos::BbosArgs, bbos_testbed::AppArgs, conns::ConnsArgs, copy::CopyArgs,
    core::CoreArgs, fio::FioArgs, io500::Io500Args, worker::WorkerArgs,
};
use crate::cmd::cluster::{StartArgs, StatusArgs, StopArgs};
use crate::cmd::drain::{CkptCommand, DrainCommand};
use crate::cmd::files::{CpArgs, LsArgs, MkdirArgs, RmArgs};
use crate::cmd::fsck::FsckArgs;
use crate::cmd::mount::{MountArgs, UmountArgs};
use crate::cmd::run::RunArgs;
use crate::cmd::stage_out::StageOutArgs;
use crate::cmd::stripe::{GetstripeArgs, SetstripeArgs};
use crate::cmd::top::TopArgs;
use crate::cmd::tune::TuneArgs;
use crate::cmd::PathsArgs;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "surge",
    version,
    about = "Surge: a user-space burst-buffer file system for HPC clusters",
    long_about = "Surge: a user-space burst-buffer file system for HPC clusters.\n\n\
        Start a cluster with `surge start`, move files with `surge cp`, copy them to the \
        parallel file system with `surge stage-out`, and stop it with `surge stop`. Paths inside \
        Surge are written under the mount prefix (SURGE_MOUNT, default /surge: /surge/ckpt/a) or \
        as surge:/ckpt/a; commands that only take Surge paths also take namespace paths (/ckpt/a). \
        `surge cp` reads a relative path as local and places another absolute path by where it \
        exists, refusing one that exists in both places or in neither (docs/core.md, Paths)."
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
    /// A live view of the cluster, refreshed every second: per daemon and per job, read and write
    /// bandwidth, requests per second, queue depth, buffer space and stage-out progress.
    Top(TopArgs),
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
    /// Set the default layout of directories (-d deletes it), or create empty files with a layout.
    Setstripe(SetstripeArgs),
    /// Show the layout of files and directories (-c, -S, -i: one field per path).
    Getstripe(GetstripeArgs),
    /// Copy files from the buffer to the same path on the PFS, verifying every copy.
    StageOut(StageOutArgs),
    /// Re-check every block of files (directories recursively) against the checksums the daemons
    /// keep beside the data; list each damaged block with its file offset and daemon, and exit 1
    /// if any is damaged (files only on the PFS have nothing in the buffer to check).
    Scrub(PathsArgs),
    /// Check the namespace against every daemon's objects on the running cluster: orphans, lost
    /// or untrusted stripes, stray objects, doomed and held files, abandoned stage-out temps,
    /// dangling names and link counts (with --verify-data every block, as scrub). Read-only
    /// unless --repair; exit 0 clean, 1 problems left, 2 all repaired, 3 not checked.
    Fsck(FsckArgs),
    /// Mount Surge at a directory through FUSE (default SURGE_MOUNT, else /surge), so every
    /// program sees it as a file system; a background server process serves it.
    Mount(MountArgs),
    /// Unmount a Surge mount (a stale one, whose server died, too).
    Umount(UmountArgs),
    /// Run a program (or an mpirun command line) on Surge: bring up a job-scoped cluster (or
    /// join a running one), run it with the interposer, stage out what it wrote, summarize.
    Run(RunArgs),
    /// The data manager, which drains the buffer to the PFS while jobs run (`surge start --drain
    /// bbos`): `surge drain status` shows its policy, thresholds, rates and each job's checkpoints.
    #[command(subcommand)]
    Drain(DrainCommand),
    /// Checkpoint settings the data manager uses: `surge ckpt mtbf JOB SECONDS`.
    #[command(subcommand)]
    Ckpt(CkptCommand),
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
    BenchWorker(WorkerArgs),
    /// (internal) one checkpointing application of `surge bench bbos --testbed`, or its tally.
    #[command(hide = true)]
    BenchBbosApp(AppArgs),
}

impl Command {
    /// Whether the command winds something down (a job, daemons, a mount,
    /// clusters of a benchmark) and so must outlive a reader of its output
    /// that went away; the others end by SIGPIPE then (see main.rs).
    pub fn winds_down(&self) -> bool {
        match self {
            Command::Run(_)
            | Command::Stop(_)
            | Command::Testbed(_)
            | Command::Bench(_)
            | Command::BenchWorker(_)
            | Command::BenchBbosApp(_) => true,
            Command::Start(a) => a.foreground,
            Command::Mount(a) => a.foreground,
            _ => false,
        }
    }
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Client library against direct I/O on the buffer directory: sequential write/read and creates.
    Core(CoreArgs),
    /// fio through the interposer against fio on the buffer's device; and the interposer's cost outside the mount.
    Fio(FioArgs),
    /// The IO500 phases with IOR and mdtest (built from their release archive) on Surge, under
    /// `surge run` with FUSE and the interposer and with the interposer alone, against tmpfs; the score and ratios.
    Io500(Io500Args),
    /// `surge cp`, stage-in and stage-out (verified) of one file against `cp` between the same directories.
    Copy(CopyArgs),
    /// Connections per daemon and their policies (Mulconn) on the test bed: 16 threads, 1-8
    /// connections, TtoS/TtoM/auto, with the daemon's per-connection cap off and on (needs root).
    Conns(ConnsArgs),
    /// Burst-buffer drain policies (Dedicated, Harmonia MaxEff/MaxBW, BBOS), simulated at the
    /// evaluation setup of [Sung20, ch. 5] scaled down.
    Bbos(BbosArgs),
    /// `surge run --autotune`: a job whose first run had a poor layout (one stripe, many
    /// writers), run again with the tuner's layout, on the test bed (shaped links) and on localhost.
    Autotune(AutotuneBenchArgs),
}
