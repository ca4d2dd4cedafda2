//! Private directories and files: where Surge keeps a user's objects,
//! namespace, logs and cluster files. The default buffer lives in a
//! world-writable directory (`/dev/shm`), so another local user could
//! create it first and swap object files, or plant a symlink where a log is
//! written. Every directory that holds such files is therefore created 0700
//! and refused when someone else owns it or can write to it, and the files
//! are created 0600 without following a symlink. A directory anyone may
//! create names in (sticky and world-writable, as `/tmp` and `/dev/shm`) is
//! refused outright: files of Surge's belong in a directory of their own
//! inside it. A file found at a private file's name is used only when it is
//! a regular file of this user's with no other link, so nothing another user
//! planted there (a link, a FIFO, a hard link to a file of root's) is written.

use crate::raw;
use crate::raw::Stat;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a directory cannot be trusted with a user's files.
#[derive(Debug)]
pub enum PrivateDirError {
    /// It could not be created or examined.
    Io { what: String, path: PathBuf, error: io::Error },
    /// It is not a directory.
    NotADirectory { what: String, path: PathBuf },
    /// Someone else owns it, can write to it, or owns the symlink to it.
    Unsafe { what: String, path: PathBuf, owner: u32, mode: u32, why: &'static str },
    /// Any user may create names in it (sticky and world-writable).
    Shared { what: String, path: PathBuf, mode: u32 },
}

impl fmt::Display for PrivateDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrivateDirError::Io { what, path, error } => write!(f, "cannot use {what} {}: {error}", path.display()),
            PrivateDirError::NotADirectory { what, path } => {
                write!(f, "{what} {} is not a directory", path.display())
            }
            PrivateDirError::Unsafe { what, path, owner, mode, why } => write!(
                f,
                "refusing {what} {} (owner uid {owner}, mode {mode:03o}): {why}, so another user could \
                 replace its files; remove it (if it is yours: `chmod 700 {}`) or choose another directory",
                path.display(),
                path.display()
            ),
            PrivateDirError::Shared { what, path, mode } => write!(
                f,
                "refusing {what} {} (mode {mode:04o}): it is a shared directory where any user may create \
                 names, so another user could plant links or files there; use a directory of your own \
                 (such as {}/surge-$(id -u)/)",
                path.display(),
                path.display()
            ),
        }
    }
}

impl std::error::Error for PrivateDirError {}

/// Creates `dir` (and missing parents) with mode 0700 if it does not exist,
/// then checks that it is ours alone: owned by this user, not writable by
/// group or others, and, if `dir` itself is a symlink, the link owned by
/// this user or root (a link another user owns can be re-pointed at will).
/// `what` names the directory in the error ("buffer directory").
/// The interposer makes its lock directories inside applications: raw calls (`raw`).
pub fn private_dir(dir: &Path, what: &str) -> Result<(), PrivateDirError> {
    let io_error = |error| PrivateDirError::Io { what: what.to_string(), path: dir.to_path_buf(), error };
    raw::create_dir_all(dir, 0o700).map_err(io_error)?;
    let me = current_uid();
    let unsafe_dir = |st: &Stat, why| PrivateDirError::Unsafe {
        what: what.to_string(),
        path: dir.to_path_buf(),
        owner: st.st_uid,
        mode: st.st_mode & 0o7777,
        why,
    };
    let link = raw::lstat(dir).map_err(io_error)?;
    if link.st_mode & libc::S_IFMT == libc::S_IFLNK && link.st_uid != me && link.st_uid != 0 {
        return Err(unsafe_dir(&link, "it is a symbolic link another user owns"));
    }
    let st = raw::stat(dir).map_err(io_error)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(PrivateDirError::NotADirectory { what: what.to_string(), path: dir.to_path_buf() });
    }
    if st.st_mode & (libc::S_ISVTX | 0o002) == libc::S_ISVTX | 0o002 {
        return Err(PrivateDirError::Shared {
            what: what.to_string(),
            path: dir.to_path_buf(),
            mode: st.st_mode & 0o7777,
        });
    }
    if st.st_uid != me {
        return Err(unsafe_dir(&st, "another user owns it"));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(unsafe_dir(&st, "group or others may write to it"));
    }
    Ok(())
}

/// Opens `path` for appending (a log), creating it with mode 0600; an
/// existing file is made 0600 too. A symlink at `path` is refused, not
/// followed.
pub fn open_private_log(path: &Path) -> io::Result<File> {
    open_private(path, OpenOptions::new().append(true).create(true))
}

