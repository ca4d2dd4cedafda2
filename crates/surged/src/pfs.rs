//! The PFS tier: a POSIX directory whose tree mirrors the namespace (the
//! file for "/a/b" is `<root>/a/b`).
//!
//! Every host path is built from a canonical namespace path (no "..", see
//! `surge_proto::path::canonical`) joined under the root, and checked after
//! the kernel resolved its symbolic links: nothing outside the root is ever
//! read, written or created. The last component of a path that is opened is
//! opened with `O_NOFOLLOW`.
//!
//! Symbolic links show as links ([`FileKind::Symlink`], their target read,
//! never followed here): the namespace hands them to the client, which
//! follows them in its own process with its own rights, as it would on the
//! PFS itself. So a link planted by another user, inside or out of the
//! root, can never make the daemon read, write or list anything: the
//! daemon acts on the link entry alone (remove, rename, replace). A
//! directory path with a link in it is resolved with `canonicalize`, and
//! one leading outside the root is not there; the namespace meets every
//! link on a path first, so this only guards against a tree changed
//! meanwhile. A path without links (nearly all) is checked with one
//! `openat2` instead (`Pfs::resolve`).

use crate::failure::Failure;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, DirEntryExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use surge_proto::msg::FileKind;
use surge_proto::{path, Errno};

/// The marker in the names of stage-out temporary files:
/// `.<name>.surge-stage.<ino>.<8 hex digits>`.
const STAGE_MARK: &str = ".surge-stage.";
/// Longest part of a file's name repeated in its stage temp's name, so the
/// temp's name stays within NAME_MAX.
const STAGE_NAME_KEEP: usize = 200;

/// A file or directory on the PFS, as `stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PfsNode {
    /// The PFS inode number.
    pub ino: u64,
    pub kind: FileKind,
    pub mode: u32,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// 512-byte blocks its data takes on the PFS (holes take none).
    pub blocks: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PfsEntry {
    pub name: String,
    pub kind: FileKind,
    /// The PFS inode number.
    pub ino: u64,
}

pub struct Pfs {
    /// Canonical (symlink-free) absolute root.
    root: PathBuf,
}

impl Pfs {
    /// Opens the PFS tier rooted at the existing directory `root`.
    pub fn open(root: &Path) -> io::Result<Pfs> {
        let root = root.canonicalize()?;
        if !root.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        Ok(Pfs { root })
    }

    /// Is the root there (a PFS not mounted yet has none)?
    pub fn root_present(&self) -> bool {
        self.root.is_dir()
    }

    fn host(&self, ns: &str) -> PathBuf {
        self.root.join(ns.trim_start_matches('/'))
    }

