//! `surge bench fio`: fio in each way a program can reach Surge, against
//! fio directly on a directory of the buffer's device, in the same run and
//! alternating run by run:
//! - `direct`: a plain directory on the buffer's device (the baseline);
//! - `fuse`: the bench's own FUSE mount of the cluster, no interposer;
//! - `fuse+preload`: the same mount with the interposer as its fast path;
//! - `preload`: the interposer alone, on a prefix that is not a mount;
//! - `glusterfs` (with `--peer glusterfs`): the peer users would otherwise
//!   mount, one brick on the same device ([`super::glusterfs`]).
//!
//! Workloads: sequential write then read (psync) per transfer size, job
//! count and file layout, and a metadata loop like mdtest's (creates/s and
//! stats/s, one process). Optionally, what the interposer costs a program
//! on a path outside the mount, against no preload.

use super::glusterfs::GlusterPeer;
use super::{check_interrupted, ratios, rotated, show, show_ratio, stop_on_signals, verdict, RatioTable, Setup};
use crate::cmd::mount::MountArgs;
use crate::cmd::mount::{Mounted, ServerLife};
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
    /// Ways to reach the files (direct is the baseline every ratio needs).
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = Mode::SURGE_AND_DIRECT)]
    pub modes: Vec<Mode>,
    /// Also measure a peer file system users would otherwise mount, on the same device (as root).
    #[arg(long, value_enum)]
    pub peer: Option<Peer>,
    /// fio job counts to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 16])]
    pub jobs: Vec<u32>,
    /// Transfer sizes to measure.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_values_t = [1u64 << 20, 64 << 10])]
    pub xfer: Vec<u64>,
    /// Bytes each job writes, then reads.
    #[arg(long, value_parser = parse_size, default_value = "32M")]
    pub size: u64,
    /// File layouts to measure.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [FileLayout::PerJob])]
    pub layouts: Vec<FileLayout>,
    /// Files the metadata loop creates, then stats (0: no metadata loop; needs python3).
    #[arg(long, default_value_t = 1000)]
    pub md_files: u64,
    /// Repetitions; medians and min–max are reported.
    #[arg(long, default_value_t = 5)]
    pub runs: u32,
    /// Also measure the interposer's cost on a path outside the mount (1 job, against no preload).
    #[arg(long)]
    pub outside_mount: bool,
    /// Directory holding the buffer tier, the baseline files and the mount point (tmpfs by default).
    #[arg(long, default_value = "/dev/shm")]
    pub scratch: PathBuf,
    /// The daemons' request-path stages, as `surge start` takes them (surged's defaults unless named).
    #[command(flatten)]
    pub stages: crate::stage_settings::StageArgs,
}

/// How fio reaches the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// A plain directory on the buffer's device: the baseline.
    Direct,
    /// The FUSE mount, no interposer.
    Fuse,
    /// The FUSE mount with the interposer (its fast path).
    #[value(name = "fuse+preload", alias = "fuse-preload")]
    FusePreload,
    /// The interposer alone, on a prefix that is not a mount.
    Preload,
    /// GlusterFS, one brick on the buffer's device, through its FUSE client (`--peer glusterfs`).
    #[value(skip)]
    Glusterfs,
}

/// A file system measured beside Surge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Peer {
    /// GlusterFS: a volume of one brick in the scratch directory, mounted with its FUSE client
    /// (glusterfs-server; glusterd is started if it is not running).
    Glusterfs,
}

impl Mode {
    const SURGE_AND_DIRECT: [Mode; 4] = [Mode::Direct, Mode::Fuse, Mode::FusePreload, Mode::Preload];
    const ALL: [Mode; 5] = [Mode::Direct, Mode::Fuse, Mode::FusePreload, Mode::Preload, Mode::Glusterfs];

    fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Fuse => "fuse",
            Mode::FusePreload => "fuse+preload",
            Mode::Preload => "preload",
            Mode::Glusterfs => "glusterfs",
        }
    }

    fn index(self) -> usize {
        Mode::ALL.iter().position(|&m| m == self).expect("every mode is in ALL")
    }
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

