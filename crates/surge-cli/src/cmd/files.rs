//! `surge ls|cat|cp|rm|mkdir`: file operations through the client library.
//! Path arguments follow the rule in paths.rs; `surge cp` plans a copy
//! (every file and its size) before moving a byte, so its progress bar
//! knows the total.

use super::paths::{cp_operand, Operand};
use super::progress::{Transfer, LONG_TRANSFER};
use super::{ns_path, CmdResult, Ctx, LongHelpOnly, PathsArgs};
use crate::units::listing_size;
use clap::Args;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use surge_client::{Attr, Client, FileKind, Tier};

#[derive(Args)]
#[command(disable_help_flag = true)]
pub struct LsArgs {
    /// Long listing: kind, mode, size, tier, layout, modification time.
    #[arg(short = 'l')]
    pub long: bool,
    /// With -l, sizes as 1.5K, 768M, 2.0G (powers of 1024, rounded up, as coreutils' ls -h).
    #[arg(short = 'h', long = "human-readable")]
    pub human_readable: bool,
    #[command(flatten)]
    pub help: LongHelpOnly,
    #[arg(default_value = "/")]
    pub paths: Vec<String>,
}

#[derive(Args)]
pub struct CpArgs {
    /// Copy directories recursively.
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Sources, then the destination (a directory when there are several sources). Surge paths
    /// are written /surge/... (SURGE_MOUNT) or surge:/...; an absolute path outside the mount is
    /// Surge's or local by where it exists, and refused as ambiguous when that does not decide.
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<String>,
}

#[derive(Args)]
pub struct RmArgs {
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Ignore paths that do not exist.
    #[arg(short = 'f', long)]
    pub force: bool,
    #[arg(required = true)]
    pub paths: Vec<String>,
}

