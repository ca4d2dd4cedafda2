//! The network front: the accept loop, one thread per connection, the
//! session handshake and the framing of requests and replies. A
//! connection is a TCP stream or, on the daemon's node, a Unix one
//! (`crate::local`): both are served here, the node-local ops only over
//! the latter.
//!
//! A connection whose peer breaks the protocol (bad frame, unknown
//! operation, bad checksum, undecodable body, failed authentication) gets
//! an error reply when the stream is still in step, and is closed; a
//! request that fails as a file-system call would (ENOENT, ENOSPC, ...)
//! gets its error reply and the connection goes on.

use crate::background::Backoff;
use crate::bodies::{self, BodyAccount, BodyBudget};
use crate::checksum::{reply_crc, BlockSums, BodyCheck, ChecksumStage};
use crate::failure::Failure;
use crate::handles::ClientId;
use crate::job::Job;
use crate::local::grants::LocalSession;
use crate::locking::lock;
use crate::logging::log;
use crate::metrics::RequestMetrics;
use crate::rates::SpaceWait;
use crate::request_path::{ReplyBody, RequestPath};
use crate::sched::{Arrival, Ticket};
use crate::stream::Stream;
use crate::throttle::ConnThrottle;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read};
use std::net::TcpListener;
use std::os::unix::io::{AsRawFd, RawFd};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};
use surge_proto::auth::{self, MAC_LEN, NONCE_LEN};
use surge_proto::frame::{self, FrameError, REQUEST_HEADER_LEN};
use surge_proto::msg::{DaemonStatus, HelloReply};
use surge_proto::{Errno, Op, Request, RequestHeader};

/// Largest request body taken from a peer that has not authenticated yet
/// (a Hello is a few hundred bytes): strangers cannot make us allocate
/// `--max-frame` bytes per connection.
const PRE_AUTH_MAX_BODY: u32 = 64 << 10;
/// Reply buffers larger than this are freed after the request.
const KEEP_BUFFER: usize = 16 << 20;
/// Most requests read ahead of the one being served (clients keep up to 8
/// in flight per connection), and most body bytes they may hold.
const READ_AHEAD: usize = 16;
const READ_AHEAD_BYTES: usize = 16 << 20;
/// How long a stopping daemon waits for requests in service to finish.
const DRAIN_GRACE: Duration = Duration::from_secs(5);
/// Most connections that have not authenticated yet, apart from the
/// `--max-connections` authenticated ones: a stranger without the secret
/// cannot take the slots of clients that have it. When they are all taken,
/// the oldest is dropped for the newcomer, so idle connections cannot keep
/// a client out either; a real client authenticates within milliseconds.
pub const MAX_UNAUTHENTICATED: usize = 64;

/// Start and stop of the network front, shared with `RunningDaemon`.
pub struct Control {
    listener: TcpListener,
    stopping: AtomicBool,
    connections: Mutex<Connections>,
    /// Signalled whenever a connection ends.
    ended: Condvar,
    /// Run once when the daemon starts stopping (stops the background tasks).
    on_stop: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// The node-local socket's listener, woken by `stop` as the TCP one is.
    local_listener: Mutex<Option<RawFd>>,
}

#[derive(Default)]
struct Connections {
    next_id: u64,
    /// Sockets of the open connections. A socket stays open while it is
    /// listed here (see `Registered`), so shutting one down never hits a
    /// reused descriptor.
    open: HashMap<u64, OpenConnection>,
}

impl Connections {
    fn count(&self, standing: Standing) -> usize {
        self.open.values().filter(|c| c.standing == standing).count()
    }
}

struct OpenConnection {
    fd: RawFd,
    standing: Standing,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Has not authenticated yet.
    Stranger,
    /// A stranger shut down to make room for a newer one; its thread is ending.
    Dropped,
    Authenticated,
}

/// Why a request was refused: the bodies being received hold the daemon's
/// memory budget for them.
fn body_budget_full(index: u32, limit: usize, len: usize) -> Failure {
    Failure::new(
        Errno(libc::EAGAIN),
        format!(
            "daemon {index} busy: the request bodies it is receiving hold its memory for them \
             ({limit} bytes, --max-body-memory), so this {len}-byte request was not read; retry later"
        ),
    )
}

/// Why a connection was refused: too many connections already.
fn busy(index: u32, limit: usize) -> Failure {
    Failure::new(
        Errno(libc::EAGAIN),
        format!("daemon {index} busy: too many connections (limit {limit}); retry later, or start the cluster with a higher --max-connections"),
    )
}

