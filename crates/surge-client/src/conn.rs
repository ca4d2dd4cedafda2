//! One authenticated connection to one daemon: TCP, or the daemon's Unix
//! socket when it runs on this node (the node-local data path, which the
//! same protocol serves; see `crate::local`).
//!
//! A connection is used by one caller at a time (the pool hands it out).
//! Any transport failure — error, timeout, EOF, a reply that does not match
//! its request — leaves the byte stream in an unknown state, so the
//! connection marks itself broken and is never reused. Error replies
//! (an errno from the daemon) are complete frames and keep it usable.

use crate::deadline;
use crate::error::{Error, Result};
use crate::job::JobIdentity;
use crate::open_files::OpenFiles;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::mem::ManuallyDrop;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use surge_proto::frame::{self, FrameError, ReplyHeader};
use surge_proto::msg::{HelloReply, WriteReply, MAX_HOLD};
use surge_proto::shards::ino_shard;
use surge_proto::{auth, Encoder, Op, Reply, Request, MAX_FRAME_DEFAULT};

const CLIENT_NAME: &str = concat!("surge-client/", env!("CARGO_PKG_VERSION"));

/// Who we are to every daemon of the cluster.
pub(crate) struct Session {
    pub secret: Vec<u8>,
    pub secret_file: PathBuf,
    pub cluster_id: String,
    pub daemon_count: u32,
    pub job: JobIdentity,
    pub host: String,
    /// Sent in every `Hello`: daemon 0 counts the files this client holds
    /// open under it (with the pid, so a forked child is another client).
    pub instance: u64,
    /// The files this client has open: a new connection to daemon 0
    /// announces those it holds (`Hold`).
    pub open_files: Arc<OpenFiles>,
    /// The namespace's shards (1: daemon 0 keeps it): each shard counts
    /// the handles of its own inodes.
    pub shards: u32,
    pub connect_timeout: Duration,
    pub io_timeout: Duration,
    /// Per daemon index: its Unix socket, when it runs on this node and
    /// the node-local data path is on.
    pub local_sockets: Vec<Option<PathBuf>>,
    /// Failures of requests answered after their call returned (see `Conn::unanswered`).
    pub late_failures: Arc<LateFailures>,
}

/// Failures of requests whose replies were read after the call that sent
/// them returned (node-local commits: `crate::local`), by the file's inode,
/// until that file's next write, fsync or close reports them.
#[derive(Default)]
pub(crate) struct LateFailures(Mutex<HashMap<u64, Error>>);

impl LateFailures {
    fn record(&self, ino: u64, failure: Error) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).entry(ino).or_insert(failure);
    }

    /// The failure recorded for file `ino`, if any, as this call's error (once).
    pub fn take(&self, ino: u64) -> Result<()> {
        match self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&ino) {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }
}

/// A daemon's place in the cluster.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Endpoint {
    pub index: u32,
    pub addr: SocketAddr,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "daemon {} ({})", self.index, self.addr)
    }
}

/// A request sent on a connection whose reply has not been received yet.
#[must_use = "every reply must be received to keep the connection in step"]
pub(crate) struct Pending {
    request_id: u64,
    op: Op,
}

/// A connection's byte stream.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(timeout),
            Stream::Unix(s) => s.set_write_timeout(timeout),
        }
    }

    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl io::Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

pub(crate) struct Conn {
    /// Closed on drop only by the process that dialled (see `Drop`).
    stream: ManuallyDrop<Stream>,
    /// The process that dialled: after fork() a child must not share the
    /// parent's byte streams.
    pid: u32,
    endpoint: Endpoint,
    job_id: u64,
    io_timeout: Duration,
    /// The receive and send timeouts set on the socket now (see [`rearm`]).
    read_armed: Duration,
    write_armed: Duration,
    next_request_id: u64,
    /// Reused for every request's fields and every reply body (never bulk data).
    head: Encoder,
    body: Vec<u8>,
    broken: bool,
    /// Broken because the daemon did not answer in time (it may be stopped
    /// or overloaded, not gone).
    timed_out: bool,
    /// Requests sent whose replies no caller waits for, oldest first, with
    /// the file each concerns (a node-local write's commit: the write
    /// returned once its bytes were in the object file and its checksums
    /// sent, so the next request goes out without another round trip).
    /// Read before the next reply; a failure goes to `late_failures`.
    unanswered: VecDeque<(Pending, u64)>,
    late_failures: Arc<LateFailures>,
}