    /// The host path of `ns` with every symlink resolved; `None` if it does
    /// not exist or resolves outside the root.
    ///
    /// The common case, a path without links, takes one `openat2` that
    /// refuses any link on the way (`RESOLVE_NO_SYMLINKS`; the root is
    /// canonical and `ns` has no ".."), so it is the path itself and inside
    /// the root. Only a path with a link is resolved in full (`realpath`:
    /// one `readlink` per component) and checked to stay inside the root.
    fn resolve(&self, ns: &str) -> Result<Option<PathBuf>, Errno> {
        let host = self.host(ns);
        let no_links = rustix::fs::openat2(
            rustix::fs::CWD,
            &host,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        );
        match no_links {
            Ok(_) => return Ok(Some(host)),
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::NOTDIR) => return Err(Errno::ENOTDIR),
            // A link on the way, or a kernel without openat2 (before 5.6).
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOSYS | rustix::io::Errno::AGAIN) => {}
            Err(e) => return Err(Errno(e.raw_os_error())),
        }
        match host.canonicalize() {
            Ok(p) if p.starts_with(&self.root) => Ok(Some(p)),
            Ok(_) => Ok(None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ELOOP)) => Ok(None),
            Err(e) => Err(Errno::from_io(&e)),
        }
    }

    /// The host path of the directory entry `ns` itself: its directory
    /// resolved and checked, its last component not followed.
    fn entry(&self, ns: &str) -> Result<Option<PathBuf>, Errno> {
        let Some((dir, name)) = path::split(ns) else { return Err(Errno::EBUSY) };
        Ok(self.resolve(dir)?.map(|d| d.join(name)))
    }

    /// The file, directory or symbolic link (not followed) at `ns`, if the
    /// PFS has one there that belongs to the namespace (not a special file
    /// or a stage temp). `ENOTDIR` when a component of `ns` is a file.
    pub fn stat(&self, ns: &str) -> Result<Option<PfsNode>, Errno> {
        if path::split(ns).is_some_and(|(_, name)| is_stage_temp(name)) {
            return Ok(None);
        }
        let host = if ns == "/" { Some(self.root.clone()) } else { self.entry(ns)? };
        let Some(host) = host else { return Ok(None) };
        match fs::symlink_metadata(host) {
            Ok(meta) => Ok(node_of(&meta)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Errno::from_io(&e)),
        }
    }

    /// The target of the symbolic link `ns`; EINVAL if it is not a link,
    /// EILSEQ if the target is not UTF-8 (as namespace names must be).
    pub fn read_link(&self, ns: &str) -> Result<String, Errno> {
        let host = self.entry(ns)?.ok_or(Errno::ENOENT)?;
        let target = fs::read_link(host)?;
        target.into_os_string().into_string().map_err(|_| Errno(libc::EILSEQ))
    }

    /// Puts a symbolic link to `target` at `ns` (for link inode `ino`) with
    /// the link's own `times`, replacing any non-directory entry there in
    /// one rename, the way a stage-out commit replaces a file.
    pub fn put_link(&self, ns: &str, ino: u64, target: &str, times: &Times) -> Result<(), Failure> {
        let (dir, name) = path::split(ns).ok_or(Errno::EISDIR)?;
        let host_dir = self.make_dirs(dir)?;
        let temp = host_dir.join(stage_temp_name(name, ino));
        std::os::unix::fs::symlink(target, &temp)?;
        let placed = set_entry_times(&temp, times)
            .and_then(|()| check_metadata(ns, &temp, &fs::symlink_metadata(&temp)?, None, times))
            .and_then(|()| Ok(fs::rename(&temp, host_dir.join(name))?));
        if let Err(e) = placed {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        Ok(crate::sys::sync_dir(&host_dir)?)
    }

    /// The namespace entries of directory `ns` on the PFS, in name order;
    /// empty if the PFS has no such directory.
    pub fn list(&self, ns: &str) -> Result<Vec<PfsEntry>, Errno> {
        let mut out = Vec::new();
        self.scan(ns, |entry| {
            out.push(entry);
            true
        })?;
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Does the PFS directory `ns` hold no namespace entry (or not exist)?
    pub fn is_empty_dir(&self, ns: &str) -> Result<bool, Errno> {
        let mut empty = true;
        self.scan(ns, |_| {
            empty = false;
            false
        })?;
        Ok(empty)
    }

    /// Calls `visit` for the namespace entries of directory `ns` until it returns false.
    fn scan(&self, ns: &str, mut visit: impl FnMut(PfsEntry) -> bool) -> Result<(), Errno> {
        let Some(dir) = self.resolve(ns)? else { return Ok(()) };
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => return Ok(()),
            Err(e) => return Err(Errno::from_io(&e)),
        };
        for entry in entries {
            let entry = entry?;
            // Namespace names are UTF-8; other names are not part of it.
            let Ok(name) = entry.file_name().into_string() else { continue };
            if is_stage_temp(&name) {
                continue;
            }
            if let Some(kind) = kind_of(entry.file_type()?) {
                if !visit(PfsEntry { name, kind, ino: entry.ino() }) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Opens the PFS file `ns` for reading, with what `fstat` says of it
    /// (which the read cache keys the file's bytes by).
    pub fn open_file(&self, ns: &str) -> Result<(File, fs::Metadata), Errno> {
        let host = self.resolve(ns)?.ok_or(Errno::ENOENT)?;
        let file = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(host)?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Err(Errno::EISDIR);
        }
        Ok((file, meta))
    }

    /// Reads the PFS file `ns` from `offset`; short at its end.
    #[cfg(test)]
    pub fn read_at(&self, ns: &str, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        crate::sys::pread_full(&self.open_file(ns)?.0, buf, offset)
    }

    /// Creates the new file `ns` (its directories as needed) with `mode`,
    /// for a checkpoint placed on the PFS directly; EEXIST if it exists.
    pub fn create_file(&self, ns: &str, mode: u32) -> Result<PfsNode, Errno> {
        let (dir, name) = path::split(ns).ok_or(Errno::EISDIR)?;
        let host = self.make_dirs(dir)?.join(name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode & 0o7777)
            .custom_flags(libc::O_NOFOLLOW)
            .open(host)?;
        node_of(&file.metadata()?).ok_or(Errno::EIO)
    }

    /// Opens the existing PFS file `ns` for writing in place (a checkpoint
    /// placed on the PFS directly); `truncate` empties it.
    pub fn open_for_writing(&self, ns: &str, truncate: bool) -> Result<File, Errno> {
        let host = self.resolve(ns)?.ok_or(Errno::ENOENT)?;
        let file =
            OpenOptions::new().read(true).write(true).truncate(truncate).custom_flags(libc::O_NOFOLLOW).open(&host)?;
        if file.metadata()?.is_dir() {
            return Err(Errno::EISDIR);
        }
        Ok(file)
    }

    /// Flushes the directory holding `ns`, making its entry durable.
    pub fn sync_dir_of(&self, ns: &str) -> Result<(), Errno> {
        let (dir, _) = path::split(ns).ok_or(Errno::EISDIR)?;
        let host = self.resolve(dir)?.ok_or(Errno::ENOENT)?;
        Ok(crate::sys::sync_dir(&host)?)
    }

    /// Is there any directory entry at `ns` (of any kind)?
    pub fn has_entry(&self, ns: &str) -> Result<bool, Errno> {
        let Some(host) = self.entry(ns)? else { return Ok(false) };
        match fs::symlink_metadata(host) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(false),
            Err(e) => Err(Errno::from_io(&e)),
        }
    }

    /// Removes the non-directory entry at `ns` (a symlink itself, never its target), if any.
    pub fn remove_file(&self, ns: &str) -> Result<(), Errno> {
        self.remove_entry(ns, false)
    }

    /// Removes the directory at `ns`, if any; `ENOTEMPTY` if it has entries.
    pub fn remove_dir(&self, ns: &str) -> Result<(), Errno> {
        self.remove_entry(ns, true)
    }

    fn remove_entry(&self, ns: &str, dir: bool) -> Result<(), Errno> {
        let Some(host) = self.entry(ns)? else { return Ok(()) };
        let result = match fs::symlink_metadata(&host) {
            Ok(meta) if meta.is_dir() != dir => return Ok(()),
            Ok(_) if dir => fs::remove_dir(&host),
            Ok(_) => fs::remove_file(&host),
            Err(e) => Err(e),
        };
        match result {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(()),
            other => other.map_err(|e| Errno::from_io(&e)),
        }
    }

    /// Renames the entry `from` to `to`, creating `to`'s directories as needed.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), Errno> {
        let source = self.entry(from)?.ok_or(Errno::ENOENT)?;
        let (to_dir, to_name) = path::split(to).ok_or(Errno::EBUSY)?;
        let target = self.make_dirs(to_dir)?.join(to_name);
        fs::rename(source, target)?;
        Ok(())
    }

    /// Creates the directories of `ns` that are missing (`mkdir -p`) and
    /// returns its host path. A symlink on the way is followed only when it
    /// leads to a directory inside the root. A new directory is made 0700,
    /// private until the namespace gives it its mode ([`Pfs::settle`]): a
    /// private directory of the job is never readable by others on the
    /// PFS, not even for a moment.
    pub fn make_dirs(&self, ns: &str) -> Result<PathBuf, Errno> {
        let mut dir = self.root.clone();
        for name in ns.split('/').filter(|n| !n.is_empty()) {
            let next = dir.join(name);
            dir = match fs::symlink_metadata(&next) {
                Ok(meta) if meta.is_dir() => next,
                Ok(meta) if meta.file_type().is_symlink() => match next.canonicalize() {
                    Ok(real) if real.starts_with(&self.root) && real.is_dir() => real,
                    _ => return Err(Errno::ENOTDIR),
                },
                Ok(_) => return Err(Errno::ENOTDIR),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    match fs::DirBuilder::new().mode(0o700).create(&next) {
                        Ok(()) => next,
                        // Made by someone else just now: fine if it is a directory.
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && next.is_dir() && !next.is_symlink() => {
                            next
                        }
                        Err(e) => return Err(Errno::from_io(&e)),
                    }
                }
                Err(e) => return Err(Errno::from_io(&e)),
            };
        }
        Ok(dir)
    }

    /// Creates the stage-out temp file of file `ns` (inode `ino`) beside
    /// where its copy will go, `size` bytes long, and returns its namespace path.
    pub fn create_stage_temp(&self, ns: &str, ino: u64, size: u64) -> Result<String, Errno> {
        let (dir, name) = path::split(ns).ok_or(Errno::EISDIR)?;
        let host_dir = self.make_dirs(dir)?;
        let temp_name = stage_temp_name(name, ino);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(host_dir.join(&temp_name))?;
        file.set_len(size)?;
        Ok(if dir == "/" { format!("/{temp_name}") } else { format!("{dir}/{temp_name}") })
    }

    /// Opens the stage temp `temp` of inode `ino` for copying into it.
    pub fn open_stage_temp(&self, temp: &str, ino: u64) -> Result<File, Failure> {
        let host = self.stage_temp_entry(temp, Some(ino))?.ok_or(Errno::ENOENT)?;
        let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(host)?;
        Ok(file)
    }

    /// Puts a finished stage temp in place as the PFS copy of `ns`: checks
    /// its size, gives it the file's mode and times (`meta`) and checks
    /// that the PFS kept them, flushes it, renames it over `ns` and flushes
    /// the directory, so the copy is durable once this returns.
    pub fn commit_stage_temp(&self, temp: &str, ino: u64, ns: &str, size: u64, meta: &CopyMeta) -> Result<(), Failure> {
        let source = self.stage_temp_entry(temp, Some(ino))?.ok_or(Errno::ENOENT)?;
        let target = self.entry(ns)?.ok_or(Errno::ENOENT)?;
        let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(&source)?;
        let actual = file.metadata()?.len();
        if actual != size {
            return Err(Failure::new(
                Errno::EIO,
                format!("stage-out copy {temp} has {actual} bytes, the file has {size}"),
            ));
        }
        file.set_permissions(fs::Permissions::from_mode(meta.mode & 0o7777))?;
        put_user_xattrs(&file, &source, &meta.xattrs)?;
        // The times last: nothing after them moves the mtime.
        rustix::fs::futimens(&file, &meta.times.timestamps()).map_err(io::Error::from)?;
        check_metadata(ns, &source, &file.metadata()?, Some(meta), &meta.times)?;
        file.sync_all()?;
        fs::rename(&source, &target)?;
        if let Some(dir) = target.parent() {
            crate::sys::sync_dir(dir)?;
        }
        Ok(())
    }

    /// Gives the PFS directory `ns` (made if missing) the mode, extended
    /// attributes and times of `meta`, checked: a stage-out does this once
    /// the directory's contents are in place, as each of them moved its
    /// mtime on. A directory another user owns (a shared project directory
    /// the namespace shows from the PFS) is left as its owner keeps it:
    /// only the owner may set them, and a file staged into it must not fail
    /// for that.
    pub fn settle(&self, ns: &str, meta: &CopyMeta) -> Result<(), Failure> {
        let host = self.make_dirs(ns)?;
        let dir = OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW).open(&host)?;
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 && dir.metadata()?.uid() != euid {
            return Ok(());
        }
        dir.set_permissions(fs::Permissions::from_mode(meta.mode & 0o7777))?;
        put_user_xattrs(&dir, &host, &meta.xattrs)?;
        rustix::fs::futimens(&dir, &meta.times.timestamps()).map_err(io::Error::from)?;
        check_metadata(ns, &host, &dir.metadata()?, Some(meta), &meta.times)
    }

    /// The `user.*` extended attributes of the PFS entry `ns` (not followed).
    pub fn xattrs(&self, ns: &str) -> Result<Vec<(String, Vec<u8>)>, Errno> {
        let host = if ns == "/" { Some(self.root.clone()) } else { self.entry(ns)? };
        Ok(user_xattrs(&host.ok_or(Errno::ENOENT)?)?)
    }

    /// The stage temps of inode `ino` beside file `ns` (namespace paths):
    /// copies a stage-out left when it never finished.
    pub fn stage_temps_of(&self, ns: &str, ino: u64) -> Result<Vec<String>, Errno> {
        let (dir, _) = path::split(ns).ok_or(Errno::EISDIR)?;
        self.stage_temps_in(dir, Some(ino))
    }

    /// The stage temps (of inode `ino`, or of any) in directory `dir`
    /// (namespace paths).
    pub fn stage_temps_in(&self, dir: &str, ino: Option<u64>) -> Result<Vec<String>, Errno> {
        let Some(host) = self.resolve(dir)? else { return Ok(Vec::new()) };
        let entries = match fs::read_dir(&host) {
            Ok(entries) => entries,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => return Ok(Vec::new()),
            Err(e) => return Err(Errno::from_io(&e)),
        };
        let mut temps = Vec::new();
        for entry in entries {
            let Ok(name) = entry?.file_name().into_string() else { continue };
            if stage_temp_ino(&name).is_some_and(|found| ino.is_none_or(|ino| ino == found)) {
                temps.push(if dir == "/" { format!("/{name}") } else { format!("{dir}/{name}") });
            }
        }
        Ok(temps)
    }

    /// Removes a stage temp (of any inode); absent is fine.
    pub fn remove_stage_temp(&self, temp: &str) -> Result<(), Failure> {
        let Some(host) = self.stage_temp_entry(temp, None)? else { return Ok(()) };
        match fs::remove_file(host) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// The host entry of `temp`, refusing any path that is not a stage temp
    /// (of inode `ino`, when given): stage requests write nothing else.
    fn stage_temp_entry(&self, temp: &str, ino: Option<u64>) -> Result<Option<PathBuf>, Failure> {
        let name = path::split(temp).map(|(_, name)| name).unwrap_or("");
        match stage_temp_ino(name) {
            Some(found) if ino.is_none_or(|ino| ino == found) => Ok(self.entry(temp)?),
            _ => Err(Failure::new(Errno::EINVAL, format!("{temp} is not a stage-out temp file of this file"))),
        }
    }
}

