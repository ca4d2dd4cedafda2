//! `surge fsck`: the namespace checked against the objects on the running
//! cluster (daemon 0 does it: `Request::Fsck`, see surged's fsck.rs), its
//! findings printed per class with what `--repair` does about each, and
//! with `--verify-data` every block re-checked as `surge scrub /` does.
//! Exit status: 0 clean, 1 problems left, 2 every problem repaired, 3 the
//! check could not be made.

use super::scrub::{scrub_tree, Tally};
use super::{CmdResult, Ctx};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;
use surge_client::{Client, ClientConfig, FsckFinding, FsckReply, FSCK_NO_DAEMON};

/// How long daemon 0's check may take at least (`SURGE_TIMEOUT` when longer):
/// about 0.3 ms per stripe of each file, so 10 minutes cover ~2 million stripes.
const CHECK_TIMEOUT: Duration = Duration::from_secs(600);

/// A check that could not be made (a daemon down, no cluster).
const FAILED: u8 = 3;
const PROBLEMS_LEFT: u8 = 1;
const ALL_REPAIRED: u8 = 2;

#[derive(Args)]
#[command(after_help = "Exit status: 0 clean (notes only), 1 problems found and not all repaired, \
    2 every problem found was repaired, 3 the check could not be made (a daemon down).\n\n\
    Classes: orphan, young-orphan (a note), stray-object, data-lost, untrusted, doomed, held (a note), \
    stage-temp, dangling, link-count, damaged-block (--verify-data); docs/operations.md says what each \
    means. --repair only removes orphans and stray objects unchanged for the orphan grace, wakes the \
    deleter, removes abandoned stage-out temps and sets link counts to the names found; lost, \
    untrusted and damaged data are reported, never repaired.")]
pub struct FsckArgs {
    /// Do the safe repairs (the report says what each problem gets).
    #[arg(long)]
    pub repair: bool,
    /// Also re-check every block of every buffer file against its checksum (`surge scrub /`).
    #[arg(long)]
    pub verify_data: bool,
    /// Print the findings as TOML.
    #[arg(long)]
    pub toml: bool,
}

/// One finding as printed.
#[derive(Serialize)]
struct Line {
    class: &'static str,
    problem: bool,
    ino: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    daemon: Option<u32>,
    path: String,
    detail: String,
    repair: &'static str,
    repaired: bool,
}

#[derive(Serialize)]
struct Report {
    files: u64,
    objects: u64,
    problems: usize,
    repaired: usize,
    finding: Vec<Line>,
}

impl Line {
    fn of(f: &FsckFinding) -> Line {
        Line {
            class: f.class.name(),
            problem: f.class.is_problem(),
            ino: f.ino,
            daemon: (f.daemon != FSCK_NO_DAEMON).then_some(f.daemon),
            path: f.path.clone(),
            detail: f.detail.clone(),
            repair: f.class.repair(),
            repaired: f.repaired,
        }
    }

    /// The damaged blocks `--verify-data`'s scrub found, and the files it could not check.
    fn damaged(tally: &Tally) -> impl Iterator<Item = Line> + '_ {
        let line = |path: &String, detail: String| Line {
            class: "damaged-block",
            problem: true,
            ino: 0,
            daemon: None,
            path: path.clone(),
            detail,
            repair: "nothing: restore the file from its PFS copy or its source",
            repaired: false,
        };
        let damaged = tally.damaged.iter().map(move |(path, block)| {
            line(path, format!("block at file offset {} on {} disagrees with its checksum", block.offset, block.daemon))
        });
        let unchecked = tally.bad.iter().filter(|path| !tally.damaged.iter().any(|(p, _)| p == *path));
        damaged.chain(unchecked.map(move |path| line(path, "could not be scrubbed (see the message above)".into())))
    }
}

pub fn fsck(ctx: &Ctx, a: FsckArgs) -> CmdResult {
    let (reply, tally) = match check(ctx, &a) {
        Ok(found) => found,
        Err(e) => {
            note!("surge: fsck could not check the cluster: {e}");
            return Ok(ExitCode::from(FAILED));
        }
    };
    let lines: Vec<Line> = reply.findings.iter().map(Line::of).chain(Line::damaged(&tally)).collect();
    let problems = lines.iter().filter(|l| l.problem).count();
    let repaired = lines.iter().filter(|l| l.repaired).count();
    let report = Report { files: reply.files, objects: reply.objects, problems, repaired, finding: lines };
    if a.toml {
        print!("{}", toml::to_string(&report).map_err(|e| e.to_string())?);
    } else {
        print_text(&report, a.repair);
    }
    let left = report.finding.iter().any(|l| l.problem && !l.repaired);
    Ok(ExitCode::from(match (problems, left) {
        (0, _) => 0,
        (_, true) => PROBLEMS_LEFT,
        (_, false) => ALL_REPAIRED,
    }))
}

fn check(ctx: &Ctx, a: &FsckArgs) -> Result<(FsckReply, Tally), String> {
    let from_env = ClientConfig::from_env().map_err(|e| e.to_string())?;
    // The whole check is one request: it may take longer than one operation's timeout.
    let config = ClientConfig { io_timeout: from_env.io_timeout.max(CHECK_TIMEOUT), ..from_env };
    let client = Client::connect_with(&ctx.cluster_file, config).map_err(|e| e.to_string())?;
    let reply = client.fsck(a.repair).map_err(|e| e.to_string())?;
    let mut tally = Tally::default();
    if a.verify_data {
        scrub_tree(&client, "/", &mut tally);
    }
    Ok((reply, tally))
}

fn print_text(report: &Report, repair: bool) {
    println!("surge fsck: {} file(s) and {} object(s) checked", report.files, report.objects);
    let mut by_class: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &report.finding {
        *by_class.entry(l.class).or_default() += 1;
        let kind = if l.problem { "" } else { " (note)" };
        let at = l.daemon.map_or_else(String::new, |d| format!(" on daemon {d}"));
        let path = if l.path.is_empty() { String::new() } else { format!(" {}", l.path) };
        let done = match (l.repaired, repair && l.problem) {
            (true, _) => "repaired: ",
            (false, true) => "not repaired; ",
            (false, false) => "--repair: ",
        };
        println!("{}{kind}: inode {}{at}{path}: {} [{done}{}]", l.class, l.ino, l.detail, l.repair);
    }
    let classes: Vec<String> = by_class.iter().map(|(class, n)| format!("{class} {n}")).collect();
    match report.problems {
        0 if report.finding.is_empty() => println!("surge fsck: clean"),
        0 => println!("surge fsck: clean; notes: {}", classes.join(", ")),
        n => println!("surge fsck: {n} problem(s), {} repaired ({})", report.repaired, classes.join(", ")),
    }
}
