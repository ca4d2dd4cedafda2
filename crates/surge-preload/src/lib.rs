//! The Rust handler of Surge's LD_PRELOAD interposer: it serves the calls its C shim routes to Surge.
//!
//! `libsurge_preload.so` (C, in `shim/`) is what a program preloads: it
//! owns the libc entry points, sends every path outside the Surge mount and
//! every non-Surge descriptor straight to libc, and loads this library on
//! the first call that touches Surge. This library keeps the descriptor
//! table, talks to the cluster through `surge-client` and records the I/O
//! profile. Its C interface (`shim/handler.h`) is `surge_px_*`: each
//! call returns -1 (or NULL) with errno set on failure, like libc.
//!
//! # Safety
//!
//! Pointer arguments follow the C contract of the libc call they serve:
//! strings are NUL-terminated, buffers are valid for the length given,
//! out-pointers are writable, a directory stream comes from
//! `surge_px_opendir` and is closed once.
#![allow(clippy::missing_safety_doc)]

mod attrs;
mod darshan;
mod descriptor;
mod dir;
mod exec;
mod fast;
mod links;
mod locks;
mod mpi_files;
mod mpiio;
mod ops;
mod paths;
mod placeholder;
mod process;
mod profile;

use crate::paths::Target;
use crate::process::{loaded, process};
use crate::profile::Meta;
use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CStr};
use surge_client::posix::guarded;
use surge_client::{Error, Result};
use surge_proto::msg::XATTR_SIZE_MAX;

/// Runs a Surge call: errors set errno (and connection trouble is reported).
fn px<T>(failure: T, call: &str, body: impl FnOnce() -> Result<T>) -> T {
    guarded(failure, || {
        body().inspect_err(|e| {
            links::note(e);
            if let Some(c) = loaded() {
                c.report(call, e);
            }
        })
    })
}

unsafe fn text<'a>(p: *const c_char) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::new(libc::EFAULT, "NULL path"));
    }
    CStr::from_ptr(p).to_str().map_err(|_| Error::new(libc::EINVAL, "path is not UTF-8"))
}

unsafe fn out<'a, T>(p: *mut T) -> Result<&'a mut T> {
    p.as_mut().ok_or_else(|| Error::new(libc::EFAULT, "NULL result buffer"))
}

/// Copies `s` into a C buffer of `cap` bytes with its NUL.
unsafe fn put_text(s: &str, buf: *mut c_char, cap: usize) -> Result<()> {
    if buf.is_null() {
        return Err(Error::new(libc::EFAULT, "NULL path buffer"));
    }
    if s.len() + 1 > cap {
        return Err(Error::new(libc::ENAMETOOLONG, format!("{s} is longer than {cap} bytes")));
    }
    std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
    *buf.add(s.len()) = 0;
    Ok(())
}

fn offset(off: i64) -> Option<u64> {
    u64::try_from(off).ok()
}

unsafe fn bytes_mut<'a>(buf: *mut c_void, n: usize) -> Result<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(Error::new(libc::EFAULT, "NULL buffer"));
    }
    Ok(std::slice::from_raw_parts_mut(buf.cast(), n.min(ops::MAX_RW_COUNT)))
}

unsafe fn bytes<'a>(buf: *const c_void, n: usize) -> Result<&'a [u8]> {
    bytes_mut(buf.cast_mut(), n).map(|b| &*b)
}

unsafe fn iovecs<'a>(iov: *const libc::iovec, count: c_int) -> Result<Vec<&'a mut [u8]>> {
    if !(0..=libc::UIO_MAXIOV).contains(&count) || (count > 0 && iov.is_null()) {
        return Err(Error::new(libc::EINVAL, format!("invalid iovec count {count}")));
    }
    (0..count as usize).map(|i| bytes_mut((*iov.add(i)).iov_base, (*iov.add(i)).iov_len)).collect()
}

/// Where `path` leads from `dirfd`: 1 and the Surge path in `out`; 0 for
/// libc with the arguments as given; 2 for libc with the absolute host
/// path put in `out`; -1 on error.
/// What a fast-path export returns when the kernel must serve the call.
const FALLBACK: isize = -2;