impl Conn {
    /// Dials `endpoint` and authenticates with the session's secret.
    pub fn dial(endpoint: Endpoint, session: &Session) -> Result<Conn> {
        let unreachable = |e: io::Error| {
            Error::new(libc::EIO, format!("{endpoint} is not reachable: {e}; it may be down (check `surge status`)"))
        };
        let connect_timeout = deadline::time_left(session.connect_timeout).ok_or_else(|| {
            Error::new(libc::EIO, format!("{endpoint}: no time left to connect within {:?}", session.io_timeout))
        })?;
        let local = session.local_sockets.get(endpoint.index as usize).cloned().flatten();
        let stream = match &local {
            Some(path) => Stream::Unix(UnixStream::from(move_high(
                UnixStream::connect(path)
                    .map_err(|e| {
                        Error::new(
                            libc::EIO,
                            format!(
                                "{endpoint}'s node-local socket {} is not reachable: {e}; it may be down \
                                 (check `surge status`; SURGE_LOCAL=0 uses TCP)",
                                path.display()
                            ),
                        )
                    })?
                    .into(),
                high_fd_base(),
            ))),
            None => {
                let stream = TcpStream::connect_timeout(&endpoint.addr, connect_timeout).map_err(unreachable)?;
                let stream = TcpStream::from(move_high(stream.into(), high_fd_base()));
                stream.set_nodelay(true).map_err(unreachable)?;
                Stream::Tcp(stream)
            }
        };
        let io_timeout = session.io_timeout.max(Duration::from_millis(1));
        stream.set_read_timeout(Some(io_timeout)).map_err(unreachable)?;
        stream.set_write_timeout(Some(io_timeout)).map_err(unreachable)?;
        let mut conn = Conn {
            stream: ManuallyDrop::new(stream),
            pid: crate::pid::current(),
            endpoint,
            job_id: session.job.id,
            io_timeout,
            read_armed: io_timeout,
            write_armed: io_timeout,
            next_request_id: 1,
            head: Encoder::new(),
            body: Vec::new(),
            broken: false,
            timed_out: false,
            unanswered: VecDeque::new(),
            late_failures: Arc::clone(&session.late_failures),
        };
        conn.handshake(session)?;
        conn.announce_held(session)?;
        Ok(conn)
    }

    /// On a connection to daemon 0, which counts the handles, announces the
    /// buffer files this client holds open: daemon 0 may have restarted
    /// and lost its count, and would then evict them under the handles.
    /// Announcing them again to a daemon 0 that kept its count changes
    /// nothing (`Hold` raises counts to what it names, no further).
    fn announce_held(&mut self, session: &Session) -> Result<()> {
        if self.endpoint.index >= session.shards {
            return Ok(());
        }
        let mut held = session.open_files.held();
        held.retain(|&ino| ino_shard(ino, session.shards) == self.endpoint.index);
        for inos in held.chunks(MAX_HOLD) {
            self.call::<()>(&Request::Hold { inos: inos.to_vec() })?;
        }
        Ok(())
    }

    fn handshake(&mut self, session: &Session) -> Result<()> {
        let hello: HelloReply = self.call(&Request::Hello {
            client: CLIENT_NAME,
            job_label: &session.job.label,
            pid: crate::pid::current(),
            host: &session.host,
            instance: session.instance,
        })?;
        if hello.cluster_id != session.cluster_id
            || hello.daemon_index != self.endpoint.index
            || hello.daemon_count != session.daemon_count
        {
            return Err(Error::new(
                libc::EIO,
                format!(
                    "{} answers as daemon {} of {} in cluster {}, but the cluster file expects daemon {} of {} \
                     in cluster {}: the cluster file is stale; restart with `surge stop; surge start`",
                    self.endpoint.addr,
                    hello.daemon_index,
                    hello.daemon_count,
                    hello.cluster_id,
                    self.endpoint.index,
                    session.daemon_count,
                    session.cluster_id
                ),
            ));
        }
        let proof = auth::prove(&session.secret, &hello.nonce);
        self.call::<()>(&Request::Auth { proof }).map_err(|e| {
            if e.errno() == libc::EACCES {
                Error::new(
                    libc::EACCES,
                    format!(
                        "{} refused the cluster secret {}: it is not the secret this cluster was started with",
                        self.endpoint,
                        session.secret_file.display()
                    ),
                )
            } else {
                e
            }
        })
    }

    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    pub fn io_timeout(&self) -> Duration {
        self.io_timeout
    }

