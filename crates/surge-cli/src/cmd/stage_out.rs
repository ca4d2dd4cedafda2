//! `surge stage-out`: verified copies from the buffer to the PFS.

use super::progress::Transfer;
use super::{ns_path, CmdResult, Ctx};
use clap::Args;
use std::process::ExitCode;
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

/// Files and symbolic links under `path` (itself if not a directory) that
/// need staging, with their sizes (0 for a link).
pub fn collect(client: &Client, path: &str, force: bool, out: &mut Vec<(String, u64)>) -> surge_client::Result<()> {
    let attr = client.stat(path)?;
    match attr.kind {
        // A link is staged as a link with the same target: no bytes to copy.
        FileKind::File | FileKind::Symlink => {
            let needed = match attr.tier {
                // A lost file's stage-out fails by name (its data is not all there).
                Tier::Buffer | Tier::Lost => true,
                Tier::Staged => force,
                Tier::Pfs => false,
            };
            if needed {
                out.push((path.to_string(), if attr.kind == FileKind::File { attr.size } else { 0 }));
            }
        }
        // A PFS-only directory of the union view holds no buffer file (the
        // namespace copies a directory in before anything is created in it):
        // its tree, maybe all the PFS has, is not walked.
        // FIFOs, sockets and devices hold no data: nothing to stage (docs/core.md).
        FileKind::Fifo | FileKind::CharDevice | FileKind::BlockDevice | FileKind::Socket => {}
        FileKind::Dir if attr.tier == Tier::Pfs => {}
        FileKind::Dir => {
            for ent in client.readdir(path)? {
                let child = if path == "/" { format!("/{}", ent.name) } else { format!("{path}/{}", ent.name) };
                match collect(client, &child, force, out) {
                    // Its size is unknown (a daemon holding part of it is down): still listed,
                    // so that its stage-out fails by name instead of the whole listing.
                    Err(e) if ent.kind == FileKind::File && e.errno() != libc::ENOENT => out.push((child, 0)),
                    result => result?,
                }
            }
        }
    }
    Ok(())
}

/// Stages out every directory under `path`, deepest first, after the
/// files: each gets its PFS copy (made if missing) with its mode, times
/// and extended attributes (`Client::stage_dir`). A file's stage-out made
/// the directories above it private and moved their mtimes on, and a
/// directory the job left without files would vanish with the buffer.
/// Directories `elsewhere` says go somewhere else (a stage-out
/// directive's) are left out. Returns the directories staged, and those
/// that could not be (with why).
pub fn stage_directories(client: &Client, path: &str, elsewhere: &dyn Fn(&str) -> bool) -> (usize, Vec<String>) {
    let (mut staged, mut failed) = (0, Vec::new());
    let entries = match client.readdir(path) {
        Ok(entries) => entries,
        Err(e) => return (0, vec![format!("{path}: {e}")]),
    };
    for ent in entries.into_iter().filter(|e| e.kind == FileKind::Dir) {
        let child = if path == "/" { format!("/{}", ent.name) } else { format!("{path}/{}", ent.name) };
        if elsewhere(&child) {
            continue;
        }
        match client.stat(&child) {
            Ok(attr) if attr.tier == Tier::Pfs => continue, // on the PFS already, and nothing of the buffer below
            Ok(_) => {}
            Err(e) if e.errno() == libc::ENOENT => continue,
            Err(e) => {
                failed.push(format!("{child}: {e}"));
                continue;
            }
        }
        let (below, failures) = stage_directories(client, &child, elsewhere);
        staged += below;
        failed.extend(failures);
        match client.stage_dir(&child) {
            Ok(_) => staged += 1,
            Err(e) => failed.push(format!("{child}: {e}")),
        }
    }
    (staged, failed)
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
    let mut unstaged = Vec::new();
    for root in roots.iter().filter(|root| client.stat(root).is_ok_and(|attr| attr.kind == FileKind::Dir)) {
        unstaged.extend(stage_directories(&client, root, &|_| false).1);
        if root != "/" {
            unstaged.extend(client.stage_dir(root).err().map(|e| format!("{root}: {e}")));
        }
    }
    if !unstaged.is_empty() {
        note!("surge: {} directory(ies) could not be staged out: {}", unstaged.len(), unstaged.join(", "));
    }
    Ok(if report.failures.is_empty() && unstaged.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
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
    let progress = Transfer::new(total, quiet);
    let (mut staged, mut bytes, mut failures) = (0usize, 0u64, Vec::new());
    for (path, _) in files {
        if give_up() {
            progress.note(&format!("surge: stage-out stopped before {path}"));
            failures.push(path.clone());
            continue;
        }
        progress.set_file(path);
        let base = progress.position();
        let result = client.stage_out(path, &mut |done| progress.set_position(base + done));
        match result {
            Ok(report) => {
                staged += 1;
                bytes += report.bytes;
                progress.set_position(base + report.bytes);
            }
            Err(e) => {
                // On stderr whether or not a bar is drawn (-q, no terminal).
                progress.note(&format!("surge: stage-out of {path} failed: {e}"));
                failures.push(path.clone());
            }
        }
    }
    let line = format!(
        "surge: staged out {staged} file(s), {}, every copy verified, to {}",
        progress.finish(bytes),
        client.cluster().pfs.display()
    );
    // The result of `surge stage-out`; a diagnostic where stdout is a job's (`surge run`).
    match to {
        Report::Stdout => println!("{line}"),
        Report::Stderr => note!("{line}"),
    }
    if !failures.is_empty() {
        note!("surge: {} file(s) not staged (their buffer copies are intact): {}", failures.len(), failures.join(", "));
    }
    StageSummary { staged, bytes, failures }
}
