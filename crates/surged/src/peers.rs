//! Calls from one daemon to another: daemon 0's background tasks ask the
//! data daemons to list and remove objects.
//!
//! Built here on surge-proto (frames, the Hello/Auth handshake with the
//! peer secret, which only daemons hold, so the peer accepts the peer
//! operations from us: `Op::is_peer_only`), not on the surge-client crate:
//! the client library is made for applications (a cluster file, a job
//! identity, per-operation deadlines, connection policies, the C ABI) and
//! offers files, not single object requests to one daemon. A daemon needs
//! only that: one request at a time to a daemon it finds in the
//! registration directory (`--register-dir`) it was started with. So
//! surged stays independent of the client and of its changes.
//!
//! A daemon's calls to itself (daemon 0 deletes its own objects too) do
//! not go over TCP, where they would take a connection slot of
//! `--max-connections`: they are handed to its own request path
//! ([`Peers::serve_locally`]).
//!
//! One connection per peer is kept between calls. A call that meets a
//! broken connection dials again once (the registration is re-read, so a
//! restarted peer is found at its new address); the requests sent this
//! way must be idempotent (`ObjList`, `ObjRemove` are).
//!
//! To call a new request: `peers.call::<ReplyType>(daemon, &Request::...)`.

use crate::failure::Failure;
use crate::locking::lock;
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use surge_proto::frame::{self, FrameError};
use surge_proto::msg::HelloReply;
use surge_proto::{auth, Encoder, Errno, Reply, Request};

/// Job id the requests of background work are charged to.
pub const BACKGROUND_JOB: u64 = 0;

/// Serves a request of this daemon to itself: the reply body, or the failure.
pub type LocalCall = Box<dyn Fn(&Request<'_>) -> Result<Vec<u8>, Failure> + Send + Sync>;

pub struct Peers {
    index: u32,
    /// The peer secret (`surge_cluster::peer_secret`), not the cluster secret.
    secret: Vec<u8>,
    local: OnceLock<LocalCall>,
    register_dir: Option<PathBuf>,
    /// Limit on connecting and on each wait for a reply.
    timeout: Duration,
    idle: Mutex<HashMap<u32, PeerConn>>,
}

struct PeerConn {
    stream: TcpStream,
    next_id: u64,
}

impl Peers {
    pub fn new(index: u32, secret: Vec<u8>, register_dir: Option<PathBuf>, timeout: Duration) -> Peers {
        Peers { index, secret, local: OnceLock::new(), register_dir, timeout, idle: Mutex::new(HashMap::new()) }
    }

    /// Calls to this daemon itself go to `local` (set once, when its
    /// request path exists).
    pub fn serve_locally(&self, local: LocalCall) {
        let _ = self.local.set(local);
    }

    /// Sends `req` to daemon `daemon` and decodes its reply; a failed
    /// request comes back as the peer's errno and message.
    pub fn call<R: Reply>(&self, daemon: u32, req: &Request<'_>) -> Result<R, Failure> {
        if daemon == self.index {
            let local =
                self.local.get().ok_or_else(|| Failure::new(Errno::ENOTCONN, "this daemon does not serve yet"))?;
            return decode(daemon, req, &local(req)?);
        }
        let kept = lock(&self.idle).remove(&daemon);
        let (mut conn, fresh) = match kept {
            Some(conn) => (conn, false),
            None => (self.dial(daemon)?, true),
        };
        let answer = match conn.call(req) {
            Err(_) if !fresh => {
                // The kept connection broke (the peer restarted): once more on a new one.
                conn = self.dial(daemon)?;
                conn.call(req)
            }
            other => other,
        };
        let answer = answer
            .map_err(|e| Failure::new(e.errno(), format!("daemon {daemon} did not answer {:?}: {e}", req.op())))?;
        lock(&self.idle).insert(daemon, conn);
        decode(daemon, req, &answer?)
    }

    /// Daemon `daemon`'s address, from its registration.
    fn address(&self, daemon: u32) -> Result<SocketAddr, Failure> {
        let unknown =
            |why: String| Failure::new(Errno::ENOTCONN, format!("daemon {daemon}'s address is unknown: {why}"));
        let dir = self.register_dir.as_ref().ok_or_else(|| unknown("this daemon has no --register-dir".into()))?;
        let entry = surge_cluster::registrations(dir)
            .into_iter()
            .find(|e| e.index == daemon)
            .ok_or_else(|| unknown(format!("it is not registered in {}", dir.display())))?;
        entry.addr.parse().map_err(|_| unknown(format!("its registration gives {:?}", entry.addr)))
    }

    /// A new, authenticated connection to `daemon`.
    fn dial(&self, daemon: u32) -> Result<PeerConn, Failure> {
        let addr = self.address(daemon)?;
        let failed = |e: &dyn std::fmt::Display, errno: Errno| {
            Failure::new(errno, format!("cannot reach daemon {daemon} at {addr}: {e}"))
        };
        let stream = TcpStream::connect_timeout(&addr, self.timeout).map_err(|e| failed(&e, Errno::from_io(&e)))?;
        let setup = || -> io::Result<()> {
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(self.timeout))?;
            stream.set_write_timeout(Some(self.timeout))
        };
        setup().map_err(|e| failed(&e, Errno::from_io(&e)))?;
        let mut conn = PeerConn { stream, next_id: 1 };
        let host = surge_cluster::hostname();
        let pid = std::process::id();
        // Daemons open no files: the instance names nothing daemon 0 counts.
        let hello = Request::Hello { client: "surged", job_label: "background", pid, host: &host, instance: 0 };
        let body = conn.call(&hello).map_err(|e| failed(&e, e.errno()))??;
        let nonce = decode::<HelloReply>(daemon, &hello, &body)?.nonce;
        conn.call(&Request::Auth { proof: auth::prove_peer(&self.secret, &nonce) })
            .map_err(|e| failed(&e, e.errno()))??;
        Ok(conn)
    }
}

/// The reply body of `req` from `daemon`, decoded.
fn decode<R: Reply>(daemon: u32, req: &Request<'_>, body: &[u8]) -> Result<R, Failure> {
    R::from_body(body).map_err(|e| Failure::new(Errno::EPROTO, format!("daemon {daemon}'s {:?} reply: {e}", req.op())))
}

impl PeerConn {
    /// One request and its reply: the reply body, or the peer's failure.
    fn call(&mut self, req: &Request<'_>) -> Result<Result<Vec<u8>, Failure>, FrameError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut head = Encoder::new();
        let bulk = req.encode(&mut head);
        frame::write_request(&mut self.stream, req.op() as u8, id, BACKGROUND_JOB, req.io_size(), &head.buf, bulk)?;
        let header = frame::read_reply_header(&mut self.stream, u32::MAX)?;
        let mut body = vec![0; header.body_len as usize];
        frame::read_reply_body(&mut self.stream, &header, &mut body)?;
        if header.request_id != id {
            return Err(FrameError::Io(io::Error::other(format!(
                "reply to request {} instead of {id}",
                header.request_id
            ))));
        }
        Ok(match header.status {
            0 => Ok(body),
            status => Err(Failure::new(Errno(status), String::from_utf8_lossy(&body).into_owned())),
        })
    }
}