fn fast_px(call: &str, body: impl FnOnce() -> Result<fast::Outcome<usize>>) -> isize {
    px(-1, call, || {
        Ok(match body()? {
            fast::Outcome::Served(n) => n as isize,
            fast::Outcome::Fallback => FALLBACK,
        })
    })
}

/// FUSE mode: files on the mount have device number `dev`.
#[no_mangle]
pub extern "C" fn surge_px_fuse_mode(dev: u64) {
    attrs::set_mount_dev(dev);
}

/// FUSE mode: 1 when metadata calls on the mount's paths may be taken
/// (the mount's server, process `server_pid`, is told of every change), 0 when not.
#[no_mangle]
pub extern "C" fn surge_px_meta_fast(server_pid: u32) -> c_int {
    px(0, "metadata fast path", || fast::take_metadata_calls(server_pid).map(c_int::from))
}

/// read/pread on a descriptor of the FUSE mount (`off` < 0: at its position); -2: the kernel's call.
#[no_mangle]
pub unsafe extern "C" fn surge_px_fast_read(fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize {
    fast_px("read", || fast::read(fd, bytes_mut(buf, n)?, offset(off)))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_fast_write(fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize {
    fast_px("write", || fast::write(fd, bytes(buf, n)?, offset(off)))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_fast_readv(fd: c_int, iov: *const libc::iovec, count: c_int, off: i64) -> isize {
    fast_px("readv", || fast::readv(fd, &mut iovecs(iov, count)?, offset(off)))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_fast_writev(fd: c_int, iov: *const libc::iovec, count: c_int, off: i64) -> isize {
    fast_px("writev", || {
        let bufs: Vec<&[u8]> = iovecs(iov, count)?.into_iter().map(|b| &*b).collect();
        fast::writev(fd, &bufs, offset(off))
    })
}

/// The shim is about to make a call that reads the kernel's cached size of a file.
#[no_mangle]
pub extern "C" fn surge_px_fast_sync_sizes() {
    fast::sync_sizes();
}

/// The kernel served an open (0) or fsync (1) of mount descriptor `fd` in
/// `seconds`: the profile counts it.
#[no_mangle]
pub extern "C" fn surge_px_fast_noted(fd: c_int, call: c_int, seconds: f64) {
    let op = match call {
        0 => Meta::Open,
        1 => Meta::Fsync,
        _ => return,
    };
    fast::noted(fd, op, seconds);
}

/// The shim saw a fast-path descriptor closed.
#[no_mangle]
pub extern "C" fn surge_px_fast_forget(fd: c_int) {
    fast::forget(fd);
}

/// `MPI_File_open` of `name` gave `handle` in `seconds` (collective: over
/// more than one process; `mode` its access mode): counted if the file is Surge's.
#[no_mangle]
pub unsafe extern "C" fn surge_px_mpiio_opened(
    handle: *const c_void,
    name: *const c_char,
    collective: c_int,
    mode: c_int,
    seconds: f64,
) {
    px((), "MPI_File_open", || {
        mpi_files::opened(process(), handle as usize, text(name)?, collective != 0, mode as u64, seconds);
        Ok(())
    })
}

/// An MPI-IO call on `handle` (`call`: a SURGE_MPIIO_* code) of `bytes`, in `seconds`.
#[no_mangle]
pub extern "C" fn surge_px_mpiio_recorded(handle: *const c_void, call: c_int, bytes: i64, seconds: f64) {
    if let (Some(c), Some(call)) = (loaded(), mpiio::Call::from_code(call)) {
        mpi_files::recorded(c, handle as usize, call, bytes.max(0) as u64, seconds);
    }
}

/// `MPI_File_close` of `handle`, in `seconds`.
#[no_mangle]
pub extern "C" fn surge_px_mpiio_closed(handle: *const c_void, seconds: f64) {
    if let Some(c) = loaded() {
        mpi_files::closed(c, handle as usize, seconds);
    }
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_resolve(dirfd: c_int, path: *const c_char, out: *mut c_char, cap: usize) -> c_int {
    px(-1, "resolve", || match process().resolve(dirfd, text(path)?)? {
        Target::Surge(p) => put_text(&p, out, cap).map(|_| 1),
        Target::Host => Ok(0),
        Target::HostPath(p) => put_text(&p, out, cap).map(|_| 2),
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    px(-1, "open", || ops::open(text(path)?, flags, mode))
}

/// open of a name of Surge descriptor `fd` (/dev/fd/N, /proc/self/fd/N).
#[no_mangle]
pub extern "C" fn surge_px_reopen(fd: c_int, flags: c_int) -> c_int {
    px(-1, "open", || ops::reopen(fd, flags))
}

/// read (`off` < 0: at the descriptor's position) and pread.
#[no_mangle]
pub unsafe extern "C" fn surge_px_read(fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize {
    px(-1, "read", || Ok(ops::read(fd, bytes_mut(buf, n)?, offset(off))? as isize))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_write(fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize {
    px(-1, "write", || Ok(ops::write(fd, bytes(buf, n)?, offset(off))? as isize))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_readv(fd: c_int, iov: *const libc::iovec, count: c_int, off: i64) -> isize {
    px(-1, "readv", || Ok(ops::readv(fd, &mut iovecs(iov, count)?, offset(off))? as isize))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_writev(fd: c_int, iov: *const libc::iovec, count: c_int, off: i64) -> isize {
    px(-1, "writev", || {
        let bufs: Vec<&[u8]> = iovecs(iov, count)?.into_iter().map(|b| &*b).collect();
        Ok(ops::writev(fd, &bufs, offset(off))? as isize)
    })
}

#[no_mangle]
pub extern "C" fn surge_px_lseek(fd: c_int, off: i64, whence: c_int) -> i64 {
    px(-1, "lseek", || Ok(ops::lseek(fd, off, whence)? as i64))
}

#[no_mangle]
pub extern "C" fn surge_px_fsync(fd: c_int) -> c_int {
    px(-1, "fsync", || ops::fsync(fd).map(|_| 0))
}

#[no_mangle]
pub extern "C" fn surge_px_ftruncate(fd: c_int, len: i64) -> c_int {
    px(-1, "ftruncate", || ops::ftruncate(fd, len).map(|_| 0))
}

/// fallocate; returns 0 or -1 with errno (posix_fallocate returns it instead: the shim converts).
#[no_mangle]
pub extern "C" fn surge_px_fallocate(fd: c_int, mode: c_int, off: i64, len: i64) -> c_int {
    px(-1, "fallocate", || ops::fallocate(fd, mode, off, len).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    px(-1, "fstat", || {
        *out(st)? = attrs::stat(&ops::fstat(fd)?);
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_fstatx(fd: c_int, stx: *mut libc::statx) -> c_int {
    px(-1, "statx", || {
        *out(stx)? = attrs::statx(&ops::fstat(fd)?);
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_statfs(sf: *mut libc::statfs) -> c_int {
    px(-1, "statfs", || {
        *out(sf)? = ops::statfs()?;
        Ok(0)
    })
}

/// Forgets `fd`; the shim closes the kernel descriptor.
#[no_mangle]
pub extern "C" fn surge_px_close(fd: c_int) -> c_int {
    px(-1, "close", || ops::close(fd).map(|_| 0))
}

#[no_mangle]
pub extern "C" fn surge_px_dup(old: c_int, new: c_int) -> c_int {
    px(-1, "dup", || ops::dup(old, new).map(|_| new))
}

#[no_mangle]
pub extern "C" fn surge_px_getfl(fd: c_int) -> c_int {
    px(-1, "fcntl", || ops::status_flags(fd))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_lock(fd: c_int, cmd: c_int, lk: *mut libc::flock) -> c_int {
    px(-1, "fcntl", || ops::lock(fd, cmd, out(lk)?))
}

#[no_mangle]
pub extern "C" fn surge_px_flock(fd: c_int, operation: c_int) -> c_int {
    px(-1, "flock", || ops::flock(fd, operation))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_stat(path: *const c_char, st: *mut libc::stat) -> c_int {
    px(-1, "stat", || {
        *out(st)? = attrs::stat(&ops::stat(text(path)?)?);
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_statx(path: *const c_char, stx: *mut libc::statx) -> c_int {
    px(-1, "statx", || {
        *out(stx)? = attrs::statx(&ops::stat(text(path)?)?);
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_lstat(path: *const c_char, st: *mut libc::stat) -> c_int {
    px(-1, "lstat", || {
        *out(st)? = attrs::stat(&ops::lstat(text(path)?)?);
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_lstatx(path: *const c_char, stx: *mut libc::statx) -> c_int {
    px(-1, "statx", || {
        *out(stx)? = attrs::statx(&ops::lstat(text(path)?)?);
        Ok(0)
    })
}

/// The call on Surge path `path` (a PATH_MAX buffer) met the symbolic link
/// its error named, after `links` others: puts the path to try next in
/// `path` and returns 1 (a Surge path) or 2 (a host path, for libc); 0
/// when the link is not on `path` (left as it is); -1 and ELOOP after too
/// many links.
#[no_mangle]
pub unsafe extern "C" fn surge_px_follow(path: *mut c_char, links: c_int) -> c_int {
    px(-1, "follow a symbolic link", || {
        let c = process();
        let current = text(path)?.to_string();
        match links::follow(&c.mount, c, &current, links == 0)? {
            links::Next::Surge(next) => put_text(&next, path, libc::PATH_MAX as usize).map(|_| 1),
            links::Next::Host(next) => put_text(&next, path, libc::PATH_MAX as usize).map(|_| 2),
            links::Next::NotOnPath => Ok(0),
        }
    })
}

/// readlink: the target's bytes, cut to `len`, without a NUL.
#[no_mangle]
pub unsafe extern "C" fn surge_px_readlink(path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    px(-1, "readlink", || put_link(&ops::readlink(text(path)?)?, buf, len))
}

/// readlink of /proc/self/fd/N or /dev/fd/N, where N is Surge descriptor `fd`.
#[no_mangle]
pub unsafe extern "C" fn surge_px_fd_link(fd: c_int, buf: *mut c_char, len: usize) -> isize {
    px(-1, "readlink", || put_link(&ops::fd_link(fd)?, buf, len))
}

/// Puts a link's target into `buf` as readlink(2) does: cut to `len`
/// bytes, no NUL; the count.
unsafe fn put_link(target: &str, buf: *mut c_char, len: usize) -> Result<isize> {
    let n = target.len().min(len);
    if n > 0 {
        std::ptr::copy_nonoverlapping(target.as_ptr(), out(buf)? as *mut c_char as *mut u8, n);
    }
    Ok(n as isize)
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_symlink(target: *const c_char, path: *const c_char) -> c_int {
    px(-1, "symlink", || {
        let target = match target.is_null() {
            true => return Err(Error::new(libc::EFAULT, "NULL target")),
            // Targets are UTF-8, as namespace names are.
            false => CStr::from_ptr(target).to_str().map_err(|_| Error::new(libc::EINVAL, "target is not UTF-8"))?,
        };
        ops::symlink(target, text(path)?).map(|_| 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_access(path: *const c_char, amode: c_int) -> c_int {
    px(-1, "access", || ops::access(text(path)?, amode).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_unlink(path: *const c_char) -> c_int {
    px(-1, "unlink", || ops::unlink(text(path)?).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_mkdir(path: *const c_char, mode: c_uint) -> c_int {
    px(-1, "mkdir", || ops::mkdir(text(path)?, mode).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_rmdir(path: *const c_char) -> c_int {
    px(-1, "rmdir", || ops::rmdir(text(path)?).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_rename(from: *const c_char, to: *const c_char, flags: c_uint) -> c_int {
    px(-1, "rename", || ops::rename(text(from)?, text(to)?, flags).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_link(from: *const c_char, to: *const c_char, follow: c_int) -> c_int {
    px(-1, "link", || ops::link(text(from)?, text(to)?, follow != 0).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_chmod(path: *const c_char, mode: c_uint, nofollow: c_int) -> c_int {
    px(-1, "chmod", || ops::chmod(text(path)?, mode, nofollow != 0).map(|_| 0))
}

/// `times` NULL means both now, as for utimensat.
#[no_mangle]
pub unsafe extern "C" fn surge_px_utimens(path: *const c_char, times: *const libc::timespec, nofollow: c_int) -> c_int {
    px(-1, "utimensat", || {
        let times = times.as_ref().map(|_| [*times, *times.add(1)]);
        ops::utimens(text(path)?, times, nofollow != 0).map(|_| 0)
    })
}

/// getxattr/lgetxattr (`nofollow`): the value's length with `size` 0,
/// else the value copied into `value` (ERANGE if it does not fit).
#[no_mangle]
pub unsafe extern "C" fn surge_px_getxattr(
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
    nofollow: c_int,
) -> isize {
    px(-1, "getxattr", || put_xattr(&ops::get_xattr(text(path)?, text(name)?, nofollow != 0)?, value, size))
}

/// listxattr/llistxattr: the names, each ended by a NUL, as getxattr gives a value.
#[no_mangle]
pub unsafe extern "C" fn surge_px_listxattr(
    path: *const c_char,
    list: *mut c_char,
    size: usize,
    nofollow: c_int,
) -> isize {
    px(-1, "listxattr", || put_xattr(&ops::list_xattr(text(path)?, nofollow != 0)?, list as *mut c_void, size))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_setxattr(
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
    nofollow: c_int,
) -> c_int {
    px(-1, "setxattr", || {
        if size > XATTR_SIZE_MAX {
            return Err(Error::new(
                libc::E2BIG,
                format!("extended attribute values have at most {XATTR_SIZE_MAX} bytes"),
            ));
        }
        let value = bytes(value, size)?;
        ops::set_xattr(text(path)?, text(name)?, Some(value), flags as u32, nofollow != 0).map(|_| 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_removexattr(path: *const c_char, name: *const c_char, nofollow: c_int) -> c_int {
    px(-1, "removexattr", || ops::set_xattr(text(path)?, text(name)?, None, 0, nofollow != 0).map(|_| 0))
}

/// Puts an extended attribute's value (or a list of names) into `buf`
/// as getxattr(2) does: its length when `size` is 0, else all of it, or
/// ERANGE when it does not fit.
unsafe fn put_xattr(bytes: &[u8], buf: *mut c_void, size: usize) -> Result<isize> {
    if size == 0 {
        return Ok(bytes.len() as isize);
    }
    if bytes.len() > size {
        return Err(Error::new(libc::ERANGE, format!("the value has {} bytes, the buffer {size}", bytes.len())));
    }
    bytes_mut(buf, bytes.len())?.copy_from_slice(bytes);
    Ok(bytes.len() as isize)
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_chown(path: *const c_char, uid: c_uint, gid: c_uint) -> c_int {
    px(-1, "chown", || ops::chown(text(path)?, uid, gid).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_truncate(path: *const c_char, len: i64) -> c_int {
    px(-1, "truncate", || ops::truncate(text(path)?, len).map(|_| 0))
}

/// The Surge path of descriptor `fd`, for the *at and f* calls the shim
/// turns into path calls.
#[no_mangle]
pub unsafe extern "C" fn surge_px_fd_path(fd: c_int, out: *mut c_char, cap: usize) -> c_int {
    px(-1, "fd path", || put_text(&ops::fd_path(fd)?, out, cap).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_chdir(path: *const c_char) -> c_int {
    px(-1, "chdir", || ops::chdir(text(path)?).map(|_| 0))
}

/// The working directory left the mount (a chdir to a host directory).
#[no_mangle]
pub extern "C" fn surge_px_leave_cwd() {
    if let Some(c) = loaded() {
        c.set_cwd(None);
    }
}

/// The working directory an earlier program image left under the mount
/// (SURGE_CWD, which the shim checked against the kernel's), taken as it is:
/// the chdir that made it checked it.
#[no_mangle]
pub unsafe extern "C" fn surge_px_adopt_cwd(host_path: *const c_char) {
    px((), "adopt the working directory", || {
        let c = process();
        if let Target::Surge(path) = c.mount.classify(text(host_path)?) {
            c.set_cwd(Some(path));
        }
        Ok(())
    })
}

/// Placeholder `fd` sits on a standard stream (0-2), which stdio reads and
/// writes past the interposer: its file is noted for `surge run` to report.
#[no_mangle]
pub extern "C" fn surge_px_note_stream(fd: c_int) {
    px((), "note a standard stream", || {
        let c = process();
        c.profile.note_stream(c.mount.prefix(), &c.descriptor(fd)?.path);
        Ok(())
    })
}

/// The host name of the Surge working directory, or of Surge path `path`
/// (after checking it exists: realpath).
#[no_mangle]
pub unsafe extern "C" fn surge_px_host_name(path: *const c_char, out: *mut c_char, cap: usize) -> c_int {
    px(-1, "getcwd", || {
        let c = process();
        let surge_path = match path.is_null() {
            true => c.cwd().ok_or_else(|| Error::new(libc::ENOENT, "the working directory is not in Surge"))?,
            false => {
                let p = text(path)?.to_string();
                ops::stat(&p)?;
                p
            }
        };
        put_text(&c.mount.host_name(&surge_path), out, cap).map(|_| 0)
    })
}

/// A directory stream over `fd` (which it then owns).
#[no_mangle]
pub extern "C" fn surge_px_opendir(fd: c_int) -> *mut c_void {
    px(std::ptr::null_mut(), "opendir", || Ok(Box::into_raw(dir::open(fd)?).cast()))
}

/// The next entry, or NULL at the end (errno unchanged).
#[no_mangle]
pub unsafe extern "C" fn surge_px_readdir(stream: *mut c_void) -> *mut libc::dirent64 {
    match stream.cast::<dir::DirStream>().as_mut() {
        Some(s) => s.read().unwrap_or(std::ptr::null_mut()),
        None => std::ptr::null_mut(),
    }
}

/// Frees the stream and forgets its descriptor (the shim closes the
/// kernel's, which it takes from dirfd first).
#[no_mangle]
pub unsafe extern "C" fn surge_px_closedir(stream: *mut c_void) -> c_int {
    let s = Box::from_raw(stream.cast::<dir::DirStream>());
    px(-1, "closedir", || ops::close(s.fd()).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_dirfd(stream: *mut c_void) -> c_int {
    (*stream.cast::<dir::DirStream>()).fd()
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_telldir(stream: *mut c_void) -> c_long {
    (*stream.cast::<dir::DirStream>()).tell() as c_long
}

#[no_mangle]
pub unsafe extern "C" fn surge_px_seekdir(stream: *mut c_void, position: c_long) {
    (*stream.cast::<dir::DirStream>()).seek(position);
}

/// A call Surge does not support on its files: one line on stderr, errno
/// `errno`, -1.
#[no_mangle]
pub unsafe extern "C" fn surge_px_unsupported(
    call: *const c_char,
    fd: c_int,
    path: *const c_char,
    errno: c_int,
) -> c_int {
    let call = text(call).unwrap_or("?");
    let what = match text(path) {
        Ok(p) => p.to_string(),
        Err(_) => ops::fd_path(fd).unwrap_or_else(|_| format!("descriptor {fd}")),
    };
    let msg =
        Error::new(errno, format!("{call} on the Surge file {what} is not supported; use read and write instead"));
    eprintln!("surge: {msg}");
    guarded(-1, || Err(msg))
}

/// A FIFO, device node or Unix socket at a Surge path (the interposer
/// alone): EOPNOTSUPP, and one line per process naming the limit.
#[no_mangle]
pub unsafe extern "C" fn surge_px_special_file(kind: *const c_char, path: *const c_char) -> c_int {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let kind = text(kind).unwrap_or("a special file");
    let name = text(path).map_or_else(|_| "?".to_string(), |p| process().mount.host_name(p));
    let msg = Error::new(
        libc::EOPNOTSUPP,
        format!(
            "{kind} at {name} is not supported with the interposer alone: Surge holds regular files, \
             directories and symbolic links; FIFOs, sockets and device nodes need the FUSE mount \
             (surge run without --no-fuse) or a host path"
        ),
    );
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("surge: {msg}");
    }
    guarded(-1, || Err(msg))
}

/// What the shim execs for Surge path `path` (the interposer alone): a
/// sealed memfd with the program's bytes, or for a `#!` script
/// SURGE_SCRIPT with its interpreter and argument ("" for none) written out.
#[no_mangle]
pub unsafe extern "C" fn surge_px_program(
    path: *const c_char,
    interp: *mut c_char,
    arg: *mut c_char,
    cap: usize,
) -> c_int {
    use std::os::fd::IntoRawFd;
    px(-1, "execve", || {
        let path = text(path)?;
        match exec::program(path)? {
            exec::Program::Image(fd) => Ok(fd.into_raw_fd()),
            exec::Program::Script(line) => {
                let (program, argument) = exec::interpreter(&line)
                    .ok_or_else(|| Error::new(libc::ENOEXEC, format!("{path} names no interpreter after #!")))?;
                put_text(program, interp, cap)?;
                put_text(argument.unwrap_or(""), arg, cap)?;
                Ok(exec::SCRIPT)
            }
        }
    })
}

/// From a vfork child: whether Surge path `path` may be executed (0), or -1 with errno.
#[no_mangle]
pub unsafe extern "C" fn surge_px_probe_program(path: *const c_char) -> c_int {
    px(-1, "execve", || exec::probe(text(path)?).map(|()| 0))
}

/// Before exec and at exit: appends this image's profile to the job's.
#[no_mangle]
pub extern "C" fn surge_px_flush_profile() {
    fast::sync_sizes();
    if let Some(c) = loaded() {
        if let Err(e) = c.profile.write_out(c.mount.prefix()) {
            eprintln!("surge: could not write the I/O profile: {e}");
        }
    }
}

/// Gives every Surge descriptor its lock file before a child shares it (`locks`).
fn share_lock_files(c: &process::Process) {
    if let Some(client) = c.connected() {
        let known = c.table.entries().into_iter().filter_map(|(fd, d)| Some((fd, d.known_ino()?)));
        locks::share(known, &client.cluster().cluster_id);
    }
}

#[no_mangle]
pub extern "C" fn surge_px_atfork_prepare() {
    fast::sync_sizes();
    if let Some(c) = loaded() {
        share_lock_files(c);
        c.table.lock_for_fork();
        c.profile.lock_for_fork();
        locks::lock_for_fork();
    }
}

fn unlock_after_fork() {
    if let Some(c) = loaded() {
        // SAFETY: paired with the prepare handler, once per fork in each process.
        unsafe {
            locks::unlock_after_fork();
            c.profile.unlock_after_fork();
            c.table.unlock_after_fork();
        }
    }
}

/// Before an exec of this image: lock files follow their placeholders (`locks`).
#[no_mangle]
pub extern "C" fn surge_px_before_exec() {
    locks::before_exec();
}

/// Before vfork or posix_spawn: the child shares the placeholders, and
/// their lock files with them.
#[no_mangle]
pub extern "C" fn surge_px_share_lock_files() {
    if let Some(c) = loaded() {
        share_lock_files(c);
    }
}

#[no_mangle]
pub extern "C" fn surge_px_after_spawn() {
    locks::after_spawn();
}

#[no_mangle]
pub extern "C" fn surge_px_atfork_parent() {
    unlock_after_fork();
}

#[no_mangle]
pub extern "C" fn surge_px_atfork_child() {
    unlock_after_fork();
    if let Some(c) = loaded() {
        c.profile.restart_in_child();
    }
}
