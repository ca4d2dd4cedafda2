//! `surge bench copy`: the copy paths against `cp` between the same
//! directories (tmpfs by default): `surge cp` of a host file into Surge
//! against `cp` + `sync` of the copy into the baseline directory; a verified stage-in
//! (`Client::stage_in`) against `cp` into the baseline directory; and the
//! stage-out of that file to its PFS path (`Client::stage_out`, the
//! daemons' verified copy) against `cp` of the source into the PFS
//! directory. Each case's two sides alternate, the one going first moving
//! on every run; medians with min–max over runs and per-run ratios.

use super::{rotated, show, show_ratio, verdict, RatioTable, Setup, SetupArgs};
use crate::cmd::CmdResult;
use crate::units::{human, parse_size};
use clap::Args;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;
use surge_client::Client;

#[derive(Args, Debug)]
#[command(after_help = "Example:\n  surge bench copy --size 256M --runs 5")]
pub struct CopyArgs {
    /// Size of the file copied (random bytes; the source sits in the scratch directory too).
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    pub size: u64,
    #[command(flatten)]
    pub setup: SetupArgs,
}

/// What is copied, each with its baseline and target (a ratio to clear).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    /// `surge cp SRC surge:/…` against `cp SRC DIRECT/…` then `sync DIRECT/…`.
    SurgeCp,
    /// `Client::stage_in` against `cp SRC DIRECT/…`.
    StageIn,
    /// `Client::stage_out` (to the PFS) against `cp SRC PFS/…`.
    StageOut,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::SurgeCp => "surge cp (vs cp + sync FILE)",
            Case::StageIn => "stage-in, verified (vs cp)",
            Case::StageOut => "stage-out to the PFS, verified (vs cp)",
        }
    }

    /// The targets: `surge cp` 0.8, the verified stagings 0.5.
    fn target(self) -> f64 {
        match self {
            Case::SurgeCp => 0.8,
            Case::StageIn | Case::StageOut => 0.5,
        }
    }
}

/// Bytes per second of `copy`, which must move `size` bytes.
fn timed(size: u64, copy: impl FnOnce() -> Result<(), String>) -> Result<f64, String> {
    let start = Instant::now();
    copy()?;
    Ok(size as f64 / start.elapsed().as_secs_f64().max(1e-9))
}

/// Runs `cmd`, failing with its stderr.
fn run_command(mut cmd: Command) -> Result<(), String> {
    let out = cmd.stdin(Stdio::null()).stdout(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim())),
    }
}

fn cp(from: &Path, to: &Path) -> Result<(), String> {
    fs::remove_file(to).ok();
    let mut cmd = Command::new("cp");
    cmd.arg(from).arg(to);
    run_command(cmd)
}

/// The baseline of `case`, bytes/s.
fn baseline(case: Case, setup: &Setup, source: &Path, size: u64) -> Result<f64, String> {
    match case {
        Case::SurgeCp => timed(size, || {
            let dest = setup.direct.join("cp.dat");
            cp(source, &dest)?;
            // `sync FILE`: the copy's own fsync, as `surge cp` makes its destination durable (a
            // whole-system sync(2) would time the other processes' dirty pages too).
            fs::File::open(&dest).and_then(|f| f.sync_all()).map_err(|e| format!("{}: {e}", dest.display()))
        }),
        Case::StageIn => timed(size, || cp(source, &setup.direct.join("in.dat"))),
        Case::StageOut => timed(size, || cp(source, &setup.root.join("pfs").join("out-cp.dat"))),
    }
}

/// Surge's side of `case`, bytes/s.
fn surge(case: Case, setup: &Setup, client: &Client, source: &Path, size: u64) -> Result<f64, String> {
    let err = |e: surge_client::Error| e.to_string();
    match case {
        Case::SurgeCp => {
            client.unlink("/cp.dat").ok();
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let mut cmd = Command::new(exe);
            cmd.arg("--cluster").arg(&setup.cluster_file).arg("cp").arg(source).arg("surge:/cp.dat");
            timed(size, || run_command(cmd))
        }
        Case::StageIn => timed(size, || client.stage_in(source, "/staged.dat", &mut |_| {}).map(drop).map_err(err)),
        Case::StageOut => {
            // A fresh version each run, so the stage-out copies it all.
            client.stage_in(source, "/staged.dat", &mut |_| {}).map_err(err)?;
            timed(size, || client.stage_out("/staged.dat", &mut |_| {}).map(drop).map_err(err))
        }
    }
}

/// Writes `size` random bytes to `path`.
fn make_source(path: &Path, size: u64) -> Result<(), String> {
    let mut out = fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(std::process::id());
    let mut left = size;
    while left > 0 {
        for word in chunk.chunks_mut(8) {
            // xorshift64: incompressible enough, and no zero runs left as holes.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            word.copy_from_slice(&seed.to_le_bytes()[..word.len()]);
        }
        let n = left.min(chunk.len() as u64) as usize;
        out.write_all(&chunk[..n]).map_err(|e| format!("{}: {e}", path.display()))?;
        left -= n as u64;
    }
    Ok(())
}

pub fn run(a: CopyArgs) -> CmdResult {
    let setup = Setup::start(&a.setup.scratch, a.setup.daemons, &a.setup.stages)?;
    let client = Client::connect(&setup.cluster_file).map_err(|e| e.to_string())?;
    let source = setup.root.join("source.dat");
    make_source(&source, a.size)?;
    let mut table: RatioTable<Case> = RatioTable::default();
    let mut step = 0usize;
    for run in 0..a.setup.runs {
        note!("surge bench copy: run {}/{}", run + 1, a.setup.runs);
        for case in [Case::SurgeCp, Case::StageIn, Case::StageOut] {
            let mut rate = [0.0; 2];
            for side in rotated(&[0usize, 1], step) {
                rate[side] = match side {
                    0 => baseline(case, &setup, &source, a.size)?,
                    _ => surge(case, &setup, &client, &source, a.size)?,
                };
            }
            step += 1;
            table.add(case, rate[0], rate[1]);
        }
    }
    println!(
        "surge bench copy: {} daemons ({}), a {} file, {} run(s) alternated, median (min–max over runs), MB/s",
        a.setup.daemons,
        a.setup.stages.describe(),
        human(a.size),
        a.setup.runs
    );
    println!("| copy | baseline | surge | surge/baseline | target |");
    println!("|---|---:|---:|---:|---|");
    for (case, s) in &table.rows {
        println!(
            "| {} | {} | {} | {} | >= {}: {} |",
            case.name(),
            show(&s.direct, 1e6, 0),
            show(&s.surge, 1e6, 0),
            show_ratio(&s.ratio),
            case.target(),
            verdict(&s.ratio, case.target())
        );
    }
    Ok(ExitCode::SUCCESS)
}
