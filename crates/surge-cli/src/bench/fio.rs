//! `surge bench fio`: fio through the interposer on /surge against fio
//! directly on a directory of the buffer's device, in the same run:
//! sequential write then read, per transfer size, job count and file
//! layout (a file per job, or one shared file). Then what the interposer
//! costs a program on a path outside the mount, against no preload.

use super::{median, RatioTable, Setup};
use crate::cmd::CmdResult;
use crate::units::{human, parse_size};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[derive(Args, Debug)]
pub struct FioArgs {
    /// Daemons in the benchmark cluster.
    #[arg(long, default_value_t = 2)]
    pub daemons: u32,
    /// fio job counts to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 2, 4])]
    pub jobs: Vec<u32>,
    /// Transfer sizes to measure.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_values_t = [1u64 << 20, 64 << 10])]
    pub xfer: Vec<u64>,
    /// Bytes each job writes, then reads.
    #[arg(long, value_parser = parse_size, default_value = "128M")]
    pub size: u64,
    /// File layouts to measure.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [FileLayout::PerJob, FileLayout::Shared])]
    pub layouts: Vec<FileLayout>,
    /// Repetitions; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Directory holding the buffer tier and the baseline files (tmpfs by default).
    #[arg(long, default_value = "/dev/shm")]
    pub scratch: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FileLayout {
    /// One file per fio job.
    PerJob,
    /// One file; each job writes its own region.
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rw {
    Write,
    Read,
}

/// What the outside-the-mount comparison reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    Bandwidth,
    CpuTime,
}

/// Where and how one fio run goes.
struct Run<'a> {
    dir: &'a str,
    /// Environment for the fio process (the interposer's, or none).
    env: &'a [(&'a str, String)],
}

