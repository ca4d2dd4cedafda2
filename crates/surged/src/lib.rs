//! `surged`, the Surge storage daemon. One runs per node; daemon 0 also
//! keeps the namespace (the metadata daemon). [`start`] binds, announces
//! the daemon and serves until a `Shutdown` request or
//! [`RunningDaemon::shutdown`].
//!
//! The request path is a chain of stages behind small traits, chosen in one
//! place ([`Stages`], given to [`start_with`], named in the registry of
//! [`stages`]), so that checksum pipelines,
//! schedulers and caches plug in without rewrites. A connection thread
//! reads a request frame, and the frames pipelined behind it that arrived
//! whole, registering each at the scheduling point
//! ([`sched::SchedulingPoint`], which counts it per job and tells the
//! [`sched::Scheduler`]). In its turn, [`checksum::ChecksumStage`]
//! verifies the body, the request is decoded and admitted
//! ([`sched::Scheduler::admit`]), then the namespace (daemon 0) or the
//! [`cache::ReadCache`] (behind [`cache::ReadThrough`]) in front of the
//! [`store::ObjectStore`] and the PFS tier serves it. The reply's checksum
//! comes from the checksum stage too, and the request's ticket is released
//! once the reply has been sent. `testing` (feature `testing`) holds test
//! doubles of the stages.

mod blocksums;
pub mod cache;
pub mod checksum;
pub mod sched;
pub mod stages;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(any(test, feature = "testing"))]
pub use demote::Demotion;

mod appends;
mod background;
mod blkio;
mod bodies;
mod calibrate;
mod changes;
mod collector;
mod deleter;
mod demote;
mod demotion_control;
mod direct;
mod drain;
mod exporter;
mod failure;
mod fence;
mod fsck;
mod group_commit;
mod handles;
mod identity;
mod inventory;
mod job;
mod local;
mod locking;
mod logging;
mod meter;
mod metrics;
mod namespace;
mod nsdb;
mod peers;
mod pfs;
mod rates;
mod request_path;
mod server;
mod shard;
mod space;
mod stage_out;
mod stage_temps;
mod staged_copy;
mod stamp;
mod stream;
mod synced_store;
mod sys;
mod throttle;
mod xattrs;

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use surge_cluster::{ClusterError, DaemonEntry, PrivateDirError};
use surge_proto::{Layout, MAX_FRAME_DEFAULT};

pub use bodies::MAX_BODY_MEMORY_DEFAULT;
pub use demotion_control::RateControlKind;
pub use drain::config::{DrainConfig, DrainPolicyKind, Placement, TrimMode, DEFAULT_PERIOD as DEFAULT_DRAIN_PERIOD};
pub use drain::evict_order::EvictOrderKind;
pub use identity::StoreStart;
pub use stages::{StageNames, Stages};

use logging::log;