impl Control {
    pub fn new(listener: TcpListener) -> Control {
        Control {
            listener,
            stopping: AtomicBool::new(false),
            connections: Mutex::new(Connections::default()),
            ended: Condvar::new(),
            on_stop: Mutex::new(None),
            local_listener: Mutex::new(None),
        }
    }

    /// Has `stop` wake the node-local listener `fd` too (open until the daemon stopped).
    pub fn also_stop(&self, fd: RawFd) {
        *lock(&self.local_listener) = Some(fd);
    }

    /// Has `stop` run `f` first thing (a later call replaces an earlier `f`).
    pub fn on_stop(&self, f: impl FnOnce() + Send + 'static) {
        *lock(&self.on_stop) = Some(Box::new(f));
    }

    /// Stops accepting connections; the accept loop then drains the open ones.
    pub fn stop(&self) {
        if !self.stopping.swap(true, Ordering::SeqCst) {
            if let Some(f) = lock(&self.on_stop).take() {
                f();
            }
            // Wakes the accept call (Linux: a listening socket shut down for
            // reading stops listening).
            crate::sys::shutdown_read(self.listener.as_raw_fd());
            if let Some(fd) = *lock(&self.local_listener) {
                crate::sys::shutdown_read(fd);
            }
        }
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    pub fn connection_count(&self) -> usize {
        lock(&self.connections).open.len()
    }

    /// Lists a new, unauthenticated connection; `None` when `limit`
    /// authenticated connections are open. Makes room by ending the oldest
    /// unauthenticated connection when `MAX_UNAUTHENTICATED` are open.
    fn register(&self, stream: &Stream, limit: usize) -> Option<u64> {
        let mut conns = lock(&self.connections);
        if conns.count(Standing::Authenticated) >= limit {
            return None;
        }
        if conns.count(Standing::Stranger) >= MAX_UNAUTHENTICATED {
            let oldest =
                conns.open.iter_mut().filter(|(_, c)| c.standing == Standing::Stranger).min_by_key(|(&id, _)| id);
            if let Some((_, c)) = oldest {
                // Its thread reads end-of-file and deregisters it.
                crate::sys::shutdown_read(c.fd);
                c.standing = Standing::Dropped;
            }
        }
        conns.next_id += 1;
        let id = conns.next_id;
        conns.open.insert(id, OpenConnection { fd: stream.as_raw_fd(), standing: Standing::Stranger });
        Some(id)
    }

    /// Counts connection `id` as authenticated; false when `limit`
    /// authenticated connections are open already.
    fn authenticated(&self, id: u64, limit: usize) -> bool {
        let mut conns = lock(&self.connections);
        if conns.count(Standing::Authenticated) >= limit {
            return false;
        }
        match conns.open.get_mut(&id) {
            Some(c) if c.standing == Standing::Stranger => {
                c.standing = Standing::Authenticated;
                true
            }
            // Dropped meanwhile: its socket is shut down already.
            _ => false,
        }
    }

    fn deregister(&self, id: u64) {
        lock(&self.connections).open.remove(&id);
        self.ended.notify_all();
    }

    /// Ends every connection once its request in service (if any) is
    /// answered, waiting up to `grace`; returns how many did not end in time.
    fn drain(&self, grace: Duration) -> usize {
        let deadline = Instant::now() + grace;
        let mut conns = lock(&self.connections);
        for c in conns.open.values() {
            // A blocked read returns end-of-file; replies can still be sent.
            crate::sys::shutdown_read(c.fd);
        }
        while !conns.open.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            conns = self.ended.wait_timeout(conns, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        conns.open.len()
    }
}

/// Settings of the network front.
pub struct Settings {
    pub index: u32,
    pub daemons: u32,
    pub cluster_id: String,
    pub secret: Vec<u8>,
    /// The secret only the cluster's daemons hold (`surge_cluster::peer_secret`):
    /// a connection that proves it may send the peer operations.
    pub peer_secret: Vec<u8>,
    pub max_frame: u32,
    pub frame_timeout: Duration,
    /// Time a new connection has to authenticate.
    pub handshake_timeout: Duration,
    pub max_connections: usize,
    pub conn_rate: Option<u64>,
    /// The request-path stages by their registry names (`surge status`).
    pub stages: String,
}

pub struct Server {
    pub request_path: RequestPath,
    pub control: Arc<Control>,
    pub settings: Settings,
    pub started: Instant,
    pub requests: AtomicU64,
    /// Each request's latency and errno, for the metrics endpoint.
    pub metrics: Arc<RequestMetrics>,
    /// The memory every connection's request bodies may hold (`--max-body-memory`).
    pub bodies: BodyBudget,
    /// Held for the daemon's life; declared last so it is released only
    /// after the request path (and its database) closed.
    pub _buffer_lock: File,
}

impl Server {
    pub fn status(&self) -> Result<DaemonStatus, Failure> {
        Ok(DaemonStatus {
            pid: std::process::id(),
            uptime_s: self.started.elapsed().as_secs(),
            connections: self.control.connection_count() as u32,
            requests: self.requests.load(Ordering::Relaxed),
            conn_rate: self.settings.conn_rate.unwrap_or(0),
            stages: self.settings.stages.clone(),
            ..self.request_path.status()?
        })
    }
}

/// Accepts connections until `Control::stop`, then drains the open ones.
/// Out of descriptors or memory, accepting backs off (100 ms, doubling to
/// 2 s) so the open connections have time to end, and the log says so once
/// and again when it works, not at every try.
pub fn run(server: &Arc<Server>) {
    let index = server.settings.index;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    for incoming in server.control.listener.incoming() {
        if server.control.stopping() {
            break;
        }
        match incoming {
            Ok(stream) => {
                if let Some((failures, over)) = backoff.succeeded() {
                    log!(Info, index, "accepting connections again after {failures} failure(s) over {over:.1?}");
                }
                admit(server, Stream::Tcp(stream));
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)) => {
                let retry = backoff.failed(Errno::from_io(&e));
                if retry.news {
                    log!(
                        Error,
                        index,
                        "accepting a connection failed: {e}; trying again in {:?} until it works",
                        retry.delay
                    );
                }
                thread::sleep(retry.delay);
            }
            // The peer gave up before we took it (ECONNABORTED ...): nothing lasting.
            Err(e) => log!(Debug, index, "accepting a connection failed: {e}"),
        }
    }
    let busy = server.control.drain(DRAIN_GRACE);
    if busy > 0 {
        log!(Warn, index, "{busy} connection(s) still busy after {} s; stopping anyway", DRAIN_GRACE.as_secs());
    }
}

/// Serves a new connection on a thread of its own, unless too many are open.
pub fn admit(server: &Arc<Server>, stream: Stream) {
    let index = server.settings.index;
    let peer = stream.peer();
    let limit = server.settings.max_connections;
    let Some(id) = server.control.register(&stream, limit) else {
        log!(Warn, index, "refused connection from {peer}: {limit} connections open (--max-connections)");
        // A fresh socket's send buffer takes this without blocking.
        let _ = refuse_connection(&stream, &*server.request_path.checksum, &busy(index, limit));
        return;
    };
    log!(Debug, index, "connection from {peer}");
    let registered = Registered { control: Arc::clone(&server.control), id, stream };
    let server = Arc::clone(server);
    let spawned = thread::Builder::new().name(format!("surged{index}-conn")).spawn(move || {
        Connection::new(&server, &registered.stream, id, peer).run();
        // Let go of the request path before the connection counts as ended: once
        // the drain saw every connection end, the accept thread holds the
        // last reference and closes the store and the database.
        drop(server);
        drop(registered);
    });
    if let Err(e) = spawned {
        log!(Error, index, "cannot start a thread for a new connection: {e}");
    }
}

/// An accepted socket, listed in `Control` until it is closed.
struct Registered {
    control: Arc<Control>,
    id: u64,
    stream: Stream,
}

impl Drop for Registered {
    fn drop(&mut self) {
        // Runs before `stream` is closed.
        self.control.deregister(self.id);
    }
}

enum Session {
    /// Waiting for Hello.
    New,
    /// Hello answered with this nonce; waiting for Auth.
    Challenged([u8; NONCE_LEN]),
    Authenticated,
}

/// What to send after a request.
enum Outcome {
    /// The reply built in the connection's `ReplyBody`.
    Reply,
    /// The (empty) reply, then stop the daemon.
    ReplyThenStop,
    /// An error reply; the connection goes on.
    Fail(Failure),
    /// An error reply, then the connection is closed.
    Refuse(Failure),
}

impl Outcome {
    /// The reply's status: 0, or the errno of the failure.
    fn errno(&self) -> i32 {
        match self {
            Outcome::Reply | Outcome::ReplyThenStop => 0,
            Outcome::Fail(failure) | Outcome::Refuse(failure) => failure.errno.0,
        }
    }
}

struct Connection<'a> {
    server: &'a Server,
    stream: &'a Stream,
    /// Our entry in `Control`.
    id: u64,
    /// Until when a connection that has not authenticated is kept.
    handshake_deadline: Instant,
    /// Who is at the other end, for the log.
    peer: String,
    session: Session,
    /// Requests read ahead of the one being served, oldest first.
    inbox: VecDeque<Frame<'a>>,
    /// Why reading ahead stopped the stream, reported once the inbox is served.
    read_error: Option<FrameError>,
    /// Body buffers of served requests, for the next ones.
    spare: Vec<Vec<u8>>,
    reply: ReplyBody,
    throttle: Option<ConnThrottle>,
    /// The job label the client gave in `Hello` (for the data manager's
    /// report), and the job id that Hello was sent as: a client serving
    /// other processes (the FUSE server) charges their requests to their
    /// own jobs, whose names it never gave.
    job_label: String,
    job_labelled: u64,
    /// The client at the other end, from its `Hello`.
    client: ClientId,
    /// Authenticated with the peer secret: another daemon of the cluster.
    from_peer: bool,
    /// A peer operation from this client was refused and logged: later ones
    /// are refused without a log line each.
    peer_op_refused: bool,
    /// The wait for space the writes of a pipelined burst share.
    space: SpaceWait,
    /// The request being served was sent before the client had the reply
    /// before it (its bytes had arrived when that reply was sent).
    sent_before_reply: bool,
    /// What this connection's body buffers hold of the daemon's budget.
    account: BodyAccount<'a>,
    /// The node-local data path's grants and descriptors (a Unix stream's).
    local: LocalSession<'a>,
}