    /// Reads one piece of an object into `slice`. A daemon may serve less than
    /// asked (its frame limit), so only an empty answer means the object ended.
    pub fn read_piece(&mut self, ino: u64, object_offset: u64, slice: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while done < slice.len() {
            let req = Request::Read { ino, offset: object_offset + done as u64, len: (slice.len() - done) as u32 };
            let n = self.call_read(&req, &mut slice[done..])?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }

    /// Over the daemon's Unix socket (the node-local data path)?
    pub fn is_local(&self) -> bool {
        matches!(*self.stream, Stream::Unix(_))
    }

    /// `call`, for a reply that comes with descriptors (`ObjHandles`):
    /// they travel with its first bytes, taken here by a peek before the
    /// reply is read as any other (close-on-exec, moved out of the way of
    /// the program's own numbers).
    pub fn call_with_fds<R: Reply>(&mut self, req: &Request<'_>) -> Result<(R, Vec<OwnedFd>)> {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
        let pending = self.send(req)?;
        // The descriptors come with this reply's first bytes, not those of a reply before it.
        self.read_unanswered(pending.request_id)?;
        let left = self.time_left()?;
        rearm(&self.stream, &mut self.read_armed, left, Stream::set_read_timeout)
            .map_err(|e| self.frame_failure(FrameError::Io(e)))?;
        let mut first = [0u8; 1];
        let mut space = nix::cmsg_space!([RawFd; 2]);
        let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_CMSG_CLOEXEC;
        let fd = self.stream.as_raw_fd();
        let mut fds = Vec::new();
        let mut iov = [io::IoSliceMut::new(&mut first)];
        let received = recvmsg::<UnixAddr>(fd, &mut iov, Some(&mut space), flags).and_then(|peeked| {
            Ok(peeked
                .cmsgs()?
                .filter_map(|message| match message {
                    ControlMessageOwned::ScmRights(fds) => Some(fds),
                    _ => None,
                })
                .flatten()
                .collect::<Vec<RawFd>>())
        });
        let received = received.map_err(|e| self.frame_failure(FrameError::Io(e.into())))?;
        for fd in received {
            // SAFETY: the kernel just installed this descriptor for us; nothing else owns it.
            fds.push(move_high(unsafe { OwnedFd::from_raw_fd(fd) }, high_fd_base()));
        }
        let reply = self.receive(pending)?;
        Ok((reply, fds))
    }

    /// Sends `req` and decodes its reply.
    pub fn call<R: Reply>(&mut self, req: &Request<'_>) -> Result<R> {
        let pending = self.send(req)?;
        self.receive(pending)
    }

    /// Sends `req` and reads its reply body — raw file data — straight into
    /// `into`; returns the byte count (short where the data ends).
    pub fn call_read(&mut self, req: &Request<'_>, into: &mut [u8]) -> Result<usize> {
        let pending = self.send(req)?;
        self.receive_into(pending, into)
    }

    /// Sends `requests` with up to `window` of them in flight, handing each
    /// reply, in order, to `receive` with the context that came with its
    /// request. After an error reply, what is in flight is still received
    /// (the stream stays in step) but nothing more is sent; the first error
    /// is returned.
    pub fn pipeline<'r, T>(
        &mut self,
        window: usize,
        requests: impl IntoIterator<Item = (Request<'r>, T)>,
        mut receive: impl FnMut(&mut Conn, Pending, T) -> Result<()>,
    ) -> Result<()> {
        let mut in_flight = VecDeque::with_capacity(window);
        let mut first_error = None;
        for (req, context) in requests {
            if in_flight.len() >= window.max(1) {
                let (pending, context) = in_flight.pop_front().expect("the window is full");
                if let Err(e) = receive(self, pending, context) {
                    first_error = Some(e);
                    break;
                }
            }
            match self.send(&req) {
                Ok(pending) => in_flight.push_back((pending, context)),
                Err(e) => {
                    first_error = Some(e);
                    break;
                }
            }
        }
        for (pending, context) in in_flight {
            if self.broken {
                break;
            }
            if let Err(e) = receive(self, pending, context) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Sends `req` for file `ino` without waiting for its reply, a
    /// `WriteReply` (see `unanswered`).
    pub fn send_unanswered(&mut self, req: &Request<'_>, ino: u64) -> Result<()> {
        let pending = self.send(req)?;
        self.unanswered.push_back((pending, ino));
        Ok(())
    }

    /// Reads the replies of the `unanswered` requests sent before request
    /// `before` (all of them with `u64::MAX`); a failure the daemon
    /// answers goes to `late_failures`, a broken stream is this call's.
    pub fn read_unanswered(&mut self, before: u64) -> Result<()> {
        while self.unanswered.front().is_some_and(|(earlier, _)| earlier.request_id < before) {
            let (earlier, ino) = self.unanswered.pop_front().expect("just seen");
            match self.receive::<WriteReply>(earlier) {
                Ok(_) => {}
                Err(e) if self.broken => return Err(e),
                Err(e) => self.late_failures.record(ino, e),
            }
        }
        Ok(())
    }

    pub fn late_failures(&self) -> &LateFailures {
        &self.late_failures
    }

    /// Are replies of `send_unanswered` requests still unread?
    pub fn has_unanswered(&self) -> bool {
        !self.unanswered.is_empty()
    }

    /// Sends a request; its reply must then be received, in sending order.
    pub fn send(&mut self, req: &Request<'_>) -> Result<Pending> {
        if self.broken {
            return Err(self.fail("connection was already broken".to_string()));
        }
        let pending = Pending { request_id: self.next_request_id, op: req.op() };
        self.next_request_id += 1;
        let left = self.time_left()?;
        rearm(&self.stream, &mut self.write_armed, left, Stream::set_write_timeout)
            .map_err(|e| self.frame_failure(FrameError::Io(e)))?;
        self.head.buf.clear();
        let bulk = req.encode(&mut self.head);
        let mut socket = NoSigpipe(self.stream.as_raw_fd());
        let job = crate::job::charged().unwrap_or(self.job_id);
        let (op, id, io_size) = (pending.op as u8, pending.request_id, req.io_size());
        frame::write_request(&mut socket, op, id, job, io_size, &self.head.buf, bulk)
            .map_err(|e| self.frame_failure(FrameError::Io(e)))?;
        Ok(pending)
    }

    /// Receives and decodes the reply to `pending`.
    pub fn receive<R: Reply>(&mut self, pending: Pending) -> Result<R> {
        let hdr = self.receive_header(&pending)?;
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        body.resize(hdr.body_len as usize, 0);
        let decoded = match frame::read_reply_body(&mut *self.stream, &hdr, &mut body) {
            Ok(()) => {
                R::from_body(&body).map_err(|e| self.fail(format!("sent a malformed {:?} reply: {e}", pending.op)))
            }
            Err(e) => Err(self.frame_failure(e)),
        };
        self.body = body;
        decoded
    }

    /// Receives the reply to `pending` — raw file data — straight into
    /// `into`; returns the byte count (short where the data ends).
    pub fn receive_into(&mut self, pending: Pending, into: &mut [u8]) -> Result<usize> {
        let hdr = self.receive_header(&pending)?;
        let n = hdr.body_len as usize;
        if n > into.len() {
            return Err(self.fail(format!("answered a read of {} bytes with {n} bytes", into.len())));
        }
        frame::read_reply_body(&mut *self.stream, &hdr, &mut into[..n]).map_err(|e| self.frame_failure(e))?;
        Ok(n)
    }

    /// Reads the header of the reply to `pending`; an error reply becomes
    /// the daemon's errno and message.
    fn receive_header(&mut self, pending: &Pending) -> Result<ReplyHeader> {
        if self.broken {
            return Err(self.fail("connection was already broken".to_string()));
        }
        self.read_unanswered(pending.request_id)?;
        let left = self.time_left()?;
        rearm(&self.stream, &mut self.read_armed, left, Stream::set_read_timeout)
            .map_err(|e| self.frame_failure(FrameError::Io(e)))?;
        let hdr = frame::read_reply_header(&mut *self.stream, MAX_FRAME_DEFAULT).map_err(|e| self.frame_failure(e))?;
        if hdr.request_id == 0 && hdr.op == 0 && hdr.status != 0 {
            return Err(self.refusal(&hdr));
        }
        if hdr.request_id != pending.request_id || hdr.op != pending.op as u8 {
            return Err(self.fail(format!(
                "answered request {} ({:?}) with a reply to request {} (op {:#04x})",
                pending.request_id, pending.op, hdr.request_id, hdr.op
            )));
        }
        deadline::progressed();
        if hdr.status != 0 {
            return Err(self.error_reply(&hdr));
        }
        Ok(hdr)
    }

    fn error_reply(&mut self, hdr: &ReplyHeader) -> Error {
        self.body.clear();
        self.body.resize(hdr.body_len as usize, 0);
        match frame::read_reply_body(&mut *self.stream, hdr, &mut self.body) {
            Ok(()) => Error::new(hdr.status, String::from_utf8_lossy(&self.body).into_owned()),
            Err(e) => self.frame_failure(e),
        }
    }

    /// How long the next send or receive may wait: the I/O timeout, cut to
    /// what the operation's deadline leaves; an error once it has passed.
    fn time_left(&mut self) -> Result<Duration> {
        deadline::time_left(self.io_timeout).ok_or_else(|| {
            self.timed_out = true;
            self.fail(format!("did not answer within {:?}", self.io_timeout))
        })
    }

    /// The daemon ended the connection rather than answer (too many
    /// connections, a timeout; docs/protocol.md): its errno and reason.
    fn refusal(&mut self, hdr: &ReplyHeader) -> Error {
        let error = self.error_reply(hdr);
        if self.broken {
            return error;
        }
        self.broken = true;
        Error::new(error.errno(), format!("{} (at {})", error.message(), self.endpoint.addr))
    }

    fn frame_failure(&mut self, e: FrameError) -> Error {
        let why = match &e {
            FrameError::Closed => "closed the connection".to_string(),
            FrameError::Io(io) if matches!(io.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                self.timed_out = true;
                format!("did not answer within {:?}", self.io_timeout)
            }
            FrameError::Io(io) if io.kind() == io::ErrorKind::UnexpectedEof => {
                "closed the connection in the middle of a reply".to_string()
            }
            FrameError::Io(io) => format!("connection failed: {io}"),
            other => format!("sent a bad reply: {other}"),
        };
        self.fail(why)
    }

    /// Marks the connection unusable and builds the EIO the caller reports.
    fn fail(&mut self, why: String) -> Error {
        self.broken = true;
        Error::new(libc::EIO, format!("{} {why}; it may be down (check `surge status`)", self.endpoint))
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// Can this idle connection carry another request? False once broken,
    /// in a forked child, or when the daemon has closed it (it exited or was
    /// restarted) — a non-blocking peek sees the EOF without consuming anything.
    pub fn is_usable(&self) -> bool {
        if self.broken || self.pid != crate::pid::current() {
            return false;
        }
        if !self.unanswered.is_empty() {
            // The bytes there are its replies: an EOF shows at the next read.
            return true;
        }
        let mut byte = 0u8;
        // SAFETY: a valid socket descriptor and a one-byte buffer we own.
        let n = unsafe {
            libc::recv(self.stream.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT)
        };
        // Only "nothing to read yet" means healthy: EOF, an error or stray
        // bytes between replies all mean the connection is finished.
        n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
    }

    /// Takes this connection out of service (e.g. its daemon is shutting down).
    pub fn retire(&mut self) {
        self.broken = true;
    }
}

impl AsRawFd for Conn {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
    }
}

impl Drop for Conn {
    /// A forked child does not close the socket it inherited: a program may
    /// have closed it already (Open MPI closes every descriptor between fork
    /// and exec) and the number may name another file by now. The socket is
    /// close-on-exec, and the parent's copy keeps the connection open anyway.
    fn drop(&mut self) {
        if self.pid == crate::pid::current() {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.stream) }
        }
    }
}

/// The lowest descriptor number the library's sockets move to: out of the
/// way of the numbers programs pick themselves (a shell's `exec 3>file`,
/// `dup2(x, 3)`, bash's 255), and above FD_SETSIZE (1024) when the limit
/// allows, so the gap the sockets leave does not push a select() user's
/// descriptors past it. It stays close to the bottom of what is open
/// rather than at the top of a large limit: the kernel sizes a process's
/// descriptor table (and copies it at every fork) up to its highest open
/// descriptor, 8 MiB for a limit of 2^20.
fn high_fd_base() -> i32 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid rlimit to fill in.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 { limit.rlim_cur } else { 1024 };
    fd_base_for(soft)
}