/// Everything a daemon needs to start.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// This daemon's index, `0..daemons`; daemon 0 is the metadata daemon.
    pub index: u32,
    /// Daemons in the cluster.
    pub daemons: u32,
    /// This daemon's own directory (objects, lock, and on daemon 0 the
    /// namespace); created if missing.
    pub buffer: PathBuf,
    /// Root of the PFS tier; must exist.
    pub pfs: PathBuf,
    pub secret_file: PathBuf,
    /// Reported to clients in the Hello reply.
    pub cluster_id: String,
    /// Where to announce the daemon once it serves (`daemon-<index>.toml`).
    pub register_dir: Option<PathBuf>,
    pub listen: SocketAddr,
    /// The IP clients use to reach the daemon; the listen IP if not set.
    pub advertise: Option<IpAddr>,
    /// Most bytes the objects may take; the device's free space if not set.
    pub capacity: Option<u64>,
    /// Largest request body accepted.
    pub max_frame: u32,
    /// Most bytes the request bodies of every connection may hold at once
    /// (`bodies`): a body that finds no room waits a little, then is refused
    /// with EAGAIN.
    pub max_body_memory: u64,
    /// Time a request frame has to arrive once its first byte did.
    pub frame_timeout: Duration,
    /// Time a new connection has to authenticate; connections that have
    /// not are also limited apart (`server::MAX_UNAUTHENTICATED`).
    pub handshake_timeout: Duration,
    /// The root directory's default layout, set when the namespace is created.
    pub root_layout: Layout,
    pub max_connections: usize,
    /// Per-connection rate cap in bytes/s, to model a file system whose
    /// single-connection path is the bottleneck; `None` (the default): off.
    pub conn_rate: Option<u64>,
    /// Daemon 0: time between rounds of the orphan collector (the first
    /// runs at start).
    pub collect_every: Duration,
    /// Daemon 0: how long an object must have been unchanged before the
    /// orphan collector may delete it.
    pub orphan_grace: Duration,
    /// Daemon 0: longest time a namespace change waits to be made durable
    /// with the others of that time (group commit); zero: every change is
    /// durable before it is acknowledged. `None`: [`default_commit_interval`].
    pub commit_interval: Option<Duration>,
    /// Where to serve the metrics for Prometheus (`GET /metrics`); `None`
    /// (the default): no endpoint. Port 0: any free port (the log says which).
    pub metrics: Option<SocketAddr>,
    /// Daemon 0: the data manager (`--drain`); off by default.
    pub drain: DrainConfig,
    /// How to treat the directory's store: new, existing, or back after a
    /// loss (`--store-start`; docs/core.md "A daemon that lost its store").
    pub store: StoreStart,
    /// Where the namespace is kept: daemon 0 alone, or a shard on every daemon (`shard`).
    pub namespace: surge_cluster::NamespacePolicy,
}

impl DaemonConfig {
    /// This daemon's shard, when the namespace is spread over the daemons.
    pub fn shard(&self) -> Option<namespace::Shard> {
        let count = self.namespace.shards(self.daemons);
        (count > 1).then_some(namespace::Shard { index: self.index, count })
    }

    /// A configuration with the defaults of every optional setting.
    pub fn new(
        index: u32,
        daemons: u32,
        buffer: impl Into<PathBuf>,
        pfs: impl Into<PathBuf>,
        secret_file: impl Into<PathBuf>,
        cluster_id: impl Into<String>,
    ) -> DaemonConfig {
        DaemonConfig {
            index,
            daemons,
            buffer: buffer.into(),
            pfs: pfs.into(),
            secret_file: secret_file.into(),
            cluster_id: cluster_id.into(),
            register_dir: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            capacity: None,
            max_frame: MAX_FRAME_DEFAULT,
            max_body_memory: bodies::MAX_BODY_MEMORY_DEFAULT,
            frame_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(5),
            root_layout: Layout::ROOT_DEFAULT,
            max_connections: 1024,
            conn_rate: None,
            collect_every: Duration::from_secs(300),
            orphan_grace: Duration::from_secs(300),
            commit_interval: None,
            metrics: None,
            drain: DrainConfig::default(),
            store: StoreStart::default(),
            namespace: surge_cluster::NamespacePolicy::default(),
        }
    }

    fn check(&self) -> Result<(), StartError> {
        let bad = |why: String| Err(StartError::Config(why));
        if self.daemons == 0 {
            return bad("a cluster has at least one daemon".into());
        }
        if self.index >= self.daemons {
            return bad(format!("index {} is not in 0..{} (the cluster's daemons)", self.index, self.daemons));
        }
        if self.namespace.shards(self.daemons) > surge_proto::shards::MAX_SHARDS {
            return bad(format!(
                "a namespace spread over the daemons has at most {} shards: use --namespace one beyond that",
                surge_proto::shards::MAX_SHARDS
            ));
        }
        if self.namespace.shards(self.daemons) > 1 && self.drain.is_on() {
            return bad("the data manager (--drain) runs with --namespace one only, for now: each shard's would \
                        set the daemons' rates on its own"
                .into());
        }
        if self.conn_rate == Some(0) {
            return bad("the per-connection rate cap must be positive (leave it out for no cap)".into());
        }
        if self.collect_every.is_zero() {
            return bad("the orphan collector's period must be positive".into());
        }
        if self.max_frame == 0
            || self.max_body_memory == 0
            || self.frame_timeout.is_zero()
            || self.handshake_timeout.is_zero()
            || self.max_connections == 0
        {
            return bad(
                "the frame and body memory limits, frame and handshake timeouts and connection limit must be positive"
                    .into(),
            );
        }
        if let Err(why) = self.drain.check() {
            return bad(why);
        }
        if self.root_layout.stripe_count == 0 {
            return bad("the root stripe count must be at least 1 (or -1 for every daemon)".into());
        }
        if let Err(why) = self.root_layout.validate(self.daemons) {
            return bad(format!("root layout: {why}"));
        }
        if self.advertise.is_none() && self.listen.ip().is_unspecified() {
            return bad(format!(
                "--listen {} accepts on every interface: give --advertise IP, the address clients should use",
                self.listen
            ));
        }
        Ok(())
    }
}