#[derive(Args)]
pub struct MkdirArgs {
    /// Create parents as needed; no error if the directory exists.
    #[arg(short = 'p', long)]
    pub parents: bool,
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Copy unit: several stripes at once, so a copy keeps every daemon busy.
const COPY_CHUNK: usize = 8 << 20;

fn errno_is(e: &surge_client::Error, errno: i32) -> bool {
    e.errno() == errno
}

fn fail(path: &str, e: impl std::fmt::Display) -> String {
    format!("{path}: {e}")
}

pub fn ls(ctx: &Ctx, a: LsArgs) -> CmdResult {
    let client = ctx.client()?;
    // Entries that could not be listed: each is named as it fails.
    let mut failed = 0usize;
    let many = a.paths.len() > 1;
    for arg in &a.paths {
        let path = ns_path(arg)?;
        let attr = match client.stat(&path) {
            Ok(attr) => attr,
            Err(e) => {
                note!("surge: {}", fail(arg, e));
                failed += 1;
                continue;
            }
        };
        if attr.kind == FileKind::Dir {
            if many {
                println!("{arg}:");
            }
            let entries = client.readdir(&path).map_err(|e| fail(arg, e))?;
            for ent in entries {
                let child = if path == "/" { format!("/{}", ent.name) } else { format!("{path}/{}", ent.name) };
                if a.long {
                    match client.stat(&child) {
                        Ok(attr) => println!("{}", long_line(&attr, &ent.name, a.human_readable)),
                        Err(e) => {
                            note!("surge: {}", fail(&child, e));
                            failed += 1;
                        }
                    }
                } else {
                    println!("{}", ent.name);
                }
            }
        } else if a.long {
            println!("{}", long_line(&attr, arg, a.human_readable));
        } else {
            println!("{arg}");
        }
    }
    if failed == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    note!("surge: {failed} entr{} could not be listed (see above)", if failed == 1 { "y" } else { "ies" });
    Ok(ExitCode::from(1))
}

fn long_line(attr: &Attr, name: &str, human_readable: bool) -> String {
    let kind = match attr.kind {
        FileKind::File => '-',
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
    };
    let mut perms = String::with_capacity(9);
    for shift in [6, 3, 0] {
        let bits = (attr.mode >> shift) & 7;
        perms.push(if bits & 4 != 0 { 'r' } else { '-' });
        perms.push(if bits & 2 != 0 { 'w' } else { '-' });
        perms.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    let tier = match attr.tier {
        Tier::Buffer => "buffer",
        Tier::Staged => "staged",
        Tier::Pfs => "pfs",
        Tier::Lost => "lost",
    };
    let layout = if attr.kind == FileKind::File && attr.tier != Tier::Pfs {
        format!("{}x{}", attr.layout.stripe_count, crate::units::human(attr.layout.stripe_size).replace(' ', ""))
    } else {
        "-".into()
    };
    let size = listing_size(attr.size, human_readable);
    format!("{kind}{perms} {size:>12} {tier:<6} {layout:<10} {} {name}", utc_time(attr.mtime_ns))
}

/// "YYYY-MM-DD HH:MM" in UTC (days-from-civil inverse, proleptic Gregorian).
pub(crate) fn utc_time(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
}

pub fn cat(ctx: &Ctx, a: PathsArgs) -> CmdResult {
    let client = ctx.client()?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut buf = vec![0u8; COPY_CHUNK];
    for arg in &a.paths {
        let path = ns_path(arg)?;
        let file = client.open(&path, libc::O_RDONLY, 0).map_err(|e| fail(arg, e))?;
        loop {
            let n = file.read(&mut buf).map_err(|e| fail(arg, e))?;
            if n == 0 {
                break;
            }
            // A reader that went away ends the command by SIGPIPE (main.rs).
            out.write_all(&buf[..n]).map_err(|e| format!("standard output: {e}"))?;
        }
    }
    out.flush().ok();
    Ok(ExitCode::SUCCESS)
}

/// One end of a copy.
#[derive(Clone, Debug)]
enum Endpoint {
    Local(PathBuf),
    Surge(String),
}

/// What a copy needs to know of an existing endpoint.
struct Meta {
    is_dir: bool,
    mode: u32,
    size: u64,
}

impl Endpoint {
    /// An operand of `surge cp`, placed by the path rule (paths.rs).
    fn parse(client: &Client, arg: &str, operand: Operand) -> Result<Endpoint, String> {
        let in_surge = |path: &str| match client.stat(path) {
            Ok(_) => Ok(true),
            Err(e) if errno_is(&e, libc::ENOENT) || errno_is(&e, libc::ENOTDIR) => Ok(false),
            Err(e) => Err(fail(arg, e)),
        };
        Ok(match cp_operand(arg, operand, &in_surge)? {
            Some(path) => Endpoint::Surge(path),
            None => Endpoint::Local(PathBuf::from(arg)),
        })
    }

    fn display(&self) -> String {
        match self {
            Endpoint::Local(p) => p.display().to_string(),
            Endpoint::Surge(p) => format!("surge:{p}"),
        }
    }

    /// What it is, or None when it does not exist.
    fn probe(&self, client: &Client) -> Result<Option<Meta>, String> {
        match self {
            Endpoint::Local(p) => match fs::metadata(p) {
                Ok(m) => Ok(Some(Meta { is_dir: m.is_dir(), mode: m.permissions().mode() & 0o7777, size: m.len() })),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(fail(&self.display(), e)),
            },
            Endpoint::Surge(p) => match client.stat(p) {
                Ok(a) => Ok(Some(Meta { is_dir: a.kind == FileKind::Dir, mode: a.mode & 0o7777, size: a.size })),
                Err(e) if errno_is(&e, libc::ENOENT) => Ok(None),
                Err(e) => Err(fail(&self.display(), e)),
            },
        }
    }

    fn child(&self, name: &str) -> Endpoint {
        match self {
            Endpoint::Local(p) => Endpoint::Local(p.join(name)),
            Endpoint::Surge(p) if p == "/" => Endpoint::Surge(format!("/{name}")),
            Endpoint::Surge(p) => Endpoint::Surge(format!("{p}/{name}")),
        }
    }

    fn name(&self) -> Option<String> {
        match self {
            Endpoint::Local(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()),
            Endpoint::Surge(p) => surge_proto::path::split(p).map(|(_, n)| n.to_string()),
        }
    }

    fn list(&self, client: &Client) -> Result<Vec<String>, String> {
        match self {
            Endpoint::Local(p) => {
                let mut names: Vec<String> = fs::read_dir(p)
                    .map_err(|e| fail(&self.display(), e))?
                    .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                    .collect();
                names.sort();
                Ok(names)
            }
            Endpoint::Surge(p) => {
                Ok(client.readdir(p).map_err(|e| fail(&self.display(), e))?.into_iter().map(|e| e.name).collect())
            }
        }
    }

    fn make_dir(&self, client: &Client, mode: u32) -> Result<(), String> {
        match self {
            Endpoint::Local(p) => match fs::create_dir(p) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(fail(&self.display(), e)),
                _ => Ok(()),
            },
            Endpoint::Surge(p) => match client.mkdir(p, mode) {
                Err(e) if !errno_is(&e, libc::EEXIST) => Err(fail(&self.display(), e)),
                _ => Ok(()),
            },
        }
    }
}

/// A source being read or a destination being written.
enum Stream {
    Local(fs::File),
    // Boxed: a Surge handle is much larger than a descriptor.
    Surge(Box<surge_client::File>),
}

impl Stream {
    /// The first data extent at or after `offset` (SEEK_DATA, then
    /// SEEK_HOLE: a Surge file's from its objects, a local file's from its
    /// file system), `None` when only holes or the end follow.
    fn data_after(&self, offset: u64) -> Result<Option<(u64, u64)>, String> {
        let seek = |offset: u64, hole: bool| -> Result<Option<u64>, String> {
            let found = match self {
                Stream::Local(f) => {
                    let whence = if hole { libc::SEEK_HOLE } else { libc::SEEK_DATA };
                    let at = libc::off_t::try_from(offset).map_err(|e| e.to_string())?;
                    // SAFETY: lseek on a descriptor this stream owns; reads are positional.
                    match unsafe { libc::lseek(f.as_raw_fd(), at, whence) } {
                        found if found >= 0 => Ok(found as u64),
                        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)),
                    }
                }
                Stream::Surge(f) => f.seek_data_or_hole(offset, hole).map_err(|e| e.errno()),
            };
            match found {
                Ok(at) => Ok(Some(at)),
                Err(libc::ENXIO) => Ok(None),
                Err(errno) => Err(std::io::Error::from_raw_os_error(errno).to_string()),
            }
        };
        let Some(start) = seek(offset, false)? else { return Ok(None) };
        Ok(seek(start, true)?.map(|end| (start, end)))
    }
    fn size(&self) -> Result<u64, String> {
        match self {
            Stream::Local(f) => f.metadata().map(|m| m.len()).map_err(|e| e.to_string()),
            Stream::Surge(f) => f.attr().map(|a| a.size).map_err(|e| e.to_string()),
        }
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, String> {
        match self {
            Stream::Local(f) => f.read_at(buf, offset).map_err(|e| e.to_string()),
            Stream::Surge(f) => f.read_at(buf, offset).map_err(|e| e.to_string()),
        }
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), String> {
        match self {
            Stream::Local(f) => f.write_all_at(buf, offset).map_err(|e| e.to_string()),
            Stream::Surge(f) => {
                let mut done = 0;
                while done < buf.len() {
                    done += f.write_at(&buf[done..], offset + done as u64).map_err(|e| e.to_string())?;
                }
                Ok(())
            }
        }
    }
    fn set_len(&self, len: u64) -> Result<(), String> {
        match self {
            Stream::Local(f) => f.set_len(len).map_err(|e| e.to_string()),
            Stream::Surge(f) => f.set_len(len).map_err(|e| e.to_string()),
        }
    }
}