/// What one table row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    Write,
    Read,
    Create,
    Stat,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Write => "write",
            Work::Read => "read",
            Work::Create => "create",
            Work::Stat => "stat",
        }
    }

    fn is_data(self) -> bool {
        matches!(self, Work::Write | Work::Read)
    }
}

/// One row: the work, transfer size, jobs and layout (0, 1, per job for the metadata loop).
type Case = (Work, u64, u32, FileLayout);

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
    check_interrupted()?;
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
    check_interrupted()?;
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

/// The metadata loop, in one process with the mode's environment: N
/// open(O_CREAT|O_EXCL)+close, then N stat, each timed on its own (the
/// interpreter's start and the first Surge call, which connects, are
/// outside the timing); the files are then removed, untimed. The mount
/// caches neither a file's attributes nor, after a create, its name, so
/// every stat reaches the file system.
const MD_LOOP: &str = r#"
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.mkdir(d)
paths = [os.path.join(d, "f%d" % i) for i in range(n)]
flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY
t0 = time.perf_counter()
for p in paths:
    os.close(os.open(p, flags, 0o644))
t1 = time.perf_counter()
for p in paths:
    os.stat(p)
t2 = time.perf_counter()
for p in paths:
    os.unlink(p)
os.rmdir(d)
print(n / (t1 - t0), n / (t2 - t1))
"#;

