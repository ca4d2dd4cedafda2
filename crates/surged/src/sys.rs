//! Thin wrappers over the few system calls std does not expose, and the
//! whole-buffer positional reads and writes the store, checksums and PFS share.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::Path;
use surge_proto::Errno;

/// Takes an exclusive `flock` on `file` without waiting; `WouldBlock` if another holder has it.
pub fn try_lock_exclusive(file: &File) -> io::Result<()> {
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
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

/// Writes all of `data` at `offset`; on failure, how much was written before it.
pub(crate) fn pwrite_all(file: &File, data: &[u8], offset: u64) -> (usize, Option<Errno>) {
    let mut done = 0;
    while done < data.len() {
        match file.write_at(&data[done..], offset + done as u64) {
            Ok(0) => return (done, Some(Errno::EIO)),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (done, Some(Errno::from_io(&e))),
        }
    }
    (done, None)
}

/// Reads until `buf` is full or the file ends.
/// Copies up to `len` bytes of `from` at `from_offset` to `to` at
/// `to_offset` inside the kernel (copy_file_range(2)); the bytes copied,
/// 0 at the end of `from`.
pub(crate) fn copy_range(from: &File, from_offset: u64, to: &File, to_offset: u64, len: u64) -> Result<u64, Errno> {
    let (Ok(mut from_at), Ok(mut to_at)) = (libc::loff_t::try_from(from_offset), libc::loff_t::try_from(to_offset))
    else {
        return Err(Errno::EFBIG);
    };
    loop {
        // SAFETY: both descriptors are open files; the offsets are ours to update.
        let n = unsafe {
            libc::copy_file_range(from.as_raw_fd(), &mut from_at, to.as_raw_fd(), &mut to_at, len as usize, 0)
        };
        match n {
            n if n >= 0 => return Ok(n as u64),
            _ => match io::Error::last_os_error() {
                e if e.kind() == io::ErrorKind::Interrupted => {}
                e => return Err(Errno::from_io(&e)),
            },
        }
    }
}

/// Where the next data (`hole` false) or hole (`hole` true) of `file` at or
/// after `offset` starts (lseek(2) SEEK_DATA/SEEK_HOLE); `None` when there is
/// none before the end (ENXIO). Only positional I/O uses the descriptor, so
/// moving its offset is harmless.
pub(crate) fn seek_data_or_hole(file: &File, offset: u64, hole: bool) -> Result<Option<u64>, Errno> {
    let at = libc::off_t::try_from(offset).map_err(|_| Errno::EFBIG)?;
    let whence = if hole { libc::SEEK_HOLE } else { libc::SEEK_DATA };
    // SAFETY: lseek on a descriptor we own.
    match unsafe { libc::lseek(file.as_raw_fd(), at, whence) } {
        found if found >= 0 => Ok(Some(found as u64)),
        _ => match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
            e => Err(Errno::from_io(&e)),
        },
    }
}

/// fallocate(2) of `[offset, offset + len)` of `file` with `mode`.
pub(crate) fn fallocate(file: &File, mode: i32, offset: u64, len: u64) -> Result<(), Errno> {
    let (Ok(at), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(Errno::EFBIG);
    };
    loop {
        // SAFETY: fallocate on a descriptor we own, with integer arguments.
        if unsafe { libc::fallocate(file.as_raw_fd(), mode, at, len) } == 0 {
            return Ok(());
        }
        match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::Interrupted => {}
            e => return Err(Errno::from_io(&e)),
        }
    }
}

pub(crate) fn pread_full(file: &File, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Errno::from_io(&e)),
        }
    }
    Ok(done)
}

/// Whether this process may write in `dir` (access(2), W_OK).
pub fn check_writable(dir: &Path) -> io::Result<()> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: access only reads the NUL-terminated path.
    match unsafe { libc::access(path.as_ptr(), libc::W_OK) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// What O_DIRECT transfers align to (file offsets, lengths and memory): the
/// largest logical block size of common disks.
pub const DIRECT_ALIGN: usize = 4096;

/// `file` opened again with O_DIRECT, for reading or (`write`) writing;
/// a file system without O_DIRECT refuses (EINVAL).
pub fn reopen_direct(file: &File, write: bool) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// A zeroed buffer of at least `len` bytes, whole [`DIRECT_ALIGN`] blocks,
/// starting at an address O_DIRECT takes.
pub struct AlignedBuf {
    bytes: Vec<u8>,
    start: usize,
}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        let len = len.max(1).next_multiple_of(DIRECT_ALIGN);
        let bytes = vec![0u8; len + DIRECT_ALIGN];
        let start = bytes.as_ptr().align_offset(DIRECT_ALIGN);
        AlignedBuf { bytes, start }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let len = self.bytes.len() - DIRECT_ALIGN;
        &self.bytes[self.start..self.start + len]
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.bytes.len() - DIRECT_ALIGN;
        &mut self.bytes[self.start..self.start + len]
    }
}

/// Bytes received on a socket and not yet read (`FIONREAD`); 0 if unknown.
pub fn bytes_available(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the pointer we pass.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } == 0 {
        n.max(0) as usize
    } else {
        0
    }
}

/// Is `dir` on a tmpfs (statfs's `f_type`)? False when it cannot be told.
pub fn on_tmpfs(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|st| st.f_type == libc::TMPFS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tmpfs_is_told_from_other_file_systems() {
        assert!(!on_tmpfs(Path::new("/proc")), "/proc is a procfs");
        assert!(!on_tmpfs(Path::new("/no/such/dir")), "what cannot be told is not a tmpfs");
        let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return };
        for tmpfs in mounts.lines().filter(|l| l.split(' ').nth(2) == Some("tmpfs")) {
            let dir = tmpfs.split(' ').nth(1).expect("a mount point");
            // A name with spaces is escaped there (`\040`).
            if !Path::new(dir).is_dir() {
                continue;
            }
            assert!(on_tmpfs(Path::new(dir)), "{dir} is a tmpfs mount");
        }
    }
}
