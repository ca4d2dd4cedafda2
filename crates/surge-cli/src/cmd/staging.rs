//! A job's staging directives, as DataWarp's `#DW stage_in`/`stage_out`
//! and UnifyFS's transfer manifests have them: `surge run --stage-in
//! SRC:DST` copies host files or directories into Surge before the job
//! starts (the job does not start if one fails), `--stage-out SRC:DST`
//! copies what the job wrote to a destination other than the file's own
//! PFS path after it ends, and `--manifest FILE` lists either kind. Every
//! copy is verified end to end (`Client::stage_in`, `Client::stage_out_to`)
//! and several files are copied at once.
//!
//! A manifest has one directive per line, in either spelling:
//!
//! ```text
//! stage_in  /scratch/inputs/mesh.h5   /surge/mesh.h5
//! stage_out /surge/ckpt               /scratch/run42/ckpt
//! #DW stage_in source=/scratch/inputs destination=/surge/inputs type=directory
//! ```
//!
//! Blank lines and other lines starting with `#` are comments. Surge paths
//! are written under the mount (`/surge/...`) or as `surge:/...`.

use super::paths::spelled_in_surge;
use super::progress::Transfer;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use surge_client::{Attr, Client, FileKind};

/// Files copied at once: enough to keep every daemon busy with small files.
const WORKERS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Host to Surge, before the job.
    In,
    /// Surge to host, after the job.
    Out,
}

/// One directive: `host` is the host side (source of a stage-in,
/// destination of a stage-out), `surge` a namespace path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub direction: Direction,
    pub host: PathBuf,
    pub surge: String,
}

impl Directive {
    /// `SRC:DST` as given to `--stage-in` or `--stage-out` (either side
    /// may be spelt `surge:/...`, whose colon does not split).
    pub fn parse(direction: Direction, spec: &str, mount: &str) -> Result<Directive, String> {
        let split = spec.match_indices(':').map(|(at, _)| at).find(|&at| &spec[..at] != "surge");
        match split.map(|at| (&spec[..at], &spec[at + 1..])) {
            Some((src, dst)) if !src.is_empty() && !dst.is_empty() => Directive::new(direction, src, dst, mount),
            _ => Err(format!("{spec:?}: give SRC:DST")),
        }
    }

    fn new(direction: Direction, src: &str, dst: &str, mount: &str) -> Result<Directive, String> {
        let (host, surge) = match direction {
            Direction::In => (src, dst),
            Direction::Out => (dst, src),
        };
        let surge = match spelled_in_surge(surge, mount) {
            Some(path) => path?,
            None => return Err(format!("{surge}: not a Surge path (write it under the mount, or as surge:/...)")),
        };
        if spelled_in_surge(host, mount).is_some() {
            return Err(format!("{host}: is a Surge path; the other side of a stage directive is on the host"));
        }
        Ok(Directive { direction, host: PathBuf::from(host), surge })
    }
}

/// The directives of a manifest file (see the module), Surge paths under `mount`.
pub fn read_manifest(path: &Path, mount: &str) -> Result<Vec<Directive>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut directives = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let at = || format!("{} line {}", path.display(), number + 1);
        let line = line.trim();
        let (datawarp, line) = match line.strip_prefix("#DW") {
            Some(rest) => (true, rest.trim()),
            None if line.is_empty() || line.starts_with('#') => continue,
            None => (false, line),
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let direction = match fields.first() {
            Some(&"stage_in") => Direction::In,
            Some(&"stage_out") => Direction::Out,
            Some(&"jobdw" | &"persistentdw" | &"swap") if datawarp => continue,
            _ => return Err(format!("{}: expected stage_in or stage_out, got {line:?}", at())),
        };
        let (src, dst) = if datawarp {
            let value = |key: &str| fields[1..].iter().find_map(|f| f.strip_prefix(key)?.strip_prefix('='));
            match (value("source"), value("destination")) {
                (Some(src), Some(dst)) => (src, dst),
                _ => return Err(format!("{}: a #DW directive needs source= and destination=", at())),
            }
        } else {
            match fields[1..] {
                [src, dst] => (src, dst),
                _ => return Err(format!("{}: expected `{} SRC DST` (paths without spaces)", at(), fields[0])),
            }
        };
        directives.push(Directive::new(direction, src, dst, mount).map_err(|e| format!("{}: {e}", at()))?);
    }
    Ok(directives)
}

/// One file to copy: host path and Surge path.
type FilePair = (PathBuf, String);

