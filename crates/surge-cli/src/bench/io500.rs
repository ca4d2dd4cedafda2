//! `surge bench io500`: the IO500 phases [IO500] with IOR and mdtest, on
//! Surge and on a plain directory of the buffer's device (tmpfs) in the
//! same run, the modes taking turns going first round by round:
//! - `fuse+preload`: under `surge run` in its default mode (the FUSE mount,
//!   the ranks preloaded with the interposer as its fast path);
//! - `preload`: under `surge run --no-fuse` (the interposer alone);
//! - `tmpfs`: a plain directory in --scratch, no Surge (the baseline).
//!
//! The Surge modes join one cluster the bench starts; every IOR, mdtest
//! and find invocation is its own `surge run` (so a read phase sees a
//! fresh mount, as a later job would). IOR and mdtest are built once from
//! their release archive into target/ior-4.0.0 and reused while the
//! archive is unchanged. Phases, in IO500's order, at fixed sizes instead
//! of IO500's 300-second stonewalls (a 2-core machine): ior-easy (a file
//! per rank, large transfers), ior-hard (one shared file, 47008-byte
//! strided transfers), mdtest-easy (empty files, a directory per rank),
//! mdtest-hard (3901-byte files in one shared directory), find (one walk
//! counting every file, checked against what the write phases made).
//! Read phases run IOR's read-check (-R) and mdtest's read verification
//! (-X); `--check` adds write-checks (-W, --verify-write) at tiny sizes.
//! The score is IO500's: the geometric mean of the bandwidths (GiB/s), of
//! the metadata rates (kIOPS), and of those two.

use super::{check_interrupted, median, ratios, rotated, show, show_ratio, stop_on_signals, verdict, Setup};
use crate::cmd::CmdResult;
use crate::units::{human, parse_size};
use clap::{Args, ValueEnum};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  surge bench io500                      # 3 modes, 12 phases, 3 rounds: a few minutes\n  \
    surge bench io500 --check              # tiny sizes, write-checks, 1 round: about a minute\n  \
    surge bench io500 --modes fuse+preload,tmpfs --phases ior-easy-write,ior-easy-read\n\n\
    IOR and mdtest are built from --ior-tarball (autoconf, automake, Open MPI's mpicc: scripts/setup.sh) \
    into --ior-build on the first run, about a minute, and reused after."
)]
pub struct Io500Args {
    /// Daemons in the benchmark cluster.
    #[arg(long, default_value_t = 2)]
    pub daemons: u32,
    /// MPI ranks of every IOR and mdtest run (mpirun --oversubscribe).
    #[arg(long, default_value_t = 4)]
    pub ranks: u32,
    /// Where the phases run (tmpfs is the baseline every ratio needs).
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = Mode::ALL)]
    pub modes: Vec<Mode>,
    /// Phases to run (always in IO500's order); a read, stat or delete phase needs its write phase.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = Phase::ALL)]
    pub phases: Vec<Phase>,
    /// Rounds; medians and min–max over rounds are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Bytes each rank writes, then reads, in ior-easy (its own file).
    #[arg(long, value_parser = parse_size, default_value = "128M")]
    pub easy_size: u64,
    /// ior-easy's transfer size.
    #[arg(long, value_parser = parse_size, default_value = "2M")]
    pub easy_xfer: u64,
    /// 47008-byte transfers each rank writes, then reads, in ior-hard (strided in one shared file).
    #[arg(long, default_value_t = 1000)]
    pub hard_segments: u64,
    /// Empty files each rank creates in its own directory in mdtest-easy.
    #[arg(long, default_value_t = 500)]
    pub easy_files: u64,
    /// 3901-byte files each rank creates in the one shared directory of mdtest-hard.
    #[arg(long, default_value_t = 250)]
    pub hard_files: u64,
    /// A tiny configuration, one round, with IOR's and mdtest's write-checks too: fails unless
    /// every phase runs in every mode with a positive figure and no verification error.
    #[arg(long, conflicts_with_all = ["rounds", "easy_size", "easy_xfer", "hard_segments", "easy_files", "hard_files"])]
    pub check: bool,
    /// Directory holding the buffer tier, the baseline's directory and the mount point (tmpfs by default).
    #[arg(long, default_value = "/dev/shm")]
    pub scratch: PathBuf,
    /// IOR's release archive [default: ../shared/third_party/ior-4.0.0.tar.gz beside the
    /// repository this surge was built in].
    #[arg(long, env = "SURGE_IOR_TARBALL", value_name = "FILE")]
    pub ior_tarball: Option<PathBuf>,
    /// Where IOR and mdtest are built and kept between runs [default: ior-4.0.0 in the cargo
    /// target directory this surge was built in].
    #[arg(long, value_name = "DIR")]
    pub ior_build: Option<PathBuf>,
    /// The daemons' request-path stages, as `surge start` takes them (surged's defaults unless named).
    #[command(flatten)]
    pub stages: crate::stage_settings::StageArgs,
}

