//! A `redis-server` of one job's own: what `surge run --drain-state redis`
//! starts for the job's drain state and stops after it, and what the tests
//! of the Redis backend run against.
//!
//! The server keeps nothing on disk (no RDB snapshots, no append-only
//! file: the state lives as long as the job, and the data manager's resume
//! pass rebuilds it from the namespace), listens on one address on a port
//! that was free, and asks for a password drawn at start. The password is
//! in a configuration file of mode 0600 in the server's directory, never on
//! a command line (which every local user can read in `/proc`), and in the
//! URL that [`RedisServer::url`] gives; [`redacted`] hides it in messages.
//! The server is stopped by its pid.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a new server has to answer a PING.
const READY_WITHIN: Duration = Duration::from_secs(10);
/// How long a stopped server has to exit before it is killed.
const EXIT_WITHIN: Duration = Duration::from_secs(5);
/// Ports tried when another program takes the free port first.
const PORT_ATTEMPTS: u32 = 3;

pub struct RedisServer {
    child: Child,
    addr: SocketAddr,
    password: String,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts `redis-server` listening on `bind` (a free port), its
    /// configuration and log in `dir` (created 0700 if missing), and waits
    /// until it answers. The error says what failed and what to do.
    pub fn start(dir: &Path, bind: IpAddr) -> Result<RedisServer, String> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot make the Redis directory {}: {e}", dir.display()))?;
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port(bind).map_err(|e| format!("no free port on {bind} for redis-server: {e}"))?;
            let server = RedisServer::spawn(dir, SocketAddr::new(bind, port))?;
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    fn spawn(dir: &Path, addr: SocketAddr) -> Result<RedisServer, String> {
        let password = random_password();
        let config = dir.join("redis.conf");
        let log = dir.join("redis.log");
        let text = format!(
            "bind {ip}\nport {port}\nrequirepass {password}\nsave \"\"\nappendonly no\ndir \"{dir}\"\n\
             logfile \"{log}\"\ndaemonize no\n",
            ip = addr.ip(),
            port = addr.port(),
            dir = dir.display(),
            log = log.display(),
        );
        write_private(&config, &text).map_err(|e| format!("cannot write {}: {e}", config.display()))?;
        let child = Command::new("redis-server")
            .arg(&config)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot run redis-server ({e}); scripts/setup.sh installs it (Debian: redis-server)")
            })?;
        Ok(RedisServer { child, addr, password, dir: dir.to_path_buf() })
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        loop {
            let pong = client
                .get_connection_with_timeout(Duration::from_secs(1))
                .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
            let why = match pong {
                Ok(_) => return Ok(()),
                Err(e) => e.to_string(),
            };
            let exited = fs::metadata(format!("/proc/{}", self.pid())).is_err() || Instant::now() > deadline;
            if exited {
                let log = fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                return Err(format!(
                    "redis-server on {} did not answer ({why}); its log {}:\n{log}",
                    self.addr,
                    self.dir.join("redis.log").display()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://:PASSWORD@HOST:PORT`, for [`crate::RedisState::connect`].
    pub fn url(&self) -> String {
        format!("redis://:{}@{}", self.password, self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then SIGKILL if it has not exited within a few seconds.
    pub fn stop(&mut self) {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + EXIT_WITHIN;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }

    /// SIGKILL, as a crash would, and waits for it to be gone.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }

    fn signal(&mut self, signal: i32) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: kill(2) on the pid of our own child, which was not reaped yet.
            unsafe { libc::kill(self.pid() as i32, signal) };
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `url` with its password, if any, replaced by `***` (for messages and logs).
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// A port on `ip` that nothing listens on (just now).
fn free_port(ip: IpAddr) -> io::Result<u16> {
    Ok(TcpListener::bind((ip, 0))?.local_addr()?.port())
}

fn random_password() -> String {
    let mut raw = [0u8; 24];
    getrandom::getrandom(&mut raw).expect("the OS random source is unavailable");
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_private(path: &Path, text: &str) -> io::Result<()> {
    let _ = fs::remove_file(path);
    let mut file: File =
        OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)?;
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redacted_url_keeps_everything_but_the_password() {
        assert_eq!(redacted("redis://:s3cret@10.0.0.1:6379"), "redis://:***@10.0.0.1:6379");
        assert_eq!(redacted("redis://user:pw@h:1/0"), "redis://user:***@h:1/0");
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redacted("not a url"), "not a url");
    }
}
