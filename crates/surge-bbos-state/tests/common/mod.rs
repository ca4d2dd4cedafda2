//! Test support: the shared suite every backend passes, a `redis-server`
//! of the test's own on a free port of 127.0.0.1, and the stores opened in
//! temporary directories.
#![allow(dead_code, unused_macros)] // each test binary uses its own part of the helpers

#[macro_use]
pub mod suite;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use surge_bbos_state::{DrainState, EmbeddedState, RedisState};
use tempfile::TempDir;

/// A `redis-server` of this test's own (no persistence, its own
/// directory), killed by its pid when dropped.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl RedisServer {
    /// Starts one, or says why it cannot (for `skip_unless_ready`).
    pub fn start() -> Result<RedisServer, String> {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("redis.log")).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot run redis-server ({e}); scripts/setup.sh installs it"))?;
        let server = RedisServer { child, port, dir };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = redis::Client::open(self.url()).unwrap();
        loop {
            let pong = client.get_connection().and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
            match pong {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
                    return Err(format!("redis-server on port {} did not answer: {e}\n{log}", self.port));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A raw connection, to look at the keys as redis-cli would.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url()).unwrap().get_connection().unwrap()
    }

    /// SIGKILL to its pid, as a crash would, and waits for it to be gone.
    pub fn kill(&mut self) {
        // SAFETY: kill(2) on the pid of our own child, which was not reaped yet.
        assert_eq!(unsafe { libc::kill(self.pid() as i32, libc::SIGKILL) }, 0);
        self.child.wait().unwrap();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.kill();
        }
    }
}

/// A port on 127.0.0.1 that nothing listens on (just now).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A store under test and what must live as long as it.
pub struct Opened {
    pub state: Box<dyn DrainState>,
    pub dir: TempDir,
    pub server: Option<RedisServer>,
}

pub fn embedded(_test: &str) -> Option<Opened> {
    let dir = tempfile::tempdir().unwrap();
    let state = Box::new(EmbeddedState::open(dir.path()).unwrap());
    Some(Opened { state, dir, server: None })
}

/// A Redis store on a server of its own; `None` (a visible skip) where
/// redis-server is missing.
pub fn redis(test: &str) -> Option<Opened> {
    let server = surge_testkit::skip_unless_ready(test, RedisServer::start())?;
    let state = Box::new(RedisState::connect(&server.url(), "test").unwrap());
    Some(Opened { state, dir: tempfile::tempdir().unwrap(), server: Some(server) })
}