/// One fio run: aggregate bandwidth (bytes/s) and the CPU seconds (user +
/// system) fio and its job processes used.
fn fio(run: &Run<'_>, rw: Rw, xfer: u64, jobs: u32, size: u64, layout: FileLayout) -> Result<(f64, f64), String> {
    let rw_name = if rw == Rw::Write { "write" } else { "read" };
    let mut cmd = Command::new("fio");
    cmd.args(["--name=bench", "--ioengine=psync", "--group_reporting", "--output-format=json", "--fallocate=none"])
        .arg(format!("--rw={rw_name}"))
        .arg(format!("--bs={xfer}"))
        .arg(format!("--size={size}"))
        .arg(format!("--numjobs={jobs}"))
        .arg(format!("--directory={}", run.dir));
    if rw == Rw::Write {
        cmd.arg("--end_fsync=1");
    }
    if layout == FileLayout::Shared {
        cmd.arg("--filename=shared.dat").arg(format!("--offset_increment={size}"));
    }
    for (k, v) in run.env {
        cmd.env(k, v);
    }
    let cpu_before = children_cpu_seconds();
    let out = cmd.output().map_err(|e| format!("cannot run fio (install it: scripts/setup.sh): {e}"))?;
    let cpu = children_cpu_seconds() - cpu_before;
    if !out.status.success() {
        return Err(format!("fio failed on {}: {}", run.dir, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok((bandwidth(&out.stdout, rw_name)?, cpu))
}

/// CPU time of this process's waited-for children so far. Far steadier than
/// wall time on a shared machine: it is what the interposer adds that counts.
fn children_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Aggregate bandwidth (bytes/s) from fio's JSON report.
fn bandwidth(json: &[u8], rw: &str) -> Result<f64, String> {
    // fio may print notes before the JSON document.
    let start = json.iter().position(|&b| b == b'{').ok_or("fio printed no JSON report")?;
    let report: serde_json::Value =
        serde_json::from_slice(&json[start..]).map_err(|e| format!("unreadable fio report: {e}"))?;
    report["jobs"][0][rw]["bw_bytes"].as_f64().ok_or_else(|| format!("fio report without jobs[0].{rw}.bw_bytes"))
}

/// Removes what one case wrote (fio names per-job files bench.<job>.0).
fn clean(dir: &str, env: &[(&str, String)]) -> Result<(), String> {
    let status = Command::new("sh")
        .args(["-c", "rm -f \"$0\"/bench.* \"$0\"/shared.dat", dir])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .status()
        .map_err(|e| e.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("could not clean {dir}"))
    }
}

pub fn run(a: FioArgs) -> CmdResult {
    let preload = crate::cmd::preload_library()?;
    let setup = Setup::start(&a.scratch, a.daemons)?;
    let interposed: Vec<(&str, String)> = vec![
        ("LD_PRELOAD", preload.display().to_string()),
        ("SURGE_CLUSTER", setup.cluster_file.display().to_string()),
        ("SURGE_MOUNT", "/surge".into()),
        ("SURGE_PROFILE", setup.root.join("profile.jsonl").display().to_string()),
    ];
    let direct_dir = setup.direct.display().to_string();
    let direct = Run { dir: &direct_dir, env: &[] };
    let surge = Run { dir: "/surge", env: &interposed };
    // Outside the mount: the same directory, with and without the interposer.
    let outside = Run { dir: &direct_dir, env: &interposed[..1] };

    type Case = (Rw, u64, u32, FileLayout);
    let mut table: RatioTable<Case> = RatioTable::default();
    let mut overhead: RatioTable<(Rw, u64, Measure)> = RatioTable::default();
    for round in 0..a.runs {
        eprintln!("surge bench fio: run {}/{}", round + 1, a.runs);
        for &xfer in &a.xfer {
            for &jobs in &a.jobs {
                for &layout in &a.layouts {
                    for rw in [Rw::Write, Rw::Read] {
                        let (d, _) = fio(&direct, rw, xfer, jobs, a.size, layout)?;
                        let (s, _) = fio(&surge, rw, xfer, jobs, a.size, layout)?;
                        table.add((rw, xfer, jobs, layout), d, s);
                    }
                    clean(direct.dir, direct.env)?;
                    clean(surge.dir, surge.env)?;
                }
            }
            // Each side writes a fresh file and reads it back; who goes
            // first alternates between rounds.
            let mut sides = [(&direct, [(0.0, 0.0); 2]), (&outside, [(0.0, 0.0); 2])];
            if round % 2 == 1 {
                sides.reverse();
            }
            for (run, bw) in sides.iter_mut() {
                bw[0] = fio(run, Rw::Write, xfer, 1, a.size, FileLayout::PerJob)?;
                bw[1] = fio(run, Rw::Read, xfer, 1, a.size, FileLayout::PerJob)?;
                clean(direct.dir, direct.env)?;
            }
            let (plain, preloaded) = if round % 2 == 1 { (sides[1].1, sides[0].1) } else { (sides[0].1, sides[1].1) };
            for (i, rw) in [Rw::Write, Rw::Read].into_iter().enumerate() {
                overhead.add((rw, xfer, Measure::Bandwidth), plain[i].0, preloaded[i].0);
                overhead.add((rw, xfer, Measure::CpuTime), plain[i].1, preloaded[i].1);
            }
        }
    }
    print_tables(&a, &table, &overhead);
    Ok(ExitCode::SUCCESS)
}

fn print_tables(a: &FioArgs, table: &RatioTable<(Rw, u64, u32, FileLayout)>, overhead: &RatioTable<(Rw, u64, Measure)>) {
    let name = |rw: &Rw| format!("{rw:?}").to_lowercase();
    println!(
        "surge bench fio: fio psync, {} per job, {} daemons, {} run(s), medians; MB/s",
        human(a.size),
        a.daemons,
        a.runs
    );
    println!("| rw | transfer | jobs | files | direct | surge | surge/direct |");
    println!("|---|---|---:|---|---:|---:|---:|");
    for ((rw, xfer, jobs, layout), s) in &table.rows {
        println!(
            "| {} | {} | {jobs} | {} | {:.0} | {:.0} | {:.2} |",
            name(rw),
            human(*xfer),
            if *layout == FileLayout::Shared { "shared" } else { "per job" },
            median(s.direct.clone()) / 1e6,
            median(s.surge.clone()) / 1e6,
            median(s.ratio.clone())
        );
    }
    println!();
    println!("interposer cost outside the mount (fio on {}, 1 job):", Path::new(&a.scratch).display());
    println!("| rw | transfer | measure | no preload | preloaded | preloaded/none |");
    println!("|---|---|---|---:|---:|---:|");
    for ((rw, xfer, measure), s) in &overhead.rows {
        let (label, scale) = match measure {
            Measure::Bandwidth => ("MB/s", 1e6),
            Measure::CpuTime => ("CPU ms", 1e-3),
        };
        println!(
            "| {} | {} | {label} | {:.0} | {:.0} | {:.3} |",
            name(rw),
            human(*xfer),
            median(s.direct.clone()) / scale,
            median(s.surge.clone()) / scale,
            median(s.ratio.clone())
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_read_from_the_json_report() {
        let report = br#"note: both iodepth >= 1 and synchronous I/O engine are selected
{"jobs": [{"write": {"bw_bytes": 123456789}, "read": {"bw_bytes": 0}}]}"#;
        assert_eq!(bandwidth(report, "write").unwrap(), 123456789.0);
        assert!(bandwidth(b"garbage", "write").is_err());
        assert!(bandwidth(br#"{"jobs": []}"#, "read").is_err());
    }
}
