//! `surge start`, `surge stop`, `surge status`.

use super::{CmdResult, Ctx};
use crate::args::{StartArgs, StatusArgs, StopArgs};
use crate::launch::{self, LaunchPlan, Rank};
use crate::units::human;
use std::process::ExitCode;
use std::time::Duration;
use surge_cluster::ConnectionDefaults;

pub fn start(ctx: &Ctx, a: StartArgs) -> CmdResult {
    if let Some(index) = a.daemon {
        let entry = launch::restart(&ctx.cluster_file, index, Duration::from_secs(a.timeout))?;
        println!("surge: daemon {index} is back at {} (pid {})", entry.addr, entry.pid);
        return Ok(ExitCode::SUCCESS);
    }
    if a.daemons == 0 {
        return Err("--daemons must be at least 1".into());
    }
    let plan = LaunchPlan {
        cluster_file: ctx.cluster_file.clone(),
        daemons_per_host: a.daemons,
        buffer: a.buffer,
        pfs: a.pfs,
        listen: launch::listen_ip(&a.listen)?,
        capacity: a.capacity,
        stripe_count: a.stripe_count,
        stripe_size: a.stripe_size,
        timeout: Duration::from_secs(a.timeout),
        connections: ConnectionDefaults { count: a.conns, policy: a.conn_policy },
        conn_rate: a.conn_rate,
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
        println!("  export SURGE_CLUSTER={}", ctx.cluster_file.display());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn stop(ctx: &Ctx, a: StopArgs) -> CmdResult {
    let notes = launch::stop(&ctx.cluster_file, Duration::from_secs(a.timeout))?;
    for n in &notes {
        eprintln!("surge: {n}");
    }
    println!("surge: cluster stopped");
    Ok(ExitCode::SUCCESS)
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
            "{:>4}  {:<21} {:>8}  {:<5} {:>8} {:>10} {:>10} {:>8} {:>6}",
            "idx", "address", "pid", "state", "objects", "used", "capacity", "files", "dirs"
        );
        for (d, s) in &rows {
            match s {
                Ok(s) => println!(
                    "{:>4}  {:<21} {:>8}  {:<5} {:>8} {:>10} {:>10} {:>8} {:>6}",
                    d.index,
                    d.addr,
                    s.pid,
                    "up",
                    s.objects,
                    human(s.bytes_used),
                    human(s.capacity),
                    if s.is_metadata { s.files.to_string() } else { "-".into() },
                    if s.is_metadata { s.dirs.to_string() } else { "-".into() },
                ),
                Err(e) => println!("{:>4}  {:<21} {:>8}  {:<5} {e}", d.index, d.addr, d.pid, "DOWN"),
            }
        }
        let up: Vec<_> = rows.iter().filter_map(|(_, s)| s.as_ref().ok()).collect();
        let used: u64 = up.iter().map(|s| s.bytes_used).sum();
        let objects: u64 = up.iter().map(|s| s.objects).sum();
        let files = up.iter().find(|s| s.is_metadata).map(|s| s.files);
        println!(
            "total: {}/{} daemons up, {objects} objects, {} in the buffer{}",
            up.len(),
            rows.len(),
            human(used),
            files.map(|f| format!(", {f} files")).unwrap_or_default()
        );
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
                        human(j.bytes)
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

fn status_toml(cluster: &surge_client::ClusterFile, rows: &[(surge_client::DaemonEntry, surge_client::Result<surge_client::DaemonStatus>)]) -> String {
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
                    "state = \"up\"\npid = {}\nuptime_s = {}\nmetadata = {}\nobjects = {}\nbytes_used = {}\ncapacity = {}\ndevice_free = {}\nfiles = {}\ndirs = {}\nconnections = {}\nrequests = {}\nconn_rate = {}\nstore_bytes = {}\nstore_busy_ns = {}",
                    s.pid, s.uptime_s, s.is_metadata, s.objects, s.bytes_used, s.capacity, s.device_free, s.files, s.dirs, s.connections, s.requests, s.conn_rate, s.store_bytes, s.store_busy_ns
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