/// Where the phases run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// `surge run`'s default: the FUSE mount with the interposer as its fast path.
    #[value(name = "fuse+preload", alias = "fuse-preload")]
    FusePreload,
    /// `surge run --no-fuse`: the interposer alone.
    Preload,
    /// A plain directory in --scratch: the baseline.
    Tmpfs,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::FusePreload, Mode::Preload, Mode::Tmpfs];

    fn name(self) -> &'static str {
        match self {
            Mode::FusePreload => "fuse+preload",
            Mode::Preload => "preload",
            Mode::Tmpfs => "tmpfs",
        }
    }

    fn index(self) -> usize {
        Mode::ALL.iter().position(|&m| m == self).expect("every mode is in ALL")
    }
}

/// The IO500 phases, in the order IO500 runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Phase {
    IorEasyWrite,
    MdtestEasyWrite,
    IorHardWrite,
    MdtestHardWrite,
    Find,
    IorEasyRead,
    MdtestEasyStat,
    IorHardRead,
    MdtestHardStat,
    MdtestEasyDelete,
    MdtestHardRead,
    MdtestHardDelete,
}

impl Phase {
    const ALL: [Phase; 12] = [
        Phase::IorEasyWrite,
        Phase::MdtestEasyWrite,
        Phase::IorHardWrite,
        Phase::MdtestHardWrite,
        Phase::Find,
        Phase::IorEasyRead,
        Phase::MdtestEasyStat,
        Phase::IorHardRead,
        Phase::MdtestHardStat,
        Phase::MdtestEasyDelete,
        Phase::MdtestHardRead,
        Phase::MdtestHardDelete,
    ];

    fn name(self) -> &'static str {
        match self {
            Phase::IorEasyWrite => "ior-easy-write",
            Phase::MdtestEasyWrite => "mdtest-easy-write",
            Phase::IorHardWrite => "ior-hard-write",
            Phase::MdtestHardWrite => "mdtest-hard-write",
            Phase::Find => "find",
            Phase::IorEasyRead => "ior-easy-read",
            Phase::MdtestEasyStat => "mdtest-easy-stat",
            Phase::IorHardRead => "ior-hard-read",
            Phase::MdtestHardStat => "mdtest-hard-stat",
            Phase::MdtestEasyDelete => "mdtest-easy-delete",
            Phase::MdtestHardRead => "mdtest-hard-read",
            Phase::MdtestHardDelete => "mdtest-hard-delete",
        }
    }

    /// IOR's phases count in the bandwidth score, the others in the metadata score.
    fn is_bandwidth(self) -> bool {
        matches!(self, Phase::IorEasyWrite | Phase::IorEasyRead | Phase::IorHardWrite | Phase::IorHardRead)
    }

    /// Whether the phase makes files (and so checks what it wrote under `--check`).
    fn is_write(self) -> bool {
        matches!(self, Phase::IorEasyWrite | Phase::IorHardWrite | Phase::MdtestEasyWrite | Phase::MdtestHardWrite)
    }

    /// The phase that makes the files this one reads, stats or deletes.
    fn needs(self) -> Option<Phase> {
        match self {
            Phase::IorEasyRead => Some(Phase::IorEasyWrite),
            Phase::IorHardRead => Some(Phase::IorHardWrite),
            Phase::MdtestEasyStat | Phase::MdtestEasyDelete => Some(Phase::MdtestEasyWrite),
            Phase::MdtestHardStat | Phase::MdtestHardRead | Phase::MdtestHardDelete => Some(Phase::MdtestHardWrite),
            _ => None,
        }
    }

    /// The unit the table shows and the scores combine: GiB/s or thousands of operations/s.
    fn unit(self) -> &'static str {
        if self.is_bandwidth() {
            "GiB/s"
        } else {
            "kIOPS"
        }
    }
}

/// IO500's transfer (and block) size of ior-hard: not a multiple of any page or stripe.
const HARD_XFER: u64 = 47008;
/// IO500's file size of mdtest-hard.
const HARD_FILE_BYTES: u64 = 3901;
/// The sizes of `--check`: every phase does real work, the whole run takes about a minute.
const CHECK_SIZES: Sizes =
    Sizes { easy_size: 4 << 20, easy_xfer: 1 << 20, hard_segments: 16, easy_files: 16, hard_files: 8 };

/// How much each rank moves in each phase.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    easy_size: u64,
    easy_xfer: u64,
    hard_segments: u64,
    easy_files: u64,
    hard_files: u64,
}

/// The built IOR and mdtest.
struct Tools {
    ior: PathBuf,
    mdtest: PathBuf,
}

/// What the phases of one mode run in and on.
struct Site {
    mode: Mode,
    /// The data directory as the ranks see it.
    data: PathBuf,
    /// The `surge ... run ...` words before the command (empty for tmpfs).
    wrapper: Vec<String>,
}

