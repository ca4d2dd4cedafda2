//! `surged`: parses the command line and runs the daemon until Shutdown.

use clap::{Parser, ValueEnum};
use log::LevelFilter;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use surge_bbos::thresholds::Bandwidths;
use surge_proto::layout::{LayoutPlacement, DEFAULT_STRIPE_SIZE, STRIPE_ALL};
use surge_proto::{Layout, MAX_FRAME_DEFAULT};
use surged::stages::{self, StageOptions};
use surged::{
    DaemonConfig, DrainConfig, DrainPolicyKind, EvictOrderKind, Placement, RateControlKind, StageNames, StartError,
    StoreStart, TrimMode, DEFAULT_DRAIN_PERIOD as DEFAULT_PERIOD, MAX_BODY_MEMORY_DEFAULT,
};

/// The Surge storage daemon: serves one node's share of the burst buffer;
/// daemon 0 also serves the namespace. Normally started by `surge start`.
#[derive(Parser, Debug)]
#[command(name = "surged", version)]
struct Args {
    /// This daemon's index in the cluster, 0..N (daemon 0 is the metadata daemon)
    #[arg(long, value_name = "I")]
    index: u32,

    /// Number of daemons in the cluster
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    daemons: u32,

    /// This daemon's own buffer directory (created if missing; one daemon per directory)
    #[arg(long, value_name = "DIR")]
    buffer: PathBuf,

    /// Root directory of the PFS tier (must exist)
    #[arg(long, value_name = "DIR")]
    pfs: PathBuf,

    /// Cluster secret file (hex, mode 600)
    #[arg(long, value_name = "F")]
    secret_file: PathBuf,

    /// Cluster id, reported to clients when they connect
    #[arg(long, value_name = "ID")]
    cluster_id: String,

    /// Directory to announce this daemon in (daemon-<I>.toml), once it is ready to serve
    #[arg(long, value_name = "D")]
    register_dir: Option<PathBuf>,

    /// Address to listen on (port 0: any free port)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: SocketAddr,

    /// IP address clients should use to reach this daemon [default: the listen address]
    #[arg(long, value_name = "IP")]
    advertise: Option<IpAddr>,

    /// Most bytes this daemon's objects may take on its device [default: what the device has,
    /// less a reserve kept for the namespace and the log]
    #[arg(long, value_name = "BYTES")]
    capacity: Option<u64>,

    /// Largest request body accepted, in bytes
    #[arg(long, value_name = "BYTES", default_value_t = MAX_FRAME_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_frame: u32,

    /// Most bytes the request bodies being received on every connection may
    /// hold at once; a body that finds no room waits up to 5 s, then is
    /// refused with EAGAIN (1 GiB by default)
    #[arg(long, value_name = "BYTES", default_value_t = MAX_BODY_MEMORY_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_body_memory: u64,

    /// Seconds a request may take to arrive once its first byte did, and a
    /// node-local client holding a write grant may take to commit it
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    frame_timeout: u64,

    /// Stripe count of the root directory's default layout, -1 for every daemon
    /// [default: -1] (metadata daemon only; applied when the namespace is created)
    #[arg(long, value_name = "C", allow_negative_numbers = true, value_parser = parse_stripe_count)]
    stripe_count: Option<u32>,

    /// Stripe size in bytes of the root directory's default layout, a multiple
    /// of 64 KiB [default: 1 MiB] (metadata daemon only; applied when the namespace is created)
    #[arg(long, value_name = "BYTES")]
    stripe_size: Option<u64>,

    /// How the root directory's new files choose their first daemon: auto (spread over every
    /// daemon) or local (a daemon of the creating client's node) [default: auto] (metadata
    /// daemon only; applied when the namespace is created)
    #[arg(long, value_name = "PLACEMENT", value_parser = str::parse::<LayoutPlacement>)]
    placement: Option<LayoutPlacement>,

    /// Where the namespace is kept: one (daemon 0 keeps it all) or hashed (every daemon keeps
    /// the entries of the directories whose path hashes to it); every daemon of a cluster gets
    /// the same, for as long as its buffer directories live
    #[arg(long, value_name = "POLICY", default_value = "one", value_parser = str::parse::<surge_cluster::NamespacePolicy>)]
    namespace: surge_cluster::NamespacePolicy,

    /// Seconds a new connection has to authenticate before it is closed
    #[arg(long, value_name = "SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    handshake_timeout: u64,