/// Creates/s and stats/s of the metadata loop in `run.dir`.
fn metadata(run: &Run<'_>, files: u64) -> Result<(f64, f64), String> {
    check_interrupted()?;
    let dir = format!("{}/bench-md", run.dir);
    let out = Command::new("python3")
        .args(["-c", MD_LOOP, &dir, &files.to_string()])
        .envs(run.env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .map_err(|e| format!("cannot run python3 for the metadata loop (install it, or --md-files 0): {e}"))?;
    check_interrupted()?;
    if !out.status.success() {
        return Err(format!(
            "the metadata loop failed on {}: {}",
            run.dir,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let rates: Vec<f64> = text.split_whitespace().filter_map(|t| t.parse().ok()).collect();
    match rates[..] {
        [creates, stats] => Ok((creates, stats)),
        _ => Err(format!("unexpected output of the metadata loop: {text:?}")),
    }
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

/// The bench's FUSE mount, unmounted when dropped (on errors too), before
/// the cluster it serves is stopped.
struct BenchMount(Option<Mounted>);

impl BenchMount {
    fn unmount(&mut self) -> Result<(), String> {
        self.0.take().map_or(Ok(()), Mounted::unmount)
    }
}

impl Drop for BenchMount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            note!("surge bench fio: {e}");
        }
    }
}

/// Samples per case and mode, one per run, in first-seen case order.
#[derive(Default)]
struct ModeTable {
    rows: Vec<(Case, [Vec<f64>; 5])>,
}

impl ModeTable {
    fn add(&mut self, case: Case, mode: Mode, value: f64) {
        let i = self.rows.iter().position(|(c, _)| *c == case).unwrap_or_else(|| {
            self.rows.push((case, Default::default()));
            self.rows.len() - 1
        });
        self.rows[i].1[mode.index()].push(value);
    }
}

fn check_args(a: &FioArgs) -> Result<(), String> {
    if !a.modes.contains(&Mode::Direct) {
        return Err("--modes must include direct: every ratio is to it".into());
    }
    if Mode::ALL.iter().any(|m| a.modes.iter().filter(|x| *x == m).count() > 1) {
        return Err("--modes names a mode twice".into());
    }
    if a.runs == 0 || a.jobs.is_empty() || a.jobs.contains(&0) || a.xfer.is_empty() || a.xfer.contains(&0) {
        return Err("--runs, --jobs and --xfer must be at least 1".into());
    }
    if a.xfer.iter().any(|&x| x > a.size) {
        return Err("--size must be at least every --xfer".into());
    }
    Ok(())
}

pub fn run(mut a: FioArgs) -> CmdResult {
    check_args(&a)?;
    if a.peer == Some(Peer::Glusterfs) {
        a.modes.push(Mode::Glusterfs);
    }
    let preload = crate::cmd::preload_library()?;
    stop_on_signals();
    // Dropped in reverse order: the mount goes before the cluster.
    let setup = Setup::start(&a.scratch, a.daemons, &a.stages)?;
    let mut mount = BenchMount(None);
    let mnt = setup.root.join("mnt");
    if a.modes.iter().any(|m| matches!(m, Mode::Fuse | Mode::FusePreload)) {
        mount.0 = Some(Mounted::start(&setup.cluster_file, &mnt, &MountArgs::default(), ServerLife::EndsWithCaller)?);
    }
    // The interposer alone serves this prefix: it is not a mount, nor a directory.
    let prefix = setup.root.join("surge");
    let gluster = match a.peer {
        Some(Peer::Glusterfs) => Some(GlusterPeer::start(&setup.root)?),
        None => None,
    };
    let gluster_dir = gluster.as_ref().map(|g| g.mount.display().to_string()).unwrap_or_default();
    let interposer = |mount: &Path, profile: &str| -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", preload.display().to_string()),
            ("SURGE_CLUSTER", setup.cluster_file.display().to_string()),
            ("SURGE_MOUNT", mount.display().to_string()),
            ("SURGE_PROFILE", setup.root.join(profile).display().to_string()),
        ]
    };
    let fast_env = interposer(&mnt, "profile-fuse-preload.jsonl");
    let preload_env = interposer(&prefix, "profile-preload.jsonl");
    let (direct_dir, mnt_dir, prefix_dir) =
        (setup.direct.display().to_string(), mnt.display().to_string(), prefix.display().to_string());
    // In the order of Mode::ALL.
    let runs = [
        Run { dir: &direct_dir, env: &[] },
        Run { dir: &mnt_dir, env: &[] },
        Run { dir: &mnt_dir, env: &fast_env },
        Run { dir: &prefix_dir, env: &preload_env },
        Run { dir: &gluster_dir, env: &[] },
    ];
    let run_of = |mode: Mode| &runs[mode.index()];
    // Outside the mount: the baseline's directory, with and without the interposer.
    let outside = Run { dir: &direct_dir, env: &preload_env[..1] };

    let mut table = ModeTable::default();
    let mut overhead: RatioTable<(Rw, u64, Measure)> = RatioTable::default();
    let mut fast_bytes_expected = 0u64;
    for round in 0..a.runs {
        note!("surge bench fio: run {}/{}", round + 1, a.runs);
        // Who goes first moves on by one every run (and every case).
        let mut step = round as usize;
        let mut order = || {
            step += 1;
            rotated(&a.modes, step - 1)
        };
        for &xfer in &a.xfer {
            for &jobs in &a.jobs {
                for &layout in &a.layouts {
                    for mode in order() {
                        let run = run_of(mode);
                        for (rw, work) in [(Rw::Write, Work::Write), (Rw::Read, Work::Read)] {
                            let (bw, _) = fio(run, rw, xfer, jobs, a.size, layout)
                                .map_err(|e| format!("{}: {e}", mode.name()))?;
                            table.add((work, xfer, jobs, layout), mode, bw);
                        }
                        clean(run.dir, run.env)?;
                        if mode == Mode::FusePreload {
                            fast_bytes_expected += 2 * jobs as u64 * a.size;
                        }
                    }
                }
            }
        }
        if a.md_files > 0 {
            for mode in order() {
                let (creates, stats) =
                    metadata(run_of(mode), a.md_files).map_err(|e| format!("{}: {e}", mode.name()))?;
                table.add((Work::Create, 0, 1, FileLayout::PerJob), mode, creates);
                table.add((Work::Stat, 0, 1, FileLayout::PerJob), mode, stats);
            }
        }
        if a.outside_mount {
            for &xfer in &a.xfer {
                // Each side writes a fresh file and reads it back; who goes
                // first alternates between rounds.
                let mut sides = [(run_of(Mode::Direct), [(0.0, 0.0); 2]), (&outside, [(0.0, 0.0); 2])];
                if round % 2 == 1 {
                    sides.reverse();
                }
                for (run, bw) in sides.iter_mut() {
                    bw[0] = fio(run, Rw::Write, xfer, 1, a.size, FileLayout::PerJob)?;
                    bw[1] = fio(run, Rw::Read, xfer, 1, a.size, FileLayout::PerJob)?;
                    clean(&direct_dir, &[])?;
                }
                let (plain, preloaded) =
                    if round % 2 == 1 { (sides[1].1, sides[0].1) } else { (sides[0].1, sides[1].1) };
                for (i, rw) in [Rw::Write, Rw::Read].into_iter().enumerate() {
                    overhead.add((rw, xfer, Measure::Bandwidth), plain[i].0, preloaded[i].0);
                    overhead.add((rw, xfer, Measure::CpuTime), plain[i].1, preloaded[i].1);
                }
            }
        }
    }
    print_tables(&a, &table);
    if a.modes.contains(&Mode::FusePreload) {
        let carried = profiled_bytes(&setup.root.join("profile-fuse-preload.jsonl"));
        println!(
            "fast path: the interposer's profile counts {} moved on the mount's descriptors, of {} fio moved in fuse+preload",
            human(carried),
            human(fast_bytes_expected)
        );
    }
    if a.outside_mount {
        print_overhead(&a, &overhead);
    }
    mount.unmount()?;
    Ok(ExitCode::SUCCESS)
}