/// A new stage temp name for file `name` (inode `ino`):
/// `.<name>.surge-stage.<ino>.<8 random hex digits>`.
fn stage_temp_name(name: &str, ino: u64) -> String {
    let nonce = surge_proto::auth::new_nonce();
    format!(
        ".{}{STAGE_MARK}{ino}.{:02x}{:02x}{:02x}{:02x}",
        truncate_at_char(name, STAGE_NAME_KEEP),
        nonce[0],
        nonce[1],
        nonce[2],
        nonce[3]
    )
}

/// The inode number in a stage temp's name; `None` if `name` is not one.
pub fn stage_temp_ino(name: &str) -> Option<u64> {
    let rest = name.strip_prefix('.')?;
    let (_, tail) = rest.rsplit_once(STAGE_MARK)?;
    let (ino, nonce) = tail.split_once('.')?;
    let digits = |s: &str, hex: bool| {
        !s.is_empty() && s.bytes().all(|b| if hex { b.is_ascii_hexdigit() } else { b.is_ascii_digit() })
    };
    if nonce.len() == 8 && digits(nonce, true) && digits(ino, false) {
        ino.parse().ok()
    } else {
        None
    }
}

pub fn is_stage_temp(name: &str) -> bool {
    stage_temp_ino(name).is_some()
}