impl Site {
    /// `argv` as this mode runs it.
    fn command(&self, argv: &[String]) -> Command {
        let words: Vec<&String> = self.wrapper.iter().chain(argv).collect();
        let mut cmd = Command::new(words[0]);
        cmd.args(&words[1..]);
        cmd
    }

    fn command_line(&self, argv: &[String]) -> String {
        self.wrapper.iter().chain(argv).map(String::as_str).collect::<Vec<_>>().join(" ")
    }

    /// Runs `argv` as this mode runs it; its output, or an error naming the
    /// step, the exit status, the command line and the end of its output.
    fn run(&self, step: &str, argv: &[String]) -> Result<Output, String> {
        check_interrupted()?;
        let out = self
            .command(argv)
            .output()
            .map_err(|e| format!("{step} on {}: cannot run `{}`: {e}", self.mode.name(), self.command_line(argv)))?;
        check_interrupted()?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(failure(
                &format!("{step} on {} failed ({})", self.mode.name(), out.status),
                &self.command_line(argv),
                &out,
            ))
        }
    }
}

/// A failed step's report: what, the command line, and the last lines of its output.
fn failure(what: &str, command_line: &str, out: &Output) -> String {
    format!(
        "{what}\n  command: {command_line}\n  stdout (last lines):\n{}\n  stderr (last lines):\n{}",
        last_lines(&out.stdout, 25),
        last_lines(&out.stderr, 25)
    )
}

fn last_lines(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// The command lines of the phases, at the given sizes.
struct Plan {
    ranks: u32,
    sizes: Sizes,
    write_checks: bool,
    tools: Tools,
}

impl Plan {
    fn mpirun(&self, program: &Path) -> Vec<String> {
        let mut argv = strings(&["mpirun", "--oversubscribe", "--allow-run-as-root", "-np"]);
        argv.push(self.ranks.to_string());
        argv.push(program.display().to_string());
        argv
    }

    /// IO500's IOR options: tasks reordered so a rank reads what another
    /// wrote (-C -Q 1), barriers between phases (-g), a fixed data
    /// signature so the read phase checks the write phase's data (-G), files
    /// kept between the phases (-k), fsync at the end of the write (-e).
    fn ior(&self, phase: Phase, data: &Path) -> Vec<String> {
        let s = &self.sizes;
        let mut argv = self.mpirun(&self.tools.ior);
        argv.extend(strings(&["-C", "-Q", "1", "-g", "-k", "-e", "-a", "POSIX", "-O", "summaryFormat=JSON"]));
        let easy = matches!(phase, Phase::IorEasyWrite | Phase::IorEasyRead);
        let shape = if easy {
            format!("-G 271 -F -t {} -b {}", s.easy_xfer, s.easy_size)
        } else {
            format!("-G 27 -t {HARD_XFER} -b {HARD_XFER} -s {}", s.hard_segments)
        };
        argv.extend(shape.split(' ').map(String::from));
        let file = if easy { "ior-easy/file" } else { "ior-hard/file" };
        argv.extend(["-o".into(), data.join(file).display().to_string()]);
        match phase {
            p if p.is_write() && self.write_checks => argv.extend(strings(&["-w", "-W"])),
            p if p.is_write() => argv.push("-w".into()),
            _ => argv.extend(strings(&["-r", "-R"])),
        }
        argv
    }

    /// IO500's mdtest options: files only (-F), a rank stats and reads
    /// another's files (-N 1), warnings counted as failures.
    fn mdtest(&self, phase: Phase, data: &Path) -> Vec<String> {
        let s = &self.sizes;
        let mut argv = self.mpirun(&self.tools.mdtest);
        argv.extend(strings(&["-F", "-N", "1", "-a", "POSIX", "--warningAsErrors"]));
        let easy = matches!(phase, Phase::MdtestEasyWrite | Phase::MdtestEasyStat | Phase::MdtestEasyDelete);
        let (shape, dir) = if easy {
            // A directory per rank (-u), the files at the leaf (-L).
            (format!("-n {} -u -L -G 270669", s.easy_files), "mdtest-easy")
        } else {
            (format!("-n {} -t -G 27 -w {HARD_FILE_BYTES} -e {HARD_FILE_BYTES}", s.hard_files), "mdtest-hard")
        };
        argv.extend(shape.split(' ').map(String::from));
        argv.extend(["-d".into(), data.join(dir).display().to_string()]);
        match phase {
            Phase::MdtestEasyWrite => argv.push("-C".into()),
            Phase::MdtestHardWrite if self.write_checks => argv.extend(strings(&["-C", "--verify-write"])),
            Phase::MdtestHardWrite => argv.push("-C".into()),
            Phase::MdtestEasyStat | Phase::MdtestHardStat => argv.push("-T".into()),
            Phase::MdtestHardRead => argv.extend(strings(&["-E", "-X"])),
            _ => argv.push("-r".into()),
        }
        argv
    }

    fn argv(&self, phase: Phase, data: &Path) -> Vec<String> {
        match phase {
            Phase::Find => {
                // Timed inside the command, so `surge run`'s start and mount are not.
                let script = "date +%s%N && find \"$1\" -type f -printf . && echo && date +%s%N";
                vec!["sh".into(), "-c".into(), script.into(), "sh".into(), data.display().to_string()]
            }
            p if p.is_bandwidth() => self.ior(p, data),
            p => self.mdtest(p, data),
        }
    }

    /// Files present when find runs (after the write phases, before any delete).
    fn files_at_find(&self, phases: &[Phase]) -> u64 {
        let ranks = self.ranks as u64;
        phases
            .iter()
            .map(|p| match p {
                Phase::IorEasyWrite => ranks,
                Phase::IorHardWrite => 1,
                Phase::MdtestEasyWrite => ranks * self.sizes.easy_files,
                Phase::MdtestHardWrite => ranks * self.sizes.hard_files,
                _ => 0,
            })
            .sum()
    }

    /// Runs one phase; its figure in the phase's unit.
    fn measure(&self, site: &Site, phase: Phase, expected_files: u64) -> Result<f64, String> {
        let argv = self.argv(phase, &site.data);
        let out = site.run(phase.name(), &argv)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let figure = match phase {
            Phase::Find => find_rate(&stdout, expected_files).map(|rate| rate / 1e3),
            p if p.is_bandwidth() => verified_ior(&all)
                .and_then(|()| ior_bandwidth(&stdout, if p.is_write() { "write" } else { "read" }))
                .map(|bw| bw / (1u64 << 30) as f64),
            p => verified_mdtest(&all).and_then(|()| mdtest_rate(&stdout, mdtest_row(p))).map(|rate| rate / 1e3),
        };
        match figure {
            Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
            Ok(x) => Err(failure(
                &format!("{} on {} reported {x}, not a positive figure", phase.name(), site.mode.name()),
                &site.command_line(&argv),
                &out,
            )),
            Err(e) => {
                Err(failure(&format!("{} on {}: {e}", phase.name(), site.mode.name()), &site.command_line(&argv), &out))
            }
        }
    }
}

/// The row of mdtest's rate summary a phase reports.
fn mdtest_row(phase: Phase) -> &'static str {
    match phase {
        Phase::MdtestEasyWrite | Phase::MdtestHardWrite => "File creation",
        Phase::MdtestEasyStat | Phase::MdtestHardStat => "File stat",
        Phase::MdtestHardRead => "File read",
        _ => "File removal",
    }
}