/// A request frame read off the connection.
struct Frame<'a> {
    hdr: RequestHeader,
    body: Vec<u8>,
    /// The body checked against its CRC as it arrived, with the block
    /// checksums of a write's data.
    checked: Result<BlockSums, Errno>,
    /// When its first byte arrived.
    arrived: Instant,
    /// Its body did not fit in the daemon's budget for bodies: skipped,
    /// and the request is answered with this failure.
    refused: Option<Failure>,
    /// Its place at the scheduling point, from when it was read (the
    /// file-system requests of an authenticated session).
    arrival: Option<Arrival<'a>>,
}

impl<'a> Connection<'a> {
    fn new(server: &'a Server, stream: &'a Stream, id: u64, peer: String) -> Connection<'a> {
        let throttle = server.settings.conn_rate.map(ConnThrottle::new);
        Connection {
            server,
            stream,
            id,
            handshake_deadline: Instant::now() + server.settings.handshake_timeout,
            peer,
            session: Session::New,
            inbox: VecDeque::new(),
            read_error: None,
            spare: Vec::new(),
            reply: ReplyBody::default(),
            throttle,
            job_label: String::new(),
            job_labelled: 0,
            client: ClientId::DAEMON,
            from_peer: false,
            peer_op_refused: false,
            space: SpaceWait::default(),
            sent_before_reply: false,
            account: BodyAccount::new(&server.bodies),
            local: LocalSession::default(),
        }
    }

    /// Serves the connection until it ends; daemon 0 counts the
    /// authenticated ones per client (their files are let go with the last,
    /// the removed ones kept for them go to the deleter, and the temps of
    /// their unfinished stage-outs are removed).
    fn run(mut self) {
        self.serve();
        let request_path = &self.server.request_path;
        self.local.reclaim(&request_path.data, self.server.settings.index, &self.peer);
        if request_path.namespace.is_kept() && matches!(self.session, Session::Authenticated) {
            if request_path.namespace.handles.disconnected(self.client) {
                request_path.namespace.abandon_stage_outs(self.client);
            }
            request_path.namespace.release_unheld();
        }
    }

    fn serve(&mut self) {
        let settings = &self.server.settings;
        let timeout = settings.frame_timeout;
        // Failures here mean the peer is gone; the first read will tell.
        let _ = self.stream.set_nodelay();
        let _ = self.stream.set_read_timeout(Some(timeout.min(settings.handshake_timeout)));
        let _ = self.stream.set_write_timeout(Some(timeout));
        loop {
            let next = match self.inbox.pop_front() {
                Some(frame) => Ok(frame),
                None => self.read_error.take().map_or_else(|| self.read_frame(), Err),
            };
            let mut frame = match next {
                Ok(frame) => frame,
                Err(FrameError::Closed) => return,
                Err(e) => return self.frame_error(e),
            };
            self.read_ahead();
            self.server.requests.fetch_add(1, Ordering::Relaxed);
            self.reply.clear();
            let mut ticket = None;
            let outcome = panic::catch_unwind(AssertUnwindSafe(|| self.execute(&mut frame, &mut ticket)))
                .unwrap_or_else(|_| Outcome::Refuse(Failure::new(Errno::EIO, "internal error (see the daemon's log)")));
            if let (Some(throttle), Outcome::Reply) = (&mut self.throttle, &outcome) {
                throttle.pace(data_bytes(&frame.hdr, &self.reply), frame.arrived);
            }
            let errno = outcome.errno();
            // Bytes that crossed the connection; a node-local read grant said
            // what it moved itself (`local::grants`), which none here replaces.
            let carried = data_bytes(&frame.hdr, &self.reply);
            if let (Some(ticket), 0, true) = (&mut ticket, errno, carried > 0) {
                ticket.moved(carried);
            }
            // Bytes of the next request there before this reply goes out were
            // sent without waiting for it: the same burst (`SpaceWait`).
            self.sent_before_reply = !self.inbox.is_empty() || crate::sys::bytes_available(self.stream.as_raw_fd()) > 0;
            let open = self.respond(&frame.hdr, outcome);
            // In service until its reply is out: a read's bytes are charged to its job.
            drop(ticket);
            // Under the op it is charged as (a node-local grant: its `Write` or `Read`).
            let counted = Op::from_u8(frame.hdr.op).map_or(frame.hdr.op, |op| op.charged_as() as u8);
            self.server.metrics.answered(counted, frame.arrived.elapsed(), errno);
            if !open {
                return;
            }
            // Kept for the next requests, as much as reading ahead may fill.
            let kept: usize = self.spare.iter().map(Vec::capacity).sum();
            if kept + frame.body.capacity() <= READ_AHEAD_BYTES {
                self.spare.push(frame.body);
            } else {
                self.account.free(frame.body);
            }
            self.reply.trim(KEEP_BUFFER);
        }
    }

    /// Reads the next request frame, waiting for it; a file-system request
    /// of an authenticated session is registered at the scheduling point.
    fn read_frame(&mut self) -> Result<Frame<'a>, FrameError> {
        let server: &'a Server = self.server;
        let settings = &server.settings;
        let (limit, deadline) = match self.session {
            // A client holding write grants (the objects' locks) must commit
            // within the frame timeout, or the connection ends and they are reclaimed.
            Session::Authenticated if self.local.holds_grants() => {
                (settings.max_frame, Some(Instant::now() + settings.frame_timeout))
            }
            Session::Authenticated => (settings.max_frame, None),
            _ => (settings.max_frame.min(PRE_AUTH_MAX_BODY), Some(self.handshake_deadline)),
        };
        let mut reader =
            FrameReader { stream: self.stream, timeout: settings.frame_timeout, first_byte: None, deadline };
        let bodies = &server.bodies;
        if bodies.used() > bodies.limit() / 2 && crate::sys::bytes_available(self.stream.as_raw_fd()) == 0 {
            // Idle while the budget runs short: other connections may need the room. Otherwise the
            // spares stay: a buffer freed and allocated again per request costs its page faults
            // (15% of a single client's 1 MiB write bandwidth).
            self.spare.drain(..).for_each(|buf| self.account.free(buf));
        }
        let hdr = frame::read_request_header(&mut reader, limit)?;
        let arrived = reader.first_byte.unwrap_or_else(Instant::now);
        let len = hdr.body_len as usize;
        let mut body = self.spare.pop().unwrap_or_default();
        let waited = Instant::now();
        if !self.account.make_room(&mut body, len, bodies::PATIENCE) {
            frame::skip_request_body(&mut reader, &hdr)?;
            let refused = Some(body_budget_full(settings.index, server.bodies.limit(), len));
            return Ok(Frame { hdr, body, checked: Err(Errno::EIO), arrived, refused, arrival: None });
        }
        // The wait for room was the daemon's: the client's bytes have their full time.
        reader.first_byte = reader.first_byte.map(|first| first + waited.elapsed());
        let capacity = body.capacity();
        // Checked piece by piece while the rest of the body arrives.
        let mut check: Option<BodyCheck> = None;
        let read = frame::read_request_body_in_pieces(&mut reader, &hdr, &mut body, |hdr, so_far| {
            check.get_or_insert_with(|| BodyCheck::new(&*server.request_path.checksum, hdr)).arrived(so_far)
        });
        self.account.grew(capacity, &body);
        read?;
        let checked = check.map_or(Err(Errno::EIO), BodyCheck::finish);
        let arrival = match self.session {
            Session::Authenticated => server.request_path.arrive(&hdr),
            _ => None,
        };
        Ok(Frame { hdr, body, checked, arrived, refused: None, arrival })
    }

    /// Reads the requests the client pipelined behind the one about to be
    /// served, as far as they have arrived whole (so this never waits), so
    /// that the scheduler sees them. A header that is not right is left for
    /// `read_frame` to report in turn.
    fn read_ahead(&mut self) {
        if !matches!(self.session, Session::Authenticated) || self.read_error.is_some() {
            return;
        }
        let limit = self.server.settings.max_frame;
        let mut buffered: usize = self.inbox.iter().map(|f| f.body.len()).sum();
        while self.inbox.len() < READ_AHEAD {
            let available = crate::sys::bytes_available(self.stream.as_raw_fd());
            let mut raw = [0u8; REQUEST_HEADER_LEN];
            if available < REQUEST_HEADER_LEN || !matches!(self.stream.peek(&mut raw), Ok(REQUEST_HEADER_LEN)) {
                return;
            }
            let Ok(hdr) = RequestHeader::decode(&raw) else { return };
            let len = hdr.body_len as usize;
            if hdr.body_len > limit
                || available < REQUEST_HEADER_LEN + len
                || buffered + len > READ_AHEAD_BYTES
                || !self.server.bodies.fits(len)
            {
                return;
            }
            match self.read_frame() {
                Ok(frame) => self.inbox.push_back(frame),
                Err(e) => {
                    self.read_error = Some(e);
                    return;
                }
            }
            buffered += len;
        }
    }

    /// Serves one request; a file-system request is admitted at the
    /// scheduling point first, its ticket left in `ticket`.
    fn execute(&mut self, frame: &mut Frame<'a>, ticket: &mut Option<Ticket<'a>>) -> Outcome {
        let hdr = &frame.hdr;
        let Some(op) = Op::from_u8(hdr.op) else {
            return Outcome::Refuse(Failure::new(Errno::ENOSYS, format!("unknown operation 0x{:02x}", hdr.op)));
        };
        let authenticated = matches!(self.session, Session::Authenticated);
        if !authenticated && !matches!(op, Op::Hello | Op::Auth) {
            return Outcome::Refuse(Failure::new(Errno::EACCES, "authentication required"));
        }
        if let Some(failure) = frame.refused.take() {
            return Outcome::Fail(failure);
        }
        if authenticated && op.is_peer_only() && !self.from_peer {
            return Outcome::Fail(self.refuse_peer_op(op));
        }
        let (req, sums) = match checked_request(op, &frame.body, std::mem::replace(&mut frame.checked, Err(Errno::EIO)))
        {
            Ok(checked) => checked,
            Err(failure) => return Outcome::Refuse(failure),
        };
        let settings = &self.server.settings;
        match req {
            Request::Hello { client, job_label, pid, host, instance } => match self.session {
                Session::New => {
                    self.job_label = job_label.to_string();
                    self.job_labelled = hdr.job_id;
                    self.client = ClientId { instance, pid };
                    let nonce = auth::new_nonce();
                    self.session = Session::Challenged(nonce);
                    // Quoted and escaped: the strings are the unauthenticated peer's own.
                    self.peer = format!("{} ({client:?} pid {pid} on {host:?})", self.peer);
                    self.reply.put(&HelloReply {
                        nonce,
                        daemon_index: settings.index,
                        daemon_count: settings.daemons,
                        cluster_id: settings.cluster_id.clone(),
                    });
                    Outcome::Reply
                }
                Session::Challenged(_) => Outcome::Refuse(Failure::new(Errno::EACCES, "authentication required")),
                Session::Authenticated => Outcome::Fail(Failure::new(Errno::EINVAL, "session already authenticated")),
            },
            Request::Auth { proof } => self.authenticate(&proof),
            Request::Status => match self.server.status() {
                Ok(status) => {
                    self.reply.put(&status);
                    Outcome::Reply
                }
                Err(failure) => Outcome::Fail(failure),
            },
            Request::Shutdown => Outcome::ReplyThenStop,
            req if req.op().is_local_only() && self.stream.is_unix() => {
                *ticket = frame.arrival.take().map(Arrival::admit);
                let grant = match req {
                    Request::LocalWriteBegin { ino, offset, len } => Some((ino, offset, len)),
                    _ => None,
                };
                // Only a grant waits for space; the commits between a refused
                // grant's retries leave their burst alone (`SpaceWait`).
                let retry = grant.is_some_and(|(ino, offset, len)| self.space.next_grant(ino, offset, len));
                let job = Job { id: hdr.job_id, label: "", client: self.client, space: Some(&self.space) };
                let handled = self.local.handle(&self.server.request_path.data, job, &req, ticket, &mut self.reply);
                if let Some((ino, offset, len)) = grant {
                    let refused = matches!(&handled, Err(failure) if failure.errno == Errno::ENOSPC);
                    self.space.answered_grant(ino, offset, len, retry, refused);
                }
                match handled {
                    Ok(()) => Outcome::Reply,
                    Err(failure) => Outcome::Fail(failure),
                }
            }
            req => {
                *ticket = frame.arrival.take().map(Arrival::admit);
                let label = if hdr.job_id == self.job_labelled { self.job_label.as_str() } else { "" };
                self.space.next_request(self.sent_before_reply);
                let job = Job { id: hdr.job_id, label, client: self.client, space: Some(&self.space) };
                match self.server.request_path.handle(job, &req, &sums, &mut self.reply) {
                    Ok(()) => Outcome::Reply,
                    Err(failure) => Outcome::Fail(failure),
                }
            }
        }
    }

    /// The failure for peer operation `op` sent by a client; logged for the
    /// first one of the connection only, so a client cannot flood the log.
    fn refuse_peer_op(&mut self, op: Op) -> Failure {
        let failure = Failure::new(
            Errno(libc::EPERM),
            format!("{op:?} is sent only by the cluster's daemons to each other, not by clients"),
        );
        if !std::mem::replace(&mut self.peer_op_refused, true) {
            log!(Warn, self.server.settings.index, "refused {op:?} from client {}: {failure}", self.peer);
        }
        failure
    }

    fn authenticate(&mut self, proof: &[u8; MAC_LEN]) -> Outcome {
        let settings = &self.server.settings;
        let from_peer = match self.session {
            Session::Challenged(nonce) => auth::verify_peer(&settings.peer_secret, &nonce, proof),
            _ => false,
        };
        match self.session {
            Session::Challenged(nonce) if from_peer || auth::verify(&settings.secret, &nonce, proof) => {
                self.from_peer = from_peer;
                let limit = self.server.settings.max_connections;
                if !self.server.control.authenticated(self.id, limit) {
                    return Outcome::Refuse(busy(self.server.settings.index, limit));
                }
                self.session = Session::Authenticated;
                if self.server.request_path.namespace.is_kept() {
                    self.server.request_path.namespace.handles.connected(self.client);
                }
                let role = if from_peer { "daemon" } else { "client" };
                log!(Debug, self.server.settings.index, "authenticated {} as a {role}", self.peer);
                let _ = self.stream.set_read_timeout(Some(self.server.settings.frame_timeout));
                Outcome::Reply
            }
            Session::Challenged(_) => Outcome::Refuse(Failure::new(Errno::EACCES, "wrong cluster secret")),
            Session::New => Outcome::Refuse(Failure::new(Errno::EACCES, "authentication required")),
            Session::Authenticated => Outcome::Fail(Failure::new(Errno::EINVAL, "session already authenticated")),
        }
    }

    /// Sends the reply for `outcome`; false if the connection must close.
    fn respond(&mut self, hdr: &RequestHeader, outcome: Outcome) -> bool {
        // Closed once sent: the client has its own copies.
        let handing = std::mem::take(&mut self.local.handing);
        let index = self.server.settings.index;
        match outcome {
            Outcome::Reply => self.send(hdr, 0, self.reply.head(), self.reply.bulk(), self.reply.bulk_crc(), &handing),
            Outcome::ReplyThenStop => {
                self.send(hdr, 0, &[], &[], None, &[]);
                log!(Info, index, "shutdown requested by {}", self.peer);
                self.server.control.stop();
                true
            }
            Outcome::Fail(failure) => {
                if failure.errno == Errno::EIO {
                    log!(Error, index, "{} request from {} failed: {failure}", op_name(hdr.op), self.peer);
                }
                self.send(hdr, failure.errno.0, failure.text().as_bytes(), &[], None, &[])
            }
            Outcome::Refuse(failure) => {
                log!(Warn, index, "refused {} from {}: {failure}", op_name(hdr.op), self.peer);
                self.send(hdr, failure.errno.0, failure.text().as_bytes(), &[], None, &[]);
                false
            }
        }
    }

    /// Writes one reply frame, its checksum through the checksum stage
    /// (`bulk_crc`: the bulk's, when a read built it); false if the peer
    /// cannot be written to.
    /// Descriptors handed out (`ObjHandles`) go with the reply's first bytes.
    fn send(
        &self,
        hdr: &RequestHeader,
        status: i32,
        head: &[u8],
        bulk: &[u8],
        bulk_crc: Option<u32>,
        handing: &[File],
    ) -> bool {
        let crc = reply_crc(&*self.server.request_path.checksum, head, bulk, bulk_crc);
        if handing.is_empty() {
            return frame::write_reply_summed(&mut &*self.stream, hdr.op, hdr.request_id, status, head, bulk, crc)
                .is_ok();
        }
        let mut reply = Vec::with_capacity(frame::REPLY_HEADER_LEN + head.len() + bulk.len());
        let fds: Vec<RawFd> = handing.iter().map(AsRawFd::as_raw_fd).collect();
        frame::write_reply_summed(&mut reply, hdr.op, hdr.request_id, status, head, bulk, crc).is_ok()
            && self.stream.send_with_fds(&reply, &fds).is_ok()
    }

    /// A frame could not be read: say why if the peer can still hear it, and close.
    fn frame_error(&self, error: FrameError) {
        let index = self.server.settings.index;
        let settings = &self.server.settings;
        let reply = match &error {
            FrameError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                Some(Failure::new(
                    error.errno(),
                    match self.session {
                        Session::Authenticated => {
                            format!("request not completed within {} s", settings.frame_timeout.as_secs_f64())
                        }
                        _ => format!("not authenticated within {} s", settings.handshake_timeout.as_secs_f64()),
                    },
                ))
            }
            // The peer hung up mid-frame or the connection broke: nobody to tell.
            FrameError::Io(_) => None,
            FrameError::TooLarge { len, max } if !matches!(self.session, Session::Authenticated) => Some(Failure::new(
                Errno::EACCES,
                format!("authentication required (got a {len}-byte request; {max} bytes at most before it)"),
            )),
            other => Some(Failure::new(other.errno(), other.to_string())),
        };
        log!(Warn, index, "closing connection from {}: {error}", self.peer);
        if let Some(failure) = reply {
            let _ = refuse_connection(self.stream, &*self.server.request_path.checksum, &failure);
        }
    }
}

