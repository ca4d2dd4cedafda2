//! Starting the daemons: one `surge start` per daemon host, run in that
//! host's namespace as one rank of a launch, exactly as `mpirun` would run
//! them on a real cluster (PMI_RANK/PMI_SIZE/PMI_JOBID). They meet through
//! the registration directory beside the cluster file, which every
//! namespace sees because all of them share this machine's filesystem.

use crate::{Daemon, Error, Host, Spec};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use surge_cluster::ClusterFile;

/// A backstop for a `surge start` that hangs; `surge start` itself gives up
/// after its own --timeout (60 s by default) with a message.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Lines of a failed `surge start`'s output quoted in the error.
const QUOTED_LINES: usize = 8;

/// Variables by which `surge start` would take its rank from an outer
/// launcher (mpirun, Slurm) instead of the PMI_* ones the testbed sets.
const OUTER_LAUNCHER_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_STEP_ID",
    "SLURM_JOB_ID",
];

pub fn cluster_file(state_dir: &Path) -> PathBuf {
    state_dir.join("cluster.toml")
}

fn start_log(state_dir: &Path, host: u32) -> PathBuf {
    state_dir.join("logs").join(format!("start-h{host}.log"))
}

/// Runs `surge start` on every daemon host at once, waits for all of them,
/// and returns the daemons the cluster file lists.
pub fn start(spec: &Spec, surge_bin: &Path, daemon_hosts: &[Host]) -> Result<Vec<Daemon>, Error> {
    let cluster = cluster_file(&spec.state_dir);
    let logs = spec.state_dir.join("logs");
    fs::create_dir_all(&logs).map_err(|e| Error::io(format!("cannot create {}", logs.display()), e))?;
    let launch_id = format!("testbed-{}-{}", spec.name, std::process::id());
    let mut running = Vec::new();
    for host in daemon_hosts {
        match spawn_rank(spec, surge_bin, &cluster, host, daemon_hosts.len(), &launch_id) {
            Ok(child) => running.push((host.index, child)),
            Err(e) => {
                stop_all(&mut running);
                return Err(e);
            }
        }
    }
    wait_all(&spec.state_dir, &mut running)?;
    collect_daemons(spec, &cluster, daemon_hosts)
}

fn spawn_rank(
    spec: &Spec,
    surge_bin: &Path,
    cluster: &Path,
    host: &Host,
    ranks: usize,
    launch_id: &str,
) -> Result<Child, Error> {
    let log_path = start_log(&spec.state_dir, host.index);
    let log = fs::File::create(&log_path).map_err(|e| Error::io(format!("cannot create {}", log_path.display()), e))?;
    let log_for_stderr = log.try_clone().map_err(|e| Error::io("cannot duplicate a log descriptor", e))?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &host.netns])
        .arg(surge_bin)
        .arg("--cluster")
        .arg(cluster)
        .arg("start")
        .args(["--listen", &host.ip.to_string()])
        .args(["--daemons", &spec.daemons_per_host.to_string()])
        .arg("--buffer")
        .arg(spec.buffer_dir.as_ref().unwrap_or(&spec.state_dir).join(format!("buffer-h{}", host.index)))
        .arg("--pfs")
        .arg(spec.state_dir.join("pfs"))
        .args(&spec.start_args)
        .env("PMI_RANK", host.index.to_string())
        .env("PMI_SIZE", ranks.to_string())
        .env("PMI_JOBID", launch_id)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_for_stderr);
    for var in OUTER_LAUNCHER_VARS {
        cmd.env_remove(var);
    }
    cmd.spawn().map_err(|e| Error::io("cannot run `ip netns exec`", e))
}

/// Waits until every rank exited 0. The first failure ends the wait: the
/// other ranks would only sit out their timeout waiting for the failed one.
fn wait_all(state_dir: &Path, running: &mut Vec<(u32, Child)>) -> Result<(), Error> {
    let deadline = Instant::now() + START_TIMEOUT;
    while !running.is_empty() {
        let exited = running.iter_mut().enumerate().find_map(|(i, (host, child))| match child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) if status.success() => Some((i, *host, None)),
            Ok(Some(status)) => Some((i, *host, Some(status.to_string()))),
            Err(e) => Some((i, *host, Some(format!("cannot wait for it: {e}")))),
        });
        match exited {
            Some((i, _, None)) => {
                running.swap_remove(i);
            }
            Some((_, host, Some(how))) => {
                stop_all(running);
                return Err(start_failed(state_dir, host, &how));
            }
            None if Instant::now() > deadline => {
                let host = running[0].0;
                stop_all(running);
                return Err(start_failed(
                    state_dir,
                    host,
                    &format!("still running after {} s", START_TIMEOUT.as_secs()),
                ));
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    Ok(())
}

fn stop_all(running: &mut Vec<(u32, Child)>) {
    for (_, child) in running.iter_mut() {
        child.kill().ok();
        child.wait().ok();
    }
    running.clear();
}

/// The error for a failed rank, quoting its output: the log itself goes
/// with the state dir when `up` cleans up after the failure.
fn start_failed(state_dir: &Path, host: u32, how: &str) -> Error {
    let text = fs::read_to_string(start_log(state_dir, host)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(QUOTED_LINES)..].join("\n  ");
    Error::DaemonStart(format!("`surge start` on host {host} failed ({how}):\n  {tail}"))
}

/// The daemons of the cluster file, checked against the plan: the right
/// number, each on the host whose rank started it.
fn collect_daemons(spec: &Spec, cluster: &Path, daemon_hosts: &[Host]) -> Result<Vec<Daemon>, Error> {
    let file = ClusterFile::load(cluster).map_err(|e| Error::DaemonStart(e.to_string()))?;
    let expected = daemon_hosts.len() * spec.daemons_per_host as usize;
    if file.daemons.len() != expected {
        return Err(Error::DaemonStart(format!(
            "{} lists {} daemons, expected {expected} ({} hosts × {})",
            cluster.display(),
            file.daemons.len(),
            daemon_hosts.len(),
            spec.daemons_per_host
        )));
    }
    file.daemons
        .iter()
        .map(|d| {
            let host = &daemon_hosts[(d.index / spec.daemons_per_host) as usize];
            let addr: std::net::SocketAddr =
                d.addr.parse().map_err(|_| Error::DaemonStart(format!("daemon {} address {:?}", d.index, d.addr)))?;
            if addr.ip() != host.ip {
                return Err(Error::DaemonStart(format!(
                    "daemon {} listens on {addr}, not on host {} ({})",
                    d.index, host.index, host.ip
                )));
            }
            Ok(Daemon { index: d.index, host: host.index, addr, pid: d.pid })
        })
        .collect()
}
