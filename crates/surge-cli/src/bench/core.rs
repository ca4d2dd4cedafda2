//! `surge bench core`: sequential write and read through the client library
//! against the same I/O on the buffer directory, for 1, 2 and 4 client
//! processes and 1 MiB and 64 KiB transfers; and file creates per second.
//! Surge and the baseline alternate inside every run, and which goes first
//! moves on by one every run and case, so both see the same machine noise
//! and neither always finds the caches warm; the ratio of each pair is what
//! we report, as a median with the min–max over runs.

use super::worker::{Target, Workload};
use super::{rotated, show, show_ratio, RatioTable, Setup, SetupArgs};
use crate::cmd::CmdResult;
use crate::units::{human, parse_size};
use clap::Args;
use std::fs;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Args, Debug)]
pub struct CoreArgs {
    /// Client process counts to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 2, 4])]
    pub procs: Vec<u32>,
    /// Transfer sizes to measure.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_values_t = [1u64 << 20, 64 << 10])]
    pub xfer: Vec<u64>,
    /// Bytes each process writes, then reads.
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    pub bytes: u64,
    /// Files each process creates in the create test.
    #[arg(long, default_value_t = 2000)]
    pub files: u64,
    #[command(flatten)]
    pub setup: SetupArgs,
}

/// Runs `procs` workers at once; returns bytes (or ops) per second overall.
fn measure(
    setup: &Setup,
    target: Target,
    workload: Workload,
    procs: u32,
    xfer: u64,
    amount: u64,
) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let location: &Path = match target {
        Target::Surge => &setup.cluster_file,
        Target::Direct => &setup.direct,
    };
    // Start together, a little after the last process is spawned.
    let go = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() + 150_000_000;
    let children: Vec<_> = (0..procs)
        .map(|rank| {
            Command::new(&exe)
                .arg("bench-worker")
                .arg("--target")
                .arg(format!("{target:?}").to_lowercase())
                .arg("--workload")
                .arg(format!("{workload:?}").to_lowercase())
                .arg("--location")
                .arg(location)
                .arg("--rank")
                .arg(rank.to_string())
                .arg("--xfer")
                .arg(xfer.to_string())
                .arg("--amount")
                .arg(amount.to_string())
                .arg("--go-at-ns")
                .arg(go.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    super::overall_rate(children)
}

fn clean(setup: &Setup, procs: u32) -> Result<(), String> {
    let client = surge_client::Client::connect(&setup.cluster_file).map_err(|e| e.to_string())?;
    for rank in 0..procs {
        client.unlink(&format!("/rank{rank}")).ok();
        fs::remove_file(setup.direct.join(format!("rank{rank}"))).ok();
    }
    Ok(())
}

fn clean_creates(setup: &Setup, procs: u32) -> Result<(), String> {
    let client = surge_client::Client::connect(&setup.cluster_file).map_err(|e| e.to_string())?;
    for rank in 0..procs {
        let dir = format!("/bench-create-{rank}");
        for ent in client.readdir(&dir).unwrap_or_default() {
            client.unlink(&format!("{dir}/{}", ent.name)).map_err(|e| e.to_string())?;
        }
        client.rmdir(&dir).ok();
        fs::remove_dir_all(setup.direct.join(format!("bench-create-{rank}"))).ok();
    }
    Ok(())
}

/// One line of the result table: (workload, transfer size, client processes).
type Case = (Workload, u64, u32);

pub fn run(a: CoreArgs) -> CmdResult {
    let setup = Setup::start(&a.setup.scratch, a.setup.daemons, &a.setup.stages)?;
    let mut table: RatioTable<Case> = RatioTable::default();
    let mut add = |case: Case, direct: f64, surge: f64| table.add(case, direct, surge);
    for run in 0..a.setup.runs {
        note!("surge bench core: run {}/{}", run + 1, a.setup.runs);
        // Who goes first moves on by one every run (and every case).
        let mut step = run as usize;
        let mut both = |workload: Workload, procs: u32, xfer: u64, amount: u64| -> Result<(), String> {
            let mut rate = [0.0; 2];
            for target in rotated(&[Target::Direct, Target::Surge], step) {
                rate[target as usize] = measure(&setup, target, workload, procs, xfer, amount)?;
            }
            step += 1;
            add((workload, xfer, procs), rate[Target::Direct as usize], rate[Target::Surge as usize]);
            Ok(())
        };
        for &xfer in &a.xfer {
            for &procs in &a.procs {
                let amount = a.bytes / xfer * xfer;
                both(Workload::Write, procs, xfer, amount)?;
                both(Workload::Read, procs, xfer, amount)?;
                clean(&setup, procs)?;
            }
        }
        for &procs in &a.procs {
            both(Workload::Create, procs, 0, a.files)?;
            clean_creates(&setup, procs)?;
        }
    }
    println!(
        "surge bench core: {} daemons ({}), {} per process, {} run(s), median (min–max over runs); MB/s for write/read, creates/s for create",
        a.setup.daemons,
        a.setup.stages.describe(),
        human(a.bytes),
        a.setup.runs
    );
    println!("| workload | transfer | clients | direct | surge | surge/direct |");
    println!("|---|---|---:|---:|---:|---:|");
    for ((workload, xfer, procs), s) in table.rows {
        let create = workload == Workload::Create;
        let scale = if create { 1.0 } else { 1e6 };
        println!(
            "| {} | {} | {procs} | {} | {} | {} |",
            format!("{workload:?}").to_lowercase(),
            if create { "-".to_string() } else { human(xfer) },
            show(&s.direct, scale, 0),
            show(&s.surge, scale, 0),
            show_ratio(&s.ratio)
        );
    }
    Ok(ExitCode::SUCCESS)
}
