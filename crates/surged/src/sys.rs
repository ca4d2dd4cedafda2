//! Thin wrappers over the few system calls std does not expose.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::Path;

/// Takes an exclusive `flock` on `file` without waiting; `WouldBlock` if another holder has it.
pub fn try_lock_exclusive(file: &File) -> io::Result<()> {
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Size and free space (for unprivileged users) of the file system holding `path`, in bytes.
pub fn fs_space(path: &Path) -> io::Result<(u64, u64)> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: statvfs fills the zeroed struct we pass; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok((st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize))
}

/// Asks the kernel to drop cached pages of a file range, so the next read
/// comes from the device. Advisory: a failure changes nothing but speed.
pub fn drop_cached(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else { return };
    // SAFETY: posix_fadvise only reads its integer arguments.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED) };
}

/// Shuts a socket down for reading: a blocked `accept` or `read` on it returns at once.
pub fn shutdown_read(fd: RawFd) {
    // SAFETY: shutdown only changes the state of the socket behind fd.
    unsafe { libc::shutdown(fd, libc::SHUT_RD) };
}

/// Raises the soft open-files limit to the hard limit: every connection and
/// every cached object holds a descriptor.
pub fn raise_open_files_limit() {
    // SAFETY: getrlimit/setrlimit read and write the struct we pass.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Flushes a directory, making the entries created or renamed in it durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