    /// Most authenticated client connections served at once (connections
    /// still authenticating are limited apart, to 64)
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,

    /// Cap each connection's data rate at this many bytes/s (suffixes K, M, G: powers of 1000),
    /// to model a file system whose single-connection path is the bottleneck [default: off]
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    conn_rate: Option<u64>,

    /// Seconds between rounds of the orphan collector, which deletes objects that belong to no
    /// file; the first round runs at start (metadata daemon only)
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    collect_every: u64,

    /// Seconds an object must have been unchanged before the orphan collector may delete it
    /// (metadata daemon only)
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    orphan_grace: u64,

    /// Longest time, in milliseconds, a namespace change (a create, a removal, a rename) waits to
    /// be made durable, together with the others of that time (group commit); fsync of a file or
    /// a directory makes them durable at once, and a crash of the daemon loses at most the
    /// changes of the last interval that nobody fsynced. 0: every change is durable before it is
    /// acknowledged (metadata daemon only) [default: 0 when the buffer is on a tmpfs, where a flush
    /// is free; 50 elsewhere]
    #[arg(long, value_name = "MS")]
    commit_interval: Option<u64>,

    /// Serve metrics for Prometheus at http://ADDR/metrics, an IP:PORT such as 127.0.0.1:9300
    /// (port 0: any free port; the log names it) [default: off]
    #[arg(long, value_name = "ADDR", value_parser = parse_metrics_addr)]
    metrics: Option<SocketAddr>,

