//! Private directories and files: where Surge keeps a user's objects,
//! namespace, logs and cluster files. The default buffer lives in a
//! world-writable directory (`/dev/shm`), so another local user could
//! create it first and swap object files, or plant a symlink where a log is
//! written. Every directory that holds such files is therefore created 0700
//! and refused when someone else owns it or can write to it, and the files
//! are created 0600 without following a symlink.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
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
        }
    }
}

impl std::error::Error for PrivateDirError {}

/// Creates `dir` (and missing parents) with mode 0700 if it does not exist,
/// then checks that it is ours alone: owned by this user, not writable by
/// group or others, and, if `dir` itself is a symlink, the link owned by
/// this user or root (a link another user owns can be re-pointed at will).
/// `what` names the directory in the error ("buffer directory").
pub fn private_dir(dir: &Path, what: &str) -> Result<(), PrivateDirError> {
    let io_error = |error| PrivateDirError::Io { what: what.to_string(), path: dir.to_path_buf(), error };
    DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io_error)?;
    let me = current_uid();
    let unsafe_dir = |meta: &fs::Metadata, why| PrivateDirError::Unsafe {
        what: what.to_string(),
        path: dir.to_path_buf(),
        owner: meta.uid(),
        mode: meta.mode() & 0o7777,
        why,
    };
    let link = fs::symlink_metadata(dir).map_err(io_error)?;
    if link.file_type().is_symlink() && link.uid() != me && link.uid() != 0 {
        return Err(unsafe_dir(&link, "it is a symbolic link another user owns"));
    }
    let meta = fs::metadata(dir).map_err(io_error)?;
    if !meta.is_dir() {
        return Err(PrivateDirError::NotADirectory { what: what.to_string(), path: dir.to_path_buf() });
    }
    if meta.uid() != me {
        return Err(unsafe_dir(&meta, "another user owns it"));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_dir(&meta, "group or others may write to it"));
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
    let file = options.mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path).map_err(|e| refused_symlink(path, e))?;
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