/// Bytes read and written in a profile (`surge-profile/1`, one JSON line per process).
fn profiled_bytes(profile: &Path) -> u64 {
    let text = std::fs::read_to_string(profile).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .flat_map(|record| record["files"].as_array().cloned().unwrap_or_default())
        .map(|f| {
            let c = &f["counters"];
            c["POSIX_BYTES_READ"].as_u64().unwrap_or(0) + c["POSIX_BYTES_WRITTEN"].as_u64().unwrap_or(0)
        })
        .sum()
}

fn print_tables(a: &FioArgs, table: &ModeTable) {
    let layouts: Vec<&str> = a.layouts.iter().map(|l| layout_name(*l)).collect();
    println!(
        "surge bench fio: fio psync, {} per job ({}), metadata loop {} files, {} daemons ({}), {} run(s); median (min–max over runs)",
        human(a.size),
        layouts.join(", "),
        a.md_files,
        a.daemons,
        a.stages.describe(),
        a.runs
    );
    let label = |(work, xfer, jobs, layout): &Case| {
        let transfer = if work.is_data() { human(*xfer) } else { "-".into() };
        let files = if work.is_data() { layout_name(*layout) } else { "-" };
        format!("| {} | {transfer} | {jobs} | {files} |", work.name())
    };
    println!();
    println!("MB/s for write and read, operations/s for create and stat:");
    let peer = a.modes.contains(&Mode::Glusterfs);
    let columns: Vec<Mode> = if peer { Mode::ALL.to_vec() } else { Mode::SURGE_AND_DIRECT.to_vec() };
    let names: Vec<&str> = columns.iter().map(|m| m.name()).collect();
    println!("| work | transfer | jobs | files | {} |", names.join(" | "));
    println!("|---|---|---:|---|{}", "---:|".repeat(columns.len()));
    for (case, s) in &table.rows {
        let scale = if case.0.is_data() { 1e6 } else { 1.0 };
        let cells: Vec<String> = columns.iter().map(|m| show(&s[m.index()], scale, 0)).collect();
        println!("{} {} |", label(case), cells.join(" | "));
    }
    let ratio = |s: &[Vec<f64>; 5], a: Mode, b: Mode| ratios(&s[a.index()], &s[b.index()]);
    println!();
    println!("ratios, median of the per-run ratios (min–max):");
    println!("| work | transfer | jobs | files | fuse/direct | fuse+preload/direct | preload/direct | fuse/fuse+preload | fuse+preload/preload |");
    println!("|---|---|---:|---|---:|---:|---:|---:|---:|");
    for (case, s) in &table.rows {
        let cells: Vec<String> = [
            (Mode::Fuse, Mode::Direct),
            (Mode::FusePreload, Mode::Direct),
            (Mode::Preload, Mode::Direct),
            (Mode::Fuse, Mode::FusePreload),
            (Mode::FusePreload, Mode::Preload),
        ]
        .iter()
        .map(|&(x, y)| show_ratio(&ratio(s, x, y)))
        .collect();
        println!("{} {} |", label(case), cells.join(" | "));
    }
    println!();
    println!("targets (per-run ratios, three decimals: the verdicts compare them unrounded; met when the whole min–max range clears the bound):");
    println!("| target | work | transfer | jobs | files | ratio | verdict |");
    println!("|---|---|---|---:|---|---:|---|");
    for (case, s) in table.rows.iter().filter(|(c, _)| c.0.is_data()) {
        let r = ratio(s, Mode::FusePreload, Mode::Preload);
        println!("| fuse+preload ≥ 0.95 × preload {} {} | {} |", label(case), show(&r, 1.0, 3), verdict(&r, 0.95));
    }
    for (case, s) in table.rows.iter().filter(|(c, _)| c.0.is_data() && c.1 == 1 << 20) {
        let r = ratio(s, Mode::Fuse, Mode::FusePreload);
        println!("| fuse ≥ 0.5 × fuse+preload {} {} | {} |", label(case), show(&r, 1.0, 3), verdict(&r, 0.5));
    }
    if peer {
        for (case, s) in &table.rows {
            for mode in [Mode::FusePreload, Mode::Preload] {
                let r = ratio(s, mode, Mode::Glusterfs);
                println!(
                    "| {} ≥ 10 × glusterfs {} {} | {} |",
                    mode.name(),
                    label(case),
                    show(&r, 1.0, 3),
                    verdict(&r, 10.0)
                );
            }
        }
    }
}