/// The namespace kind of a PFS entry; `None` for special files.
fn kind_of(file_type: fs::FileType) -> Option<FileKind> {
    if file_type.is_dir() {
        Some(FileKind::Dir)
    } else if file_type.is_file() {
        Some(FileKind::File)
    } else if file_type.is_symlink() {
        Some(FileKind::Symlink)
    } else {
        None
    }
}

/// What the namespace shows of a PFS entry, from its `lstat`.
pub fn node_of(meta: &fs::Metadata) -> Option<PfsNode> {
    let kind = kind_of(meta.file_type())?;
    Some(PfsNode {
        ino: meta.ino(),
        kind,
        mode: meta.mode() & 0o7777,
        // A link's size is its target's length.
        size: if kind == FileKind::Dir { 0 } else { meta.len() },
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
        blocks: meta.blocks(),
    })
}

/// An access and a modification time, in nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    pub atime_ns: i64,
    pub mtime_ns: i64,
}

impl Times {
    fn timestamps(&self) -> rustix::fs::Timestamps {
        let spec = |ns: i64| rustix::fs::Timespec {
            tv_sec: ns.div_euclid(1_000_000_000),
            tv_nsec: ns.rem_euclid(1_000_000_000) as _,
        };
        rustix::fs::Timestamps { last_access: spec(self.atime_ns), last_modification: spec(self.mtime_ns) }
    }
}

