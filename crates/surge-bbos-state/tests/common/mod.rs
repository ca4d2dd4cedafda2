//! Test support: the shared suite every backend passes, a `redis-server`
//! of the test's own on a free port of 127.0.0.1, and the stores opened in
//! temporary directories.
#![allow(dead_code, unused_macros)] // each test binary uses its own part of the helpers

#[macro_use]
pub mod suite;

use std::net::TcpListener;
use surge_bbos_state::{DrainState, EmbeddedState, RedisState};
use tempfile::TempDir;

/// A `redis-server` of this test's own (the library's, as `surge run`
/// starts one) and its directory, killed by its pid when dropped.
pub struct RedisServer {
    server: surge_bbos_state::RedisServer,
    _dir: TempDir,
}

impl RedisServer {
    /// Starts one, or says why it cannot (for `skip_unless_ready`).
    pub fn start() -> Result<RedisServer, String> {
        let dir = tempfile::tempdir().unwrap();
        let server = surge_bbos_state::RedisServer::start(dir.path(), [127, 0, 0, 1].into())?;
        Ok(RedisServer { server, _dir: dir })
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    pub fn pid(&self) -> u32 {
        self.server.pid()
    }

    /// A raw connection, to look at the keys as redis-cli would.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url()).unwrap().get_connection().unwrap()
    }

    /// SIGKILL to its pid, as a crash would, and waits for it to be gone.
    pub fn kill(&mut self) {
        self.server.kill();
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