    /// The data manager's policy, which demotes checkpoints from the buffer to the PFS on its own
    /// (metadata daemon only; docs/bbos.md)
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = DrainPolicyKind::Off)]
    drain: DrainPolicyKind,

    /// Seconds per drain period: the data written is counted per period and the policy plans each
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_PERIOD.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    drain_period: u64,

    /// The buffer's rates the drain policy plans with, in MB/s: checkpoint writes alone, writes beside
    /// a full-speed demotion, demotion alone, demotion beside full-speed writes [default: measured at
    /// start]
    #[arg(long, value_name = "BWMAX,BWMIN,BRMAX,BRMIN", value_parser = Bandwidths::parse_mbps)]
    drain_rates: Option<Bandwidths>,

    /// Keep the drain state in this Redis (redis://HOST:PORT) [default: drain.redb in the buffer
    /// directory]; if Redis goes away, the embedded store takes over. `surge start` passes it in the
    /// environment, where a password in it stays out of `ps`
    #[arg(long, value_name = "URL", env = "SURGE_DRAIN_STATE", hide_env_values = true)]
    drain_state: Option<String>,

    /// The order in which the data manager evicts demoted checkpoints when it needs space: BBOS's
    /// (outdated versions, then the coldest jobs, highest MTBF first), or the baselines LRU (least
    /// recently opened) and FIFO (oldest written) (docs/bbos.md)
    #[arg(long, value_name = "ORDER", value_enum, default_value_t = EvictOrderKind::Bbos)]
    drain_evict: EvictOrderKind,

    /// Where new checkpoints go: `cold` writes a new file the placement policy finds cold (past the
    /// buffer's capacity this period, of a job among the highest MTBFs) to the PFS directly, so it
    /// is never demoted; `off` writes every file into the buffer (needs --drain; docs/bbos.md)
    #[arg(long, value_name = "PLACEMENT", value_enum, default_value_t = Placement::Off)]
    drain_direct: Placement,

    /// Keep a second copy of every demoted file in this directory (absolute; another device or node,
    /// such as a mounted remote file system), under the file's path, copied and verified after its
    /// demotion (needs --drain; docs/bbos.md, "Replicators") [default: off]
    #[arg(long, value_name = "DIR")]
    drain_replica: Option<PathBuf>,

    /// Cap on the replicator's copies, bytes/s such as 100M or 1.5G [default: unlimited]
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    drain_replica_rate: Option<u64>,

    /// What holds demotion copies to the demotion rate: `token`, the daemon's token bucket; `blkio`,
    /// the kernel's cgroup-v1 blkio throttling of the buffer's and PFS's disks, copying with O_DIRECT
    /// (needs root, /sys/fs/cgroup/blkio and both directories on block devices; falls back to the
    /// token bucket, with a warning, when it cannot); `auto`: blkio where it can be had, else token
    /// (docs/bbos.md, "Enforcement")
    #[arg(long, value_name = "CONTROL", value_enum, default_value_t = RateControlKind::Token)]
    drain_rate_control: RateControlKind,

    /// TRIM after deletions: `auto` has every daemon issue FITRIM on its buffer's file system, at
    /// most once per drain period, once deletions freed 1/16 of the buffer (at most 64 MiB), so
    /// the SSD's garbage collection does not slow later checkpoints; needs root (CAP_SYS_ADMIN) and
    /// a file system and device with discard, else it reports itself unsupported; `off` never
    /// trims (needs --drain; docs/bbos.md, "TRIM")
    #[arg(long, value_name = "MODE", value_enum, default_value_t = TrimMode::Auto)]
    drain_trim: TrimMode,

    /// Cap on a TRIM pass, in MB/s of the file system's byte ranges asked to trim (used or free; 0:
    /// unlimited): the trimmer asks one 128 MiB range (an ext4 block group) at a time and paces them,
    /// so that a pass does not slow the checkpoints written meanwhile [Sung20, §5.2.4]; the default
    /// passes over 600 GB within the default drain period (docs/bbos.md, "TRIM")
    #[arg(long, value_name = "MB/s", default_value = "1000", allow_negative_numbers = true,
          value_parser = surge_cluster::parse_mbps_limit)]
    drain_trim_rate: u64,

    /// How to treat the store in --buffer: `new` makes one in an empty directory (and otherwise
    /// checks it is this daemon's), `existing` requires it whole (a restart: `surge start --daemon
    /// N`), `accept-loss` comes back after a loss with the files that lost data marked lost
    /// (docs/core.md)
    #[arg(long, value_name = "HOW", value_enum, default_value_t = StoreStart::New)]
    store_start: StoreStart,

    /// The scheduling point, which orders and admits requests
    #[arg(long, value_name = "NAME", default_value = stages::SCHEDULERS[0].name,
          value_parser = stages::possible(stages::SCHEDULERS))]
    scheduler: String,

    /// The checksum stage, which checks every request body and computes every checksum kept
    #[arg(long, value_name = "NAME", default_value = stages::CHECKSUMS[0].name,
          value_parser = stages::possible(stages::CHECKSUMS))]
    checksum: String,

    /// The read cache in front of the object store and the PFS tier
    #[arg(long, value_name = "NAME", default_value = stages::CACHES[0].name,
          value_parser = stages::possible(stages::CACHES))]
    cache: String,

    /// Most bytes the read cache keeps, such as 256M or 2G (binary units)
    #[arg(long, value_name = "BYTES", default_value_t = stages::DEFAULT_CACHE_SIZE,
          value_parser = surge_cluster::parse_size)]
    cache_size: u64,

    /// Threads a checksum stage that spreads its batches (crc32c-threads) uses, the connection's
    /// own among them [default: the CPUs]
    #[arg(long, value_name = "N")]
    checksum_threads: Option<NonZeroUsize>,

    /// Most requests a depth-bounded scheduler (job-rr) lets run at once [default: 14]
    #[arg(long, value_name = "N")]
    queue_depth: Option<NonZeroUsize>,

    /// The object store, which keeps the buffer's objects and their checksums
    #[arg(long, value_name = "NAME", default_value = stages::STORES[0].name,
          value_parser = stages::possible(stages::STORES))]
    store: String,

    /// Print every registered stage implementation (KIND=NAME, a tab, what it is) and exit; given
    /// alone
    #[arg(long = "list-stages", exclusive = true)]
    _list_stages: bool,

    /// Least severe messages written to the log (stderr)
    #[arg(long, value_name = "LEVEL", env = "SURGE_LOG", value_enum, ignore_case = true, default_value_t = LogLevel::Info)]
    log_level: LogLevel,
}

/// How much the daemon logs: each level includes the ones above it.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogLevel {
    /// Failures that need someone's attention (EIO, a task that panicked)
    Error,
    /// Refused connections and requests, retried background rounds
    Warn,
    /// Start, stop, the addresses served on, what the orphan collector did
    Info,
    /// Every connection and authentication
    Debug,
}

impl From<LogLevel> for LevelFilter {
    fn from(level: LogLevel) -> LevelFilter {
        match level {
            LogLevel::Error => LevelFilter::Error,
            LogLevel::Warn => LevelFilter::Warn,
            LogLevel::Info => LevelFilter::Info,
            LogLevel::Debug => LevelFilter::Debug,
        }
    }
}

