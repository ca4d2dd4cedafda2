//! What each intercepted call does to a Surge file. Paths here are Surge
//! paths (the shim resolved them); descriptors are placeholder fd numbers.

use crate::attrs;
use crate::descriptor::Descriptor;
use crate::links;
use crate::locks;
use crate::placeholder;
use crate::process::{process, Process};
use crate::profile::Meta;
use std::sync::Arc;
use surge_client::{Attr, AttrUpdate, Error, File, FileKind, Result};
use surge_proto::link::LinkMet;

/// Largest count one read or write moves, as Linux's MAX_RW_COUNT.
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

fn einval(msg: impl Into<String>) -> Error {
    Error::new(libc::EINVAL, msg)
}

/// Records a metadata call on the counters of `path`.
fn meta<T>(c: &Process, path: &str, op: Meta, call: impl FnOnce() -> Result<T>) -> Result<T> {
    let counters = c.profile.file(path);
    c.profile.timed(&counters, call, |cnt, r, span| {
        if r.is_ok() {
            cnt.meta(op, span)
        }
    })
}

pub fn open(path: &str, flags: i32, mode: u32) -> Result<i32> {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(Error::new(libc::EOPNOTSUPP, "O_TMPFILE is not supported on Surge files"));
    }
    let c = process();
    // O_PATH only names the file: open it for reading, no data moves.
    let client_flags = if flags & libc::O_PATH != 0 { libc::O_RDONLY | (flags & libc::O_DIRECTORY) } else { flags };
    let opened = meta(c, path, Meta::Open, || c.client()?.open(path, client_flags, mode));
    let file = opened.map_err(|e| match e.link_met() {
        Some(met) if met.at == path && flags & libc::O_NOFOLLOW != 0 => {
            Error::new(libc::ELOOP, format!("{path} is a symbolic link (O_NOFOLLOW)"))
        }
        _ => e,
    })?;
    install(c, path, flags, Arc::new(file))
}

/// A new placeholder descriptor for `file`, opened as `path` with `flags`.
fn install(c: &Process, path: &str, flags: i32, file: Arc<File>) -> Result<i32> {
    let counters = c.profile.file(path);
    counters.lock().set_layout(&file.layout());
    let record = placeholder::Record { flags, file: file.buffer_file(), path: path.to_string() };
    let fd = placeholder::create(&record)?;
    let descriptor = Descriptor::opened(file, flags, counters);
    if descriptor.writable() {
        c.profile.note_writer(c.mount.prefix(), path);
    }
    c.table.insert(fd, Arc::new(descriptor));
    Ok(fd)
}

/// open of /dev/fd/N or /proc/self/fd/N (the shim found N is Surge
/// descriptor `fd`): a new descriptor, with a position and flags of its
/// own, on the file `fd` has open, as the kernel gives even once the name
/// is gone; the kernel itself would open the placeholder.
pub fn reopen(fd: i32, flags: i32) -> Result<i32> {
    let c = process();
    let d = c.descriptor(fd)?;
    if flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL {
        return Err(Error::new(libc::EEXIST, format!("{} exists: it is open as descriptor {fd}", d.path)));
    }
    let held = d.file(|| c.client())?.clone();
    // The file exists: creating and truncating (below) are not the open's.
    let access = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
    let file = if held.serves(flags) {
        held
    } else if let Some(buffer_file) = held.buffer_file() {
        // More access than `fd` has: the same file, by its objects.
        Arc::new(c.client()?.open_held(&d.path, buffer_file, access)?)
    } else {
        // More access on a file of the PFS alone: by name, which must still lead to it.
        let reopened = c.client()?.open(&d.path, access, 0)?;
        if reopened.ino() != held.ino() {
            return Err(Error::new(
                libc::ESTALE,
                format!(
                    "{} was removed or replaced since descriptor {fd} was opened: it can be reopened \
                     with the access that descriptor has, not more",
                    d.path
                ),
            ));
        }
        Arc::new(reopened)
    };
    if flags & libc::O_DIRECTORY != 0 && !file.is_dir() {
        return Err(Error::new(libc::ENOTDIR, format!("{} is not a directory", d.path)));
    }
    if flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY && !file.is_dir() {
        file.set_len(0)?;
    }
    install(c, &d.path, flags, file)
}