/// [`high_fd_base`] for the soft RLIMIT_NOFILE `soft`: the soft limit
/// minus 256, at least 512 and at most 4096, and never at or above the
/// limit itself.
fn fd_base_for(soft: libc::rlim_t) -> i32 {
    let soft = i64::try_from(soft).unwrap_or(i64::MAX).min(i64::from(i32::MAX));
    let base = (soft - 256).clamp(512, 4096).min(soft - 1).max(0);
    i32::try_from(base).expect("at most 4096")
}

/// `fd` moved to the lowest free descriptor at or above `base`, close on
/// exec, so a program's own dup2 onto a low number never lands on it; the
/// descriptor as it was when no such descriptor is free.
fn move_high(fd: OwnedFd, base: i32) -> OwnedFd {
    let raw = fd.as_raw_fd();
    if raw >= base {
        return fd;
    }
    // SAFETY: F_DUPFD_CLOEXEC has no memory arguments.
    let high = unsafe { libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, base) };
    if high < 0 {
        return fd;
    }
    // Closes the low descriptor.
    drop(fd);
    // SAFETY: `high` is a new descriptor for the same file, and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(high) }
}

/// Sets a socket timeout (`set`: the receive or the send one) to `left`,
/// the time the operation has left, unless the one `armed` is within
/// [`REARM_SLACK`] of it: requests in a row each have nearly the full
/// timeout left, and re-arming it for each cost two `setsockopt` calls per
/// request. A wait then ends at most that share of its time early or late.
fn rearm(
    stream: &Stream,
    armed: &mut Duration,
    left: Duration,
    set: fn(&Stream, Option<Duration>) -> io::Result<()>,
) -> io::Result<()> {
    if armed.abs_diff(left) <= left / REARM_SLACK {
        return Ok(());
    }
    set(stream, Some(left))?;
    *armed = left;
    Ok(())
}