/// Writes the log lines at `level` and above to stderr. The daemon's own
/// lines come as `surged[<index>]: message`; those of the crates it uses
/// get the same prefix and their origin.
fn init_logging(index: u32, level: LogLevel) {
    env_logger::Builder::new()
        .filter_level(level.into())
        .format(move |out, record| {
            if record.target().split("::").next() == Some("surged") {
                writeln!(out, "{}", record.args())
            } else {
                writeln!(out, "surged[{index}]: {}: {}", record.target(), record.args())
            }
        })
        .init();
}

fn parse_metrics_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| format!("expected IP:PORT, such as 127.0.0.1:9300 (port 0: any free port), not {text:?}"))
}

fn parse_rate(text: &str) -> Result<u64, String> {
    surge_cluster::parse_rate(text)
}

fn parse_stripe_count(text: &str) -> Result<u32, String> {
    match text.parse::<i64>() {
        Ok(-1) => Ok(STRIPE_ALL),
        Ok(n) if n >= 1 && n < STRIPE_ALL as i64 => Ok(n as u32),
        _ => Err("expected a number of daemons (1 or more) or -1 for all".into()),
    }
}

impl Args {
    /// The stages named by `--scheduler`, `--checksum`, `--cache` and `--store`.
    fn stage_names(&self) -> StageNames {
        let defaults = StageOptions::default();
        StageNames {
            scheduler: self.scheduler.clone(),
            checksum: self.checksum.clone(),
            cache: self.cache.clone(),
            store: self.store.clone(),
            options: StageOptions {
                cache_size: self.cache_size,
                checksum_threads: self.checksum_threads.unwrap_or(defaults.checksum_threads),
                queue_depth: self.queue_depth.unwrap_or(defaults.queue_depth),
            },
        }
    }

    fn into_config(self) -> DaemonConfig {
        DaemonConfig {
            register_dir: self.register_dir,
            listen: self.listen,
            advertise: self.advertise,
            capacity: self.capacity,
            max_frame: self.max_frame,
            max_body_memory: self.max_body_memory,
            frame_timeout: Duration::from_secs(self.frame_timeout),
            handshake_timeout: Duration::from_secs(self.handshake_timeout),
            root_layout: Layout {
                stripe_count: self.stripe_count.unwrap_or(STRIPE_ALL),
                stripe_size: self.stripe_size.unwrap_or(DEFAULT_STRIPE_SIZE),
                first: self.placement.unwrap_or_default().first(),
            },
            max_connections: self.max_connections as usize,
            conn_rate: self.conn_rate,
            collect_every: Duration::from_secs(self.collect_every),
            orphan_grace: Duration::from_secs(self.orphan_grace),
            commit_interval: self.commit_interval.map(Duration::from_millis),
            metrics: self.metrics,
            store: self.store_start,
            namespace: self.namespace,
            drain: DrainConfig {
                policy: self.drain,
                period: Duration::from_secs(self.drain_period),
                rates: self.drain_rates,
                state: self.drain_state,
                evict: self.drain_evict,
                direct: self.drain_direct,
                replica: self.drain_replica,
                replica_rate: self.drain_replica_rate.unwrap_or(0),
                rate_control: self.drain_rate_control,
                trim: self.drain_trim,
                trim_rate: self.drain_trim_rate,
            },
            ..DaemonConfig::new(self.index, self.daemons, self.buffer, self.pfs, self.secret_file, self.cluster_id)
        }
    }
}

fn main() -> ExitCode {
    // Before clap checks the flags a daemon requires, which a listing needs none of.
    if std::env::args_os().skip(1).eq(["--list-stages"]) {
        print!("{}", stages::listing());
        return ExitCode::SUCCESS;
    }
    let args = Args::parse();
    let index = args.index;
    init_logging(index, args.log_level);
    let started = args.stage_names().build().map_err(StartError::Config);
    match started.and_then(|stages| surged::start_with(args.into_config(), stages)) {
        Ok(daemon) => {
            daemon.wait();
            ExitCode::SUCCESS
        }
        Err(e) => {
            log::error!("surged[{index}]: error: {e}");
            // Bad settings exit like a command-line error (as clap's do).
            ExitCode::from(if matches!(e, StartError::Config(_)) { 2 } else { 1 })
        }
    }
}