/// Opens `path` for reading and writing, creating it with mode 0600 (an
/// existing file is made 0600 too); a symlink at `path` is refused.
pub fn open_private_file(path: &Path) -> io::Result<File> {
    open_private(path, OpenOptions::new().read(true).write(true).create(true))
}

fn open_private(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    // O_NONBLOCK: a FIFO planted at the name must not hang the open; it is
    // refused below, and a regular file ignores the flag.
    let file = options
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| refused_symlink(path, e))?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.uid() != current_uid() || meta.nlink() != 1 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a regular file of this user's with a single link (owner uid {}, {} links), \
                 which Surge does not write into; remove it",
                path.display(),
                meta.uid(),
                meta.nlink()
            ),
        ));
    }
    file.set_permissions(fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

/// O_NOFOLLOW fails with ELOOP on a symlink: say so in words.
pub(crate) fn refused_symlink(path: &Path, error: io::Error) -> io::Error {
    if error.raw_os_error() == Some(libc::ELOOP) {
        io::Error::other(format!("{} is a symbolic link, which Surge does not follow; remove it", path.display()))
    } else {
        error
    }
}

fn current_uid() -> u32 {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o777
    }

    #[test]
    fn a_missing_directory_is_created_0700_with_its_parents() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("a/b");
        private_dir(&dir, "buffer directory").unwrap();
        assert_eq!(mode_of(&dir), 0o700);
        assert_eq!(mode_of(&t.path().join("a")), 0o700);
    }

    #[test]
    fn a_directory_others_may_write_to_is_refused_with_its_mode() {
        let t = tempfile::tempdir().unwrap();
        fs::set_permissions(t.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(t.path(), "buffer directory").unwrap_err().to_string();
        assert!(e.contains("mode 777") && e.contains("may write") && e.contains("buffer directory"), "{e}");
    }

    #[test]
    fn a_directory_another_user_owns_is_refused_with_its_owner() {
        if current_uid() != 0 {
            return; // Only root can give a directory away.
        }
        let t = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(t.path(), Some(65534), None).unwrap();
        let e = private_dir(t.path(), "buffer directory").unwrap_err().to_string();
        assert!(e.contains("owner uid 65534") && e.contains("another user owns it"), "{e}");
    }

    #[test]
    fn a_shared_sticky_directory_is_refused_as_shared() {
        let t = tempfile::tempdir().unwrap();
        fs::set_permissions(t.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        let e = private_dir(t.path(), "cluster file directory").unwrap_err().to_string();
        assert!(e.contains("mode 1777") && e.contains("shared directory"), "{e}");
    }

    #[test]
    fn a_hard_link_fifo_or_file_of_another_user_at_a_private_name_is_refused_untouched() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
        let hard = t.path().join("hard.log");
        fs::hard_link(&victim, &hard).unwrap();
        let e = open_private_log(&hard).unwrap_err().to_string();
        assert!(e.contains("2 links"), "{e}");
        let fifo = t.path().join("fifo.log");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o666) }, 0);
        // Refused without hanging: ENXIO with no reader, else as not a regular file.
        assert!(open_private_log(&fifo).is_err());
        assert!(open_private_file(&fifo).unwrap_err().to_string().contains("not a regular file"));
        if current_uid() == 0 {
            let theirs = t.path().join("theirs.log");
            fs::write(&theirs, b"keep").unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let e = open_private_log(&theirs).unwrap_err().to_string();
            assert!(e.contains("owner uid 65534"), "{e}");
            assert_eq!(mode_of(&theirs), 0o644);
        }
        assert_eq!((fs::read(&victim).unwrap(), mode_of(&victim)), (b"keep".to_vec(), 0o644));
    }

    #[test]
    fn files_are_created_0600_and_symlinks_are_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let log = t.path().join("surged.log");
        open_private_log(&log).unwrap();
        assert_eq!(mode_of(&log), 0o600);
        let loose = t.path().join("namespace.redb");
        fs::write(&loose, b"").unwrap();
        fs::set_permissions(&loose, fs::Permissions::from_mode(0o644)).unwrap();
        open_private_file(&loose).unwrap();
        assert_eq!(mode_of(&loose), 0o600);
        let target = t.path().join("victim");
        fs::write(&target, b"keep").unwrap();
        let link = t.path().join("linked.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = open_private_log(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(fs::read(&target).unwrap(), b"keep");
    }
}
