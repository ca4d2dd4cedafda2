//! `surge`: start, stop and inspect a Surge cluster, move files in and out
//! of it, stage them to the parallel file system, and benchmark it.
//!
//! Where things live: `args.rs` is the top-level grammar (`Cli`, the
//! `Command` enum) only; each command's arguments (`...Args`) sit beside its
//! `run` function, in `cmd/<group>.rs` or `bench/<name>.rs`; this file
//! dispatches a parsed command to it.
//!
//! A reader that goes away (`surge ls -l | head -3`) ends a command as it
//! ends coreutils: quietly, by SIGPIPE. Commands that must wind something
//! down whatever becomes of their output (`surge run`, a `--foreground`
//! start or mount, `stop`, the benches) keep SIGPIPE ignored and write
//! their diagnostics with [`note!`], which drops a line stderr can no longer
//! take where `eprintln!` would panic.

/// `eprintln!` that drops its line when stderr is closed instead of panicking.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod allocation;
mod args;
mod autotune;
mod bench;
mod cmd;
mod drain_settings;
mod install;
mod launch;
mod node_daemons;
mod stage_settings;
mod supervise;
mod units;

use args::{BenchCommand, Cli, Command};
use clap::Parser;
use cmd::{cluster, drain, files, fsck, mount, run, scrub, stage_out, stripe, top, tune, CmdResult, Ctx};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !cli.command.winds_down() {
        // SAFETY: restoring the default disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            note!("surge: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn dispatch(cli: Cli) -> CmdResult {
    let cluster_file = cli.cluster.clone().unwrap_or_else(surge_cluster::default_path);
    let ctx = Ctx { cluster_file };
    match cli.command {
        Command::Start(a) => cluster::start(&ctx, a),
        Command::Stop(a) => cluster::stop(&ctx, a),
        Command::Status(a) => cluster::status(&ctx, a),
        Command::Top(a) => top::top(&ctx, a),
        Command::Ls(a) => files::ls(&ctx, a),
        Command::Cat(a) => files::cat(&ctx, a),
        Command::Cp(a) => files::cp(&ctx, a),
        Command::Rm(a) => files::rm(&ctx, a),
        Command::Mkdir(a) => files::mkdir(&ctx, a),
        Command::Setstripe(a) => stripe::setstripe(&ctx, a),
        Command::Getstripe(a) => stripe::getstripe(&ctx, a),
        Command::StageOut(a) => stage_out::stage_out(&ctx, a),
        Command::Scrub(a) => scrub::scrub(&ctx, a),
        Command::Fsck(a) => fsck::fsck(&ctx, a),
        Command::Mount(a) => mount::mount(&ctx, a),
        Command::Umount(a) => mount::umount(a),
        Command::Run(a) => run::run(&ctx, a),
        Command::Drain(c) => drain::drain(&ctx, c),
        Command::Ckpt(c) => drain::ckpt(&ctx, c),
        Command::Tune(a) => tune::tune(a),
        Command::Testbed(c) => {
            let me = std::env::current_exe().map_err(|e| format!("cannot find the surge binary: {e}"))?;
            surge_testbed::cli::run(c, me)
        }
        Command::Bench(BenchCommand::Core(a)) => bench::core::run(a),
        Command::Bench(BenchCommand::Fio(a)) => bench::fio::run(a),
        Command::Bench(BenchCommand::Io500(a)) => bench::io500::run(a),
        Command::Bench(BenchCommand::Copy(a)) => bench::copy::run(a),
        Command::Bench(BenchCommand::Conns(a)) => bench::conns::run(a),
        Command::Bench(BenchCommand::Bbos(a)) => bench::bbos::run(a),
        Command::Bench(BenchCommand::Autotune(a)) => bench::autotune::run(a),
        Command::BenchWorker(a) => bench::worker::run(a),
        Command::BenchBbosApp(a) => bench::bbos_testbed::run_worker(a),
    }
}
