//! Placeholder descriptors. Every Surge descriptor is backed by a real
//! kernel descriptor (an empty memfd named `surge-fd`), so the kernel hands
//! out fd numbers, and dup, fork, exec and close-on-exec work as they do for
//! any file. The memfd's own file position is the Surge file's position: the
//! kernel shares it between dups and across fork exactly as POSIX says. Its
//! content (never its position) records which Surge file it stands for, so
//! a program started by exec finds its inherited Surge descriptors again.
//!
//! Data that reaches the kernel instead of the interposer (glibc's internal
//! writes to an inherited stdout, a statically linked program, a raw system
//! call) must fail, never vanish: the record is sealed (F_SEAL_WRITE,
//! F_SEAL_GROW, F_SEAL_SHRINK, then F_SEAL_SEAL), so write, ftruncate and
//! fallocate fail with EPERM, and the descriptor handed out is a write-only
//! reopening of the memfd, so read fails with EBADF (and mmap with EACCES).
//! The record is read back through a read-only reopening of its own.
//! Locks are not taken on placeholders, which no other process shares, but
//! on the file's lock file (`locks`).
//!
//! Only raw system calls touch placeholders: the libc functions of the same
//! names are the interposer's own entry points.

use surge_client::{BufferFile, Error, Layout, Result};

/// The memfd name, seen as `/memfd:surge-fd (deleted)` in /proc/self/fd.
pub const NAME: &str = "surge-fd";
const HEADER_MAGIC: &str = "surge-fd 2";
/// Longest header read back: magic, flags and a path.
const HEADER_MAX: usize = 8192;
/// Seals every placeholder carries: its record never changes.
const SEALS: i32 = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
/// The open flags a placeholder keeps as its status flags (F_GETFL shows
/// them; F_SETFL changes them later).
const STATUS_FLAGS: i32 = libc::O_APPEND | libc::O_NONBLOCK;

fn check(ret: libc::c_long, what: &str) -> Result<libc::c_long> {
    if ret < 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        return Err(Error::new(errno, format!("{what} of a Surge placeholder descriptor failed")));
    }
    Ok(ret)
}

/// `/proc/self/fd/<fd>`, NUL-terminated.
fn proc_path(fd: i32) -> std::ffi::CString {
    std::ffi::CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a number")
}

/// A new descriptor for the file behind `fd`, opened anew with `flags`.
fn reopen(fd: i32, flags: i32) -> libc::c_long {
    let path = proc_path(fd);
    // SAFETY: a NUL-terminated path; no mode is needed without O_CREAT.
    unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), flags | libc::O_NOCTTY) }
}

/// What a placeholder stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The open(2) flags it was opened with.
    pub flags: i32,
    /// The buffer file it was opened on; None for a directory or a file on
    /// the PFS alone. A program started by exec opens `path` again when it
    /// still leads there, else this file by its objects.
    pub file: Option<BufferFile>,
    /// Its Surge path.
    pub path: String,
}

/// A new placeholder for the Surge file `record` names (its flags decide
/// close-on-exec and the status flags O_APPEND and O_NONBLOCK, as for any
/// descriptor). Like open, it takes the lowest free descriptor.
pub fn create(record: &Record) -> Result<i32> {
    let Record { flags, file, path } = record;
    let flags = *flags;
    let file = match file {
        Some(BufferFile { ino, layout, mode }) => {
            format!("{ino} {} {} {} {mode}", layout.stripe_count, layout.stripe_size, layout.first)
        }
        None => "-".to_string(),
    };
    let name = std::ffi::CString::new(NAME).expect("no NUL in the name");
    // Close-on-exec until it is done, so no exec in another thread takes a
    // writable copy along.
    let memfd_flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: a NUL-terminated name and valid flags.
    let memfd = unsafe { libc::syscall(libc::SYS_memfd_create, name.as_ptr(), memfd_flags) };
    let fd = check(memfd, "memfd_create")? as i32;
    let handed_out = write_record(fd, &format!("{HEADER_MAGIC}\n{flags}\n{file}\n{path}")).and_then(|()| {
        let access = libc::O_WRONLY | libc::O_CLOEXEC | (flags & STATUS_FLAGS);
        let writer = check(reopen(fd, access), "reopening (through /proc/self/fd)")? as i32;
        // The write-only descriptor takes the memfd's number, the lowest
        // free one when it was created, and so closes the memfd.
        // SAFETY: dup3 has no memory arguments; both descriptors are this module's.
        let moved = unsafe { libc::syscall(libc::SYS_dup3, writer, fd, flags & libc::O_CLOEXEC) };
        close(writer);
        check(moved, "dup3").map(|_| fd)
    });
    if handed_out.is_err() {
        close(fd);
    }
    handed_out
}

