//! Test helpers: a cluster directory, `surged` processes that are killed
//! when dropped, and the raw protocol client of `surge_testkit::wire`.
#![allow(dead_code)] // each test binary uses its own part of the helpers

use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use surge_testkit::daemon::{surged_command, wait_registered, DaemonSetup};
pub use surge_testkit::wire::Client;

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
        let (secret, registrations) = (self.path("secret"), self.registrations());
        let pfs = self.pfs();
        let setup = DaemonSetup {
            buffer: self.buffer(index),
            pfs: &pfs,
            secret_file: &secret,
            cluster_id: &self.cluster_id,
            register_dir: &registrations,
        };
        let mut cmd = surged_command(Path::new(env!("CARGO_BIN_EXE_surged")), index, daemons, &setup, extra);
        cmd.stdout(Stdio::null());
        cmd
    }

    /// Starts daemon `index` and waits until it registered.
    pub fn spawn(&self, index: u32, daemons: u32, extra: &[&str]) -> Daemon {
        self.spawn_with(index, daemons, extra, |_| {})
    }

    /// [`Fixture::spawn`], the command changed by `change` first (limits, environment).
    pub fn spawn_with(&self, index: u32, daemons: u32, extra: &[&str], change: impl FnOnce(&mut Command)) -> Daemon {
        let log = unique(self.path(&format!("daemon-{index}")));
        let mut command = self.command(index, daemons, extra);
        change(&mut command);
        let child = command.stderr(File::create(&log).unwrap()).spawn().unwrap();
        let mut daemon = Daemon { child, addr: "0.0.0.0:0".parse().unwrap(), log, reaped: None };
        let log = daemon.log.clone();
        let entry = wait_registered(&self.registrations(), index, &mut daemon.child, || {
            fs::read_to_string(&log).unwrap_or_default()
        });
        daemon.addr = entry.addr.parse().unwrap();
        daemon
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

    /// A connection as another daemon of the cluster, for the peer operations.
    pub fn peer(&self, fixture: &Fixture) -> Client {
        Client::peer(self.addr, &fixture.registrations())
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

/// Writes `data` to object `ino` from offset 0 in 1 MiB requests.
pub fn write_object(c: &mut Client, ino: u64, data: &[u8]) {
    for (k, piece) in data.chunks(1 << 20).enumerate() {
        let _: surge_proto::msg::WriteReply =
            c.ok(&surge_proto::Request::Write { ino, offset: (k << 20) as u64, data: piece });
    }
}

/// The size of `ino`'s object: 0 when there is none, or when it is retired
/// (the deleter and the evicter retire an object before they delete it).
pub fn object_size(conn: &mut Client, ino: u64) -> u64 {
    use surge_proto::{Errno, Reply};
    let answer = conn.call(&surge_proto::Request::ObjStat { ino });
    match answer.errno() {
        Some(Errno(libc::ESTALE)) => 0,
        None => surge_proto::msg::ObjStatReply::from_body(&answer.body).unwrap().size,
        Some(errno) => panic!("ObjStat of {ino}: {errno:?} {}", answer.message()),
    }
}