/// The open file behind `fd`, checked for the access the call needs.
fn open_file(c: &'static Process, fd: i32, need_read: bool, need_write: bool) -> Result<(Arc<Descriptor>, Arc<File>)> {
    let d = c.descriptor(fd)?;
    if need_read && !d.readable() {
        return Err(Error::new(libc::EBADF, format!("{} is not open for reading", d.path)));
    }
    if need_write && !d.writable() {
        return Err(Error::new(libc::EBADF, format!("{} is not open for writing", d.path)));
    }
    let file = d.file(|| c.client())?.clone();
    if (need_read || need_write) && file.is_dir() {
        return Err(Error::new(libc::EISDIR, format!("{} is a directory", d.path)));
    }
    Ok((d, file))
}

fn read_at(c: &Process, d: &Descriptor, file: &File, buf: &mut [u8], offset: u64) -> Result<usize> {
    c.profile.timed(
        &d.counters,
        || file.read_at(buf, offset),
        |cnt, r, span| {
            if let Ok(n) = r {
                cnt.read(offset, *n as u64, span)
            }
        },
    )
}

/// A write `io` makes, timed and counted in the profile: the offset it
/// landed at and the bytes written.
fn counted_write(c: &Process, d: &Descriptor, io: impl FnOnce() -> Result<(u64, usize)>) -> Result<(u64, usize)> {
    c.profile.timed(&d.counters, io, |cnt, r, span| {
        if let Ok((offset, n)) = r {
            cnt.write(*offset, *n as u64, span)
        }
    })
}

fn write_at(c: &Process, d: &Descriptor, file: &File, buf: &[u8], offset: u64) -> Result<usize> {
    counted_write(c, d, || Ok((offset, file.write_at(buf, offset)?))).map(|(_, n)| n)
}

/// read/pread: at `offset`, else at the shared position, which moves on.
pub fn read(fd: i32, buf: &mut [u8], offset: Option<u64>) -> Result<usize> {
    let c = process();
    let (d, file) = open_file(c, fd, true, false)?;
    let len = buf.len().min(MAX_RW_COUNT);
    let buf = &mut buf[..len];
    if let Some(offset) = offset {
        return read_at(c, &d, &file, buf, offset);
    }
    let _position = d.position.lock();
    let pos = placeholder::position(fd)?;
    let n = read_at(c, &d, &file, buf, pos)?;
    placeholder::set_position(fd, pos + n as u64)?;
    Ok(n)
}

/// write/pwrite: at `offset`, else at the shared position (the end of the
/// file under O_APPEND), which moves past the data.
pub fn write(fd: i32, buf: &[u8], offset: Option<u64>) -> Result<usize> {
    let c = process();
    let (d, file) = open_file(c, fd, false, true)?;
    let buf = &buf[..buf.len().min(MAX_RW_COUNT)];
    if let Some(offset) = offset {
        return write_at(c, &d, &file, buf, offset);
    }
    let _position = d.position.lock();
    let (pos, n) = if placeholder::status_flags(fd)? & libc::O_APPEND != 0 {
        // Other processes (clients of their own) append too: under the file's append lock.
        counted_write(c, &d, || file.append(buf))?
    } else {
        let pos = placeholder::position(fd)?;
        (pos, write_at(c, &d, &file, buf, pos)?)
    };
    placeholder::set_position(fd, pos + n as u64)?;
    Ok(n)
}

