//! What every C-facing layer over this library shares (the C ABI of
//! `surge.h` and the LD_PRELOAD interposer): errno-setting calls that never
//! unwind into C, and Surge attributes as POSIX `struct stat`.

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use surge_proto::layout::DEFAULT_STRIPE_SIZE;
use surge_proto::{Attr, FileKind};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs `body`, turning an error or a panic into `failure` with errno set
/// and the message kept for [`last_error`]. On success errno is what it was
/// before, as libc leaves it: the work inside (a connection that answered
/// EAGAIN before it answered, a probe that found a file) is not the
/// caller's, and programs read errno after calls that succeeded (netCDF
/// takes a short read with errno set for an error).
pub fn guarded<T>(failure: T, body: impl FnOnce() -> Result<T>) -> T {
    let caller_errno = errno();
    let error = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => {
            set_errno(caller_errno);
            return value;
        }
        Ok(Err(e)) => e,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Error::new(libc::EIO, format!("internal error in the Surge client: {what}"))
        }
    };
    let message = CString::new(error.to_string().replace('\0', " ")).unwrap_or_default();
    // Gone once the thread's locals are (a write at exit): errno still says it.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = message);
    set_errno(error.errno());
    failure
}

/// This thread's errno.
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(errno: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = errno };
}

/// The message of this thread's last failed call (valid until its next one).
pub fn last_error() -> *const c_char {
    LAST_ERROR.try_with(|last| last.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// Attributes as `stat(2)` reports them. Space is counted in whole 4 KiB
/// pages, as tmpfs and ext4 report a file without holes.
pub fn stat_of(attr: &Attr) -> libc::stat {
    // SAFETY: `struct stat` is plain integers, for which zero is valid.
    let mut s: libc::stat = unsafe { std::mem::zeroed() };
    let is_dir = attr.kind == FileKind::Dir;
    let format = match attr.kind {
        FileKind::File => libc::S_IFREG,
        FileKind::Dir => libc::S_IFDIR,
        FileKind::Symlink => libc::S_IFLNK,
    };
    s.st_mode = format | (attr.mode & 0o7777) as libc::mode_t;
    s.st_ino = attr.ino as _;
    // Directories say 1, "not counted" (as btrfs does): 2 would tell find
    // and fts that a directory has no subdirectories.
    s.st_nlink = 1;
    s.st_size = if is_dir { 4096 } else { attr.size as _ };
    let blksize = if attr.layout.stripe_size == 0 { DEFAULT_STRIPE_SIZE } else { attr.layout.stripe_size };
    s.st_blksize = blksize as _;
    // A link's target lives in its record, as a fast symlink's in its inode.
    s.st_blocks = match attr.kind {
        FileKind::File => attr.blocks as libc::blkcnt_t,
        FileKind::Dir => (s.st_size as u64).div_ceil(4096) as libc::blkcnt_t * 8,
        FileKind::Symlink => 0,
    };
    // SAFETY: getuid and getgid cannot fail.
    (s.st_uid, s.st_gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let (mtime, mtime_ns) = split_ns(attr.mtime_ns);
    let (ctime, ctime_ns) = split_ns(attr.ctime_ns);
    (s.st_atime, s.st_atime_nsec) = (mtime, mtime_ns);
    (s.st_mtime, s.st_mtime_nsec) = (mtime, mtime_ns);
    (s.st_ctime, s.st_ctime_nsec) = (ctime, ctime_ns);
    s
}

/// Nanoseconds since the epoch as (seconds, nanoseconds in 0..1e9).
pub fn split_ns(ns: i64) -> (libc::time_t, i64) {
    (ns.div_euclid(1_000_000_000) as libc::time_t, ns.rem_euclid(1_000_000_000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{Layout, Tier};

    #[test]
    fn a_call_that_succeeds_leaves_errno_as_the_caller_set_it() {
        set_errno(4242);
        let got = guarded(-1, || {
            set_errno(libc::EAGAIN); // internal work that tried again
            Ok(7)
        });
        assert_eq!((got, errno()), (7, 4242));
        let failed = guarded(-1, || Err(Error::new(libc::ENOENT, "no such file")));
        assert_eq!((failed, errno()), (-1, libc::ENOENT));
    }

    #[test]
    fn stat_gives_the_blocks_the_objects_take_and_splits_times() {
        let attr = Attr {
            ino: 7,
            kind: FileKind::File,
            mode: 0o640,
            size: 5000,
            mtime_ns: -1,
            ctime_ns: 1_500_000_000,
            layout: Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0 },
            tier: Tier::Buffer,
            created: false,
            staged_version: 0,
            blocks: 8,
        };
        let s = stat_of(&attr);
        assert_eq!(s.st_mode, libc::S_IFREG | 0o640);
        assert_eq!((s.st_size, s.st_blocks, s.st_blksize), (5000, 8, 1 << 20));
        assert_eq!((s.st_mtime, s.st_mtime_nsec), (-1, 999_999_999));
        assert_eq!((s.st_ctime, s.st_ctime_nsec), (1, 500_000_000));
    }

    #[test]
    fn a_link_is_s_iflnk_its_size_its_targets_length_and_has_no_blocks() {
        let attr = Attr {
            ino: 9,
            kind: FileKind::Symlink,
            mode: 0o777,
            size: 12,
            mtime_ns: 0,
            ctime_ns: 0,
            layout: Layout::INHERIT,
            tier: Tier::Buffer,
            created: false,
            staged_version: 0,
            blocks: 0,
        };
        let s = stat_of(&attr);
        assert_eq!(s.st_mode, libc::S_IFLNK | 0o777);
        assert_eq!((s.st_size, s.st_blocks), (12, 0));
    }
}