/// IOR's mean bandwidth (bytes/s) of `operation` from its JSON summary.
fn ior_bandwidth(stdout: &str, operation: &str) -> Result<f64, String> {
    // mpirun may print notes before the JSON document.
    let start = stdout.find('{').ok_or("IOR printed no JSON report")?;
    let report: serde_json::Value =
        serde_json::from_str(&stdout[start..]).map_err(|e| format!("unreadable IOR report: {e}"))?;
    let summary = report["summary"].as_array().ok_or("IOR's report has no summary")?;
    summary
        .iter()
        .find(|s| s["operation"] == operation)
        .and_then(|s| s["bwMeanMIB"].as_f64())
        .map(|mib| mib * (1u64 << 20) as f64)
        .ok_or_else(|| format!("IOR's summary has no {operation} bandwidth"))
}

/// IOR's read- and write-check count mismatched bytes and say so.
fn verified_ior(output: &str) -> Result<(), String> {
    match output.lines().find(|l| l.contains("Incorrect data on")) {
        Some(line) => Err(format!("IOR's data verification failed: {}", line.trim())),
        None => Ok(()),
    }
}

/// mdtest's read and write verification say so, and exit 0 all the same.
fn verified_mdtest(output: &str) -> Result<(), String> {
    match output.lines().find(|l| l.contains("ERROR: verifying")) {
        Some(line) => Err(format!("mdtest's data verification failed: {}", line.trim())),
        None => Ok(()),
    }
}

/// The mean rate (operations/s) of `row` (e.g. "File creation") in mdtest's
/// rate summary: `row  max  min  mean  stddev`.
fn mdtest_rate(stdout: &str, row: &str) -> Result<f64, String> {
    let rates = stdout.split("SUMMARY rate").nth(1).ok_or("mdtest printed no rate summary")?;
    let line = rates
        .lines()
        .map(str::trim)
        .find(|l| l.strip_prefix(row).is_some_and(|rest| rest.starts_with(' ')))
        .ok_or_else(|| format!("mdtest's rate summary has no {row:?} row"))?;
    let numbers: Vec<f64> = line[row.len()..].split_whitespace().filter_map(|t| t.parse().ok()).collect();
    match numbers[..] {
        [_max, _min, mean, _sd] => Ok(mean),
        _ => Err(format!("unexpected mdtest row {line:?}")),
    }
}

