//! The C ABI (`include/surge.h`), for the LD_PRELOAD interposer and C
//! programs. Functions behave like their libc namesakes: on failure they
//! return -1 (or NULL) and set `errno`; `surge_last_error()` has the
//! message. No panic crosses this boundary (it becomes EIO).
//!
//! # Safety
//!
//! Every pointer argument follows the C contract of the libc function of the
//! same name: strings are NUL-terminated, buffers are valid for the length
//! given, out-pointers are writable, and a `surge_dir` comes from
//! `surge_opendir` and is closed once. NULL is refused with EFAULT (EBADF
//! for a directory stream) where libc would crash.
#![allow(clippy::missing_safety_doc)]

mod table;

use crate::posix::{guarded as ffi, last_error, stat_of};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::file::File;
use std::ffi::{c_char, c_int, c_long, c_uint, c_ulonglong, c_void, CStr};
use std::io::SeekFrom;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use surge_proto::layout::{FIRST_AUTO, STRIPE_ALL};
use surge_proto::{Attr, DirEntry, FileKind, Layout};
use table::DescriptorTable;

static CLIENT: OnceLock<Client> = OnceLock::new();
/// Serializes initialisation so concurrent first calls connect once.
static INIT: Mutex<()> = Mutex::new(());
static FILES: Mutex<DescriptorTable<Arc<File>>> = Mutex::new(DescriptorTable::new());

/// Largest count one read or write moves, as Linux's MAX_RW_COUNT.
const MAX_RW_COUNT: usize = 0x7fff_f000;

/// An open directory stream (`surge_dir` in C): the listing, read at open.
pub struct SurgeDir {
    entries: Vec<DirEntry>,
    next: usize,
}

fn connect(cluster_file: Option<&Path>) -> Result<&'static Client> {
    let _one_at_a_time = INIT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(client) = CLIENT.get() {
        return Ok(client);
    }
    let client = match cluster_file {
        Some(path) => Client::connect(path)?,
        None => Client::connect_default()?,
    };
    Ok(CLIENT.get_or_init(|| client))
}

fn client() -> Result<&'static Client> {
    match CLIENT.get() {
        Some(client) => Ok(client),
        None => connect(None),
    }
}

fn files() -> MutexGuard<'static, DescriptorTable<Arc<File>>> {
    FILES.lock().unwrap_or_else(PoisonError::into_inner)
}

fn file(fd: c_int) -> Result<Arc<File>> {
    files().get(fd).ok_or_else(|| Error::new(libc::EBADF, format!("{fd} is not an open Surge descriptor")))
}

/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives the call.
unsafe fn c_str<'a>(p: *const c_char) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::new(libc::EFAULT, "NULL path"));
    }
    CStr::from_ptr(p).to_str().map_err(|_| Error::new(libc::EINVAL, "path is not UTF-8"))
}

fn offset(off: libc::off_t) -> Result<u64> {
    u64::try_from(off).map_err(|_| Error::new(libc::EINVAL, format!("negative offset {off}")))
}

/// # Safety
/// `buf` is NULL with `count` 0, or valid for reading `count` bytes.
unsafe fn buffer<'a>(buf: *const c_void, count: usize) -> Result<&'a [u8]> {
    let count = count.min(MAX_RW_COUNT);
    if count == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(Error::new(libc::EFAULT, "NULL buffer"));
    }
    Ok(std::slice::from_raw_parts(buf.cast(), count))
}

/// # Safety
/// `buf` is NULL with `count` 0, or valid for writing `count` bytes.
unsafe fn buffer_mut<'a>(buf: *mut c_void, count: usize) -> Result<&'a mut [u8]> {
    let count = count.min(MAX_RW_COUNT);
    if count == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(Error::new(libc::EFAULT, "NULL buffer"));
    }
    Ok(std::slice::from_raw_parts_mut(buf.cast(), count))
}

