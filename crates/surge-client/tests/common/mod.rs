//! A real Surge cluster for tests: `surged` processes on loopback with
//! temporary buffer and PFS directories, started the way `surge start`
//! starts them, killed when the cluster is dropped.

#![allow(dead_code)] // Each test binary uses its own part of this harness.

use std::fs;
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use surge_client::{Client, ClientConfig, ClusterFile, DaemonEntry};
use surge_proto::frame;
use surge_proto::msg::{HelloReply, ObjStatReply};
use surge_proto::{auth, Encoder, Reply, Request, MAX_FRAME_DEFAULT};
use surge_testkit::daemon::{surged_command, wait_registered, DaemonSetup};
use surge_testkit::wire;

pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub cluster_file: PathBuf,
    pub cluster: ClusterFile,
    daemons: Vec<Option<Child>>,
    /// Extra `surged` arguments of every daemon.
    daemon_args: Vec<String>,
}

impl TestCluster {
    pub fn start(count: u32) -> TestCluster {
        Self::start_in(count, &std::env::temp_dir())
    }

    /// A cluster whose directories are under `base` (e.g. tmpfs, as flash).
    pub fn start_in(count: u32, base: &Path) -> TestCluster {
        Self::start_with(count, base, &[])
    }

    /// A cluster whose daemons all get `daemon_args` too (e.g. `--capacity`).
    pub fn start_with(count: u32, base: &Path, daemon_args: &[&str]) -> TestCluster {
        let dir = tempfile::tempdir_in(base).unwrap();
        let cluster_file = dir.path().join("cluster.toml");
        let secret_file = dir.path().join("secret");
        surge_cluster::generate_secret(&secret_file).unwrap();
        let pfs = dir.path().join("pfs");
        fs::create_dir_all(&pfs).unwrap();
        let mut cluster = ClusterFile {
            version: surge_cluster::CLUSTER_FILE_VERSION,
            cluster_id: surge_cluster::new_cluster_id(),
            secret_file,
            pfs,
            daemons: Vec::new(),
            connections: Default::default(),
            namespace: Default::default(),
        };
        let daemon_args = daemon_args.iter().map(|a| a.to_string()).collect();
        let mut me = TestCluster { dir, cluster_file, cluster: cluster.clone(), daemons: Vec::new(), daemon_args };
        for index in 0..count {
            let child = me.spawn(index, count, "127.0.0.1:0");
            me.daemons.push(Some(child));
        }
        cluster.daemons = (0..count).map(|i| me.wait_registered(i)).collect();
        cluster.save(&me.cluster_file).unwrap();
        me.cluster = cluster;
        me
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.cluster_file).unwrap()
    }

    pub fn client_with_timeout(&self, io_timeout: Duration) -> Client {
        let config = ClientConfig { io_timeout, connect_timeout: io_timeout, ..ClientConfig::from_env().unwrap() };
        Client::connect_with(&self.cluster_file, config).unwrap()
    }

    pub fn pfs(&self) -> &Path {
        &self.cluster.pfs
    }

    fn registration_dir(&self) -> PathBuf {
        surge_cluster::registration_dir(&self.cluster_file)
    }

    /// Every object inode on daemon `daemon` (paging through `ObjList`).
    pub fn object_inos(&self, daemon: u32) -> Vec<u64> {
        let mut raw = RawConn::dial_as_peer(self, daemon);
        let (mut inos, mut after) = (Vec::new(), 0);
        loop {
            let page: surge_proto::msg::ObjListReply =
                raw.call(&surge_proto::Request::ObjList { after, max: 0 }).unwrap();
            inos.extend(page.objects.iter().map(|o| o.ino));
            match page.objects.last() {
                Some(last) if !page.end => after = last.ino,
                _ => return inos,
            }
        }
    }

    /// Daemon `index`'s buffer directory (its objects; daemon 0's namespace).
    pub fn daemon_dir(&self, index: u32) -> PathBuf {
        self.dir.path().join(format!("buffer{index}"))
    }

    fn spawn(&self, index: u32, count: u32, listen: &str) -> Child {
        let buffer = self.daemon_dir(index);
        fs::create_dir_all(&buffer).unwrap();
        let log = fs::File::create(self.dir.path().join(format!("surged{index}.log"))).unwrap();
        let registrations = self.registration_dir();
        let setup = DaemonSetup {
            buffer,
            pfs: &self.cluster.pfs,
            secret_file: &self.cluster.secret_file,
            cluster_id: &self.cluster.cluster_id,
            register_dir: &registrations,
        };
        let mut extra = vec!["--listen", listen];
        extra.extend(self.daemon_args.iter().map(String::as_str));
        let mut command = surged_command(&surged_binary(), index, count, &setup, &extra);
        // SAFETY: prctl is async-signal-safe. Should the test process die
        // without running Drop (a harness timeout), its daemons die with it.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        command.stdout(log.try_clone().unwrap()).stderr(log).spawn().expect("start surged")
    }

    fn wait_registered(&mut self, index: u32) -> DaemonEntry {
        let registrations = self.registration_dir();
        let child = self.daemons[index as usize].as_mut().unwrap();
        let log = self.dir.path().join(format!("surged{index}.log"));
        wait_registered(&registrations, index, child, || fs::read_to_string(&log).unwrap_or_default())
    }

    pub fn log(&self, index: u32) -> String {
        fs::read_to_string(self.dir.path().join(format!("surged{index}.log"))).unwrap_or_default()
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self, index: u32) {
        if let Some(mut child) = self.daemons[index as usize].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` to daemon `index` (SIGSTOP and SIGCONT, as a hung node).
    pub fn signal(&self, index: u32, signal: i32) {
        if let Some(child) = &self.daemons[index as usize] {
            // SAFETY: kill(2) on a daemon this harness started and still owns.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    /// Starts daemon `index` again on its old address and directories, with
    /// `args` beyond the cluster's (`--store-start accept-loss` after a loss).
    pub fn restart_with(&mut self, index: u32, args: &[&str]) {
        let cluster_args = self.daemon_args.clone();
        self.daemon_args.extend(args.iter().map(|a| a.to_string()));
        self.restart(index);
        self.daemon_args = cluster_args;
    }

    /// Starts daemon `index` again on its old address and directories.
    pub fn restart(&mut self, index: u32) {
        self.kill(index);
        let addr = self.cluster.daemons[index as usize].addr.clone();
        let count = self.cluster.daemons.len() as u32;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut child = self.spawn(index, count, &addr);
            std::thread::sleep(Duration::from_millis(50));
            // The old socket may linger briefly; retry until the port is free.
            match child.try_wait() {
                Ok(Some(_)) if Instant::now() < deadline => continue,
                _ => {
                    self.daemons[index as usize] = Some(child);
                    break;
                }
            }
        }
        let entry = self.wait_registered(index);
        assert_eq!(entry.addr, addr);
    }

    /// The file that holds object `ino` on daemon `daemon`'s device.
    pub fn object_file(&self, daemon: u32, ino: u64) -> PathBuf {
        let objects = self.dir.path().join(format!("buffer{daemon}")).join("objects");
        objects.join(format!("{:02x}", ino & 0xff)).join(format!("{ino:016x}"))
    }

    /// An object's size as its daemon reports it, over a raw connection.
    /// The size of `ino`'s object on `daemon`: 0 when there is none, or
    /// when it is retired (the deleter retires an object, then deletes it).
    pub fn object_size(&self, daemon: u32, ino: u64) -> u64 {
        let mut raw = RawConn::dial(self, daemon);
        raw.call::<ObjStatReply>(&Request::ObjStat { ino }).map(|r| r.size).unwrap_or_else(|errno| {
            assert!([libc::ENOENT, libc::ESTALE].contains(&errno), "ObjStat on daemon {daemon}: errno {errno}");
            0
        })
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for index in 0..self.daemons.len() as u32 {
            self.kill(index);
        }
    }
}

/// A protocol-level connection, for checking what daemons hold.
pub struct RawConn(wire::Client);

impl RawConn {
    pub fn dial(cluster: &TestCluster, daemon: u32) -> RawConn {
        let addr = cluster.cluster.daemons[daemon as usize].addr.parse().unwrap();
        RawConn(wire::Client::authenticated(addr, &cluster.cluster.secret().unwrap()))
    }

    /// A connection as another daemon (the peer secret), for the operations
    /// only daemons send each other: listing, retiring, ticks.
    pub fn dial_as_peer(cluster: &TestCluster, daemon: u32) -> RawConn {
        let addr = cluster.cluster.daemons[daemon as usize].addr.parse().unwrap();
        RawConn(wire::Client::peer(addr, &cluster.registration_dir()))
    }

    /// The decoded reply, or the errno the daemon answered with.
    pub fn call<R: Reply>(&mut self, req: &Request<'_>) -> Result<R, i32> {
        let answer = self.0.call(req);
        match answer.errno() {
            Some(errno) => Err(errno.0),
            None => Ok(R::from_body(&answer.body).unwrap()),
        }
    }
}

/// The `surged` binary of this target directory, built once if missing.
pub fn surged_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            // The test runs as <target>/<profile>/deps/<test>-<hash>.
            let exe = std::env::current_exe().unwrap();
            let profile_dir = exe.parent().and_then(Path::parent).expect("test binary inside a target dir");
            let binary = profile_dir.join("surged");
            if !binary.exists() {
                let target_dir = profile_dir.parent().expect("profile dir inside a target dir");
                let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
                build.args(["build", "-p", "surged"]).env("CARGO_TARGET_DIR", target_dir);
                if profile_dir.file_name().is_some_and(|p| p == "release") {
                    build.arg("--release");
                }
                let status = build.status().expect("run cargo build -p surged");
                assert!(status.success() && binary.exists(), "cargo build -p surged failed");
            }
            binary
        })
        .clone()
}

/// A TCP relay in front of a daemon that can cut every connection through
/// it at once, as a network fault or a daemon dropping clients would, and
/// can refuse new ones.
pub struct CuttingProxy {
    pub addr: std::net::SocketAddr,
    links: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
    refusing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub cuts: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl CuttingProxy {
    pub fn start(target: &str) -> CuttingProxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = CuttingProxy {
            addr: listener.local_addr().unwrap(),
            links: Default::default(),
            refusing: Default::default(),
            cuts: Default::default(),
        };
        let (links, refusing, target) = (proxy.links.clone(), proxy.refusing.clone(), target.to_string());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if refusing.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(server) = TcpStream::connect(&target) else { continue };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let mut all = links.lock().unwrap();
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (mut from, mut to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
                all.push(client);
                all.push(server);
            }
        });
        proxy
    }

    /// Closes every connection through the proxy, mid-transfer or not.
    pub fn cut_all(&self) {
        let mut links = self.links.lock().unwrap();
        for stream in links.drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        self.cuts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn refuse_new(&self, refuse: bool) {
        self.refusing.store(refuse, std::sync::atomic::Ordering::SeqCst);
    }
}

impl TestCluster {
    /// A copy of the cluster file whose daemon addresses are `proxies`.
    pub fn cluster_file_via(&self, proxies: &[CuttingProxy]) -> PathBuf {
        let mut cluster = self.cluster.clone();
        for (d, p) in cluster.daemons.iter_mut().zip(proxies) {
            d.addr = p.addr.to_string();
            // Through the proxies only, as over a network: not the node-local socket.
            d.local_socket = None;
        }
        let path = self.dir.path().join("via-proxies.toml");
        cluster.save(&path).unwrap();
        path
    }
}

/// A raw client of a daemon's Unix socket, authenticated.
pub struct LocalConn {
    pub stream: UnixStream,
    next_id: u64,
}

impl LocalConn {
    pub fn dial(cluster: &TestCluster, daemon: u32) -> LocalConn {
        let socket = cluster.cluster.daemons[daemon as usize].local_socket.clone().expect("a node-local socket");
        let stream = UnixStream::connect(socket).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut conn = LocalConn { stream, next_id: 1 };
        let instance = surge_proto::msg::new_client_instance();
        let hello: HelloReply = conn
            .call(&Request::Hello { client: "test", job_label: "job", pid: std::process::id(), host: "here", instance })
            .unwrap();
        let secret = cluster.cluster.secret().unwrap();
        conn.call::<()>(&Request::Auth { proof: auth::prove(&secret, &hello.nonce) }).unwrap();
        conn
    }

    pub fn call<R: Reply>(&mut self, req: &Request<'_>) -> Result<R, i32> {
        let mut head = Encoder::new();
        let bulk = req.encode(&mut head);
        let mut frame = Vec::new();
        frame::write_request(&mut frame, req.op() as u8, self.next_id, 1, 0, &head.buf, bulk).unwrap();
        self.next_id += 1;
        self.stream.write_all(&frame).unwrap();
        let hdr = frame::read_reply_header(&mut self.stream, MAX_FRAME_DEFAULT).unwrap();
        let mut body = vec![0; hdr.body_len as usize];
        frame::read_reply_body(&mut self.stream, &hdr, &mut body).unwrap();
        match hdr.status {
            0 => Ok(R::from_body(&body).unwrap()),
            errno => Err(errno),
        }
    }
}