/// Files per second of the find step (start ns, one dot per file, end ns),
/// after checking it found every file the write phases made.
fn find_rate(stdout: &str, expected: u64) -> Result<f64, String> {
    let lines: Vec<&str> = stdout.lines().collect();
    let [start, dots, end] = lines[..] else { return Err(format!("unexpected output of find: {stdout:?}")) };
    let ns = |t: &str| t.trim().parse::<u128>().map_err(|e| format!("unexpected time {t:?} around find: {e}"));
    let files = dots.trim().len() as u64;
    if files != expected {
        return Err(format!("find counted {files} files; the write phases made {expected}"));
    }
    let secs = (ns(end)?.saturating_sub(ns(start)?)) as f64 / 1e9;
    Ok(files as f64 / secs.max(1e-9))
}

/// Samples per row and mode, one per round.
#[derive(Default)]
struct Table {
    rows: Vec<(String, &'static str, [Vec<f64>; 3])>,
}

impl Table {
    fn add(&mut self, row: &str, unit: &'static str, mode: Mode, value: f64) {
        let i = self.rows.iter().position(|(r, ..)| r == row).unwrap_or_else(|| {
            self.rows.push((row.to_string(), unit, Default::default()));
            self.rows.len() - 1
        });
        self.rows[i].2[mode.index()].push(value);
    }
}

/// Geometric mean (None when empty).
fn geometric_mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp())
}

/// IO500's scores of one round from its phase figures: bandwidth (GiB/s),
/// metadata (kIOPS) and their geometric mean (when both are measured).
fn scores(figures: &[(Phase, f64)]) -> Vec<(&'static str, &'static str, f64)> {
    let of = |bandwidth: bool| -> Vec<f64> {
        figures.iter().filter(|(p, _)| p.is_bandwidth() == bandwidth).map(|&(_, x)| x).collect()
    };
    let bw = geometric_mean(&of(true));
    let md = geometric_mean(&of(false));
    let mut out = Vec::new();
    if let Some(bw) = bw {
        out.push(("score: bandwidth", "GiB/s", bw));
    }
    if let Some(md) = md {
        out.push(("score: metadata", "kIOPS", md));
    }
    if let (Some(bw), Some(md)) = (bw, md) {
        out.push(("score", "-", (bw * md).sqrt()));
    }
    out
}

fn check_args(a: &Io500Args) -> Result<(), String> {
    if a.modes.is_empty() || Mode::ALL.iter().any(|m| a.modes.iter().filter(|x| *x == m).count() > 1) {
        return Err("--modes must name at least one mode, none twice".into());
    }
    if a.phases.is_empty() {
        return Err("--phases must name at least one phase".into());
    }
    for p in &a.phases {
        if let Some(w) = p.needs().filter(|w| !a.phases.contains(w)) {
            return Err(format!("--phases: {} needs {} (the files it works on)", p.name(), w.name()));
        }
    }
    if a.ranks == 0 || a.rounds == 0 || a.daemons == 0 {
        return Err("--ranks, --rounds and --daemons must be at least 1".into());
    }
    if a.easy_xfer == 0 || a.easy_size == 0 || !a.easy_size.is_multiple_of(a.easy_xfer) {
        return Err("--easy-size must be a positive multiple of --easy-xfer".into());
    }
    if a.hard_segments == 0 || a.easy_files == 0 || a.hard_files == 0 {
        return Err("--hard-segments, --easy-files and --hard-files must be at least 1".into());
    }
    Ok(())
}

/// target/ of the cargo build this surge belongs to (target/<profile>/surge), if it is one.
fn cargo_target_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let target = exe.parent()?.parent()?;
    (target.file_name()? == "target").then(|| target.to_path_buf())
}