/// Why a daemon could not start.
#[derive(Debug)]
pub enum StartError {
    /// Settings that cannot work.
    Config(String),
    Secret(ClusterError),
    /// A directory someone else owns or may write to.
    Unsafe(PrivateDirError),
    /// A directory that cannot be used.
    Directory {
        what: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// Another daemon holds the buffer directory's lock.
    BufferInUse {
        path: PathBuf,
        holder: Option<u32>,
    },
    Namespace {
        path: PathBuf,
        error: String,
    },
    /// The data manager's state could not be opened or resumed.
    Drain(String),
    /// The directory's store was lost (or is not this daemon's), and the
    /// loss was not accepted; or it was and could not be recorded.
    StoreLost(String),
    Bind {
        addr: SocketAddr,
        error: io::Error,
    },
    /// The metrics endpoint could not listen.
    Metrics {
        addr: SocketAddr,
        error: io::Error,
    },
    Register {
        dir: PathBuf,
        error: io::Error,
    },
    Thread(io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Config(why) => write!(f, "invalid settings: {why}"),
            StartError::Secret(e) => write!(f, "{e}"),
            StartError::Unsafe(e) => write!(f, "{e}"),
            StartError::Directory { what, path, error } => write!(f, "cannot use {what} {}: {error}", path.display()),
            StartError::BufferInUse { path, holder } => {
                write!(f, "buffer directory {} is in use by another surged", path.display())?;
                match holder {
                    Some(pid) => write!(f, " (pid {pid})"),
                    None => Ok(()),
                }
            }
            StartError::Namespace { path, error } => write!(f, "cannot open the namespace {}: {error}", path.display()),
            StartError::Drain(error) => write!(f, "cannot start the data manager (--drain): {error}"),
            StartError::StoreLost(why) => write!(f, "{why}"),
            StartError::Bind { addr, error } => write!(f, "cannot listen on {addr}: {error}"),
            StartError::Metrics { addr, error } if error.kind() == io::ErrorKind::AddrInUse => write!(
                f,
                "cannot serve metrics on {addr}: port {} is taken by another process; choose another --metrics \
                 address (surge start: another --metrics-port)",
                addr.port()
            ),
            StartError::Metrics { addr, error } => write!(f, "cannot serve metrics on {addr}: {error}"),
            StartError::Register { dir, error } => {
                write!(f, "cannot write the registration in {}: {error}", dir.display())
            }
            StartError::Thread(error) => write!(f, "cannot start a thread of the daemon: {error}"),
        }
    }
}

impl std::error::Error for StartError {}

/// A daemon serving on its own threads.
pub struct RunningDaemon {
    addr: SocketAddr,
    control: Arc<server::Control>,
    accept: Option<JoinHandle<()>>,
    /// Daemon 0: its demotion, for tests to drive by hand.
    #[cfg(any(test, feature = "testing"))]
    demotion: Option<demote::Demotion>,
}

impl RunningDaemon {
    /// The address clients connect to: the advertised IP and the bound port.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Daemon 0's demotion (the data manager's steps), for tests.
    #[cfg(any(test, feature = "testing"))]
    pub fn demotion(&self) -> Option<&demote::Demotion> {
        self.demotion.as_ref()
    }

    /// Asks the daemon to stop: no new connections; open ones end once their
    /// request in service is answered. [`RunningDaemon::wait`] for the end.
    pub fn shutdown(&self) {
        self.control.stop();
    }