/// The request in `body`, if the body matched its checksum (`checked`);
/// a write comes with its blocks' checksums, taken as its body arrived.
fn checked_request<'b>(
    op: Op,
    body: &'b [u8],
    checked: Result<BlockSums, Errno>,
) -> Result<(Request<'b>, BlockSums), Failure> {
    let sums = checked.map_err(|errno| Failure::new(errno, "request body does not match its checksum"))?;
    match Request::decode(op, body) {
        Ok(req) => Ok((req, sums)),
        Err(e) => Err(Failure::new(Errno::EPROTO, format!("malformed {op:?} request: {e}"))),
    }
}

/// Sends the reply that ends a connection rather than answers a request:
/// operation and request id 0 (docs/protocol.md), so that the client tells
/// it from the reply it waits for and reports the daemon's reason.
fn refuse_connection(stream: &Stream, checksum: &dyn ChecksumStage, failure: &Failure) -> io::Result<()> {
    let text = failure.text();
    let crc = reply_crc(checksum, text.as_bytes(), &[], None);
    frame::write_reply_summed(&mut &*stream, 0, 0, failure.errno.0, text.as_bytes(), &[], crc)
}

/// File data a served request moved over the connection (what the rate cap charges).
fn data_bytes(hdr: &RequestHeader, reply: &ReplyBody) -> u64 {
    match Op::from_u8(hdr.op) {
        Some(Op::Write) => hdr.io_size,
        Some(Op::Read | Op::PfsRead) => reply.bulk().len() as u64,
        _ => 0,
    }
}

