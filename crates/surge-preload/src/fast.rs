//! The fast path over the FUSE mount (the model is DAOS's libioil over
//! dfuse). A program's descriptors on /surge are real kernel descriptors of
//! the FUSE mount; the shim marks the ones it saw opened, and their reads
//! and writes come here and go straight to the daemons, skipping the FUSE
//! round trip. Everything else about them (position, flags, dup, fork,
//! exec, mmap, fsync, locks) stays the kernel's.
//!
//! Every call first checks, without asking the FUSE server
//! (`AT_STATX_DONT_SYNC`), that the descriptor is still the regular file on
//! the mount it was adopted as; anything else (a mark left by a close the
//! shim did not see, an O_APPEND write, a file that cannot be opened here)
//! is `Fallback`, and the shim passes the call to the kernel, which is
//! always right. O_APPEND writes go through the mount because its server
//! serializes appends on the node.

use crate::descriptor::Descriptor;
use crate::process::{process, Process};
use crate::profile::Meta;
use crate::{attrs, ops, placeholder};
use parking_lot::{const_mutex, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use surge_client::Result;

/// Takes metadata calls on the mount's paths from now on (the shim asks
/// once): every namespace change this process makes is then told to the
/// mount's server, process `server_pid`, before its call returns
/// (`surge_client::mount_link`). False when it cannot be told.
pub fn take_metadata_calls(server_pid: u32) -> Result<bool> {
    if attrs::mount_dev() == 0 {
        return Ok(false);
    }
    process().client()?.tell_mount_of_own_changes(server_pid)?;
    Ok(true)
}

/// Descriptors written on the fast path since the kernel last fetched
/// their file's size, which the kernel caches and bounds lseek(SEEK_END),
/// stat, mappings and copy_file_range by. The size is refreshed
/// (`sync_sizes`) before such calls and at close, not after every write: a
/// size fetch is a FUSE round trip, and a sequential writer extends the
/// file on every call.
static STALE_SIZES: Mutex<Vec<i32>> = const_mutex(Vec::new());
/// Whether `STALE_SIZES` may hold any, so that the stat calls the shim
/// passes on take no lock when nothing was written.
static ANY_STALE: AtomicBool = AtomicBool::new(false);

/// What a fast-path call did.
pub enum Outcome<T> {
    Served(T),
    /// Not a call for the fast path: the kernel serves it.
    Fallback,
}

/// The kernel's attributes of regular file `fd`: cached ones
/// (`AT_STATX_DONT_SYNC`, no request to the mount), or fresh ones from the
/// mount (`AT_STATX_FORCE_SYNC`).
fn kernel_attrs(fd: i32, sync: i32) -> Option<libc::statx> {
    // SAFETY: statx fills `stx`; an empty path with AT_EMPTY_PATH names fd itself.
    unsafe {
        let mut stx: libc::statx = std::mem::zeroed();
        let mask = libc::STATX_TYPE | libc::STATX_INO | libc::STATX_SIZE;
        if libc::statx(fd, c"".as_ptr(), libc::AT_EMPTY_PATH | sync, mask, &mut stx) != 0 {
            return None;
        }
        (u32::from(stx.stx_mode) & libc::S_IFMT == libc::S_IFREG).then_some(stx)
    }
}

/// (device, inode) of `fd`, from the kernel's cache.
fn identity(fd: i32) -> Option<(u64, u64)> {
    let stx = kernel_attrs(fd, libc::AT_STATX_DONT_SYNC)?;
    Some((libc::makedev(stx.stx_dev_major, stx.stx_dev_minor), stx.stx_ino))
}

/// (device, inode) of the file at `path`, from the mount; a raw call, as
/// the handler's own work is no call of the program's (`surge_cluster::raw`).
fn name_identity(path: &str) -> Option<(u64, u64)> {
    surge_cluster::raw::stat(std::path::Path::new(path)).ok().map(|st| (st.st_dev, st.st_ino))
}

/// The Surge path `fd` was opened at: its /proc link under the mount.
fn mount_path(c: &Process, fd: i32) -> Option<String> {
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let target = target.to_str()?;
    // An unlinked file's link ends in " (deleted)": it has no path to open.
    // So does one whose FUSE dentry a concurrent create of the same name
    // replaced (several ranks creating one shared file): the name then
    // still names this very file, and only then is it taken.
    let target = match target.strip_suffix(" (deleted)") {
        Some(name) if identity(fd).is_some_and(|id| name_identity(name) == Some(id)) => name,
        Some(_) => return None,
        None => target,
    };
    let rest = target.strip_prefix(c.mount.prefix())?;
    match rest {
        "" => Some("/".into()),
        r if r.starts_with('/') => Some(r.to_string()),
        _ => None,
    }
}

/// The descriptor of `fd` for a fast-path call, adopting it on first use;
/// None when the kernel must serve the call.
fn adopt(fd: i32, writing: bool) -> Option<Arc<Descriptor>> {
    let dev = attrs::mount_dev();
    let c = process();
    let Some((fd_dev, ino)) = identity(fd).filter(|(d, _)| dev != 0 && *d == dev) else {
        c.table.remove(fd);
        return None;
    };
    let flags = placeholder::status_flags(fd).ok()?;
    if writing && flags & libc::O_APPEND != 0 || flags & libc::O_PATH != 0 {
        return None;
    }
    debug_assert_eq!(fd_dev, dev);
    if let Some(d) = c.table.get(fd) {
        if d.mount_ino == Some(ino) && d.flags & libc::O_ACCMODE == flags & libc::O_ACCMODE {
            return Some(d);
        }
    }
    let path = mount_path(c, fd)?;
    let counters = c.profile.file(&path);
    let d = Arc::new(Descriptor::on_mount(path, flags, ino, counters.clone()));
    // Opened here now, and only kept when it is the very file the kernel has.
    let file = d.file(|| c.client()).ok()?;
    if file.ino() != ino {
        return None;
    }
    counters.lock().set_layout(&file.layout());
    if d.writable() {
        c.profile.note_writer(c.mount.prefix(), &d.path);
    }
    c.table.insert(fd, d.clone());
    Some(d)
}

fn read_served(fd: i32, call: impl FnOnce() -> Result<usize>) -> Result<Outcome<usize>> {
    match adopt(fd, false) {
        Some(_) => call().map(Outcome::Served),
        None => Ok(Outcome::Fallback),
    }
}

/// A write on the fast path. It leaves the size the kernel caches stale
/// until the next `sync_sizes` (it may have grown the file, and the kernel
/// may hold a size from before another process truncated it).
fn write_served(fd: i32, call: impl FnOnce() -> Result<usize>) -> Result<Outcome<usize>> {
    let Some(d) = adopt(fd, true) else { return Ok(Outcome::Fallback) };
    let written = call()?;
    if written > 0 && !d.kernel_size_stale.swap(true, Ordering::AcqRel) {
        STALE_SIZES.lock().push(fd);
        ANY_STALE.store(true, Ordering::Release);
    }
    Ok(Outcome::Served(written))
}

/// Makes the kernel fetch from the mount the size of every file written on
/// the fast path since it last did (a size fetched within the
/// same clock tick would otherwise count as fresh even with no attribute
/// cache, and a mapping past it is SIGBUS).
pub fn sync_sizes() {
    if !ANY_STALE.swap(false, Ordering::AcqRel) {
        return;
    }
    let stale = std::mem::take(&mut *STALE_SIZES.lock());
    let Some(c) = crate::process::loaded() else { return };
    for fd in stale {
        if let Some(d) = c.table.get(fd) {
            refresh_size(fd, &d);
        }
    }
}

fn refresh_size(fd: i32, d: &Descriptor) {
    if d.kernel_size_stale.swap(false, Ordering::AcqRel) {
        kernel_attrs(fd, libc::AT_STATX_FORCE_SYNC);
    }
}

pub fn read(fd: i32, buf: &mut [u8], offset: Option<u64>) -> Result<Outcome<usize>> {
    read_served(fd, || ops::read(fd, buf, offset))
}

pub fn write(fd: i32, buf: &[u8], offset: Option<u64>) -> Result<Outcome<usize>> {
    write_served(fd, || ops::write(fd, buf, offset))
}

pub fn readv(fd: i32, bufs: &mut [&mut [u8]], offset: Option<u64>) -> Result<Outcome<usize>> {
    read_served(fd, || ops::readv(fd, bufs, offset))
}

pub fn writev(fd: i32, bufs: &[&[u8]], offset: Option<u64>) -> Result<Outcome<usize>> {
    write_served(fd, || ops::writev(fd, bufs, offset))
}

/// The kernel served `op` (an open, an fsync) on mount descriptor `fd` in
/// `seconds`, ending now: the profile counts it as the interposer counts
/// the calls it serves, so a FUSE-mode profile has the opens and fsyncs.
pub fn noted(fd: i32, op: Meta, seconds: f64) {
    let c = process();
    let Some(path) = mount_path(c, fd) else { return };
    let span = c.profile.span_ending_now(seconds);
    c.profile.file(&path).lock().meta(op, span);
}

/// The shim saw `fd` closed (or replaced by a dup2).
pub fn forget(fd: i32) {
    if let Some(c) = crate::process::loaded() {
        // Still open: the size other processes see after the close is current.
        if let Some(d) = c.table.get(fd) {
            refresh_size(fd, &d);
            d.counters.lock().meta(Meta::Close, c.profile_span_now());
        }
        c.table.remove(fd);
    }
}