/// fcntl's lock commands (F_SETLK, F_SETLKW, F_GETLK and their OFD forms)
/// on the descriptor's lock file (`locks`).
pub fn lock(fd: i32, cmd: i32, lk: &mut libc::flock) -> Result<i32> {
    let c = process();
    let d = c.descriptor(fd)?;
    // As the kernel checks a lock against the descriptor's access (the lock file is open for both).
    let needs = match i32::from(lk.l_type) {
        libc::F_WRLCK if cmd != libc::F_GETLK && cmd != libc::F_OFD_GETLK => Some((d.writable(), "writing")),
        libc::F_RDLCK if cmd != libc::F_GETLK && cmd != libc::F_OFD_GETLK => Some((d.readable(), "reading")),
        _ => None,
    };
    if let Some((false, access)) = needs {
        return Err(Error::new(libc::EBADF, format!("{} is not open for {access}: no such lock on it", d.path)));
    }
    let file = d.file(|| c.client())?;
    if i32::from(lk.l_whence) != libc::SEEK_SET {
        let position = placeholder::position(fd)?;
        locks::from_start(lk, position, file.attr()?.size)?;
    }
    let target = locks::lock_file(fd, file.ino(), &c.client()?.cluster().cluster_id)?;
    // SAFETY: a valid descriptor and a flock the caller owns.
    let r = unsafe { libc::fcntl(target, cmd, lk as *mut libc::flock) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::new(e.raw_os_error().unwrap_or(libc::ENOLCK), format!("locking {}: {e}", d.path)));
    }
    Ok(r)
}

/// flock(2) on the descriptor's lock file (`locks`).
pub fn flock(fd: i32, operation: i32) -> Result<i32> {
    let c = process();
    let d = c.descriptor(fd)?;
    let file = d.file(|| c.client())?;
    let target = locks::lock_file(fd, file.ino(), &c.client()?.cluster().cluster_id)?;
    // SAFETY: a valid descriptor.
    if unsafe { libc::flock(target, operation) } < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::new(e.raw_os_error().unwrap_or(libc::ENOLCK), format!("flock of {}: {e}", d.path)));
    }
    Ok(0)
}

/// readv/preadv: one transfer into a staging buffer, scattered after.
pub fn readv(fd: i32, bufs: &mut [&mut [u8]], offset: Option<u64>) -> Result<usize> {
    if let [only] = bufs {
        return read(fd, only, offset);
    }
    let total = bufs.iter().map(|b| b.len()).sum::<usize>().min(MAX_RW_COUNT);
    let mut staging = vec![0u8; total];
    let n = read(fd, &mut staging, offset)?;
    let mut rest = &staging[..n];
    for buf in bufs.iter_mut() {
        let take = rest.len().min(buf.len());
        buf[..take].copy_from_slice(&rest[..take]);
        rest = &rest[take..];
    }
    Ok(n)
}

/// writev/pwritev: gathered, then one transfer (atomic as one write).
pub fn writev(fd: i32, bufs: &[&[u8]], offset: Option<u64>) -> Result<usize> {
    if let [only] = bufs {
        return write(fd, only, offset);
    }
    let gathered: Vec<u8> = bufs.concat();
    write(fd, &gathered, offset)
}

pub fn lseek(fd: i32, offset: i64, whence: i32) -> Result<u64> {
    let c = process();
    let (d, file) = open_file(c, fd, false, false)?;
    let _position = d.position.lock();
    let size = || -> Result<i64> { Ok(file.attr()?.size as i64) };
    let target = match whence {
        libc::SEEK_SET => offset,
        libc::SEEK_CUR => placeholder::position(fd)? as i64 + offset,
        libc::SEEK_END => size()? + offset,
        // From the objects' extents, as the mount answers.
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            let from = u64::try_from(offset)
                .map_err(|_| Error::new(libc::ENXIO, format!("lseek from the negative offset {offset}")))?;
            file.seek_data_or_hole(from, whence == libc::SEEK_HOLE)? as i64
        }
        _ => return Err(einval(format!("lseek whence {whence} is not one Linux defines"))),
    };
    if target < 0 {
        return Err(einval(format!("lseek to the negative offset {target}")));
    }
    d.counters.lock().meta(Meta::Seek, c.profile_span_now());
    placeholder::set_position(fd, target as u64)?;
    Ok(target as u64)
}

pub fn fsync(fd: i32) -> Result<()> {
    let c = process();
    let (d, file) = open_file(c, fd, false, false)?;
    meta(c, &d.path, Meta::Fsync, || file.fsync())
}