/// What a stage-out gives a file's or directory's PFS copy besides its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyMeta {
    /// Permission bits.
    pub mode: u32,
    pub times: Times,
    /// Its `user.*` extended attributes (`crate::xattrs`), name and value.
    pub xattrs: Vec<(String, Vec<u8>)>,
}

/// The `user.*` extended attributes of the PFS entry `host` (not followed), in name order.
fn user_xattrs(host: &Path) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut names = vec![0u8; crate::xattrs::LIST_MAX];
    let len = match rustix::fs::llistxattr(host, &mut names) {
        Ok(len) => len,
        // A PFS without extended attributes has none to give.
        Err(rustix::io::Errno::OPNOTSUPP) => 0,
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for name in names[..len].split(|b| *b == 0).filter_map(|n| std::str::from_utf8(n).ok()) {
        if !name.starts_with("user.") {
            continue;
        }
        let mut value = vec![0u8; crate::xattrs::VALUE_MAX];
        match rustix::fs::lgetxattr(host, name, &mut value) {
            Ok(n) => out.push((name.to_string(), value[..n].to_vec())),
            Err(rustix::io::Errno::NODATA) => {} // removed meanwhile
            Err(e) => return Err(e.into()),
        }
    }
    out.sort();
    Ok(out)
}

/// Makes the `user.*` extended attributes of the open PFS entry `file`
/// exactly `want`: sets each, removes those it has beyond them.
fn put_user_xattrs(file: &File, host: &Path, want: &[(String, Vec<u8>)]) -> Result<(), Failure> {
    for (name, _) in user_xattrs(host)? {
        if !want.iter().any(|(n, _)| *n == name) {
            rustix::fs::fremovexattr(file, name.as_str()).map_err(io::Error::from)?;
        }
    }
    for (name, value) in want {
        rustix::fs::fsetxattr(file, name.as_str(), value, rustix::fs::XattrFlags::empty()).map_err(io::Error::from)?;
    }
    Ok(())
}