/// IOR and mdtest built from `tarball` in `build`, building them unless a
/// build from the same archive is there. A build goes into a fresh
/// directory renamed into place when done, so an interrupted build is never reused.
fn ior_tools(tarball: &Path, build: &Path) -> Result<Tools, String> {
    let tools = Tools { ior: build.join("src/ior"), mdtest: build.join("src/mdtest") };
    let meta = fs::metadata(tarball).map_err(|e| {
        format!(
            "IOR's archive {}: {e} (pass --ior-tarball: the IOR 4.0.0 release archive, ../shared/third_party/ior-4.0.0.tar.gz)",
            tarball.display()
        )
    })?;
    // The same archive by any path: a test and a bench share one build.
    let canonical = fs::canonicalize(tarball).unwrap_or_else(|_| tarball.to_path_buf());
    let stamp = format!("{} {}\n", canonical.display(), meta.len());
    let stamp_file = build.join(".built-from");
    if tools.ior.is_file() && tools.mdtest.is_file() && fs::read_to_string(&stamp_file).ok().as_deref() == Some(&stamp)
    {
        return Ok(tools);
    }
    let name = build.file_name().ok_or("--ior-build must name a directory")?.to_string_lossy();
    let partial = build.with_file_name(format!("{name}.partial-{}", std::process::id()));
    note!("surge bench io500: building IOR and mdtest from {} in {}", tarball.display(), build.display());
    fs::remove_dir_all(&partial).ok();
    fs::create_dir_all(&partial).map_err(|e| format!("{}: {e}", partial.display()))?;
    let log = partial.join("build.log");
    let tar =
        ["tar", "xzf", &tarball.display().to_string(), "--strip-components=1", "-C", &partial.display().to_string()]
            .map(String::from);
    let steps: [Vec<String>; 4] = [
        tar.to_vec(),
        strings(&["./bootstrap"]),
        strings(&["./configure", "CC=mpicc", "--disable-dependency-tracking"]),
        strings(&["make", "-j2", "-C", "src", "ior", "mdtest"]),
    ];
    for step in steps {
        let log_file = fs::OpenOptions::new().create(true).append(true).open(&log).map_err(|e| e.to_string())?;
        let err_file = log_file.try_clone().map_err(|e| e.to_string())?;
        let status = Command::new(&step[0])
            .args(&step[1..])
            .current_dir(&partial)
            .stdout(log_file)
            .stderr(err_file)
            .status()
            .map_err(|e| {
                format!(
                    "cannot run {} to build IOR: {e} (install autoconf, automake and Open MPI: scripts/setup.sh)",
                    step[0]
                )
            })?;
        if !status.success() {
            let text = fs::read(&log).unwrap_or_default();
            return Err(format!(
                "building IOR failed: `{}` ({status}) in {}; the last lines of {}:\n{}",
                step.join(" "),
                partial.display(),
                log.display(),
                last_lines(&text, 20)
            ));
        }
    }
    fs::write(partial.join(".built-from"), &stamp).map_err(|e| e.to_string())?;
    fs::remove_dir_all(build).ok();
    fs::rename(&partial, build).map_err(|e| format!("cannot move the build to {}: {e}", build.display()))?;
    Ok(tools)
}