fn op_name(op: u8) -> String {
    Op::from_u8(op).map_or_else(|| format!("operation 0x{op:02x}"), |op| format!("{op:?}"))
}

/// Reads a frame from the socket, whose receive timeout is at most the
/// frame timeout. Before a frame's first byte a timeout only means the
/// connection is idle, which is allowed until the `deadline` (if any: the
/// handshake's); once a byte arrived, the rest must follow within the
/// timeout, so a stalled peer cannot hold the thread.
struct FrameReader<'a> {
    stream: &'a Stream,
    timeout: Duration,
    /// When the frame's first byte arrived.
    first_byte: Option<Instant>,
    deadline: Option<Instant>,
}

impl Read for FrameReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let late = self.first_byte.is_some_and(|t| t.elapsed() >= self.timeout)
                || self.deadline.is_some_and(|d| Instant::now() >= d);
            if late {
                return Err(io::ErrorKind::TimedOut.into());
            }
            match (&*self.stream).read(buf) {
                Ok(n) => {
                    if n > 0 && self.first_byte.is_none() {
                        self.first_byte = Some(Instant::now());
                    }
                    return Ok(n);
                }
                Err(e)
                    if self.first_byte.is_none()
                        && matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                Err(e) => return Err(e),
            }
        }
    }
}
