//! `surge scrub`: re-checks files in the buffer against their block
//! checksums and names every damaged block.

use super::{ns_path, CmdResult, Ctx, PathsArgs};
use crate::units::human;
use std::process::ExitCode;
use surge_client::{Client, DamagedBlock, FileKind};

/// What the scrub of a tree found (`surge fsck --verify-data` runs it too).
#[derive(Default)]
pub(super) struct Tally {
    pub files: u64,
    pub bytes: u64,
    /// Each damaged block, with its file's path.
    pub damaged: Vec<(String, DamagedBlock)>,
    /// Files with a damaged block, or that could not be checked.
    pub bad: Vec<String>,
}

pub fn scrub(ctx: &Ctx, a: PathsArgs) -> CmdResult {
    let client = ctx.client()?;
    let mut tally = Tally::default();
    for arg in &a.paths {
        scrub_tree(&client, &ns_path(arg)?, &mut tally);
    }
    for (path, block) in &tally.damaged {
        println!("{path}: damaged block at offset {} on {}", block.offset, block.daemon);
    }
    println!("surge: scrubbed {} file(s), {} checked", tally.files, human(tally.bytes));
    if tally.bad.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    note!(
        "surge: {} file(s) damaged or not checked: {}; restore damaged files from their PFS copies or sources",
        tally.bad.len(),
        tally.bad.join(", ")
    );
    Ok(ExitCode::from(1))
}

/// Scrubs `path`, and every file under it when it is a directory, into `tally`.
pub(super) fn scrub_tree(client: &Client, path: &str, tally: &mut Tally) {
    let fail = |tally: &mut Tally, e: surge_client::Error| {
        note!("surge: scrub of {path} failed: {e}");
        tally.bad.push(path.to_string());
    };
    let kind = match client.stat(path) {
        Ok(attr) => attr.kind,
        Err(e) => return fail(tally, e),
    };
    if kind == FileKind::Dir {
        match client.readdir(path) {
            Ok(entries) => {
                for entry in entries {
                    let child = if path == "/" { format!("/{}", entry.name) } else { format!("{path}/{}", entry.name) };
                    scrub_tree(client, &child, tally);
                }
            }
            Err(e) => fail(tally, e),
        }
        return;
    }
    match client.scrub(path) {
        Ok(report) => {
            tally.files += 1;
            tally.bytes += report.checked;
            if !report.damaged.is_empty() {
                tally.bad.push(path.to_string());
            }
            tally.damaged.extend(report.damaged.into_iter().map(|block| (path.to_string(), block)));
        }
        Err(e) => fail(tally, e),
    }
}
