//! Errors are errno-faithful: every failure carries the Linux errno an
//! application would see from a local file system, plus a message that says
//! what went wrong and, where it helps, what to do about it.

use std::fmt;
use surge_proto::link::{LinkMet, LINK_MET};
use surge_proto::Errno;

#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    errno: i32,
    message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(errno: i32, msg: impl Into<String>) -> Error {
        Error { errno, message: msg.into() }
    }

    pub fn errno(&self) -> i32 {
        self.errno
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The symbolic link a path crossed, when the daemon answered
    /// `LINK_MET` (see `surge_proto::link`): the caller follows it.
    pub fn link_met(&self) -> Option<LinkMet> {
        (self.errno == LINK_MET.0).then(|| LinkMet::parse(&self.message)).flatten()
    }

    /// An error of `errno` whose message is the errno's own description.
    pub(crate) fn from_errno(errno: Errno) -> Error {
        Error::new(errno.0, errno.name())
    }

    /// The same errno with `context` put in front of the message (a
    /// `LINK_MET` message is the link itself, for the caller to follow, and
    /// stays as it is).
    pub(crate) fn context(self, context: impl fmt::Display) -> Error {
        if self.errno == LINK_MET.0 {
            return self;
        }
        Error { errno: self.errno, message: format!("{context}: {}", self.message) }
    }
}

/// The symbolic name of the errno values Surge produces, for messages.
fn errno_symbol(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::EPROTO => "EPROTO",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ESTALE => "ESTALE",
        _ => return None,
    })
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(met) = self.link_met() {
            return write!(f, "the path crosses the symbolic link {} -> {} (LINK_MET)", met.at, met.target);
        }
        f.write_str(&self.message)?;
        match errno_symbol(self.errno) {
            Some(name) => write!(f, " ({name})"),
            None => write!(f, " (errno {})", self.errno),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error {{ errno: {}, message: {:?} }}", self.errno, self.message)
    }
}

impl std::error::Error for Error {}

/// Keeps the raw errno (so `raw_os_error()` works, as for a local file);
/// the message survives only for errors that carry no errno.
impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        if e.errno > 0 {
            std::io::Error::from_raw_os_error(e.errno)
        } else {
            std::io::Error::other(e)
        }
    }
}

impl From<Errno> for Error {
    fn from(e: Errno) -> Error {
        Error::from_errno(e)
    }
}

/// All the values, or the error to report: the first one, except that an
/// ENOSPC anywhere wins (the application must learn it is out of space).
pub(crate) fn first_error<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    let mut values = Vec::with_capacity(results.len());
    let mut error: Option<Error> = None;
    for result in results {
        match result {
            Ok(v) => values.push(v),
            Err(e) => match &error {
                Some(first) if first.errno() == libc::ENOSPC || e.errno() != libc::ENOSPC => {}
                _ => error = Some(e),
            },
        }
    }
    error.map_or(Ok(values), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_errno_and_io_error_keeps_it() {
        let e = Error::new(libc::ENOENT, "no such file /a");
        assert_eq!(e.to_string(), "no such file /a (ENOENT)");
        assert_eq!(Error::new(4242, "odd").to_string(), "odd (errno 4242)");
        let io: std::io::Error = e.clone().into();
        assert_eq!(io.raw_os_error(), Some(libc::ENOENT));
        assert_eq!(e.context("open").message(), "open: no such file /a");
    }

    #[test]
    fn a_link_met_keeps_its_message_for_the_caller_to_follow_and_reads_well() {
        let met = LinkMet { at: "/run/t".into(), target: "../tables".into() };
        let e = Error::new(LINK_MET.0, met.message()).context("open /run/t/x");
        assert_eq!(e.link_met(), Some(met));
        assert_eq!(e.to_string(), "the path crosses the symbolic link /run/t -> ../tables (LINK_MET)");
        assert_eq!(Error::new(libc::ENOENT, met_message()).link_met(), None);
    }

    fn met_message() -> String {
        LinkMet { at: "/a".into(), target: "b".into() }.message()
    }

    #[test]
    fn first_error_prefers_enospc() {
        let e = |n| Error::new(n, "x");
        assert_eq!(first_error(vec![Ok(1), Ok(2)]), Ok(vec![1, 2]));
        assert_eq!(first_error::<()>(vec![Err(e(libc::EIO)), Err(e(libc::ENOENT))]).unwrap_err().errno(), libc::EIO);
        let got = first_error::<()>(vec![Err(e(libc::EIO)), Err(e(libc::ENOSPC)), Err(e(libc::EIO))]);
        assert_eq!(got.unwrap_err().errno(), libc::ENOSPC);
        assert_eq!(first_error(vec![Ok(1), Err(e(libc::EIO))]).unwrap_err().errno(), libc::EIO);
    }
}