pub fn ftruncate(fd: i32, len: i64) -> Result<()> {
    let c = process();
    let (d, file) = open_file(c, fd, false, false)?;
    if !d.writable() || file.is_dir() {
        return Err(einval(format!("{} is not a file open for writing", d.path)));
    }
    let len = u64::try_from(len).map_err(|_| einval(format!("negative length {len}")))?;
    meta(c, &d.path, Meta::Other, || file.set_len(len))
}

/// fallocate / posix_fallocate: the modes the objects support (see
/// `surge_client::File::fallocate`).
pub fn fallocate(fd: i32, mode: i32, offset: i64, len: i64) -> Result<()> {
    let c = process();
    let (d, file) = open_file(c, fd, false, true)?;
    if offset < 0 || len <= 0 {
        return Err(einval(format!("fallocate range {offset}+{len} is invalid")));
    }
    meta(c, &d.path, Meta::Other, || file.fallocate(mode, offset as u64, len as u64))
}

pub fn fstat(fd: i32) -> Result<Attr> {
    let c = process();
    let (d, file) = open_file(c, fd, false, false)?;
    meta(c, &d.path, Meta::Stat, || file.attr())
}

/// Forgets `fd` (the shim closes the kernel descriptor).
pub fn close(fd: i32) -> Result<()> {
    let c = process();
    locks::closing(fd);
    let d = c.table.remove(fd).ok_or_else(|| Error::new(libc::EBADF, format!("descriptor {fd} is not open")))?;
    d.counters.lock().meta(Meta::Close, c.profile_span_now());
    Ok(())
}

/// `new` is now a duplicate of `old` (the kernel already duplicated it).
pub fn dup(old: i32, new: i32) -> Result<()> {
    let c = process();
    let d = c.descriptor(old)?;
    c.table.insert(new, d);
    Ok(())
}

/// F_GETFL: the kernel's status flags with the access mode the program opened with.
pub fn status_flags(fd: i32) -> Result<i32> {
    let d = process().descriptor(fd)?;
    let kernel = placeholder::status_flags(fd)?;
    Ok((kernel & !libc::O_ACCMODE) | (d.flags & (libc::O_ACCMODE | libc::O_PATH)))
}

/// The Surge path `fd` was opened with.
pub fn fd_path(fd: i32) -> Result<String> {
    Ok(process().descriptor(fd)?.path.clone())
}

/// What the kernel's /proc/self/fd/N link says of Surge descriptor `fd`:
/// the file's name on the host, with " (deleted)" once that name no longer
/// leads to it (the kernel would name the placeholder's memfd).
pub fn fd_link(fd: i32) -> Result<String> {
    let c = process();
    let d = c.descriptor(fd)?;
    let file = d.file(|| c.client())?;
    let name = c.mount.host_name(&d.path);
    match c.client()?.stat(&d.path) {
        Ok(attr) if attr.ino == file.ino() => Ok(name),
        Ok(_) => Ok(format!("{name} (deleted)")),
        Err(e) if e.errno() == libc::ENOENT => Ok(format!("{name} (deleted)")),
        Err(e) => Err(e),
    }
}

/// stat(2): a last component that is a symbolic link is followed.
pub fn stat(path: &str) -> Result<Attr> {
    followed(path, lstat(path)?)
}

/// lstat(2): a last component that is a symbolic link is not followed.
pub fn lstat(path: &str) -> Result<Attr> {
    let c = process();
    meta(c, path, Meta::Stat, || c.client()?.stat(path))
}

/// `attr` of `path`, unless it is a symbolic link: then the error that
/// makes the shim follow it.
fn followed(path: &str, attr: Attr) -> Result<Attr> {
    if attr.kind != FileKind::Symlink {
        return Ok(attr);
    }
    Err(links::met(path, readlink(path)?))
}

pub fn readlink(path: &str) -> Result<String> {
    let c = process();
    meta(c, path, Meta::Other, || c.client()?.readlink(path))
}

pub fn symlink(target: &str, path: &str) -> Result<()> {
    let c = process();
    meta(c, path, Meta::Other, || c.client()?.symlink(target, path)).map(drop)
}