/// Writes `header` into the new memfd `fd` and seals it for good.
fn write_record(fd: i32, header: &str) -> Result<()> {
    // SAFETY: the header buffer is valid for its length.
    let wrote = unsafe { libc::syscall(libc::SYS_pwrite64, fd, header.as_ptr(), header.len(), 0) };
    if check(wrote, "recording the file in")? as usize != header.len() {
        return Err(Error::new(libc::EIO, "recording the file in a Surge placeholder descriptor came up short"));
    }
    // SAFETY: F_ADD_SEALS has no memory arguments.
    check(unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_ADD_SEALS, SEALS) }, "sealing").map(drop)
}

/// What a placeholder stands for; `None` when `fd` is not a placeholder.
pub fn describe(fd: i32) -> Option<Record> {
    // Only sealed memfds can be placeholders. Asking first also keeps the
    // reopening below away from FIFOs, terminals and devices.
    // SAFETY: F_GET_SEALS has no memory arguments.
    let seals = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GET_SEALS) };
    if seals < 0 || seals as i32 & SEALS != SEALS {
        return None;
    }
    // The placeholder itself is write-only: read the record through a
    // read-only opening of the same memfd.
    let reader = reopen(fd, libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK);
    let reader = i32::try_from(reader).ok().filter(|r| *r >= 0)?;
    let mut buf = vec![0u8; HEADER_MAX];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::syscall(libc::SYS_pread64, reader, buf.as_mut_ptr(), buf.len(), 0) };
    close(reader);
    buf.truncate(usize::try_from(n).ok()?);
    let text = String::from_utf8(buf).ok()?;
    let mut lines = text.splitn(4, '\n');
    if lines.next()? != HEADER_MAGIC {
        return None;
    }
    let flags = lines.next()?.parse().ok()?;
    let file = match lines.next()? {
        "-" => None,
        numbers => {
            let n: Vec<u64> = numbers.split(' ').map(str::parse).collect::<std::result::Result<_, _>>().ok()?;
            let [ino, stripe_count, stripe_size, first, mode] = n[..] else { return None };
            let layout =
                Layout { stripe_count: stripe_count.try_into().ok()?, stripe_size, first: first.try_into().ok()? };
            Some(BufferFile { ino, layout, mode: mode.try_into().ok()? })
        }
    };
    Some(Record { flags, file, path: lines.next()?.to_string() })
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