fn open_source(client: &Client, src: &Endpoint) -> Result<Stream, String> {
    Ok(match src {
        Endpoint::Local(p) => Stream::Local(fs::File::open(p).map_err(|e| fail(&src.display(), e))?),
        Endpoint::Surge(p) => {
            Stream::Surge(Box::new(client.open(p, libc::O_RDONLY, 0).map_err(|e| fail(&src.display(), e))?))
        }
    })
}

fn open_dest(client: &Client, dst: &Endpoint, mode: u32) -> Result<Stream, String> {
    Ok(match dst {
        Endpoint::Local(p) => {
            use std::os::unix::fs::OpenOptionsExt;
            let f = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(p);
            Stream::Local(f.map_err(|e| fail(&dst.display(), e))?)
        }
        Endpoint::Surge(p) => Stream::Surge(Box::new(
            client
                .open(p, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, mode)
                .map_err(|e| fail(&dst.display(), e))?,
        )),
    })
}

/// One step of a planned copy.
enum Step {
    MakeDir { dir: Endpoint, mode: u32 },
    Copy { src: Endpoint, dst: Endpoint, mode: u32, size: u64 },
}

/// The steps that copy `src` to `dst` (a tree only when `recursive`).
fn plan(client: &Client, src: &Endpoint, dst: &Endpoint, recursive: bool, steps: &mut Vec<Step>) -> Result<(), String> {
    let Some(meta) = src.probe(client)? else {
        return Err(fail(&src.display(), "No such file or directory"));
    };
    if !meta.is_dir {
        steps.push(Step::Copy { src: src.clone(), dst: dst.clone(), mode: meta.mode, size: meta.size });
        return Ok(());
    }
    if !recursive {
        return Err(format!("{}: is a directory (use -r to copy it)", src.display()));
    }
    steps.push(Step::MakeDir { dir: dst.clone(), mode: meta.mode });
    for name in src.list(client)? {
        plan(client, &src.child(&name), &dst.child(&name), true, steps)?;
    }
    Ok(())
}