/// What a batch of copies did.
#[derive(Debug, Default)]
pub struct Staged {
    pub files: usize,
    pub bytes: u64,
    /// Surge paths whose copy was verified.
    pub done: BTreeSet<String>,
    /// "what: why" of each copy that failed.
    pub failures: Vec<String>,
    /// "<size> in <secs> s (<rate> MB/s)".
    pub took: String,
}

/// Copies every `Direction::In` directive into Surge (directories whole,
/// creating the Surge directories they need).
pub fn stage_in(client: &Client, directives: &[Directive], quiet: bool) -> Result<Staged, String> {
    let mut files = Vec::new();
    for d in directives.iter().filter(|d| d.direction == Direction::In) {
        host_files(&d.host, &d.surge, &mut files)?;
    }
    // Each directory the copies need, made once.
    let parents: BTreeSet<&str> =
        files.iter().filter_map(|(_, surge)| Some(surge_proto::path::split(surge)?.0)).collect();
    for parent in parents {
        mkdir_all(client, parent)?;
    }
    Ok(copy_all(&files, quiet, &|| false, |(host, surge), progress| {
        client.stage_in(host, surge, progress).map(|t| t.bytes).map_err(|e| e.to_string())
    }))
}

/// Copies every `Direction::Out` directive out of Surge, files with their
/// modes and times (`Client::stage_out_to`), then each directory's mode
/// and times, after its contents; a directory made for them is 0700 until
/// then (a private directory is never readable by others on the way).
/// Stops starting copies once `give_up` says so.
pub fn stage_out(
    client: &Client,
    directives: &[Directive],
    quiet: bool,
    give_up: &(dyn Fn() -> bool + Sync),
) -> Staged {
    use std::os::unix::fs::DirBuilderExt;
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let mut listing_failures = Vec::new();
    for d in directives.iter().filter(|d| d.direction == Direction::Out) {
        if let Err(e) = surge_files(client, &d.surge, &d.host, &mut files, &mut dirs) {
            listing_failures.push(e);
        }
    }
    let mut staged = copy_all(&files, quiet, give_up, |(host, surge), progress| {
        if let Some(dir) = host.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        client.stage_out_to(surge, host, progress).map(|t| t.bytes).map_err(|e| e.to_string())
    });
    staged.failures.extend(listing_failures);
    for (host, surge, attr) in dirs {
        let settled = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&host)
            .map_err(|e| format!("{}: {e}", host.display()))
            .and_then(|()| client.copy_metadata_to_host(&surge, &attr, &host).map_err(|e| e.to_string()));
        staged.failures.extend(settled.err());
    }
    staged
}

/// The files and symbolic links (never followed) under host path `host`
/// (itself if not a directory), paired with where they go under `surge`.
fn host_files(host: &Path, surge: &str, out: &mut Vec<FilePair>) -> Result<(), String> {
    let meta = fs::symlink_metadata(host).map_err(|e| format!("{}: {e}", host.display()))?;
    if !meta.is_dir() {
        out.push((host.to_path_buf(), surge.to_string()));
        return Ok(());
    }
    let mut names: Vec<_> = fs::read_dir(host)
        .map_err(|e| format!("{}: {e}", host.display()))?
        .map(|e| e.map(|e| e.file_name()).map_err(|e| format!("{}: {e}", host.display())))
        .collect::<Result<_, _>>()?;
    names.sort();
    for name in names {
        let child = child(surge, &name.to_string_lossy());
        host_files(&host.join(&name), &child, out)?;
    }
    Ok(())
}

/// The files and symbolic links under Surge path `surge` (itself if not a
/// directory), paired with where they go under `host`; and the
/// directories, deepest first, with their attributes.
fn surge_files(
    client: &Client,
    surge: &str,
    host: &Path,
    out: &mut Vec<FilePair>,
    dirs: &mut Vec<(PathBuf, String, Attr)>,
) -> Result<(), String> {
    let attr = client.stat(surge).map_err(|e| format!("{surge}: {e}"))?;
    if attr.kind != FileKind::Dir {
        out.push((host.to_path_buf(), surge.to_string()));
        return Ok(());
    }
    for entry in client.readdir(surge).map_err(|e| format!("{surge}: {e}"))? {
        surge_files(client, &child(surge, &entry.name), &host.join(&entry.name), out, dirs)?;
    }
    dirs.push((host.to_path_buf(), surge.to_string(), attr));
    Ok(())
}

