//! A raw protocol client built on `surge_proto::frame`: one connection,
//! requests sent as they are (or as raw frames), replies read back whole.
//! Tests use it to talk to a daemon without the client library.

use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;
use surge_proto::frame::{self, FrameError, ReplyHeader};
use surge_proto::msg::{HelloReply, Reply};
use surge_proto::{auth, Encoder, Errno, Request};

/// The job id the client's requests carry.
pub const JOB: u64 = 4242;

/// A reply: status 0 and its body, or an errno and its message.
#[derive(Debug)]
pub struct Answer {
    pub header: ReplyHeader,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn errno(&self) -> Option<Errno> {
        (self.header.status != 0).then_some(Errno(self.header.status))
    }

    pub fn message(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub struct Client {
    pub stream: TcpStream,
    /// The job its requests are charged to (`JOB` unless set).
    pub job: u64,
    next_id: u64,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { stream, job: JOB, next_id: 1 }
    }

    pub fn authenticated(addr: SocketAddr, secret: &[u8]) -> Client {
        let mut c = Client::connect(addr);
        let hello = c.hello();
        let answer = c.call(&Request::Auth { proof: auth::prove(secret, &hello.nonce) });
        assert_eq!(answer.errno(), None, "{}", answer.message());
        c
    }

    /// A connection that authenticates as another daemon of the cluster
    /// registering in `register_dir` (its peer secret), for the operations
    /// only daemons send each other.
    pub fn peer(addr: SocketAddr, register_dir: &std::path::Path) -> Client {
        let secret = surge_cluster::peer_secret(register_dir).unwrap();
        let mut c = Client::connect(addr);
        let hello = c.hello();
        let answer = c.call(&Request::Auth { proof: auth::prove_peer(&secret, &hello.nonce) });
        assert_eq!(answer.errno(), None, "{}", answer.message());
        c
    }

    pub fn hello(&mut self) -> HelloReply {
        // Each connection is a client of its own: closing it lets go of the files it opened.
        let instance = surge_proto::msg::new_client_instance();
        self.ok(&Request::Hello { client: "test", job_label: "job", pid: std::process::id(), host: "here", instance })
    }

    /// Sends a request frame with `head` and `bulk` as body.
    pub fn send_raw(&mut self, op: u8, head: &[u8], bulk: &[u8]) -> io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        frame::write_request(&mut self.stream, op, id, self.job, bulk.len() as u64, head, bulk)?;
        Ok(id)
    }

    pub fn send(&mut self, req: &Request<'_>) -> u64 {
        let mut e = Encoder::new();
        let bulk = req.encode(&mut e);
        self.send_raw(req.op() as u8, &e.buf, bulk).unwrap()
    }

    pub fn recv(&mut self) -> Result<Answer, FrameError> {
        let header = frame::read_reply_header(&mut self.stream, u32::MAX)?;
        let mut body = vec![0; header.body_len as usize];
        frame::read_reply_body(&mut self.stream, &header, &mut body)?;
        Ok(Answer { header, body })
    }

    pub fn call(&mut self, req: &Request<'_>) -> Answer {
        let id = self.send(req);
        let answer = self.recv().unwrap();
        assert_eq!((answer.header.request_id, answer.header.op), (id, req.op() as u8));
        answer
    }

    /// The decoded reply of a request that must succeed.
    pub fn ok<R: Reply>(&mut self, req: &Request<'_>) -> R {
        let answer = self.call(req);
        assert_eq!(answer.errno(), None, "{req:?} failed: {}", answer.message());
        R::from_body(&answer.body).unwrap()
    }

    /// The errno and message of a request that must fail.
    pub fn fails(&mut self, req: &Request<'_>) -> (Errno, String) {
        let answer = self.call(req);
        (answer.errno().unwrap_or_else(|| panic!("{req:?} succeeded")), answer.message())
    }

    /// Reads the raw body of a `Read` or `PfsRead` reply.
    pub fn read(&mut self, req: &Request<'_>) -> Vec<u8> {
        let answer = self.call(req);
        assert_eq!(answer.errno(), None, "{req:?} failed: {}", answer.message());
        answer.body
    }

    /// True once the daemon closed the connection (end of file or reset).
    pub fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        self.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        match self.stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
        }
    }

    pub fn close_write(&self) {
        self.stream.shutdown(Shutdown::Write).unwrap();
    }
}