fn copy_file(
    client: &Client,
    src: &Endpoint,
    dst: &Endpoint,
    mode: u32,
    buf: &mut [u8],
    progress: &Transfer,
) -> Result<(), String> {
    let input = open_source(client, src)?;
    let output = open_dest(client, dst, mode)?;
    // Only the data extents are copied: the holes stay holes in the copy.
    let size = input.size().map_err(|e| fail(&src.display(), e))?;
    let mut pos = 0;
    while let Some((start, end)) = input.data_after(pos).map_err(|e| fail(&src.display(), e))? {
        let mut at = start;
        while at < end {
            let want = ((end - at) as usize).min(buf.len());
            let n = input.read_at(&mut buf[..want], at).map_err(|e| fail(&src.display(), e))?;
            if n == 0 {
                break; // shrunk meanwhile
            }
            output.write_all_at(&buf[..n], at).map_err(|e| fail(&dst.display(), e))?;
            at += n as u64;
        }
        progress.advance(at - pos);
        pos = at;
    }
    output.set_len(size.max(pos)).map_err(|e| fail(&dst.display(), e))?;
    progress.advance(size.saturating_sub(pos));
    match output {
        Stream::Local(f) => f.sync_all().map_err(|e| fail(&dst.display(), e)),
        Stream::Surge(f) => f.fsync().map_err(|e| fail(&dst.display(), e)),
    }
}