/// Sets the times of the entry at `host` itself (a link is not followed).
fn set_entry_times(host: &Path, times: &Times) -> Result<(), Failure> {
    let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
    rustix::fs::utimensat(rustix::fs::CWD, host, &times.timestamps(), flags).map_err(io::Error::from)?;
    Ok(())
}

/// Checks that the PFS kept the mode and extended attributes (of `want`,
/// when given) and the mtime a stage-out gave `ns` (at `host`; `meta`:
/// what it has now). A PFS that keeps coarser times (microseconds, whole
/// seconds) keeps the time truncated.
fn check_metadata(
    ns: &str,
    host: &Path,
    meta: &fs::Metadata,
    want: Option<&CopyMeta>,
    times: &Times,
) -> Result<(), Failure> {
    if let Some(want) = want {
        let kept_mode = meta.mode() & 0o7777;
        if want.mode & 0o7777 != kept_mode {
            return Err(Failure::new(
                Errno::EIO,
                format!("{ns}: the PFS gave its copy mode {kept_mode:04o}, not {:04o}", want.mode & 0o7777),
            ));
        }
        if user_xattrs(host)? != want.xattrs {
            return Err(Failure::new(Errno::EIO, format!("{ns}: the PFS did not keep its extended attributes")));
        }
    }
    let (want, kept) = (times.mtime_ns, meta.mtime() * 1_000_000_000 + meta.mtime_nsec());
    if ![1, 1_000, 1_000_000_000].iter().any(|grain| kept == want - want.rem_euclid(*grain)) {
        return Err(Failure::new(
            Errno::EIO,
            format!("{ns}: the PFS gave its copy the modification time {kept} ns, not {want} ns"),
        ));
    }
    Ok(())
}