    /// Blocks until the daemon stopped (after a `Shutdown` request or
    /// [`RunningDaemon::shutdown`]) and released its directories.
    pub fn wait(mut self) {
        if let Some(accept) = self.accept.take() {
            if let Err(panic) = accept.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl Drop for RunningDaemon {
    fn drop(&mut self) {
        if let Some(accept) = self.accept.take() {
            self.control.stop();
            let _ = accept.join();
        }
    }
}

/// Starts a daemon with the default [`Stages`].
pub fn start(cfg: DaemonConfig) -> Result<RunningDaemon, StartError> {
    start_with(cfg, Stages::default())
}

/// Starts a daemon: checks the settings, takes the buffer directory, opens
/// the store (and on daemon 0 the namespace), binds, writes the
/// registration and serves on background threads.
pub fn start_with(cfg: DaemonConfig, stages: Stages) -> Result<RunningDaemon, StartError> {
    cfg.check()?;
    sys::raise_open_files_limit();
    let secret = surge_cluster::read_secret(&cfg.secret_file).map_err(StartError::Secret)?;
    let dir_error = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |error| StartError::Directory { what, path, error }
    };
    surge_cluster::private_dir(&cfg.buffer, "buffer directory").map_err(StartError::Unsafe)?;
    if let Some(dir) = &cfg.register_dir {
        surge_cluster::private_dir(dir, "registration directory").map_err(StartError::Unsafe)?;
    }
    let buffer = cfg.buffer.canonicalize().map_err(dir_error("buffer directory", &cfg.buffer))?;
    let buffer_lock = lock_buffer(&buffer)?;
    let pfs = Arc::new(pfs::Pfs::open(&cfg.pfs).map_err(dir_error("PFS directory", &cfg.pfs))?);
    let found = identity::examine(&buffer, cfg.index, cfg.daemons, cfg.store).map_err(StartError::StoreLost)?;
    let shard = cfg.shard();
    let namespace = if cfg.index == 0 || shard.is_some() {
        let path = buffer.join(identity::NAMESPACE);
        // Created here 0600 and not through a symlink; redb then opens a plain file.
        surge_cluster::open_private_file(&path).map_err(dir_error("namespace database", &path))?;
        let ns = namespace::Namespace::load_shard(&path, Arc::clone(&pfs), cfg.daemons, cfg.root_layout, shard)
            .map_err(|f| StartError::Namespace { path, error: f.to_string() })?
            .with_commit_interval(cfg.commit_interval.unwrap_or_else(|| default_commit_interval(&buffer)));
        // Begun by a daemon 0 that is gone: no commit of them can come.
        match ns.remove_stage_temps(&|_| false) {
            Ok(0) => {}
            Ok(n) => log!(Info, 0, "removed {n} stage-out temp(s) left by the last run from the PFS"),
            Err(f) => log!(Warn, 0, "stage-out temps left by the last run stay for the orphan collector: {f}"),
        }
        Some(Arc::new(ns))
    } else {
        None
    };
    let peer_secret = match &cfg.register_dir {
        Some(dir) => surge_cluster::peer_secret(dir).map_err(StartError::Secret)?,
        // A daemon without registrations calls no other daemon: a secret of its
        // own keeps every client out of the peer operations all the same.
        None => surge_cluster::random_secret(),
    };
    let peers = Arc::new(peers::Peers::new(cfg.index, peer_secret.clone(), cfg.register_dir.clone(), PEER_TIMEOUT));
    let record_loss = |whole: bool, inos: &[u64]| {
        shard::refuse_loss(shard, cfg.index).map_err(StartError::StoreLost)?;
        let marked = match &namespace {
            Some(ns) => ns.mark_lost(cfg.index, whole, inos),
            None => peers.call(0, &surge_proto::Request::MarkLost { daemon: cfg.index, whole, inos: inos.to_vec() }),
        };
        let reply: surge_proto::msg::MarkLostReply = marked.map_err(|f| {
            StartError::StoreLost(format!(
                "cannot record daemon {}'s loss with the metadata daemon (daemon 0 must be running: start it \
                 first): {f}",
                cfg.index
            ))
        })?;
        log!(Warn, cfg.index, "came back without {}: {} file(s) marked lost", what_lost(whole, inos), reply.files);
        Ok::<_, StartError>(reply)
    };
    let (mut identity, existing) = match found {
        identity::Found::New(id) => (id, false),
        identity::Found::Existing(id) => (id, true),
        identity::Found::WholeLoss(id) => {
            // Recorded before the store opens, so that a crash in between still knows what was lost.
            let reply = record_loss(true, &[])?;
            let id = identity::Identity { lost_below: reply.next_ino, ..id };
            id.write(&buffer).map_err(dir_error("daemon identity", &identity::Identity::path(&buffer)))?;
            (id, false)
        }
    };
    let space_freed = Arc::new(store::SpaceFreed::default());
    let site = store::StoreSite {
        dir: buffer.join("objects"),
        capacity: cfg.capacity,
        checksum: Arc::clone(&stages.checksum),
        freed: Arc::clone(&space_freed),
        existing,
        lost_below: identity.lost_below,
    };
    let store = (stages.store)(&site).map_err(dir_error("object directory", &site.dir))?;
    let lost = store.lost();
    if !lost.is_empty() {
        if cfg.store != StoreStart::AcceptLoss {
            return Err(StartError::StoreLost(format!(
                "daemon {index} lost {what}: missing from {dir} (removed outside Surge). Files with data on them \
                 cannot be read back whole. `surge start --daemon {index} --accept-loss` brings the daemon back \
                 with those files marked lost; or restore the objects and start it again",
                index = cfg.index,
                what = what_lost(false, &lost),
                dir = site.dir.display(),
            )));
        }
        record_loss(false, &lost)?;
        store.accept_lost().map_err(dir_error("object inventory", &site.dir))?;
        identity.epoch += 1;
    }
    // Written once the store is there: an identity always comes with its inventory.
    identity.write(&buffer).map_err(dir_error("daemon identity", &identity::Identity::path(&buffer)))?;
    let fence_record = buffer.join(fence::RECORD);
    let fence = fence::Fence::open(&fence_record).map_err(dir_error("record of retired inodes", &fence_record))?;
    let listener = TcpListener::bind(cfg.listen).map_err(|error| StartError::Bind { addr: cfg.listen, error })?;
    let bound = listener.local_addr().map_err(|error| StartError::Bind { addr: cfg.listen, error })?;
    let addr = SocketAddr::new(cfg.advertise.unwrap_or(bound.ip()), bound.port());
    let metrics_listener = match cfg.metrics {
        Some(at) => Some((TcpListener::bind(at).map_err(|error| StartError::Metrics { addr: at, error })?, at)),
        None => None,
    };
    let control = Arc::new(server::Control::new(listener));
    let local_socket = buffer.join(local::listener::SOCKET_NAME);
    let local_listener = match local::listener::bind(&local_socket) {
        Ok(listener) => {
            control.also_stop(std::os::fd::AsRawFd::as_raw_fd(&listener));
            Some(listener)
        }
        Err(e) => {
            log!(
                Warn,
                cfg.index,
                "no node-local data path (clients on this node use TCP): cannot listen on {}: {e}",
                local_socket.display()
            );
            None
        }
    };
    let deleter = background::Wake::default();
    let orphans = Arc::new(collector::OrphanCounts::default());
    // The files clients hold open (daemon 0), and those kept for them when it last stopped.
    let handles = Arc::new(match &namespace {
        Some(ns) => handles::Handles::with_kept(
            ns.kept_doomed()
                .map_err(|f| StartError::Namespace { path: buffer.join(identity::NAMESPACE), error: f.to_string() })?,
        ),
        None => handles::Handles::default(),
    });
    let stage_temps = Arc::new(stage_temps::StageTemps::default());
    let mut tasks = match &namespace {
        Some(ns) => metadata_daemon_tasks(&cfg, ns, &peers, &deleter, &orphans, &stage_temps),
        None => Vec::new(),
    };
    let drain = match &namespace {
        Some(ns) => {
            let setting = drain::Setting {
                config: cfg.drain.clone(),
                daemons: cfg.daemons,
                buffer: buffer.clone(),
                cluster_id: cfg.cluster_id.clone(),
                namespace: Arc::clone(ns),
                pfs: Arc::clone(&pfs),
                pfs_dir: cfg.pfs.clone(),
                peers: Arc::clone(&peers),
                deleter: deleter.clone(),
            };
            let manager =
                Arc::new(drain::DrainManager::start(setting, Arc::clone(&handles)).map_err(StartError::Drain)?);
            tasks.extend(drain::tasks(&manager));
            Some(manager)
        }
        None => None,
    };
    let device_size = surge_cluster::fs_space(&buffer).map_or(0, |(size, _)| size);
    let (trimmer, trim) =
        drain::trimmer::start(&cfg.drain, cfg.index, &buffer, &space_freed, cfg.capacity.unwrap_or(device_size));
    tasks.extend(trimmer);
    #[cfg(any(test, feature = "testing"))]
    let demotion = namespace.as_ref().map(|ns| demote::Demotion {
        peers: Arc::clone(&peers),
        namespace: Arc::clone(ns),
        deleter: deleter.clone(),
        daemons: cfg.daemons,
    });
    let request_path = request_path::RequestPath::new(request_path::Parts {
        index: cfg.index,
        shard,
        checksum: stages.checksum,
        scheduling: sched::SchedulingPoint::new(stages.scheduler),
        store,
        cache: cache::ReadThrough::new(stages.cache),
        fsck: namespace.as_ref().map(|ns| fsck::Fsck {
            namespace: Arc::clone(ns),
            peers: Arc::clone(&peers),
            daemons: cfg.daemons,
            grace: cfg.orphan_grace,
            stage_temps: Arc::clone(&stage_temps),
            deleter: deleter.clone(),
            shard,
        }),
        namespace,
        deleter,
        orphans,
        pfs,
        max_read: cfg.max_frame as usize,
        buffer: buffer.clone(),
        capacity: cfg.capacity,
        rates: rates::Rates::until_first_tick(cfg.drain.is_on()),
        demotion: demotion_control(&cfg, &buffer),
        space_freed,
        drain,
        handles,
        stage_temps: Arc::clone(&stage_temps),
        trim,
        fence,
    });
    let server = Arc::new(server::Server {
        request_path,
        control: Arc::clone(&control),
        settings: server::Settings {
            index: cfg.index,
            daemons: cfg.daemons,
            cluster_id: cfg.cluster_id.clone(),
            secret,
            peer_secret,
            max_frame: cfg.max_frame,
            frame_timeout: cfg.frame_timeout,
            handshake_timeout: cfg.handshake_timeout,
            max_connections: cfg.max_connections,
            conn_rate: cfg.conn_rate,
            stages: stages.names.to_string(),
        },
        started: Instant::now(),
        requests: AtomicU64::new(0),
        metrics: Arc::default(),
        bodies: bodies::BodyBudget::new(usize::try_from(cfg.max_body_memory).unwrap_or(usize::MAX)),
        _buffer_lock: buffer_lock,
    });
    let exporter = match metrics_listener {
        Some((listener, asked)) => Some(start_exporter(listener, asked, &server)?),
        None => None,
    };
    let metrics_addr = exporter.as_ref().map(exporter::Exporter::addr);
    // Weak: the background tasks, which hold `peers`, end before the server.
    let local = Arc::downgrade(&server);
    peers.serve_locally(Box::new(move |req| match local.upgrade() {
        Some(server) => server.request_path.call_locally(req),
        None => Err(failure::Failure::new(surge_proto::Errno::ENOTCONN, "the daemon stopped")),
    }));

    let background = background::Background::start(cfg.index, tasks).map_err(StartError::Thread)?;
    let stopper = background.stopper();
    // Watchers of the change feed wait in a request: answered at once, they let their connections end.
    let feed_of = server.request_path.namespace.namespace.clone();
    control.on_stop(move || {
        stopper.stop();
        if let Some(ns) = feed_of {
            ns.changes().close();
        }
    });

    // The registration tells clients the daemon is ready: the listener is
    // bound, and connections wait in its backlog until the accept thread runs.
    let registration = match &cfg.register_dir {
        Some(dir) => {
            let entry = DaemonEntry {
                index: cfg.index,
                addr: addr.to_string(),
                host: surge_cluster::hostname(),
                pid: std::process::id(),
                buffer: buffer.clone(),
                node: surge_cluster::this_node(),
                local_socket: local_listener.as_ref().map(|_| local_socket.clone()),
            };
            surge_cluster::register(dir, &entry).map_err(|error| StartError::Register { dir: dir.clone(), error })?;
            Some(Registration { dir: dir.clone(), entry })
        }
        None => None,
    };
    let index = cfg.index;
    if let Some(listener) = local_listener {
        let (control, server) = (Arc::clone(&control), Arc::downgrade(&server));
        thread::Builder::new()
            .name(format!("surged{index}-local"))
            .spawn(move || local::listener::run(index, control, server, listener, local_socket))
            .map_err(StartError::Thread)?;
    }
    let spawned = thread::Builder::new().name(format!("surged{index}-accept")).spawn(move || {
        server::run(&server);
        if let Some(exporter) = exporter {
            exporter.stop();
        }
        background.stop_and_join();
        // Close the store and the database (unless a stuck connection still
        // holds them) before saying we are gone.
        drop(server);
        if let Some(registration) = &registration {
            registration.remove();
        }
        log!(Info, index, "stopped");
    });
    let accept = match spawned {
        Ok(handle) => handle,
        Err(error) => {
            if let Some(dir) = &cfg.register_dir {
                let _ = fs::remove_file(registration_path(dir, index));
            }
            return Err(StartError::Thread(error));
        }
    };
    if let Some(metrics) = metrics_addr {
        log!(Info, index, "serving metrics on http://{metrics}/metrics");
    }
    let role = if index == 0 { "metadata and data daemon" } else { "data daemon" };
    log!(
        Info,
        index,
        "serving on {addr} as {role} {index} of {} (buffer {}, PFS {})",
        cfg.daemons,
        buffer.display(),
        cfg.pfs.display()
    );
    Ok(RunningDaemon {
        addr,
        control,
        accept: Some(accept),
        #[cfg(any(test, feature = "testing"))]
        demotion,
    })
}

/// Serves the metrics of `server` on `listener` (see `exporter`). The
/// endpoint holds the server weakly: it must not keep a stopped daemon's
/// store and namespace open.
fn start_exporter(
    listener: TcpListener,
    asked: SocketAddr,
    server: &Arc<server::Server>,
) -> Result<exporter::Exporter, StartError> {
    let index = server.settings.index;
    let weak = Arc::downgrade(server);
    let status: metrics::StatusSource = Box::new(move || match weak.upgrade() {
        Some(server) => server.status(),
        None => Err(failure::Failure::new(surge_proto::Errno::ENOTCONN, "the daemon stopped")),
    });
    let drain = server.request_path.drain.manager.as_ref().map(|manager| {
        let weak = Arc::downgrade(manager);
        let source: metrics::DrainSource = Box::new(move || match weak.upgrade() {
            Some(manager) => manager.report(),
            None => Err(failure::Failure::new(surge_proto::Errno::ENOTCONN, "the daemon stopped")),
        });
        source
    });
    let registry = metrics::registry(index, status, Arc::clone(&server.metrics), drain);
    exporter::Exporter::start(listener, index, registry).map_err(|error| StartError::Metrics { addr: asked, error })
}

/// The namespace's commit interval unless `--commit-interval` says
/// otherwise: 0 (every change durable at once) when the namespace is on a
/// tmpfs, where a flush costs nothing and redb's commits without durability
/// cost more than durable ones (measured: 0.41 ms against 0.52-0.63 ms a
/// create on a loaded machine); [`GROUPED_COMMIT_INTERVAL`] on a device
/// whose flushes cost (4.8-6.4 ms a create on a disk, 0.9 ms grouped).
pub fn default_commit_interval(buffer: &Path) -> Duration {
    if sys::on_tmpfs(buffer) {
        Duration::ZERO
    } else {
        GROUPED_COMMIT_INTERVAL
    }
}

/// The commit interval on a device whose flushes cost.
pub const GROUPED_COMMIT_INTERVAL: Duration = Duration::from_millis(50);

/// Limit on dialling another daemon and on each wait for its reply.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// What holds this daemon's demotion copies to the demotion rate: the
/// control `--drain-rate-control` asks for (see `demotion_control`).
fn demotion_control(cfg: &DaemonConfig, buffer: &Path) -> Box<dyn demotion_control::DemotionControl> {
    let daemon = demotion_control::Daemon { cluster_id: &cfg.cluster_id, index: cfg.index, buffer, pfs: &cfg.pfs };
    demotion_control::choose(cfg.drain.rate_control, &daemon, &demotion_control::Probe::default())
}

/// The background tasks of the metadata daemon (see `background`): the
/// deleter, woken by `deleter`, and the orphan collector.
fn metadata_daemon_tasks(
    cfg: &DaemonConfig,
    namespace: &Arc<namespace::Namespace>,
    peers: &Arc<peers::Peers>,
    deleter: &background::Wake,
    orphans: &Arc<collector::OrphanCounts>,
    stage_temps: &Arc<stage_temps::StageTemps>,
) -> Vec<background::Registration> {
    let deleter_task =
        deleter::Deleter { namespace: Arc::clone(namespace), peers: Arc::clone(peers), daemons: cfg.daemons };
    let collector = collector::Collector {
        namespace: Arc::clone(namespace),
        peers: Arc::clone(peers),
        daemons: cfg.daemons,
        every: cfg.collect_every,
        grace: cfg.orphan_grace,
        counts: Arc::clone(orphans),
        stage_temps: Arc::clone(stage_temps),
        shard: cfg.shard(),
    };
    let mut tasks = vec![
        background::Registration::new(deleter_task, deleter.clone()),
        background::Registration::new(collector, background::Wake::default()),
    ];
    if !namespace.commit_interval().is_zero() {
        let committer = group_commit::GroupCommitter { namespace: Arc::clone(namespace) };
        tasks.push(background::Registration::new(committer, background::Wake::default()));
    }
    tasks
}

/// Locks `<buffer>/LOCK` (flock, released when the file closes, even on
/// kill -9) and records our pid in it for the error message of the next one.
/// "its store", or "N object(s) (inodes ...)", for messages about a loss.
fn what_lost(whole: bool, inos: &[u64]) -> String {
    if whole {
        return "its store".into();
    }
    let shown: Vec<String> = inos.iter().take(8).map(u64::to_string).collect();
    let more = if inos.len() > shown.len() { ", ..." } else { "" };
    format!("{} object(s) (inodes {}{more})", inos.len(), shown.join(", "))
}

fn lock_buffer(buffer: &Path) -> Result<File, StartError> {
    let path = buffer.join("LOCK");
    let io_error = |error| StartError::Directory { what: "buffer lock", path: path.clone(), error };
    let mut file = surge_cluster::open_private_file(&path).map_err(io_error)?;
    match sys::try_lock_exclusive(&file) {
        Ok(()) => {
            // Over the old pid, then cut to length: on a full device a
            // restart needs no new block.
            writeln!(file, "{}", std::process::id()).map_err(io_error)?;
            let end = file.stream_position().map_err(io_error)?;
            file.set_len(end).map_err(io_error)?;
            Ok(file)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            let mut text = String::new();
            let holder = file.read_to_string(&mut text).ok().and_then(|_| text.trim().parse().ok());
            Err(StartError::BufferInUse { path: buffer.to_path_buf(), holder })
        }
        Err(e) => Err(io_error(e)),
    }
}

/// The file `surge_cluster::register` writes for daemon `index`.
fn registration_path(dir: &Path, index: u32) -> PathBuf {
    dir.join(format!("daemon-{index}.toml"))
}

struct Registration {
    dir: PathBuf,
    entry: DaemonEntry,
}

impl Registration {
    /// Removes our registration, unless a newer daemon replaced it.
    fn remove(&self) {
        if surge_cluster::registrations(&self.dir).contains(&self.entry) {
            if let Err(e) = fs::remove_file(registration_path(&self.dir, self.entry.index)) {
                log!(Warn, self.entry.index, "cannot remove the registration in {}: {e}", self.dir.display());
            }
        }
    }
}
