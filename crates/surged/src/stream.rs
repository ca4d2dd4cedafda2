//! A client's byte stream, TCP or Unix (the node-local data path's
//! socket): the server serves both with one connection handler, since the
//! protocol is the same; only a Unix stream carries descriptors
//! ([`Stream::send_with_fds`]).

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(timeout),
            Stream::Unix(s) => s.set_write_timeout(timeout),
        }
    }

    /// Sends small frames at once (TCP; a Unix stream never delays them).
    pub fn set_nodelay(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nodelay(true),
            Stream::Unix(_) => Ok(()),
        }
    }

    /// Reads what has arrived into `buf` without taking it off the stream.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        nix::sys::socket::recv(self.as_raw_fd(), buf, nix::sys::socket::MsgFlags::MSG_PEEK).map_err(io::Error::from)
    }

    /// Who is at the other end, for the log.
    pub fn peer(&self) -> String {
        match self {
            Stream::Tcp(s) => s.peer_addr().map_or_else(|_| "an unknown peer".to_string(), |a| a.to_string()),
            Stream::Unix(_) => "a local client".to_string(),
        }
    }

    /// Writes `frame` whole, its first bytes carrying `fds` (SCM_RIGHTS);
    /// only a Unix stream can.
    pub fn send_with_fds(&self, frame: &[u8], fds: &[RawFd]) -> io::Result<()> {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
        let Stream::Unix(stream) = self else {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        };
        let cmsgs = [ControlMessage::ScmRights(fds)];
        let sent =
            sendmsg::<UnixAddr>(stream.as_raw_fd(), &[IoSlice::new(frame)], &cmsgs, MsgFlags::MSG_NOSIGNAL, None)
                .map_err(io::Error::from)?;
        (&*stream).write_all(&frame[sent..])
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, Stream::Unix(_))
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).read(buf),
            Stream::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Unix(s) => (&*s).write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write_vectored(bufs),
            Stream::Unix(s) => (&*s).write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