fn truncate_at_char(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, FileExt};

    /// Times before 1970 and with nanoseconds, which a stage-out keeps too.
    pub(crate) const TIMES: Times = Times { atime_ns: -1_500_000_001, mtime_ns: 1_234_567_890_123_456_789 };

    pub(crate) fn meta(mode: u32) -> CopyMeta {
        CopyMeta { mode, times: TIMES, xattrs: Vec::new() }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        outside: PathBuf,
        root: PathBuf,
        pfs: Pfs,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("pfs");
        let outside = dir.path().join("outside");
        fs::create_dir_all(root.join("d/e")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(root.join("d/f"), b"hello pfs").unwrap();
        fs::write(outside.join("secret"), b"do not touch").unwrap();
        symlink(&outside, root.join("escape")).unwrap();
        symlink(outside.join("secret"), root.join("d/leak")).unwrap();
        symlink("f", root.join("d/alias")).unwrap();
        let pfs = Pfs::open(&root).unwrap();
        Fixture { _dir: dir, outside, root, pfs }
    }

    #[test]
    fn stat_and_list_show_links_as_links_and_reads_never_leave_the_root() {
        let f = fixture();
        let node = f.pfs.stat("/d/f").unwrap().unwrap();
        assert_eq!((node.kind, node.size), (FileKind::File, 9));
        assert_eq!(f.pfs.stat("/d").unwrap().unwrap().kind, FileKind::Dir);
        let alias = f.pfs.stat("/d/alias").unwrap().unwrap();
        assert_eq!((alias.kind, alias.size, alias.mode), (FileKind::Symlink, 1, 0o777));
        assert_eq!(f.pfs.read_link("/d/alias").unwrap(), "f");
        assert_eq!(f.pfs.read_link("/d/f"), Err(Errno::EINVAL));
        assert_eq!(f.pfs.stat("/nope").unwrap(), None);
        assert_eq!(f.pfs.stat("/d/f/x"), Err(Errno::ENOTDIR));
        assert_eq!(f.pfs.stat("/escape").unwrap().unwrap().kind, FileKind::Symlink);
        assert_eq!(f.pfs.stat("/escape/secret").unwrap(), None);
        assert_eq!(f.pfs.stat("/d/leak").unwrap().unwrap().kind, FileKind::Symlink);
        let names: Vec<(String, FileKind)> = f.pfs.list("/d").unwrap().into_iter().map(|e| (e.name, e.kind)).collect();
        let expected =
            [("alias", FileKind::Symlink), ("e", FileKind::Dir), ("f", FileKind::File), ("leak", FileKind::Symlink)];
        assert_eq!(names, expected.map(|(n, k)| (n.to_string(), k)));
        assert!(f.pfs.list("/escape").unwrap().is_empty());
        assert!(f.pfs.list("/nope").unwrap().is_empty());
        let mut buf = [0u8; 32];
        assert_eq!(f.pfs.read_at("/d/f", 6, &mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"pfs");
        assert_eq!(f.pfs.read_at("/d/leak", 0, &mut buf), Err(Errno::ENOENT));
        assert_eq!(f.pfs.read_at("/escape/secret", 0, &mut buf), Err(Errno::ENOENT));
        assert_eq!(f.pfs.read_at("/d", 0, &mut buf), Err(Errno::EISDIR));
        assert!(!f.pfs.is_empty_dir("/d").unwrap());
        assert!(f.pfs.is_empty_dir("/d/e").unwrap());
    }

    #[test]
    fn a_directory_link_planted_mid_path_is_followed_inside_the_root_and_never_out_of_it() {
        let f = fixture();
        fs::write(f.root.join("d/e/x"), b"inside").unwrap();
        fs::create_dir(f.outside.join("sub")).unwrap();
        fs::write(f.outside.join("sub/x"), b"outside").unwrap();
        symlink(f.root.join("d/e"), f.root.join("d/in")).unwrap();
        symlink(f.outside.join("sub"), f.root.join("d/out")).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(f.pfs.stat("/d/in/x").unwrap().unwrap().size, 6);
        assert_eq!(f.pfs.read_at("/d/in/x", 0, &mut buf).unwrap(), 6);
        assert_eq!(f.pfs.stat("/d/out/x").unwrap(), None);
        assert_eq!(f.pfs.read_at("/d/out/x", 0, &mut buf), Err(Errno::ENOENT));
        assert!(f.pfs.list("/d/out").unwrap().is_empty());
        assert!(!f.pfs.has_entry("/d/out/x").unwrap());
        assert_eq!(f.pfs.open_for_writing("/d/out/x", true).unwrap_err(), Errno::ENOENT);
        assert_eq!(fs::read(f.outside.join("sub/x")).unwrap(), b"outside");
    }

    #[test]
    fn put_link_replaces_the_entry_and_never_what_a_link_points_to() {
        let f = fixture();
        f.pfs.put_link("/d/leak", 9, "f", &TIMES).unwrap();
        assert_eq!(fs::read_link(f.root.join("d/leak")).unwrap(), Path::new("f"));
        assert_eq!(fs::read(f.outside.join("secret")).unwrap(), b"do not touch");
        f.pfs.put_link("/new/dir/l", 9, "/abs", &TIMES).unwrap();
        assert_eq!(f.pfs.read_link("/new/dir/l").unwrap(), "/abs");
        assert_eq!(f.pfs.put_link("/escape/l", 9, "x", &TIMES).unwrap_err().errno, Errno::ENOTDIR);
        assert_eq!(fs::read_dir(&f.outside).unwrap().count(), 1);
    }

    #[test]
    fn changes_never_reach_outside_the_root() {
        let f = fixture();
        assert_eq!(f.pfs.make_dirs("/escape/sub"), Err(Errno::ENOTDIR));
        assert_eq!(f.pfs.rename("/d/f", "/escape/stolen"), Err(Errno::ENOTDIR));
        assert_eq!(f.pfs.create_stage_temp("/escape/x", 5, 10), Err(Errno::ENOTDIR));
        // Removing a link removes the link, not what it points to.
        f.pfs.remove_file("/d/leak").unwrap();
        f.pfs.remove_file("/escape/secret").unwrap();
        assert_eq!(fs::read(f.outside.join("secret")).unwrap(), b"do not touch");
        assert_eq!(fs::read_dir(&f.outside).unwrap().count(), 1);
        assert!(!f.root.join("d/leak").exists());
    }

    #[test]
    fn a_copy_whose_mode_time_or_xattrs_the_pfs_did_not_keep_fails_its_check() {
        let f = fixture();
        let host = f.root.join("d/f");
        let times = |mtime_ns| Times { atime_ns: 0, mtime_ns };
        let set = |mtime_ns| set_entry_times(&host, &times(mtime_ns)).unwrap();
        let check =
            |want: &CopyMeta| check_metadata("/d/f", &host, &fs::metadata(&host).unwrap(), Some(want), &want.times);
        fs::set_permissions(&host, fs::Permissions::from_mode(0o640)).unwrap();
        set(1_234_567_890_123_456_789);
        let want = CopyMeta { mode: 0o640, times: times(1_234_567_890_123_456_789), xattrs: Vec::new() };
        check(&want).unwrap();
        let failed = check(&CopyMeta { mode: 0o600, ..want.clone() }).unwrap_err();
        assert!(failed.errno == Errno::EIO && failed.message.contains("mode 0640, not 0600"), "{failed}");
        // A PFS that keeps whole seconds or microseconds keeps the time truncated.
        set(1_234_567_890_000_000_000);
        check(&want).unwrap();
        set(1_234_567_890_123_456_000);
        check(&want).unwrap();
        set(1_234_567_891_000_000_000);
        assert!(check(&want).unwrap_err().message.contains("modification time"));
        set(1_234_567_890_123_456_789);
        let tagged = CopyMeta { xattrs: vec![("user.k".to_string(), b"v".to_vec())], ..want };
        assert!(check(&tagged).unwrap_err().message.contains("extended attributes"));
        rustix::fs::setxattr(&host, "user.k", b"v", rustix::fs::XattrFlags::empty()).unwrap();
        check(&tagged).unwrap();
    }

    #[test]
    fn stage_temps_are_hidden_named_by_inode_and_committed_durably() {
        let f = fixture();
        let temp = f.pfs.create_stage_temp("/new/dir/file", 42, 5).unwrap();
        let name = path::split(&temp).unwrap().1;
        assert!(temp.starts_with("/new/dir/.file.surge-stage.42."));
        assert_eq!(stage_temp_ino(name), Some(42));
        assert!(f.pfs.list("/new/dir").unwrap().is_empty());
        assert_eq!(f.pfs.stat(&temp).unwrap(), None);
        assert!(f.pfs.open_stage_temp(&temp, 41).is_err());
        assert_eq!(f.pfs.open_stage_temp("/d/f", 42).unwrap_err().errno, Errno::EINVAL);
        let file = f.pfs.open_stage_temp(&temp, 42).unwrap();
        file.write_at(b"abcde", 0).unwrap();
        assert_eq!(f.pfs.commit_stage_temp(&temp, 42, "/new/dir/file", 6, &meta(0o640)).unwrap_err().errno, Errno::EIO);
        f.pfs.commit_stage_temp(&temp, 42, "/new/dir/file", 5, &meta(0o640)).unwrap();
        let host = f.root.join("new/dir/file");
        assert_eq!(fs::read(&host).unwrap(), b"abcde");
        assert_eq!(fs::metadata(&host).unwrap().mode() & 0o777, 0o640);
        let other = f.pfs.create_stage_temp(&format!("/{}", "n".repeat(255)), 7, 0).unwrap();
        f.pfs.remove_stage_temp(&other).unwrap();
        f.pfs.remove_stage_temp(&other).unwrap();
        assert_eq!(f.pfs.remove_stage_temp("/d/f").unwrap_err().errno, Errno::EINVAL);
        assert!(f.root.join("d/f").exists());
        for bad in [
            ".x.surge-stage.1.abc",
            "x.surge-stage.1.abcdef12",
            ".x.surge-stage..abcdef12",
            ".x.surge-stage.1a.abcdef12",
        ] {
            assert_eq!(stage_temp_ino(bad), None, "{bad}");
        }
    }
}
