//! Placeholder descriptors. Every Surge descriptor is backed by a real
//! kernel descriptor (an empty memfd named `surge-fd`), so the kernel hands
//! out fd numbers, and dup, fork, exec and close-on-exec work as they do for
//! any file. The memfd's own file position is the Surge file's position: the
//! kernel shares it between dups and across fork exactly as POSIX says. Its
//! content (never its position) records which Surge file it stands for, so
//! a program started by exec finds its inherited Surge descriptors again.
//!
//! Only raw system calls touch placeholders: the libc functions of the same
//! names are the interposer's own entry points.

use surge_client::{Error, Result};

/// The memfd name, seen as `/memfd:surge-fd (deleted)` in /proc/self/fd.
pub const NAME: &str = "surge-fd";
const HEADER_MAGIC: &str = "surge-fd 1";
/// Longest header read back: magic, flags and a path.
const HEADER_MAX: usize = 8192;

fn check(ret: libc::c_long, what: &str) -> Result<libc::c_long> {
    if ret < 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        return Err(Error::new(errno, format!("{what} of a Surge placeholder descriptor failed")));
    }
    Ok(ret)
}

/// A new placeholder for Surge file `path` opened with `flags` (which
/// decide close-on-exec and append mode, as for any descriptor).
pub fn create(path: &str, flags: i32) -> Result<i32> {
    let name = std::ffi::CString::new(NAME).expect("no NUL in the name");
    let memfd_flags = if flags & libc::O_CLOEXEC != 0 { libc::MFD_CLOEXEC } else { 0 };
    // SAFETY: a NUL-terminated name and valid flags.
    let fd = check(unsafe { libc::syscall(libc::SYS_memfd_create, name.as_ptr(), memfd_flags) }, "memfd_create")? as i32;
    let header = format!("{HEADER_MAGIC}\n{flags}\n{path}");
    // SAFETY: the header buffer is valid for its length.
    let wrote = unsafe { libc::syscall(libc::SYS_pwrite64, fd, header.as_ptr(), header.len(), 0) };
    let appended = if flags & libc::O_APPEND != 0 { set_status_flags(fd, libc::O_APPEND) } else { Ok(()) };
    if let Err(e) = check(wrote, "recording the file in").and(appended) {
        close(fd);
        return Err(e);
    }
    Ok(fd)
}

/// The open flags and Surge path a placeholder stands for; `None` when `fd`
/// is not a placeholder.
pub fn describe(fd: i32) -> Option<(i32, String)> {
    let mut buf = vec![0u8; HEADER_MAX];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::syscall(libc::SYS_pread64, fd, buf.as_mut_ptr(), buf.len(), 0) };
    buf.truncate(usize::try_from(n).ok()?);
    let text = String::from_utf8(buf).ok()?;
    let mut lines = text.splitn(3, '\n');
    if lines.next()? != HEADER_MAGIC {
        return None;
    }
    let flags = lines.next()?.parse().ok()?;
    Some((flags, lines.next()?.to_string()))
}

pub fn position(fd: i32) -> Result<u64> {
    // SAFETY: lseek has no memory arguments.
    Ok(check(unsafe { libc::syscall(libc::SYS_lseek, fd, 0, libc::SEEK_CUR) }, "lseek")? as u64)
}

pub fn set_position(fd: i32, pos: u64) -> Result<()> {
    let pos = i64::try_from(pos).map_err(|_| Error::new(libc::EOVERFLOW, "file position beyond the largest off_t"))?;
    // SAFETY: lseek has no memory arguments.
    check(unsafe { libc::syscall(libc::SYS_lseek, fd, pos, libc::SEEK_SET) }, "lseek").map(drop)
}

/// The status flags (O_APPEND, O_NONBLOCK, ...) the program set with open or F_SETFL.
pub fn status_flags(fd: i32) -> Result<i32> {
    // SAFETY: F_GETFL has no memory arguments.
    Ok(check(unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) }, "F_GETFL")? as i32)
}

fn set_status_flags(fd: i32, flags: i32) -> Result<()> {
    // SAFETY: F_SETFL has no memory arguments.
    check(unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_SETFL, flags) }, "F_SETFL").map(drop)
}

pub fn close(fd: i32) {
    // SAFETY: closing a descriptor this module created.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placeholder_records_its_file_and_keeps_the_position() {
        let fd = create("/ckpt/a b", libc::O_WRONLY | libc::O_APPEND).unwrap();
        assert_eq!(describe(fd), Some((libc::O_WRONLY | libc::O_APPEND, "/ckpt/a b".to_string())));
        assert_eq!(position(fd).unwrap(), 0, "recording the file moves no position");
        set_position(fd, 5 << 40).unwrap();
        assert_eq!(position(fd).unwrap(), 5 << 40);
        assert_ne!(status_flags(fd).unwrap() & libc::O_APPEND, 0);
        // SAFETY: plain descriptor calls.
        let dup = unsafe { libc::dup(fd) };
        assert_eq!(position(dup).unwrap(), 5 << 40, "dups share the position");
        close(dup);
        close(fd);
        assert!(describe(fd).is_none());
        let cloexec = create("/x", libc::O_RDONLY | libc::O_CLOEXEC).unwrap();
        // SAFETY: plain descriptor call.
        assert_ne!(unsafe { libc::fcntl(cloexec, libc::F_GETFD) } & libc::FD_CLOEXEC, 0);
        close(cloexec);
    }

    #[test]
    fn other_descriptors_are_not_placeholders() {
        let file = tempfile::tempfile().unwrap();
        use std::os::fd::AsRawFd;
        assert!(describe(file.as_raw_fd()).is_none());
        assert!(describe(-1).is_none());
    }
}