/// Connects to the cluster of `cluster_file` (NULL: `$SURGE_CLUSTER`, else
/// `~/.surge/cluster.toml`). Idempotent; other calls do it implicitly.
#[no_mangle]
pub unsafe extern "C" fn surge_init(cluster_file: *const c_char) -> c_int {
    ffi(-1, || {
        let path = if cluster_file.is_null() { None } else { Some(Path::new(c_str(cluster_file)?)) };
        connect(path).map(|_| 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_open(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    ffi(-1, || {
        let file = client()?.open(c_str(path)?, flags, mode)?;
        files().insert(Arc::new(file)).ok_or_else(|| Error::new(libc::EMFILE, "too many open Surge descriptors"))
    })
}

#[no_mangle]
pub extern "C" fn surge_close(fd: c_int) -> c_int {
    ffi(-1, || {
        files().remove(fd).ok_or_else(|| Error::new(libc::EBADF, format!("{fd} is not an open Surge descriptor")))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_read(fd: c_int, buf: *mut c_void, count: usize) -> isize {
    ffi(-1, || Ok(file(fd)?.read(buffer_mut(buf, count)?)? as isize))
}

#[no_mangle]
pub unsafe extern "C" fn surge_write(fd: c_int, buf: *const c_void, count: usize) -> isize {
    ffi(-1, || Ok(file(fd)?.write(buffer(buf, count)?)? as isize))
}

#[no_mangle]
pub unsafe extern "C" fn surge_pread(fd: c_int, buf: *mut c_void, count: usize, off: libc::off_t) -> isize {
    ffi(-1, || Ok(file(fd)?.read_at(buffer_mut(buf, count)?, offset(off)?)? as isize))
}

#[no_mangle]
pub unsafe extern "C" fn surge_pwrite(fd: c_int, buf: *const c_void, count: usize, off: libc::off_t) -> isize {
    ffi(-1, || Ok(file(fd)?.write_at(buffer(buf, count)?, offset(off)?)? as isize))
}

#[no_mangle]
pub extern "C" fn surge_lseek(fd: c_int, off: libc::off_t, whence: c_int) -> libc::off_t {
    ffi(-1, || {
        let pos = match whence {
            libc::SEEK_SET => SeekFrom::Start(offset(off)?),
            libc::SEEK_CUR => SeekFrom::Current(off),
            libc::SEEK_END => SeekFrom::End(off),
            _ => return Err(Error::new(libc::EINVAL, format!("unsupported lseek whence {whence}"))),
        };
        Ok(file(fd)?.seek(pos)? as libc::off_t)
    })
}

#[no_mangle]
pub extern "C" fn surge_fsync(fd: c_int) -> c_int {
    ffi(-1, || file(fd)?.fsync().map(|_| 0))
}

#[no_mangle]
pub extern "C" fn surge_ftruncate(fd: c_int, len: libc::off_t) -> c_int {
    ffi(-1, || file(fd)?.set_len(offset(len)?).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_truncate(path: *const c_char, len: libc::off_t) -> c_int {
    ffi(-1, || client()?.truncate(c_str(path)?, offset(len)?).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_stat(path: *const c_char, st: *mut libc::stat) -> c_int {
    ffi(-1, || {
        let attr = client()?.stat(c_str(path)?)?;
        fill_stat(&attr, st)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    ffi(-1, || {
        let attr = file(fd)?.attr()?;
        fill_stat(&attr, st)
    })
}

/// # Safety
/// `st` is NULL or valid for writing a `struct stat`.
unsafe fn fill_stat(attr: &Attr, st: *mut libc::stat) -> Result<c_int> {
    if st.is_null() {
        return Err(Error::new(libc::EFAULT, "NULL stat buffer"));
    }
    *st = stat_of(attr);
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn surge_mkdir(path: *const c_char, mode: libc::mode_t) -> c_int {
    ffi(-1, || client()?.mkdir(c_str(path)?, mode).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_rmdir(path: *const c_char) -> c_int {
    ffi(-1, || client()?.rmdir(c_str(path)?).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_unlink(path: *const c_char) -> c_int {
    ffi(-1, || client()?.unlink(c_str(path)?).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_rename(from: *const c_char, to: *const c_char) -> c_int {
    ffi(-1, || client()?.rename(c_str(from)?, c_str(to)?).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn surge_opendir(path: *const c_char) -> *mut SurgeDir {
    ffi(std::ptr::null_mut(), || {
        let entries = client()?.readdir(c_str(path)?)?;
        Ok(Box::into_raw(Box::new(SurgeDir { entries, next: 0 })))
    })
}

/// 1 and the next entry, 0 at the end, -1 on error (ERANGE: `cap` too small).
#[no_mangle]
pub unsafe extern "C" fn surge_readdir(
    dir: *mut SurgeDir,
    name_out: *mut c_char,
    cap: usize,
    is_dir: *mut c_int,
) -> c_int {
    ffi(-1, || {
        // SAFETY: the caller passes a stream from surge_opendir, not yet closed.
        let dir = dir.as_mut().ok_or_else(|| Error::new(libc::EBADF, "NULL directory stream"))?;
        let Some(entry) = dir.entries.get(dir.next) else { return Ok(0) };
        let name = entry.name.as_bytes();
        if name_out.is_null() {
            return Err(Error::new(libc::EFAULT, "NULL name buffer"));
        }
        if name.len() >= cap {
            return Err(Error::new(
                libc::ERANGE,
                format!("entry name {:?} needs {} bytes", entry.name, name.len() + 1),
            ));
        }
        std::ptr::copy_nonoverlapping(name.as_ptr(), name_out.cast::<u8>(), name.len());
        *name_out.add(name.len()) = 0;
        if !is_dir.is_null() {
            *is_dir = (entry.kind == FileKind::Dir) as c_int;
        }
        dir.next += 1;
        Ok(1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn surge_closedir(dir: *mut SurgeDir) -> c_int {
    ffi(-1, || {
        if dir.is_null() {
            return Err(Error::new(libc::EBADF, "NULL directory stream"));
        }
        // SAFETY: the caller passes a stream from surge_opendir, closed once.
        drop(Box::from_raw(dir));
        Ok(0)
    })
}

/// Directory: sets its default layout. Missing path: creates an empty file
/// with this layout. Existing file: EINVAL (a file's layout is fixed).
#[no_mangle]
pub unsafe extern "C" fn surge_setstripe(
    path: *const c_char,
    stripe_count: c_long,
    stripe_size: c_ulonglong,
    first: c_long,
) -> c_int {
    ffi(-1, || {
        let client = client()?;
        let path = c_str(path)?;
        let layout = requested_layout(stripe_count, stripe_size, first)?;
        match client.stat(path) {
            Ok(attr) if attr.kind == FileKind::Dir => client.set_layout(path, layout)?,
            Ok(_) => {
                return Err(Error::new(
                    libc::EINVAL,
                    format!("{path} exists: a file's layout is fixed when it is created"),
                ))
            }
            Err(e) if e.errno() == libc::ENOENT => drop(client.create(path, 0o644, layout)?),
            Err(e) => return Err(e),
        }
        Ok(0)
    })
}

/// The C conventions (-1 = all daemons / automatic, 0 = inherit) as a layout.
fn requested_layout(stripe_count: c_long, stripe_size: c_ulonglong, first: c_long) -> Result<Layout> {
    let stripe_count = match stripe_count {
        -1 => STRIPE_ALL,
        c => u32::try_from(c).ok().filter(|&c| c != STRIPE_ALL).ok_or_else(|| {
            Error::new(libc::EINVAL, format!("stripe count {c} (use -1 for all daemons, 0 to inherit)"))
        })?,
    };
    let first = match first {
        -1 => FIRST_AUTO,
        f => u32::try_from(f)
            .ok()
            .filter(|&f| f != FIRST_AUTO)
            .ok_or_else(|| Error::new(libc::EINVAL, format!("first daemon {f} (use -1 for automatic)")))?,
    };
    Ok(Layout { stripe_count, stripe_size, first })
}

/// A file's layout, or a directory's own default (fields may be 0 =
/// inherit, or UINT_MAX = all daemons / automatic). NULL outputs are skipped.
#[no_mangle]
pub unsafe extern "C" fn surge_getstripe(
    path: *const c_char,
    stripe_count: *mut c_uint,
    stripe_size: *mut c_ulonglong,
    first: *mut c_uint,
) -> c_int {
    ffi(-1, || {
        let layout = client()?.stat(c_str(path)?)?.layout;
        if !stripe_count.is_null() {
            *stripe_count = layout.stripe_count;
        }
        if !stripe_size.is_null() {
            *stripe_size = layout.stripe_size;
        }
        if !first.is_null() {
            *first = layout.first;
        }
        Ok(0)
    })
}

/// The message of this thread's last failure ("" if none); valid until the
/// thread's next failing call.
#[no_mangle]
pub extern "C" fn surge_last_error() -> *const c_char {
    last_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }

    #[test]
    fn unknown_descriptors_are_ebadf_with_a_message() {
        assert_eq!(surge_close(12345), -1);
        assert_eq!(errno(), libc::EBADF);
        let msg = unsafe { CStr::from_ptr(surge_last_error()) }.to_str().unwrap();
        assert!(msg.contains("12345") && msg.contains("EBADF"), "{msg}");
        assert_eq!(surge_lseek(-1, 0, libc::SEEK_SET), -1);
        assert_eq!(surge_fsync(77), -1);
        assert_eq!(errno(), libc::EBADF);
    }

    #[test]
    fn panics_become_eio() {
        let got = ffi(-1, || -> Result<i32> { panic!("boom") });
        assert_eq!((got, errno()), (-1, libc::EIO));
        let msg = unsafe { CStr::from_ptr(surge_last_error()) }.to_str().unwrap();
        assert!(msg.contains("boom"), "{msg}");
    }

    #[test]
    fn c_layout_conventions() {
        let l = requested_layout(-1, 1 << 20, -1).unwrap();
        assert_eq!(l, Layout { stripe_count: STRIPE_ALL, stripe_size: 1 << 20, first: FIRST_AUTO });
        assert_eq!(requested_layout(0, 0, 0).unwrap(), Layout::INHERIT);
        assert_eq!(requested_layout(-2, 0, 0).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(requested_layout(2, 0, -7).unwrap_err().errno(), libc::EINVAL);
    }

    #[test]
    fn stat_times_split_into_seconds_and_nanoseconds() {
        let layout = Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0 };
        let attr = |mtime_ns, ctime_ns| Attr {
            ino: 1,
            kind: FileKind::File,
            mode: 0o644,
            size: 0,
            mtime_ns,
            ctime_ns,
            layout,
            tier: surge_proto::Tier::Buffer,
            created: false,
            staged_version: 0,
            blocks: 0,
        };
        // (nanoseconds, the seconds and nanoseconds C sees): the nanoseconds
        // stay in 0..1e9 on both sides of the epoch, as timespec requires.
        let cases = [
            (0, (0, 0)),
            (999_999_999, (0, 999_999_999)),
            (1_000_000_000, (1, 0)),
            (1_700_000_000_123_456_789, (1_700_000_000, 123_456_789)),
            (-1, (-1, 999_999_999)),
            (-1_000_000_000, (-1, 0)),
            (-1_500_000_000, (-2, 500_000_000)),
        ];
        for (ns, (sec, nsec)) in cases {
            let st = stat_of(&attr(ns, ns + 7));
            assert_eq!((st.st_mtime, st.st_mtime_nsec), (sec, nsec), "mtime {ns}");
            assert_eq!((st.st_atime, st.st_atime_nsec), (sec, nsec), "atime follows mtime ({ns})");
            assert_eq!(st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128, ns as i128 + 7, "ctime {ns}");
        }
    }
}