pub fn run(a: Io500Args) -> CmdResult {
    check_args(&a)?;
    let (sizes, rounds) = if a.check {
        (CHECK_SIZES, 1)
    } else {
        let s = Sizes {
            easy_size: a.easy_size,
            easy_xfer: a.easy_xfer,
            hard_segments: a.hard_segments,
            easy_files: a.easy_files,
            hard_files: a.hard_files,
        };
        (s, a.rounds)
    };
    let target = cargo_target_dir();
    let tarball = a
        .ior_tarball
        .clone()
        .or_else(|| Some(target.as_ref()?.parent()?.parent()?.join("shared/third_party/ior-4.0.0.tar.gz")))
        .ok_or("pass --ior-tarball: this surge is not in a cargo target directory")?;
    let build = a
        .ior_build
        .clone()
        .or_else(|| Some(target.as_ref()?.join("ior-4.0.0")))
        .ok_or("pass --ior-build: this surge is not in a cargo target directory")?;
    let tools = ior_tools(&tarball, &build)?;
    let phases: Vec<Phase> = Phase::ALL.into_iter().filter(|p| a.phases.contains(p)).collect();
    let plan = Plan { ranks: a.ranks, sizes, write_checks: a.check, tools };
    let expected_files = plan.files_at_find(&phases);

    stop_on_signals();
    let setup = Setup::start(&a.scratch, a.daemons, &a.stages)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?.display().to_string();
    let surge_run = |mount: &Path, extra: &[&str]| -> Vec<String> {
        let mut words = vec![exe.clone(), "--cluster".into(), setup.cluster_file.display().to_string(), "run".into()];
        words.extend(["--mount".into(), mount.display().to_string()]);
        words.extend(strings(extra));
        words.extend(["--no-stage-out".into(), "-q".into()]);
        words.extend(["--profile".into(), setup.root.join("profile.jsonl").display().to_string(), "--".into()]);
        words
    };
    let (mnt, prefix) = (setup.root.join("mnt"), setup.root.join("surge"));
    let sites = [
        Site { mode: Mode::FusePreload, data: mnt.join("io500"), wrapper: surge_run(&mnt, &[]) },
        Site { mode: Mode::Preload, data: prefix.join("io500"), wrapper: surge_run(&prefix, &["--no-fuse"]) },
        Site { mode: Mode::Tmpfs, data: setup.direct.join("io500"), wrapper: Vec::new() },
    ];

    let mut table = Table::default();
    for round in 0..rounds {
        for mode in rotated(&a.modes, round as usize) {
            note!("surge bench io500: round {}/{rounds}, {}", round + 1, mode.name());
            let site = &sites[mode.index()];
            let dirs =
                ["ior-easy", "ior-hard", "mdtest-easy", "mdtest-hard"].map(|d| site.data.join(d).display().to_string());
            site.run("creating the data directories", &[vec!["mkdir".into(), "-p".into()], dirs.to_vec()].concat())?;
            let mut figures = Vec::new();
            for &phase in &phases {
                let x = plan.measure(site, phase, expected_files)?;
                table.add(phase.name(), phase.unit(), mode, x);
                figures.push((phase, x));
            }
            for (row, unit, x) in scores(&figures) {
                table.add(row, unit, mode, x);
            }
            site.run("removing the data directory", &strings(&["rm", "-rf", &site.data.display().to_string()]))?;
        }
    }
    print_tables(&a, &plan, rounds, &table);
    if a.check {
        println!(
            "check: every phase ran in every mode with a positive figure; IOR's and mdtest's data verification found no errors"
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn print_tables(a: &Io500Args, plan: &Plan, rounds: u32, table: &Table) {
    let s = &plan.sizes;
    println!(
        "surge bench io500: {} ranks; ior-easy {} per rank in {} transfers, ior-hard {} x {HARD_XFER} B per rank into one file, \
         mdtest-easy {} files per rank, mdtest-hard {} files of {HARD_FILE_BYTES} B per rank in one directory; \
         {} daemons ({}), tmpfs = a plain directory in {}; {rounds} round(s); median (min–max over rounds)",
        plan.ranks,
        human(s.easy_size),
        human(s.easy_xfer),
        s.hard_segments,
        s.easy_files,
        s.hard_files,
        a.daemons,
        a.stages.describe(),
        a.scratch.display()
    );
    let modes: Vec<Mode> = Mode::ALL.into_iter().filter(|m| a.modes.contains(m)).collect();
    let surge_modes: Vec<Mode> = if modes.contains(&Mode::Tmpfs) {
        modes.iter().copied().filter(|&m| m != Mode::Tmpfs).collect()
    } else {
        Vec::new()
    };
    let ratio = |samples: &[Vec<f64>; 3], m: Mode| ratios(&samples[m.index()], &samples[Mode::Tmpfs.index()]);
    println!();
    let mut head: Vec<String> = modes.iter().map(|m| m.name().to_string()).collect();
    head.extend(surge_modes.iter().map(|m| format!("{}/tmpfs", m.name())));
    println!("| phase | unit | {} |", head.join(" | "));
    println!("|---|---|{}", "---:|".repeat(head.len()));
    for (row, unit, samples) in &table.rows {
        let mut cells: Vec<String> = modes.iter().map(|m| show(&samples[m.index()], 1.0, 3)).collect();
        cells.extend(surge_modes.iter().map(|&m| show_ratio(&ratio(samples, m))));
        println!("| {row} | {unit} | {} |", cells.join(" | "));
    }
    if surge_modes.is_empty() {
        return;
    }
    println!();
    println!("targets (issue 27; per-round ratios, met when the whole min–max range clears the bound):");
    println!("| mode | target | ratio | verdict |");
    println!("|---|---|---:|---|");
    for &m in &surge_modes {
        if let Some((_, _, samples)) = table.rows.iter().find(|(row, ..)| row == "score") {
            let r = ratio(samples, m);
            println!("| {} | score ≥ 0.3 × tmpfs | {} | {} |", m.name(), show_ratio(&r), verdict(&r, 0.3));
        }
        let phases: Vec<(&str, Vec<f64>)> = table
            .rows
            .iter()
            .filter(|(row, ..)| !row.starts_with("score"))
            .map(|(row, _, samples)| (row.as_str(), ratio(samples, m)))
            .collect();
        let lowest = phases.iter().min_by(|x, y| median(x.1.clone()).total_cmp(&median(y.1.clone())));
        let short: Vec<&str> =
            phases.iter().filter(|(_, r)| !verdict(r, 0.05).starts_with("met")).map(|(p, _)| *p).collect();
        if let Some((phase, r)) = lowest {
            let outcome = match short.len() {
                0 => "met: every phase's whole range clears it".to_string(),
                n => format!("not met by {n} of {} phases: {}", phases.len(), short.join(", ")),
            };
            println!("| {} | every phase ≥ 0.05 × tmpfs | lowest, {phase}: {} | {outcome} |", m.name(), show_ratio(r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ior_bandwidth_is_the_mean_of_its_json_summary_in_bytes_per_second() {
        let out = r#"note from mpirun
{ "tests": [], "summary": [ { "operation": "write", "bwMeanMIB": 2.5 } ] }"#;
        assert_eq!(ior_bandwidth(out, "write").unwrap(), 2.5 * 1048576.0);
        assert!(ior_bandwidth(out, "read").unwrap_err().contains("no read"));
        assert!(ior_bandwidth("no report", "write").is_err());
    }

    #[test]
    fn mdtest_rate_is_the_mean_of_its_row_in_the_rate_summary() {
        let out = "SUMMARY rate: (of 1 iterations)\n   Operation    Max   Min   Mean   Std Dev\n   \
                   File creation   120.0   100.0   110.5   1.0\n   File stat   0.000   0.000   0.000   0.000\n\
                   SUMMARY time: (of 1 iterations)\n   File creation   9.0   9.0   9.0   0.0\n";
        assert_eq!(mdtest_rate(out, "File creation").unwrap(), 110.5);
        assert_eq!(mdtest_rate(out, "File stat").unwrap(), 0.0);
        assert!(mdtest_rate(out, "File removal").is_err());
        assert!(mdtest_rate("SUMMARY time:\n File creation 1 1 1 0", "File creation").is_err());
    }

    #[test]
    fn verification_errors_are_failures() {
        assert!(verified_ior("WARNING: Incorrect data on read (3 errors found).").is_err());
        assert!(verified_ior("Max Read: 1.0 MiB/sec").is_ok());
        assert!(verified_mdtest("ERROR: verifying the data on read (2 errors)!").is_err());
        assert!(verified_mdtest("-- finished --").is_ok());
    }

    #[test]
    fn find_counts_every_file_or_fails() {
        let out = "1000000000\n....\n1500000000\n";
        assert_eq!(find_rate(out, 4).unwrap(), 8.0);
        assert!(find_rate(out, 5).unwrap_err().contains("counted 4 files"));
        assert!(find_rate("1\n2\n", 0).is_err());
    }

    #[test]
    fn scores_are_geometric_means_of_bandwidths_of_rates_and_of_both() {
        let figures =
            [(Phase::IorEasyWrite, 2.0), (Phase::IorHardWrite, 8.0), (Phase::Find, 9.0), (Phase::MdtestEasyStat, 1.0)];
        let s = scores(&figures);
        let names: Vec<_> = s.iter().map(|(n, ..)| *n).collect();
        assert_eq!(names, ["score: bandwidth", "score: metadata", "score"]);
        assert!((s[0].2 - 4.0).abs() < 1e-12 && (s[1].2 - 3.0).abs() < 1e-12 && (s[2].2 - 12f64.sqrt()).abs() < 1e-12);
        assert_eq!(scores(&[(Phase::Find, 1.0)]).len(), 1, "no overall score without bandwidth");
    }

    #[test]
    fn a_phase_without_its_write_phase_is_refused() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: Io500Args,
        }
        let parse = |args: &[&str]| Cli::parse_from([&["x"], args].concat()).a;
        let e = check_args(&parse(&["--phases", "ior-easy-read"])).unwrap_err();
        assert!(e.contains("ior-easy-read needs ior-easy-write"), "{e}");
        assert!(check_args(&parse(&["--phases", "ior-easy-write,ior-easy-read,find"])).is_ok());
        assert!(check_args(&parse(&["--easy-size", "3M", "--easy-xfer", "2M"])).is_err());
        assert!(check_args(&parse(&["--modes", "tmpfs,tmpfs"])).is_err());
    }

    #[test]
    fn the_phases_take_io500s_shapes_and_check_what_they_read() {
        let tools = Tools { ior: "ior".into(), mdtest: "mdtest".into() };
        let mut plan = Plan { ranks: 4, sizes: CHECK_SIZES, write_checks: false, tools };
        let line = |plan: &Plan, p: Phase| plan.argv(p, Path::new("/d")).join(" ");
        assert!(line(&plan, Phase::IorHardWrite).contains("-t 47008 -b 47008 -s 16 -o /d/ior-hard/file -w"));
        assert!(line(&plan, Phase::IorEasyRead).contains("-F -t 1048576 -b 4194304 -o /d/ior-easy/file -r -R"));
        assert!(line(&plan, Phase::MdtestHardWrite).contains("-w 3901 -e 3901 -d /d/mdtest-hard -C"));
        assert!(line(&plan, Phase::MdtestHardRead).ends_with("-E -X"));
        assert!(line(&plan, Phase::MdtestEasyDelete).contains("-n 16 -u -L"));
        assert!(
            line(&plan, Phase::MdtestEasyStat).starts_with("mpirun --oversubscribe --allow-run-as-root -np 4 mdtest")
        );
        plan.write_checks = true;
        assert!(line(&plan, Phase::IorEasyWrite).ends_with("-w -W"));
        assert!(line(&plan, Phase::MdtestHardWrite).ends_with("-C --verify-write"));
    }

    #[test]
    fn find_expects_the_files_of_the_write_phases_that_ran() {
        let tools = Tools { ior: "ior".into(), mdtest: "mdtest".into() };
        let plan = Plan { ranks: 4, sizes: CHECK_SIZES, write_checks: false, tools };
        assert_eq!(plan.files_at_find(&Phase::ALL), 4 + 1 + 4 * 16 + 4 * 8);
        assert_eq!(plan.files_at_find(&[Phase::MdtestHardWrite, Phase::Find]), 32);
    }
}