/// The namespace path of `name` in directory `dir`.
fn child(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn mkdir_all(client: &Client, path: &str) -> Result<(), String> {
    if path == "/" || client.stat(path).is_ok_and(|a| a.kind == FileKind::Dir) {
        return Ok(());
    }
    if let Some((parent, _)) = surge_proto::path::split(path) {
        mkdir_all(client, parent)?;
    }
    match client.mkdir(path, 0o755) {
        Err(e) if e.errno() != libc::EEXIST => Err(format!("{path}: {e}")),
        _ => Ok(()),
    }
}

/// Runs `copy` over `files` on [`WORKERS`] threads with one progress bar.
fn copy_all(
    files: &[FilePair],
    quiet: bool,
    give_up: &(dyn Fn() -> bool + Sync),
    copy: impl Fn(&FilePair, &mut dyn FnMut(u64)) -> Result<u64, String> + Sync,
) -> Staged {
    // Sizes of the host side: a stage-in's sources; a stage-out's destinations, if any, only hint.
    let total: u64 = files.iter().filter_map(|(host, _)| fs::metadata(host).ok()).map(|m| m.len()).sum();
    let progress = Transfer::new(total, quiet || files.is_empty());
    let next = AtomicUsize::new(0);
    let staged = Mutex::new(Staged::default());
    std::thread::scope(|scope| {
        for _ in 0..WORKERS.min(files.len()) {
            scope.spawn(|| {
                while let Some(pair) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if give_up() {
                        lock(&staged).failures.push(format!("{}: not copied (stopped)", pair.1));
                        continue;
                    }
                    let mut last = 0;
                    let result = copy(pair, &mut |done| {
                        progress.advance(done - last);
                        last = done;
                    });
                    let mut staged = lock(&staged);
                    match result {
                        Ok(bytes) => {
                            staged.files += 1;
                            staged.bytes += bytes;
                            staged.done.insert(pair.1.clone());
                        }
                        Err(e) => staged.failures.push(e),
                    }
                }
            });
        }
    });
    let staged = staged.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    Staged { took: progress.finish(staged.bytes), ..staged }
}

fn lock(staged: &Mutex<Staged>) -> std::sync::MutexGuard<'_, Staged> {
    staged.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directive(direction: Direction, host: &str, surge: &str) -> Directive {
        Directive { direction, host: PathBuf::from(host), surge: surge.into() }
    }

    #[test]
    fn directives_name_the_host_side_and_the_surge_side_in_either_order() {
        assert_eq!(
            Directive::parse(Direction::In, "/scratch/in:/surge/in", "/surge").unwrap(),
            directive(Direction::In, "/scratch/in", "/in")
        );
        assert_eq!(
            Directive::parse(Direction::Out, "/job/ckpt:/scratch/out", "/job").unwrap(),
            directive(Direction::Out, "/scratch/out", "/ckpt")
        );
        assert_eq!(
            Directive::parse(Direction::Out, "surge:/ckpt:/scratch/out", "/surge").unwrap(),
            directive(Direction::Out, "/scratch/out", "/ckpt")
        );
        assert_eq!(
            Directive::parse(Direction::In, "/scratch/in:surge:/in", "/surge").unwrap(),
            directive(Direction::In, "/scratch/in", "/in")
        );
        for bad in ["", "nocolon", ":/surge/x", "/scratch/x:", "/scratch/a:/scratch/b", "/surge/a:/surge/b"] {
            assert!(Directive::parse(Direction::In, bad, "/surge").is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_manifest_takes_both_spellings_and_names_the_line_of_a_mistake() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("manifest");
        fs::write(
            &manifest,
            "# inputs\n\nstage_in /scratch/mesh.h5 /surge/mesh.h5\n\
             #DW jobdw type=scratch capacity=1TB\n\
             #DW stage_out source=/surge/ckpt destination=/scratch/ckpt type=directory\n",
        )
        .unwrap();
        assert_eq!(
            read_manifest(&manifest, "/surge").unwrap(),
            [
                directive(Direction::In, "/scratch/mesh.h5", "/mesh.h5"),
                directive(Direction::Out, "/scratch/ckpt", "/ckpt")
            ]
        );
        fs::write(&manifest, "stage_in /a\n").unwrap();
        assert!(read_manifest(&manifest, "/surge").unwrap_err().contains("line 1"));
        fs::write(&manifest, "stage_in /a /b\n").unwrap();
        assert!(read_manifest(&manifest, "/surge").unwrap_err().contains("not a Surge path"));
        fs::write(&manifest, "copy /a /surge/b\n").unwrap();
        assert!(read_manifest(&manifest, "/surge").unwrap_err().contains("expected stage_in or stage_out"));
        assert!(read_manifest(&dir.path().join("absent"), "/surge").is_err());
    }
}