/// How far (1/50, 2%) an armed socket timeout may be from the time left
/// before it is set again.
const REARM_SLACK: u32 = 50;

/// Writes to a socket without raising SIGPIPE when the daemon has gone:
/// the library runs inside applications that keep SIGPIPE's default
/// (terminate), and `TcpStream`'s vectored write is a plain `writev`.
struct NoSigpipe(RawFd);

impl io::Write for NoSigpipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // SAFETY: an all-zero msghdr is valid (no address, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        // IoSlice is guaranteed ABI-compatible with iovec on Unix.
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bufs.len().min(libc::UIO_MAXIOV as usize) as _;
        // SAFETY: msg points at `bufs`, which outlive the call.
        let n = unsafe { libc::sendmsg(self.0, &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::Instant;
    use surge_proto::frame::RequestHeader;
    use surge_proto::Reply;

    const SECRET: &[u8] = b"0123456789abcdef";

    fn session(secret: &[u8], io_timeout: Duration) -> Session {
        Session {
            secret: secret.to_vec(),
            secret_file: PathBuf::from("/run/secret"),
            cluster_id: "c1".into(),
            daemon_count: 1,
            job: JobIdentity { id: 5, label: "5".into() },
            host: "h".into(),
            instance: 1,
            open_files: Arc::new(OpenFiles::default()),
            shards: 1,
            connect_timeout: Duration::from_secs(1),
            io_timeout,
            local_sockets: Vec::new(),
            late_failures: Arc::default(),
        }
    }

    /// A scripted daemon 0 for one connection: it does the real handshake,
    /// then lets `answer` reply to every other request.
    fn fake_daemon(answer: impl Fn(&RequestHeader, &mut TcpStream) + Send + 'static) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_nodelay(true).unwrap();
            let nonce = auth::new_nonce();
            let mut body = Vec::new();
            while let Ok(hdr) = frame::read_request(&mut s, MAX_FRAME_DEFAULT, &mut body) {
                match Op::from_u8(hdr.op) {
                    Some(Op::Hello) => {
                        let hello = HelloReply { nonce, daemon_index: 0, daemon_count: 1, cluster_id: "c1".into() };
                        frame::write_reply(&mut s, hdr.op, hdr.request_id, 0, &hello.to_body(), &[]).unwrap();
                    }
                    Some(Op::Auth) => {
                        let proof = body[..].try_into().unwrap();
                        if auth::verify(SECRET, &nonce, &proof) {
                            frame::write_reply(&mut s, hdr.op, hdr.request_id, 0, &[], &[]).unwrap();
                        } else {
                            frame::write_reply(&mut s, hdr.op, hdr.request_id, libc::EACCES, b"no", &[]).unwrap();
                            return;
                        }
                    }
                    _ => answer(&hdr, &mut s),
                }
            }
        });
        Endpoint { index: 0, addr }
    }

    fn dial(endpoint: Endpoint) -> Conn {
        Conn::dial(endpoint, &session(SECRET, Duration::from_secs(5))).unwrap()
    }

    #[test]
    fn error_replies_keep_the_connection_and_data_lands_in_place() {
        let endpoint = fake_daemon(|hdr, s| match Op::from_u8(hdr.op) {
            Some(Op::Stat) => frame::write_reply(s, hdr.op, hdr.request_id, libc::ENOENT, b"no /x", &[]).unwrap(),
            _ => frame::write_reply(s, hdr.op, hdr.request_id, 0, b"", b"abc").unwrap(),
        });
        let mut conn = dial(endpoint);
        let err = conn.call::<surge_proto::Attr>(&Request::Stat { path: "/x" }).unwrap_err();
        assert_eq!((err.errno(), err.message()), (libc::ENOENT, "no /x"));
        assert!(conn.is_usable());
        let mut buf = [0u8; 8];
        assert_eq!(conn.call_read(&Request::Read { ino: 1, offset: 0, len: 8 }, &mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"abc");
        // A reply larger than the read asked for is a protocol violation.
        let err = conn.call_read(&Request::Read { ino: 1, offset: 0, len: 2 }, &mut buf[..2]).unwrap_err();
        assert_eq!(err.errno(), libc::EIO);
        assert!(conn.is_broken());
    }

    #[test]
    fn a_new_connection_to_daemon_0_announces_the_held_files_before_anything_else() {
        let (first, seen) = std::sync::mpsc::channel();
        let endpoint = fake_daemon(move |hdr, s| {
            let _ = first.send(hdr.op);
            frame::write_reply(s, hdr.op, hdr.request_id, 0, &[], &[]).unwrap();
        });
        let session = session(SECRET, Duration::from_secs(5));
        session.open_files.opened(7, true);
        session.open_files.opened(9, false);
        let mut conn = Conn::dial(endpoint, &session).unwrap();
        conn.call::<()>(&Request::ObjSync { ino: 1 }).unwrap();
        let ops: Vec<u8> = seen.try_iter().collect();
        assert_eq!(ops, [Op::Hold as u8, Op::ObjSync as u8]);
    }

    #[test]
    fn mismatched_reply_breaks_the_connection() {
        let endpoint = fake_daemon(|hdr, s| {
            frame::write_reply(s, hdr.op, hdr.request_id + 7, 0, &[], &[]).unwrap();
        });
        let mut conn = dial(endpoint);
        let err = conn.call::<()>(&Request::ObjSync { ino: 1 }).unwrap_err();
        assert_eq!(err.errno(), libc::EIO);
        assert!(err.message().contains("daemon 0") && err.message().contains("surge status"), "{err}");
        assert!(!conn.is_usable());
    }

    #[test]
    fn a_silent_daemon_times_out_with_eio() {
        let endpoint = fake_daemon(|_, _| std::thread::sleep(Duration::from_secs(3)));
        let mut conn = Conn::dial(endpoint, &session(SECRET, Duration::from_millis(200))).unwrap();
        let started = Instant::now();
        let err = conn.call::<()>(&Request::ObjSync { ino: 1 }).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(err.errno(), libc::EIO);
        assert!(err.message().contains("did not answer"), "{err}");
    }

    #[test]
    fn an_operations_deadline_cuts_the_wait_of_a_connection_armed_with_a_longer_timeout() {
        let served = std::sync::atomic::AtomicUsize::new(0);
        let endpoint = fake_daemon(move |hdr, s| {
            if served.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                frame::write_reply(s, hdr.op, hdr.request_id, 0, &[], &[]).unwrap();
            } else {
                std::thread::sleep(Duration::from_secs(4));
            }
        });
        let mut conn = Conn::dial(endpoint, &session(SECRET, Duration::from_secs(10))).unwrap();
        conn.call::<()>(&Request::ObjSync { ino: 1 }).unwrap();
        let _op = deadline::begin(Duration::from_millis(300));
        let started = Instant::now();
        let err = conn.call::<()>(&Request::ObjSync { ino: 1 }).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2), "waited {:?}", started.elapsed());
        assert!(err.message().contains("did not answer"), "{err}");
    }

    #[test]
    fn a_socket_timeout_is_set_again_only_when_the_time_left_moved_away_from_it() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let stream = Stream::Tcp(tcp.try_clone().unwrap());
        let mut armed = Duration::from_secs(30);
        rearm(&stream, &mut armed, Duration::from_millis(29_900), Stream::set_read_timeout).unwrap();
        assert_eq!(armed, Duration::from_secs(30), "within the slack: left alone");
        rearm(&stream, &mut armed, Duration::from_secs(5), Stream::set_read_timeout).unwrap();
        assert_eq!(armed, Duration::from_secs(5));
        assert_eq!(tcp.read_timeout().unwrap(), Some(Duration::from_secs(5)));
        rearm(&stream, &mut armed, Duration::from_secs(30), Stream::set_read_timeout).unwrap();
        assert_eq!(tcp.read_timeout().unwrap(), Some(Duration::from_secs(30)), "a longer wait is allowed again");
    }

    #[test]
    fn a_closed_connection_is_seen_before_reuse() {
        let endpoint = fake_daemon(|hdr, s| {
            frame::write_reply(s, hdr.op, hdr.request_id, 0, &[], &[]).unwrap();
            s.flush().unwrap();
            s.shutdown(std::net::Shutdown::Both).unwrap();
        });
        let mut conn = dial(endpoint);
        conn.call::<()>(&Request::ObjSync { ino: 1 }).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!conn.is_usable());
    }

    #[test]
    fn wrong_secret_and_unreachable_daemon() {
        let endpoint = fake_daemon(|_, _| {});
        let err = Conn::dial(endpoint, &session(b"fedcba9876543210", Duration::from_secs(5))).err().unwrap();
        assert_eq!(err.errno(), libc::EACCES);
        assert!(err.message().contains("/run/secret"), "{err}");

        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let err =
            Conn::dial(Endpoint { index: 3, addr: port }, &session(SECRET, Duration::from_secs(5))).err().unwrap();
        assert_eq!(err.errno(), libc::EIO);
        assert!(err.message().contains("daemon 3") && err.message().contains("surge status"), "{err}");
    }

    #[test]
    fn a_daemon_that_refuses_the_connection_is_reported_busy_not_as_a_protocol_mismatch() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let why = b"daemon 0 busy: too many connections (limit 2)";
            frame::write_reply(&mut s, 0, 0, libc::EAGAIN, why, &[]).unwrap();
        });
        let err = Conn::dial(Endpoint { index: 0, addr }, &session(SECRET, Duration::from_secs(5))).err().unwrap();
        assert_eq!(err.errno(), libc::EAGAIN, "{err}");
        assert!(err.message().starts_with("daemon 0 busy: too many connections (limit 2)"), "{err}");
    }

    fn fd_flags(fd: i32) -> i32 {
        // SAFETY: F_GETFD has no memory arguments.
        unsafe { libc::fcntl(fd, libc::F_GETFD) }
    }

    #[test]
    fn sockets_to_daemons_sit_high_and_close_on_exec() {
        let base = high_fd_base();
        assert!(base >= 1, "{base}");
        let mut conn = dial(fake_daemon(|hdr, s| frame::write_reply(s, hdr.op, hdr.request_id, 0, &[], &[]).unwrap()));
        let fd = conn.stream.as_raw_fd();
        assert!(fd >= base, "the socket is descriptor {fd}, below {base}");
        assert_ne!(fd_flags(fd) & libc::FD_CLOEXEC, 0, "descriptor {fd} is not close-on-exec");
        conn.call::<()>(&Request::ObjSync { ino: 1 }).unwrap();
        assert!(conn.is_usable(), "the moved socket carries requests");

        // The low descriptor the connect had no longer holds the socket
        // (another test may already have reused its number).
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let low = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let low_fd = low.as_raw_fd();
        let moved = move_high(low.into(), base);
        assert!(moved.as_raw_fd() >= base && fd_flags(moved.as_raw_fd()) & libc::FD_CLOEXEC != 0);
        let inode = |fd: i32| {
            // SAFETY: an all-zero stat is valid, and fstat fills it in.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: a valid stat buffer.
            (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
        };
        assert!(inode(moved.as_raw_fd()).is_some());
        assert_ne!(inode(low_fd), inode(moved.as_raw_fd()), "descriptor {low_fd} still holds the socket");
        // Already high: nothing to do.
        let fd = moved.as_raw_fd();
        assert_eq!(move_high(moved, fd).as_raw_fd(), fd);
    }

    #[test]
    fn the_descriptor_base_follows_the_limit_within_bounds() {
        assert_eq!(fd_base_for(1024), 768);
        assert_eq!(fd_base_for(600), 512);
        assert_eq!(fd_base_for(256), 255, "below the limit");
        assert_eq!(fd_base_for(20_000), 4096);
        assert_eq!(fd_base_for(1 << 20), 4096);
        assert_eq!(fd_base_for(libc::RLIM_INFINITY), 4096);
        assert_eq!(fd_base_for(0), 0);
    }

    #[test]
    fn a_forked_child_dropping_a_connection_leaves_a_reused_descriptor_number_alone() {
        let conn = dial(fake_daemon(|_, _| {}));
        let fd = conn.stream.as_raw_fd();
        // SAFETY: the child only calls open, dup2, close, fcntl and _exit
        // besides the drop under test (the parent's threads are not needed).
        match unsafe { libc::fork() } {
            0 => unsafe {
                // What Open MPI does before exec, then a new file takes the number.
                libc::close(fd);
                let other = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
                libc::dup2(other, fd);
                drop(conn);
                libc::_exit(if fd_flags(fd) >= 0 { 0 } else { 1 });
            },
            child => {
                let mut status = 0;
                // SAFETY: waiting for our own child.
                assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
                assert!(libc::WIFEXITED(status), "child killed by signal {}", libc::WTERMSIG(status));
                assert_eq!(libc::WEXITSTATUS(status), 0, "the child's drop closed a descriptor it did not own");
                assert!(fd_flags(fd) >= 0, "the parent's socket stays open");
            }
        }
    }

    #[test]
    fn writing_to_a_vanished_daemon_is_an_error_not_sigpipe() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        drop(listener.accept().unwrap());
        // The first write draws a reset; after it, writes fail with EPIPE.
        let _ = NoSigpipe(stream.as_raw_fd()).write(b"x");
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: the child only calls signal, sendmsg and _exit.
        match unsafe { libc::fork() } {
            0 => unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                let failed = NoSigpipe(stream.as_raw_fd()).write(b"y").is_err();
                libc::_exit(if failed { 0 } else { 1 });
            },
            child => {
                let mut status = 0;
                // SAFETY: waiting for our own child.
                assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
                assert!(libc::WIFEXITED(status), "child killed by signal {}", libc::WTERMSIG(status));
                assert_eq!(libc::WEXITSTATUS(status), 0, "the write did not fail");
            }
        }
    }
}
