//! Errors carried on the wire are Linux errno values, so that an
//! application sees exactly what a local file system would return.

use std::fmt;

/// A Linux errno value. `0` is never an `Errno`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EPROTO: Errno = Errno(libc::EPROTO);
    pub const EMSGSIZE: Errno = Errno(libc::EMSGSIZE);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const ENOTCONN: Errno = Errno(libc::ENOTCONN);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const EROFS: Errno = Errno(libc::EROFS);

    /// The errno of an I/O error, `EIO` when it carries none.
    pub fn from_io(e: &std::io::Error) -> Errno {
        match e.raw_os_error() {
            Some(code) if code != 0 => Errno(code),
            _ => Errno::EIO,
        }
    }

    pub fn name(self) -> String {
        std::io::Error::from_raw_os_error(self.0).to_string()
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Errno({}: {})", self.0, self.name())
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl std::error::Error for Errno {}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Errno {
        Errno::from_io(&e)
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}