pub fn close(fd: i32) {
    // SAFETY: closing a descriptor this module created.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(path: &str, flags: i32) -> Record {
        let layout = Layout { stripe_count: 2, stripe_size: 1 << 20, first: 1 };
        Record { flags, file: Some(BufferFile { ino: 1 << 62, layout, mode: 0o640 }), path: path.to_string() }
    }

    #[test]
    fn a_placeholder_records_its_file_and_keeps_the_position() {
        let fd = create(&rec("/ckpt/a b", libc::O_WRONLY | libc::O_APPEND)).unwrap();
        assert_eq!(describe(fd), Some(rec("/ckpt/a b", libc::O_WRONLY | libc::O_APPEND)));
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
        let unnamed = Record { flags: libc::O_RDONLY, file: None, path: "/dir".to_string() };
        let fd = create(&unnamed).unwrap();
        assert_eq!(describe(fd), Some(unnamed), "a directory or a PFS file records no buffer file");
        close(fd);
        let cloexec = create(&rec("/x", libc::O_RDONLY | libc::O_CLOEXEC)).unwrap();
        // SAFETY: plain descriptor call.
        assert_ne!(unsafe { libc::fcntl(cloexec, libc::F_GETFD) } & libc::FD_CLOEXEC, 0);
        close(cloexec);
    }

    fn errno_of(ret: isize) -> i32 {
        assert_eq!(ret, -1, "the call should have failed");
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }

    #[test]
    fn a_kernel_write_on_a_placeholder_fails_and_the_record_stays() {
        let fd = create(&rec("/ckpt/out", libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)).unwrap();
        let data = b"lost?";
        let iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
        // SAFETY: the buffers are valid for their lengths.
        unsafe {
            assert_eq!(errno_of(libc::write(fd, data.as_ptr().cast(), data.len())), libc::EPERM);
            assert_eq!(errno_of(libc::pwrite(fd, data.as_ptr().cast(), data.len(), 0)), libc::EPERM);
            assert_eq!(errno_of(libc::pwrite(fd, data.as_ptr().cast(), data.len(), 1 << 20)), libc::EPERM);
            assert_eq!(errno_of(libc::writev(fd, &iov, 1)), libc::EPERM);
            assert_eq!(errno_of(libc::ftruncate(fd, 0) as isize), libc::EPERM);
            assert_eq!(errno_of(libc::fallocate(fd, 0, 0, 4096) as isize), libc::EPERM);
        }
        assert_eq!(position(fd).unwrap(), 0, "a failed write moves no position");
        assert_eq!(describe(fd), Some(rec("/ckpt/out", libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)));
        close(fd);
    }

    #[test]
    fn a_kernel_read_on_a_placeholder_fails_instead_of_returning_the_record() {
        let fd = create(&rec("/ckpt/in", libc::O_RDONLY)).unwrap();
        let mut buf = [0u8; 64];
        // SAFETY: the buffer is valid for its length; mmap's result is only compared.
        unsafe {
            assert_eq!(errno_of(libc::read(fd, buf.as_mut_ptr().cast(), buf.len())), libc::EBADF);
            assert_eq!(errno_of(libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0)), libc::EBADF);
            let map = libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, fd, 0);
            assert_eq!(map, libc::MAP_FAILED, "the record cannot be mapped either");
        }
        assert_eq!(buf, [0u8; 64]);
        assert_eq!(describe(fd), Some(rec("/ckpt/in", libc::O_RDONLY)), "the handler still reads the record");
        close(fd);
    }

    #[test]
    fn the_position_moves_by_seek_set_and_seek_cur_and_is_shared_by_dup_and_fork() {
        let fd = create(&rec("/ckpt/p", libc::O_RDWR)).unwrap();
        // SAFETY: plain descriptor calls; the child makes only system calls before _exit.
        unsafe {
            assert_eq!(libc::lseek(fd, 1 << 40, libc::SEEK_SET), 1 << 40);
            assert_eq!(libc::lseek(fd, -24, libc::SEEK_CUR), (1 << 40) - 24);
            let dup = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0);
            assert_eq!(position(dup).unwrap(), (1 << 40) - 24, "dups share the position");
            set_position(dup, 77).unwrap();
            assert_eq!(position(fd).unwrap(), 77);
            close(dup);
            let child = libc::fork();
            if child == 0 {
                libc::lseek(fd, 4096, libc::SEEK_CUR);
                libc::_exit(0);
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(child, &mut status, 0), child);
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        }
        assert_eq!(position(fd).unwrap(), 77 + 4096, "a forked child moves the parent's position");
        close(fd);
    }

    #[test]
    fn status_flags_close_on_exec_and_the_link_name_are_those_of_any_descriptor() {
        let fd = create(&rec("/ckpt/s", libc::O_WRONLY | libc::O_APPEND | libc::O_NONBLOCK)).unwrap();
        let settable = libc::O_APPEND | libc::O_NONBLOCK;
        assert_eq!(status_flags(fd).unwrap() & settable, settable, "open's status flags are applied");
        // SAFETY: plain descriptor calls.
        unsafe {
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, 0), 0);
            assert_eq!(status_flags(fd).unwrap() & settable, 0);
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK), 0);
            assert_eq!(status_flags(fd).unwrap() & settable, libc::O_NONBLOCK);
            assert_eq!(libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC, 0, "no O_CLOEXEC, no close-on-exec");
        }
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        assert!(link.to_str().unwrap().starts_with("/memfd:surge-fd"), "{link:?}");
        close(fd);

        let cloexec = create(&rec("/ckpt/c", libc::O_RDONLY | libc::O_CLOEXEC)).unwrap();
        // SAFETY: plain descriptor call.
        assert_ne!(unsafe { libc::fcntl(cloexec, libc::F_GETFD) } & libc::FD_CLOEXEC, 0);
        assert_eq!(status_flags(cloexec).unwrap() & settable, 0);
        close(cloexec);
    }

    #[test]
    fn a_placeholder_takes_the_lowest_free_descriptor_like_open() {
        // Other tests open and close descriptors at the same time, so one
        // round may lose its free number to them; every round cannot.
        let took_it = (0..50).any(|_| {
            // SAFETY: plain descriptor calls on descriptors this test opens.
            unsafe {
                let free = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                let above = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                libc::close(free);
                let fd = create(&rec("/ckpt/low", libc::O_RDONLY)).unwrap();
                close(fd);
                libc::close(above);
                fd == free
            }
        });
        assert!(took_it, "a placeholder never took the lowest free descriptor");
    }

    #[test]
    fn other_descriptors_are_not_placeholders() {
        let file = tempfile::tempfile().unwrap();
        use std::os::fd::AsRawFd;
        assert!(describe(file.as_raw_fd()).is_none());
        assert!(describe(-1).is_none());
        // Neither a memfd of someone else's nor a pipe (which describe must
        // never open: that would block).
        let name = std::ffi::CString::new(NAME).unwrap();
        // SAFETY: plain descriptor calls on descriptors this test opens.
        unsafe {
            let unsealed = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC);
            let header = format!("{HEADER_MAGIC}\n0\n/x");
            assert_eq!(libc::write(unsealed, header.as_ptr().cast(), header.len()), header.len() as isize);
            assert!(describe(unsealed).is_none());
            libc::close(unsealed);
            let mut pipe = [0; 2];
            assert_eq!(libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC), 0);
            assert!(describe(pipe[0]).is_none());
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
    }
}