/// access(2) for the owner (Surge files belong to the job's user).
pub fn access(path: &str, amode: i32) -> Result<()> {
    let attr = stat(path)?;
    if amode == libc::F_OK {
        return Ok(());
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut missing = false;
    for (bit, owner) in [(libc::R_OK, 0o400), (libc::W_OK, 0o200), (libc::X_OK, 0o100)] {
        if amode & bit == 0 {
            continue;
        }
        let granted = if root && bit != libc::X_OK {
            true
        } else if root {
            attr.mode & 0o111 != 0 || attr.kind == FileKind::Dir
        } else {
            attr.mode & owner != 0
        };
        missing |= !granted;
    }
    if missing {
        return Err(Error::new(libc::EACCES, format!("{path}: permission denied (mode {:o})", attr.mode)));
    }
    Ok(())
}

pub fn unlink(path: &str) -> Result<()> {
    let c = process();
    meta(c, path, Meta::Unlink, || c.client()?.unlink(path))
}

pub fn mkdir(path: &str, mode: u32) -> Result<()> {
    let c = process();
    meta(c, path, Meta::Mkdir, || c.client()?.mkdir(path, mode))
}

pub fn rmdir(path: &str) -> Result<()> {
    let c = process();
    meta(c, path, Meta::Unlink, || c.client()?.rmdir(path))
}

pub fn rename(from: &str, to: &str, flags: u32) -> Result<()> {
    let c = process();
    let client = c.client()?;
    match flags {
        0 => {}
        libc::RENAME_NOREPLACE => match client.stat(to) {
            Ok(_) => return Err(Error::new(libc::EEXIST, format!("{to} exists (RENAME_NOREPLACE)"))),
            Err(e) if e.errno() == libc::ENOENT => {}
            Err(e) => return Err(e),
        },
        _ => return Err(einval(format!("rename flags {flags:#x} are not supported on Surge files"))),
    }
    meta(c, from, Meta::Rename, || client.rename(from, to))
}

/// link(2)/linkat(2): a further name of a Surge file (one inode, several
/// names: docs/fuse.md). A last component of `from` that is a symbolic
/// link is linked itself, unless `follow` (AT_SYMLINK_FOLLOW: the shim
/// retries on its target), as Linux does.
pub fn link(from: &str, to: &str, follow: bool) -> Result<()> {
    follow_last_link(from, !follow)?;
    let c = process();
    meta(c, to, Meta::Other, || c.client()?.link(from, to)).map(drop)
}

/// chmod; `nofollow` (AT_SYMLINK_NOFOLLOW): a link's own mode, which
/// cannot change (EOPNOTSUPP, as from the kernel).
pub fn chmod(path: &str, mode: u32, nofollow: bool) -> Result<()> {
    let c = process();
    match meta(c, path, Meta::Other, || {
        c.client()?.set_attr(path, &AttrUpdate { mode: Some(mode), ..Default::default() })
    }) {
        // Daemon 0 refuses a link's mode: the link is to be followed.
        Err(e) if e.errno() == libc::EOPNOTSUPP && !nofollow => stat(path).and(Err(e)),
        other => other.map(drop),
    }
}

/// Follows a last component that is a symbolic link (the shim retries on
/// its target) unless `nofollow`: the l*xattr calls, utimensat with
/// AT_SYMLINK_NOFOLLOW and link without AT_SYMLINK_FOLLOW act on a link itself.
fn follow_last_link(path: &str, nofollow: bool) -> Result<()> {
    if !nofollow {
        stat(path)?;
    }
    Ok(())
}

/// getxattr(2): the value of `name` of `path` (`user.*` only, docs/interposer.md).
pub fn get_xattr(path: &str, name: &str, nofollow: bool) -> Result<Vec<u8>> {
    follow_last_link(path, nofollow)?;
    let c = process();
    meta(c, path, Meta::Other, || c.client()?.get_xattr(path, name))
}

/// listxattr(2): the names of `path`'s extended attributes, each ended by a NUL.
pub fn list_xattr(path: &str, nofollow: bool) -> Result<Vec<u8>> {
    follow_last_link(path, nofollow)?;
    let c = process();
    meta(c, path, Meta::Other, || c.client()?.list_xattr(path))
}

/// setxattr(2) with `value`, removexattr(2) without.
pub fn set_xattr(path: &str, name: &str, value: Option<&[u8]>, flags: u32, nofollow: bool) -> Result<()> {
    follow_last_link(path, nofollow)?;
    let c = process();
    meta(c, path, Meta::Other, || match value {
        Some(value) => c.client()?.set_xattr(path, name, value, flags),
        None => c.client()?.remove_xattr(path, name),
    })
}

/// utimensat: the access and modification times. `None` means both
/// "now". A link is followed unless `nofollow` (AT_SYMLINK_NOFOLLOW): that
/// costs a lookup first.
pub fn utimens(path: &str, times: Option<[libc::timespec; 2]>, nofollow: bool) -> Result<()> {
    follow_last_link(path, nofollow)?;
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
    let time = |t: libc::timespec| match t.tv_nsec {
        libc::UTIME_OMIT => Ok(None),
        libc::UTIME_NOW => Ok(Some(now())),
        ns if !(0..1_000_000_000).contains(&ns) => Err(einval(format!("tv_nsec {ns} is out of range"))),
        ns => Ok(Some(t.tv_sec * 1_000_000_000 + ns)),
    };
    let (atime_ns, mtime_ns) = match times {
        None => {
            let now = now();
            (Some(now), Some(now))
        }
        Some([a, m]) => (time(a)?, time(m)?),
    };
    let c = process();
    if atime_ns.is_none() && mtime_ns.is_none() {
        return lstat(path).map(drop);
    }
    meta(c, path, Meta::Other, || c.client()?.set_attr(path, &AttrUpdate { atime_ns, mtime_ns, ..Default::default() }))
        .map(drop)
}

/// chown: Surge files belong to the job's user; "changing" to that owner
/// (or -1) is fine, anything else is refused.
pub fn chown(path: &str, uid: u32, gid: u32) -> Result<()> {
    // Whoever a link leads to, the answer is the same: no lookup beyond it.
    lstat(path)?;
    // SAFETY: getuid and getgid cannot fail.
    let (me, my_group) = unsafe { (libc::getuid(), libc::getgid()) };
    if (uid == u32::MAX || uid == me) && (gid == u32::MAX || gid == my_group) {
        return Ok(());
    }
    Err(Error::new(libc::EPERM, format!("{path}: Surge files belong to the job's user (uid {me}, gid {my_group})")))
}

pub fn truncate(path: &str, len: i64) -> Result<()> {
    let len = u64::try_from(len).map_err(|_| einval(format!("negative length {len}")))?;
    let c = process();
    meta(c, path, Meta::Other, || c.client()?.truncate(path, len))
}

pub fn chdir(path: &str) -> Result<()> {
    let attr = stat(path)?;
    if attr.kind != FileKind::Dir {
        return Err(Error::new(libc::ENOTDIR, format!("{path} is not a directory")));
    }
    process().set_cwd(Some(path.to_string()));
    Ok(())
}

pub fn statfs() -> Result<libc::statfs> {
    let c = process();
    let answers: Vec<_> = c.client()?.status().into_iter().filter_map(|(_, s)| s.ok()).collect();
    if answers.is_empty() {
        return Err(Error::new(libc::EIO, "no Surge daemon answered"));
    }
    Ok(attrs::statfs(&answers))
}

/// A directory on the way of a link's target, as daemon 0 sees it.
impl links::Lookup for Process {
    fn link_on(&self, path: &str) -> Result<Option<LinkMet>> {
        let client = self.client()?;
        match client.stat(path) {
            Ok(attr) if attr.kind == FileKind::Dir => Ok(None),
            Ok(attr) if attr.kind == FileKind::Symlink => {
                Ok(Some(LinkMet { at: path.to_string(), target: client.readlink(path)? }))
            }
            Ok(_) => Err(Error::new(libc::ENOTDIR, format!("{path} is not a directory"))),
            Err(e) => e.link_met().map(Some).ok_or(e),
        }
    }
}

impl Process {
    /// A zero-length span at the current time, for calls not worth timing.
    pub fn profile_span_now(&self) -> crate::profile::Span {
        let now = self.profile.now();
        crate::profile::Span { start: now, end: now }
    }
}