pub fn cp(ctx: &Ctx, a: CpArgs) -> CmdResult {
    let client = ctx.client()?;
    let (dst_arg, src_args) = a.paths.split_last().expect("clap requires two paths");
    let dst = Endpoint::parse(&client, dst_arg, Operand::Destination)?;
    let dst_is_dir = matches!(dst.probe(&client)?, Some(Meta { is_dir: true, .. }));
    if src_args.len() > 1 && !dst_is_dir {
        return Err(format!("{}: not a directory (copying several sources needs one)", dst.display()));
    }
    let mut steps = Vec::new();
    for arg in src_args {
        let src = Endpoint::parse(&client, arg, Operand::Source)?;
        let target = if dst_is_dir {
            dst.child(&src.name().ok_or_else(|| format!("{arg}: has no file name to copy to"))?)
        } else {
            dst.clone()
        };
        plan(&client, &src, &target, a.recursive, &mut steps)?;
    }
    let (files, total) = steps.iter().fold((0usize, 0u64), |(files, total), step| match step {
        Step::Copy { size, .. } => (files + 1, total + size),
        Step::MakeDir { .. } => (files, total),
    });
    let long = total >= LONG_TRANSFER;
    let progress = Transfer::new(total, !long);
    let mut buf = vec![0u8; COPY_CHUNK];
    for step in &steps {
        match step {
            Step::MakeDir { dir, mode } => dir.make_dir(&client, *mode)?,
            Step::Copy { src, dst, mode, .. } => {
                progress.set_file(&src.display());
                copy_file(&client, src, dst, *mode, &mut buf, &progress)?;
            }
        }
    }
    let done = progress.finish(total);
    if long {
        note!("surge: copied {files} file(s), {done}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn rm(ctx: &Ctx, a: RmArgs) -> CmdResult {
    let client = ctx.client()?;
    for arg in &a.paths {
        let path = ns_path(arg)?;
        match remove(&client, &path, a.recursive) {
            Err(e) if a.force && errno_is(&e, libc::ENOENT) => {}
            Err(e) if errno_is(&e, libc::EISDIR) => return Err(format!("{arg}: is a directory (use -r)")),
            Err(e) => return Err(fail(arg, e)),
            Ok(()) => {}
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn remove(client: &Client, path: &str, recursive: bool) -> surge_client::Result<()> {
    let attr = client.stat(path)?;
    // A link is removed itself, never what it leads to.
    if attr.kind != FileKind::Dir {
        return client.unlink(path);
    }
    if !recursive {
        return Err(surge_client::Error::new(libc::EISDIR, format!("{path} is a directory")));
    }
    for ent in client.readdir(path)? {
        let child = if path == "/" { format!("/{}", ent.name) } else { format!("{path}/{}", ent.name) };
        remove(client, &child, true)?;
    }
    if path == "/" {
        return Ok(());
    }
    client.rmdir(path)
}

pub fn mkdir(ctx: &Ctx, a: MkdirArgs) -> CmdResult {
    let client = ctx.client()?;
    for arg in &a.paths {
        let path = ns_path(arg)?;
        if a.parents {
            make_dirs(&client, &path)?;
        } else {
            client.mkdir(&path, 0o755).map_err(|e| fail(arg, e))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `mkdir -p` of namespace path `path`: no error when a directory is there already.
pub fn make_dirs(client: &Client, path: &str) -> Result<(), String> {
    let mut prefix = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        prefix.push('/');
        prefix.push_str(part);
        match client.mkdir(&prefix, 0o755) {
            Err(e) if errno_is(&e, libc::EEXIST) => {
                let attr = client.stat(&prefix).map_err(|e| fail(&prefix, e))?;
                if attr.kind != FileKind::Dir {
                    return Err(format!("{prefix}: exists and is not a directory"));
                }
            }
            Err(e) => return Err(fail(&prefix, e)),
            Ok(()) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_time_matches_known_dates() {
        assert_eq!(utc_time(0), "1970-01-01 00:00");
        assert_eq!(utc_time(1_700_000_000 * 1_000_000_000), "2023-11-14 22:13");
        assert_eq!(utc_time(951_782_400 * 1_000_000_000), "2000-02-29 00:00");
    }
}
