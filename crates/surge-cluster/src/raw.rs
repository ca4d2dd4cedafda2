//! Surge's own files through raw system calls (rustix's linux_raw backend),
//! never through libc. Surge code runs inside applications (the interposer
//! and the client library it loads): the cluster file and secret it reads,
//! the job profile, writers journal and lock files it writes, are not the
//! application's I/O. Libraries interposed on libc's calls see none of
//! these calls: a profiler preloaded with the job (Darshan) does not count
//! them as the application's files, and Surge's own interposer does not
//! route them.

use rustix::fs::Mode;
pub use rustix::fs::{OFlags, Stat};
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Opens `path` with `flags` (O_CLOEXEC added), creating it with `mode` if
/// `flags` asks.
pub fn open(path: &Path, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(path, flags | OFlags::CLOEXEC, Mode::from_raw_mode(mode))?)
}

/// The whole of what `fd` reads from its position to the end.
pub fn read_all(fd: &OwnedFd) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match rustix::io::read(fd, &mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The text of file `path`.
pub fn read_to_string(path: &Path) -> io::Result<String> {
    let bytes = read_all(&open(path, OFlags::RDONLY, 0)?)?;
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Writes all of `bytes` to `fd`.
pub fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match rustix::io::write(fd, bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Appends `bytes` to `path` (created with `mode` when missing) in one
/// write where the kernel takes it whole, so that lines that processes
/// append at once stay whole.
pub fn append(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_all(&open(path, OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE, mode)?, bytes)
}

/// Creates directory `path` and its missing parents with `mode`.
pub fn create_dir_all(path: &Path, mode: u32) -> io::Result<()> {
    match rustix::fs::mkdir(path, Mode::from_raw_mode(mode)) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) if stat(path)?.st_mode & libc::S_IFMT == libc::S_IFDIR => Ok(()),
        Err(rustix::io::Errno::NOENT) => match path.parent() {
            Some(parent) if parent != path && !parent.as_os_str().is_empty() => {
                create_dir_all(parent, mode)?;
                create_dir_all(path, mode)
            }
            _ => Err(rustix::io::Errno::NOENT.into()),
        },
        Err(e) => Err(e.into()),
    }
}

/// stat(2) of `path`, following links.
pub fn stat(path: &Path) -> io::Result<Stat> {
    Ok(rustix::fs::stat(path)?)
}

/// lstat(2) of `path`: a link itself.
pub fn lstat(path: &Path) -> io::Result<Stat> {
    Ok(rustix::fs::lstat(path)?)
}

/// fstat(2) of `fd`.
pub fn fstat(fd: &OwnedFd) -> io::Result<Stat> {
    Ok(rustix::fs::fstat(fd)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_lines_follow_each_other_and_read_back_whole() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("a/b/journal");
        create_dir_all(file.parent().unwrap(), 0o700).unwrap();
        create_dir_all(file.parent().unwrap(), 0o700).unwrap(); // already there: fine
        append(&file, b"one\n", 0o600).unwrap();
        append(&file, b"two\n", 0o600).unwrap();
        assert_eq!(read_to_string(&file).unwrap(), "one\ntwo\n");
        assert_eq!(stat(&file).unwrap().st_mode & 0o777, 0o600);
        assert_eq!(stat(file.parent().unwrap()).unwrap().st_mode & 0o777, 0o700);
    }

    #[test]
    fn errors_keep_their_kind() {
        let t = tempfile::tempdir().unwrap();
        let missing = read_to_string(&t.path().join("missing")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        std::fs::write(t.path().join("file"), "x").unwrap();
        let under_a_file = create_dir_all(&t.path().join("file/sub"), 0o700).unwrap_err();
        assert_eq!(under_a_file.raw_os_error(), Some(libc::ENOTDIR));
    }
}
