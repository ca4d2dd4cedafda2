//! Test helpers: a cluster directory, `surged` processes that are killed
//! when dropped, and a tiny protocol client built on `surge_proto::frame`.
#![allow(dead_code)] // each test binary uses its own part of the helpers

use std::fs::{self, File};
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use surge_proto::frame::{self, FrameError, ReplyHeader};
use surge_proto::msg::{HelloReply, Reply};
use surge_proto::{auth, Encoder, Errno, Request};

pub const JOB: u64 = 4242;

/// A temporary directory with a secret, a PFS root and a registration directory.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub secret: Vec<u8>,
    pub cluster_id: String,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        surge_cluster::generate_secret(&dir.path().join("secret")).unwrap();
        fs::create_dir(dir.path().join("pfs")).unwrap();
        let secret = surge_cluster::read_secret(&dir.path().join("secret")).unwrap();
        Fixture { dir, secret, cluster_id: "test-cluster".into() }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn pfs(&self) -> PathBuf {
        self.path("pfs")
    }

    pub fn buffer(&self, index: u32) -> PathBuf {
        self.path(&format!("buffer/daemon-{index}"))
    }

    pub fn registrations(&self) -> PathBuf {
        self.path("cluster.toml.d")
    }

    /// The `surged` command for daemon `index` of `daemons`, with `extra`
    /// arguments (which replace the defaults of the same flags).
    pub fn command(&self, index: u32, daemons: u32, extra: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_surged"));
        cmd.arg("--index").arg(index.to_string());
        cmd.arg("--daemons").arg(daemons.to_string());
        let defaults = [
            ("--buffer", self.buffer(index)),
            ("--pfs", self.pfs()),
            ("--secret-file", self.path("secret")),
            ("--cluster-id", PathBuf::from(&self.cluster_id)),
            ("--register-dir", self.registrations()),
        ];
        for (flag, value) in defaults {
            if !extra.contains(&flag) {
                cmd.arg(flag).arg(value);
            }
        }
        cmd.args(extra);
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        cmd
    }

    /// Starts daemon `index` and waits until it registered.
    pub fn spawn(&self, index: u32, daemons: u32, extra: &[&str]) -> Daemon {
        let log = unique(self.path(&format!("daemon-{index}")));
        let child = self.command(index, daemons, extra).stderr(File::create(&log).unwrap()).spawn().unwrap();
        let mut daemon = Daemon { child, addr: "0.0.0.0:0".parse().unwrap(), log, reaped: None };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let pid = daemon.child.id();
            if let Some(entry) = surge_cluster::registrations(&self.registrations())
                .into_iter()
                .find(|e| e.index == index && e.pid == pid)
            {
                daemon.addr = entry.addr.parse().unwrap();
                return daemon;
            }
            if let Some(status) = daemon.child.try_wait().unwrap() {
                panic!("surged {index} exited with {status} before registering:\n{}", daemon.log());
            }
            assert!(Instant::now() < deadline, "surged {index} did not register:\n{}", daemon.log());
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn unique(path: PathBuf) -> PathBuf {
    let mut n = 0;
    loop {
        let candidate = path.with_extension(format!("{n}.log"));
        if !candidate.exists() {
            return candidate;
        }
        n += 1;
    }
}

/// A `surged` process, killed (SIGKILL) and reaped when dropped.
pub struct Daemon {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
    reaped: Option<ExitStatus>,
}

impl Daemon {
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn client(&self, fixture: &Fixture) -> Client {
        Client::authenticated(self.addr, &fixture.secret)
    }

    /// Kills the process with SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        self.reaped = Some(self.child.wait().unwrap());
    }

    /// Waits (up to `limit`) for the process to exit by itself.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.reaped = Some(status);
                return status;
            }
            assert!(Instant::now() < deadline, "surged did not exit:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

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

    pub fn hello(&mut self) -> HelloReply {
        self.ok(&Request::Hello { client: "test", job_label: "job", pid: std::process::id(), host: "here" })
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

/// Bytes that differ at every offset and from one seed to the next.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_add(seed).wrapping_mul(2654435761) >> 11) as u8).collect()
}
