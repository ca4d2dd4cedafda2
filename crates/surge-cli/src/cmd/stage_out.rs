//! `surge stage-out`: verified copies from the buffer to the PFS.

use super::{ns_path, CmdResult, Ctx};
use crate::units::{human, mbps};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::process::ExitCode;
use std::time::Instant;
use surge_client::{Client, FileKind, Tier};

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

/// Files under `path` (itself if a file) that need staging, with their sizes.
pub fn collect(client: &Client, path: &str, force: bool, out: &mut Vec<(String, u64)>) -> surge_client::Result<()> {
    let attr = client.stat(path)?;
    match attr.kind {
        FileKind::File => {
            let needed = match attr.tier {
                Tier::Buffer => true,
                Tier::Staged => force,
                Tier::Pfs => false,
            };
            if needed {
                out.push((path.to_string(), attr.size));
            }
        }
        FileKind::Dir => {
            for ent in client.readdir(path)? {
                let child = if path == "/" { format!("/{}", ent.name) } else { format!("{path}/{}", ent.name) };
                collect(client, &child, force, out)?;
            }
        }
    }
    Ok(())
}

pub fn stage_out(ctx: &Ctx, a: StageOutArgs) -> CmdResult {
    let client = ctx.client()?;
    let roots: Vec<String> =
        if a.all { vec!["/".into()] } else { a.paths.iter().map(|p| ns_path(p)).collect::<Result<_, _>>()? };
    let mut files = Vec::new();
    for root in &roots {
        collect(&client, root, a.force, &mut files).map_err(|e| format!("{root}: {e}"))?;
    }
    let report = stage_files(&client, &files, a.quiet, Report::Stdout, &|| false);
    Ok(if report.failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// What a stage-out did.
pub struct StageSummary {
    pub staged: usize,
    pub bytes: u64,
    pub failures: Vec<String>,
}

/// Where the summary line of a stage-out goes.
pub enum Report {
    Stdout,
    Stderr,
}

/// Stages `files` (path, size) with a progress bar, prints one summary
/// line `to` stdout or stderr, and names the files that failed (their
/// buffer copies stay) on stderr; stops before the next file once
/// `give_up` says so.
pub fn stage_files(
    client: &Client,
    files: &[(String, u64)],
    quiet: bool,
    to: Report,
    give_up: &dyn Fn() -> bool,
) -> StageSummary {
    let total: u64 = files.iter().map(|(_, s)| s).sum();
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(total) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    let started = Instant::now();
    let (mut staged, mut bytes, mut failures) = (0usize, 0u64, Vec::new());
    for (path, _) in files {
        if give_up() {
            bar.suspend(|| eprintln!("surge: stage-out stopped before {path}"));
            failures.push(path.clone());
            continue;
        }
        bar.set_message(path.clone());
        let base = bar.position();
        let result = client.stage_out(path, &mut |done| bar.set_position(base + done));
        match result {
            Ok(report) => {
                staged += 1;
                bytes += report.bytes;
                bar.set_position(base + report.bytes);
            }
            Err(e) => {
                // On stderr whether or not a bar is drawn (-q, no terminal).
                bar.suspend(|| eprintln!("surge: stage-out of {path} failed: {e}"));
                failures.push(path.clone());
            }
        }
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let line = format!(
        "surge: staged out {staged} file(s), {} in {secs:.2} s ({:.0} MB/s), every copy verified, to {}",
        human(bytes),
        mbps(bytes, secs),
        client.cluster().pfs.display()
    );
    // The result of `surge stage-out`; a diagnostic where stdout is a job's (`surge run`).
    match to {
        Report::Stdout => println!("{line}"),
        Report::Stderr => eprintln!("{line}"),
    }
    if !failures.is_empty() {
        eprintln!(
            "surge: {} file(s) not staged (their buffer copies are intact): {}",
            failures.len(),
            failures.join(", ")
        );
    }
    StageSummary { staged, bytes, failures }
}