fn layout_name(layout: FileLayout) -> &'static str {
    if layout == FileLayout::Shared {
        "shared"
    } else {
        "per job"
    }
}

fn print_overhead(a: &FioArgs, overhead: &RatioTable<(Rw, u64, Measure)>) {
    let name = |rw: &Rw| format!("{rw:?}").to_lowercase();
    println!();
    println!(
        "interposer cost outside the mount (fio on {}, 1 job), median (min–max over runs):",
        Path::new(&a.scratch).display()
    );
    println!("| rw | transfer | measure | no preload | preloaded | preloaded/none |");
    println!("|---|---|---|---:|---:|---:|");
    for ((rw, xfer, measure), s) in &overhead.rows {
        let (label, scale) = match measure {
            Measure::Bandwidth => ("MB/s", 1e6),
            Measure::CpuTime => ("CPU ms", 1e-3),
        };
        println!(
            "| {} | {} | {label} | {} | {} | {} |",
            name(rw),
            human(*xfer),
            show(&s.direct, scale, 0),
            show(&s.surge, scale, 0),
            show(&s.ratio, 1.0, 3)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::spread;

    #[test]
    fn bandwidth_is_read_from_the_json_report() {
        let report = br#"note: both iodepth >= 1 and synchronous I/O engine are selected
{"jobs": [{"write": {"bw_bytes": 123456789}, "read": {"bw_bytes": 0}}]}"#;
        assert_eq!(bandwidth(report, "write").unwrap(), 123456789.0);
        assert!(bandwidth(b"garbage", "write").is_err());
        assert!(bandwidth(br#"{"jobs": []}"#, "read").is_err());
    }

    #[test]
    fn runs_pair_up_into_ratios_with_their_range_and_verdict() {
        let mut t = ModeTable::default();
        let case = (Work::Write, 1 << 20, 1, FileLayout::PerJob);
        for (d, f) in [(100.0, 50.0), (200.0, 190.0), (100.0, 96.0)] {
            t.add(case, Mode::Direct, d);
            t.add(case, Mode::Fuse, f);
        }
        let s = &t.rows[0].1;
        let r = ratios(&s[Mode::Fuse.index()], &s[Mode::Direct.index()]);
        assert_eq!(spread(&r), Some((0.95, 0.5, 0.96)));
        assert_eq!(show(&r, 1.0, 2), "0.95 (0.50–0.96)");
        assert_eq!(show(&s[Mode::Preload.index()], 1.0, 0), "-");
        assert_eq!(verdict(&r, 0.5), "met: the whole range clears it");
        assert_eq!(verdict(&r, 0.9), "median meets it, the range does not clear it");
        assert_eq!(verdict(&r, 0.99), "not met");
        assert_eq!(verdict(&[], 0.5), "not measured");
    }
}
