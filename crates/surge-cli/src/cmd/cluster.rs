//! `surge start`, `surge stop`, `surge status`.

use super::{orphans, CmdResult, Ctx};
use crate::drain_settings::{DrainArgs, DrainPolicyKind};
use crate::launch::{self, LaunchPlan, Rank};
use crate::launch::{default_buffer, default_pfs};
use crate::stage_settings::StageArgs;
use crate::units::{listing_size, parse_size};
use clap::Args;
use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use surge_bbos_state::server::redacted;
use surge_cluster::ConnectionDefaults;
use surge_cluster::NamespacePolicy;
use surge_cluster::{ConnCount, ConnPolicy};
use surge_proto::layout::LayoutPlacement;

#[derive(Args)]
pub struct StartArgs {
    /// Daemons to start on this host.
    #[arg(long, short = 'n', default_value_t = 2)]
    pub daemons: u32,
    /// Start daemon N of the running cluster again after it died, on its own address and
    /// directories (it comes back with its objects; clients reconnect). The other options
    /// are ignored: the daemon gets the settings it was first started with.
    #[arg(long, value_name = "N")]
    pub daemon: Option<u32>,
    /// With --daemon N: bring back a daemon whose store was lost (its directory wiped, or
    /// objects removed outside Surge), which a restart otherwise refuses. The files that had
    /// data there are marked lost: `surge ls -l` shows them, opening one fails with EIO until
    /// it is removed or rewritten.
    #[arg(long, requires = "daemon")]
    pub accept_loss: bool,
    /// Buffer-tier directory on fast local storage (each daemon uses BUFFER/daemon-<index>);
    /// created mode 700, and refused if another user owns it or may write to it.
    #[arg(long, value_name = "DIR", default_value_os_t = default_buffer())]
    pub buffer: PathBuf,
    /// Parallel-file-system tier: a directory shared by all hosts (Lustre in production).
    #[arg(long, value_name = "DIR", default_value_os_t = default_pfs())]
    pub pfs: PathBuf,
    /// Address the daemons listen on: an IP, `hostname` for the address this host's name
    /// resolves to (what a multi-host `mpirun ... surge start` wants), or the allocation's hosts
    /// `h1,h2,...` for the address of the one that is this host.
    #[arg(long, default_value = "127.0.0.1", value_name = "IP")]
    pub listen: String,
    /// Capacity limit per daemon (e.g. 10G); writes beyond it fail with ENOSPC. Default: an equal
    /// share of the buffer device among this host's daemons.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    pub capacity: Option<u64>,
    /// Default stripe count of the root directory (-1 = every daemon).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub stripe_count: i64,
    /// Default stripe size of the root directory.
    #[arg(long, value_parser = parse_size, default_value = "1M", value_name = "BYTES")]
    pub stripe_size: u64,
    /// How the root directory's new files choose their first daemon: auto (spread over every
    /// daemon by inode number) or local (a daemon of the creating process's node, for
    /// file-per-process output; with --stripe-count above 1 a file still stripes on from it).
    #[arg(long, default_value = "auto", value_name = "PLACEMENT", value_parser = str::parse::<LayoutPlacement>)]
    pub placement: LayoutPlacement,
    /// Where the namespace is kept: one (daemon 0 keeps it all) or hashed (spread over every
    /// daemon by a hash of each name's directory: a directory's entries are on one daemon, so
    /// per-process directories spread; a rename of a directory, and a rename or hard link
    /// between directories on different daemons, fails with EXDEV, which mv turns into a copy).
    /// Recorded in the cluster file, so every client routes alike.
    #[arg(long, env = "SURGE_NAMESPACE", default_value = "one", value_name = "POLICY", value_parser = str::parse::<NamespacePolicy>)]
    pub namespace: NamespacePolicy,
    /// Seconds to wait for every daemon (on every host) to come up.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Connections each client opens to each daemon: 1-16, or auto (as many as the measured
    /// store rate over the measured per-connection rate calls for). Written to the cluster
    /// file; a client's SURGE_CONNS overrides it.
    #[arg(long, default_value = "auto", value_name = "N")]
    pub conns: ConnCount,
    /// How clients spread requests over those connections: ttos (a file stays on its opening
    /// thread's connection), ttom (requests take the connections in turn), auto (ttos for
    /// writes, ttom for reads). A client's SURGE_CONN_POLICY overrides it.
    #[arg(long, default_value = "auto", value_name = "POLICY")]
    pub conn_policy: ConnPolicy,
    /// Cap each daemon connection's data rate (e.g. 600M or 600MB/s), to model a file system
    /// whose single-connection path is the bottleneck. Off by default.
    #[arg(long, value_parser = surge_cluster::parse_rate, value_name = "RATE")]
    pub conn_rate: Option<u64>,
    /// Seconds between rounds of the orphan collector, which deletes objects that belong to no
    /// file (daemon default: 300).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub collect_every: Option<u64>,
    /// Seconds an object must have been unchanged before the orphan collector may delete it
    /// (daemon default: 300).
    #[arg(long, value_name = "SECS")]
    pub orphan_grace: Option<u64>,
    /// Stay until this host's daemons exit, stopping them on SIGTERM/SIGINT/SIGHUP: for launchers
    /// that end a step's processes with the step (srun), as `surge run` on several nodes starts them.
    #[arg(long)]
    pub foreground: bool,
    /// Serve each daemon's metrics for Prometheus: daemon i of this host at
    /// http://LISTEN:BASE+i/metrics (0: any free port each, named in the daemon's log).
    /// Off by default; docs/operations.md lists the metrics.
    #[arg(long, value_name = "BASE")]
    pub metrics_port: Option<u16>,
    #[command(flatten)]
    pub drain: DrainArgs,
    #[command(flatten)]
    pub stages: StageArgs,
}

