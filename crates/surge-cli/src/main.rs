//! `surge`: start, stop and inspect a Surge cluster, move files in and out
//! of it, stage them to the parallel file system, and benchmark it.

mod args;
mod bench;
mod cmd;
mod launch;
mod units;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("surge: {e:#}");
            ExitCode::from(1)
        }
    }
}