#[derive(Args)]
pub struct StopArgs {
    /// Seconds to wait for each daemon to exit before killing it (local daemons only).
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// Also remove the cluster's buffer directories on this host, with every file in them
    /// (files without a PFS copy are lost: `surge stage-out --all` first).
    #[arg(long)]
    pub purge: bool,
    /// Instead of the cluster file's cluster: wind down the job clusters on this host whose
    /// `surge run` was killed (each file staged out with verification, the daemons stopped,
    /// the buffer removed when every file has a PFS copy).
    #[arg(long, conflicts_with = "purge")]
    pub orphans: bool,
}

#[derive(Args)]
#[command(disable_help_flag = true)]
pub struct StatusArgs {
    /// Print machine-readable TOML instead of a table.
    #[arg(long)]
    pub toml: bool,
    /// Sizes as 1.5K, 768M, 2.0G (powers of 1024, as coreutils' -h) instead of bytes.
    #[arg(short = 'h', long = "human-readable")]
    pub human_readable: bool,
    #[command(flatten)]
    pub help: super::LongHelpOnly,
}

pub fn start(ctx: &Ctx, a: StartArgs) -> CmdResult {
    if let Some(index) = a.daemon {
        let comeback = if a.accept_loss { launch::Comeback::AcceptingLoss } else { launch::Comeback::Whole };
        let entry = launch::restart(&ctx.cluster_file, index, comeback, Duration::from_secs(a.timeout))?;
        println!("surge: daemon {index} is back at {} (pid {})", entry.addr, entry.pid);
        if a.accept_loss {
            println!("surge: files that had data on daemon {index} are marked lost: `surge ls -l` shows them");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.daemons == 0 {
        return Err("--daemons must be at least 1".into());
    }
    if let Some(base) = a.metrics_port.filter(|&base| base > 0) {
        if u32::from(base) + a.daemons - 1 > u32::from(u16::MAX) {
            return Err(format!(
                "--metrics-port {base} leaves no port for each of the {} daemons: choose a lower one",
                a.daemons
            ));
        }
    }
    a.drain.check(false)?;
    let plan = LaunchPlan {
        cluster_file: ctx.cluster_file.clone(),
        daemons_per_host: a.daemons,
        buffer: a.buffer,
        pfs: a.pfs,
        listen: launch::listen_ip(&a.listen)?,
        capacity: a.capacity,
        stripe_count: a.stripe_count,
        stripe_size: a.stripe_size,
        placement: a.placement,
        timeout: Duration::from_secs(a.timeout),
        connections: ConnectionDefaults { count: a.conns, policy: a.conn_policy },
        conn_rate: a.conn_rate,
        collect_every: a.collect_every,
        orphan_grace: a.orphan_grace,
        metrics_port: a.metrics_port,
        drain: a.drain,
        stages: a.stages,
        namespace: a.namespace,
    };
    let rank = Rank::from_env();
    let cluster = launch::start(&plan, &rank)?;
    if rank.rank == 0 {
        println!(
            "surge: started {} daemon(s) on {} host(s); cluster file {}",
            cluster.daemons.len(),
            rank.size,
            ctx.cluster_file.display()
        );
        println!("  buffer {}  PFS {}", plan.buffer.display(), cluster.pfs.display());
        println!(
            "  client connections per daemon: {} ({} policy){}",
            a.conns,
            a.conn_policy,
            plan.conn_rate.map(|r| format!(", each capped at {} MB/s", r as f64 / 1e6)).unwrap_or_default()
        );
        match plan.metrics_port {
            Some(0) => println!("  metrics for Prometheus on a free port each (each daemon's surged.log names it)"),
            Some(base) => println!(
                "  metrics for Prometheus: http://HOST:{base}/metrics to :{}/metrics on each host",
                u32::from(base) + a.daemons - 1
            ),
            None => {}
        }
        if let Some(policy) = plan.drain.drain.filter(|&p| p != DrainPolicyKind::Off) {
            let state = plan.drain.drain_state.as_deref().map_or("the embedded store of daemon 0".into(), redacted);
            println!("  data manager: {policy} policy, state in {state} (surge drain status)");
        }
        println!("  export SURGE_CLUSTER={}", ctx.cluster_file.display());
    }
    if a.foreground {
        for note in launch::stay_with_daemons(&cluster, &plan, &rank) {
            note!("surge: {note}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn stop(ctx: &Ctx, a: StopArgs) -> CmdResult {
    if a.orphans {
        return stop_orphans();
    }
    // Read before stopping: the daemons' directories are named where they were started.
    let buffers = if a.purge { launch::local_buffers(&ctx.cluster_file)? } else { Vec::new() };
    let notes = launch::stop(&ctx.cluster_file, Duration::from_secs(a.timeout))?;
    for n in &notes {
        note!("surge: {n}");
    }
    note!("surge: cluster stopped");
    for dir in buffers {
        fs::remove_dir_all(&dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
        note!("surge: removed {}", dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn stop_orphans() -> CmdResult {
    let found = orphans::find(&default_buffer());
    if found.is_empty() {
        note!("surge: no abandoned job cluster under {}", default_buffer().display());
    }
    let mut failed = false;
    for buffer in found {
        match orphans::clean(&buffer, false) {
            Ok(note) => note!("surge: {note}"),
            Err(e) => {
                failed = true;
                note!("surge: {e}");
            }
        }
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

pub fn status(ctx: &Ctx, a: StatusArgs) -> CmdResult {
    let client = ctx.client()?;
    let cluster = client.cluster().clone();
    let rows = client.status();
    if a.toml {
        print!("{}", status_toml(&cluster, &rows));
    } else {
        println!("cluster {} ({} daemons), PFS {}", cluster.cluster_id, cluster.daemons.len(), cluster.pfs.display());
        println!(
            "{:>4}  {:<21} {:>8}  {:<5} {:>8} {:>14} {:>14} {:>8} {:>6}",
            "idx", "address", "pid", "state", "objects", "used", "capacity", "files", "dirs"
        );
        for (d, s) in &rows {
            match s {
                Ok(s) => println!(
                    "{:>4}  {:<21} {:>8}  {:<5} {:>8} {:>14} {:>14} {:>8} {:>6}",
                    d.index,
                    d.addr,
                    s.pid,
                    "up",
                    s.objects,
                    listing_size(s.bytes_used, a.human_readable),
                    listing_size(s.capacity, a.human_readable),
                    if s.is_metadata { s.files.to_string() } else { "-".into() },
                    if s.is_metadata { s.dirs.to_string() } else { "-".into() },
                ),
                Err(e) => println!("{:>4}  {:<21} {:>8}  {:<5} {e}", d.index, d.addr, d.pid, "DOWN"),
            }
        }
        let up: Vec<_> = rows.iter().filter_map(|(_, s)| s.as_ref().ok()).collect();
        let used: u64 = up.iter().map(|s| s.bytes_used).sum();
        let objects: u64 = up.iter().map(|s| s.objects).sum();
        // Daemon 0, or every daemon when the namespace is spread over them: their counts add up.
        let keepers: Vec<_> = up.iter().filter(|s| s.is_metadata).collect();
        let sum = |count: fn(&surge_client::DaemonStatus) -> u64| keepers.iter().map(|s| count(s)).sum::<u64>();
        let files = (!keepers.is_empty()).then(|| sum(|s| s.files));
        println!(
            "total: {}/{} daemons up, {objects} objects, {} in the buffer{}",
            up.len(),
            rows.len(),
            listing_size(used, a.human_readable),
            files.map(|f| format!(", {f} files")).unwrap_or_default()
        );
        print_stages(&up);
        if !keepers.is_empty() {
            println!(
                "removed files awaiting deletion: {} ({} kept open by a client); orphan objects since daemon 0 started: {} found, {} deleted",
                sum(|s| s.doomed), sum(|s| s.held), sum(|s| s.orphans_found), sum(|s| s.orphans_collected)
            );
            let lost = sum(|s| s.lost_files);
            if lost > 0 {
                println!(
                    "files lost with a daemon's store: {lost} (`surge ls -l` shows them as lost; remove or rewrite them)"
                );
            }
        }
        if up.iter().any(|s| !s.jobs.is_empty()) {
            println!("jobs at each daemon's scheduling point:");
            for s in &up {
                for j in &s.jobs {
                    println!(
                        "  daemon {:>3}  job {:<20} {:>4} waiting {:>4} in service {:>10} requests {:>10} served",
                        s.index,
                        j.job,
                        j.waiting,
                        j.in_service,
                        j.requests,
                        listing_size(j.bytes, a.human_readable)
                    );
                }
            }
        }
        let cap = up.iter().map(|s| s.conn_rate).max().unwrap_or(0);
        println!(
            "client connections per daemon: {} ({} policy; SURGE_CONNS and SURGE_CONN_POLICY override){}",
            cluster.connections.count,
            cluster.connections.policy,
            if cap > 0 { format!("; each capped at {} MB/s", cap as f64 / 1e6) } else { String::new() }
        );
    }
    let all_up = rows.iter().all(|(_, s)| s.is_ok());
    Ok(if all_up { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

/// Each set of request-path stages the daemons run, with the daemons that
/// run it, and the reads their read caches served and missed (every read
/// misses with `cache=none`).
fn print_stages(up: &[&surge_client::DaemonStatus]) {
    let mut sets: Vec<(&str, Vec<u32>)> = Vec::new();
    for s in up.iter().filter(|s| !s.stages.is_empty()) {
        match sets.iter_mut().find(|(stages, _)| *stages == s.stages) {
            Some((_, daemons)) => daemons.push(s.index),
            None => sets.push((&s.stages, vec![s.index])),
        }
    }
    for (stages, daemons) in &sets {
        let daemons: Vec<String> = daemons.iter().map(u32::to_string).collect();
        println!("stages of daemon(s) {}: {stages}", daemons.join(", "));
    }
    if !sets.is_empty() {
        let hits: u64 = up.iter().map(|s| s.cache_hits).sum();
        let misses: u64 = up.iter().map(|s| s.cache_misses).sum();
        println!("reads served by the read caches: {hits}; that missed them: {misses}");
    }
}

fn status_toml(
    cluster: &surge_client::ClusterFile,
    rows: &[(surge_client::DaemonEntry, surge_client::Result<surge_client::DaemonStatus>)],
) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "cluster_id = {:?}\npfs = {:?}\nconns = \"{}\"\nconn_policy = \"{}\"\n",
        cluster.cluster_id,
        cluster.pfs.display().to_string(),
        cluster.connections.count,
        cluster.connections.policy
    );
    for (d, s) in rows {
        let _ = writeln!(out, "\n[[daemon]]\nindex = {}\naddr = {:?}\nhost = {:?}", d.index, d.addr, d.host);
        match s {
            Ok(s) => {
                let _ = writeln!(
                    out,
                    "state = \"up\"\npid = {}\nuptime_s = {}\nmetadata = {}\nobjects = {}\nbytes_used = {}\ncapacity = {}\ndevice_free = {}\nfiles = {}\ndirs = {}\nconnections = {}\nrequests = {}\nconn_rate = {}\nstore_bytes = {}\nstore_busy_ns = {}\ndoomed = {}\nheld = {}\norphans_found = {}\norphans_collected = {}\nstages = {:?}\ncache_hits = {}\ncache_misses = {}",
                    s.pid, s.uptime_s, s.is_metadata, s.objects, s.bytes_used, s.capacity, s.device_free, s.files, s.dirs, s.connections, s.requests, s.conn_rate, s.store_bytes, s.store_busy_ns,
                    s.doomed, s.held, s.orphans_found, s.orphans_collected, s.stages, s.cache_hits, s.cache_misses
                );
                for j in &s.jobs {
                    let _ = writeln!(
                        out,
                        "\n[[daemon.job]]\njob = {}\nwaiting = {}\nin_service = {}\nrequests = {}\nserved_bytes = {}",
                        j.job, j.waiting, j.in_service, j.requests, j.bytes
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "state = \"down\"\nerror = {:?}", e.to_string());
            }
        }
    }
    out
}
