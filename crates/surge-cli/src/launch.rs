//! Bringing daemons up and down. `surge start` runs once per host: under
//! mpirun each rank launches its host's daemons, every daemon registers in
//! the shared registration directory, and rank 0 writes the cluster file
//! once all have registered. On one host it is the same path with one rank.

use crate::drain_settings::DrainArgs;
use crate::stage_settings::StageArgs;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use surge_client::{Client, ClusterFile};
use surge_cluster::{
    registration_dir, registrations, ConnectionDefaults, DaemonEntry, NamespacePolicy, CLUSTER_FILE_VERSION,
};
use surge_proto::layout::LayoutPlacement;

/// The buffer directory `surge start` and `surge run` use unless told:
/// `SURGE_BUFFER`, else `surge-<uid>` under /dev/shm when it exists (memory
/// is the fastest local tier). The uid, not `$USER`: without `USER` (cron,
/// `env -i`) every user would meet in one directory, the first one's.
pub fn default_buffer() -> PathBuf {
    if let Some(dir) = std::env::var_os("SURGE_BUFFER").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    // SAFETY: geteuid cannot fail and has no preconditions.
    let name = format!("surge-{}", unsafe { libc::geteuid() });
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm.join(name)
    } else {
        std::env::temp_dir().join(name)
    }
}

/// The PFS directory `surge start` and `surge run` use unless told.
pub fn default_pfs() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    home.join(".surge").join("pfs")
}

pub struct LaunchPlan {
    pub cluster_file: PathBuf,
    pub daemons_per_host: u32,
    pub buffer: PathBuf,
    pub pfs: PathBuf,
    /// The IP daemons listen on (see [`listen_ip`]).
    pub listen: String,
    pub capacity: Option<u64>,
    pub stripe_count: i64,
    pub stripe_size: u64,
    /// How the root directory's new files choose their first daemon.
    pub placement: LayoutPlacement,
    pub timeout: Duration,
    /// Written to the cluster file: what clients use unless their environment says otherwise.
    pub connections: ConnectionDefaults,
    /// Per-connection rate cap of every daemon (bytes/s).
    pub conn_rate: Option<u64>,
    /// The orphan collector's period and grace (seconds); `surged`'s defaults when `None`.
    pub collect_every: Option<u64>,
    pub orphan_grace: Option<u64>,
    /// Daemon i of a host serves its metrics on this port + i (0: any free port); `None`: off.
    pub metrics_port: Option<u16>,
    /// The data manager's settings (off by default).
    pub drain: DrainArgs,
    /// The daemons' request-path stages (surged's defaults unless named).
    pub stages: StageArgs,
    /// Where the namespace is kept (`--namespace`), told to every daemon and written to the cluster file.
    pub namespace: NamespacePolicy,
}

impl LaunchPlan {
    /// A one-host cluster on 127.0.0.1 with the defaults of `surge start`.
    pub fn local(cluster_file: PathBuf, daemons: u32, buffer: PathBuf, pfs: PathBuf) -> LaunchPlan {
        LaunchPlan {
            cluster_file,
            daemons_per_host: daemons,
            buffer,
            pfs,
            listen: "127.0.0.1".into(),
            capacity: None,
            stripe_count: -1,
            stripe_size: 1 << 20,
            placement: LayoutPlacement::Auto,
            timeout: Duration::from_secs(60),
            connections: ConnectionDefaults::default(),
            conn_rate: None,
            collect_every: None,
            orphan_grace: None,
            metrics_port: None,
            drain: DrainArgs::default(),
            stages: StageArgs::default(),
            namespace: NamespacePolicy::default(),
        }
    }
}

/// This process's place among the `surge start` processes of one launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rank {
    pub rank: u32,
    pub size: u32,
    /// Identifies the launch, so ranks never trust leftovers of an earlier one.
    pub launch_id: String,
}

impl Rank {
    /// From the launcher's environment (Open MPI, PMI/MPICH, Slurm), else a single rank.
    pub fn from_env() -> Rank {
        if let Some((rank, size)) = surge_cluster::launcher_rank() {
            let launch_id = ["OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_JOBID", "SLURM_STEP_ID"]
                .iter()
                .find_map(|k| std::env::var(k).ok())
                .unwrap_or_default();
            let job = std::env::var("SLURM_JOB_ID").unwrap_or_default();
            return Rank { rank, size, launch_id: format!("{job}.{launch_id}") };
        }
        Rank { rank: 0, size: 1, launch_id: format!("local.{}", std::process::id()) }
    }
}

fn secret_path(cluster_file: &Path) -> PathBuf {
    cluster_file.with_extension("secret")
}

/// Is any daemon of an existing cluster file still answering?
pub fn cluster_alive(cluster_file: &Path) -> bool {
    match Client::connect(cluster_file) {
        Ok(c) => c.status().iter().any(|(_, s)| s.is_ok()),
        Err(_) => false,
    }
}

/// Starts this host's daemons; rank 0 returns the finished cluster file.
pub fn start(plan: &LaunchPlan, rank: &Rank) -> Result<ClusterFile, String> {
    // The secret, the registrations and the mount's log go beside the cluster file.
    let dir = plan.cluster_file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    surge_cluster::private_dir(dir, "cluster file directory").map_err(|e| e.to_string())?;
    plan.stages.check(&crate::install::surged()?)?;
    let reg = registration_dir(&plan.cluster_file);
    let secret = secret_path(&plan.cluster_file);
    let launch_marker = reg.join("launch-id");
    let cluster_id = if rank.rank == 0 {
        if plan.cluster_file.exists() {
            if cluster_alive(&plan.cluster_file) {
                return Err(format!(
                    "a Surge cluster is already running with cluster file {}; stop it with `surge stop`, \
                     or pass --cluster FILE to start a second one",
                    plan.cluster_file.display()
                ));
            }
            fs::remove_file(&plan.cluster_file).ok();
        }
        fs::remove_dir_all(&reg).ok();
        surge_cluster::private_dir(&reg, "registration directory").map_err(|e| e.to_string())?;
        surge_cluster::generate_secret(&secret)
            .map_err(|e| format!("cannot write the secret {}: {e}", secret.display()))?;
        let id = surge_cluster::new_cluster_id();
        let marker = format!("{}\n{id}\n", rank.launch_id);
        surge_cluster::write_atomically(&launch_marker, marker.as_bytes(), 0o600)
            .map_err(|e| format!("cannot write {}: {e}", launch_marker.display()))?;
        id
    } else {
        wait_for_launch_marker(&launch_marker, &rank.launch_id, plan.timeout)?
    };

    let total = rank.size * plan.daemons_per_host;
    surge_cluster::private_dir(&plan.buffer, "buffer directory").map_err(|e| e.to_string())?;
    fs::create_dir_all(&plan.pfs).map_err(|e| format!("cannot create PFS dir {}: {e}", plan.pfs.display()))?;
    let capacity = plan.capacity.or_else(|| device_share(&plan.buffer, plan.daemons_per_host));
    let mut children = Vec::new();
    for local in 0..plan.daemons_per_host {
        let index = rank.rank * plan.daemons_per_host + local;
        children.push(spawn_daemon(plan, capacity, index, total, &cluster_id, &secret, &reg)?);
    }
    let mine: Vec<u32> = children.iter().map(|c| c.index).collect();
    wait_for_registrations(
        &reg,
        |found| mine.iter().all(|i| found.iter().any(|d| d.index == *i)),
        &mut children,
        plan.timeout,
    )?;
    if rank.rank != 0 {
        return wait_for_cluster_file(&plan.cluster_file, &cluster_id, plan.timeout);
    }
    wait_for_registrations(
        &reg,
        |found| found.iter().filter(|d| d.index < total).count() == total as usize,
        &mut children,
        plan.timeout,
    )?;
    let cluster = ClusterFile {
        version: CLUSTER_FILE_VERSION,
        cluster_id,
        secret_file: fs::canonicalize(&secret).unwrap_or(secret),
        pfs: fs::canonicalize(&plan.pfs).unwrap_or_else(|_| plan.pfs.clone()),
        daemons: registrations(&reg).into_iter().filter(|d| d.index < total).collect(),
        connections: plan.connections,
        namespace: plan.namespace,
    };
    cluster.save(&plan.cluster_file).map_err(|e| format!("cannot write {}: {e}", plan.cluster_file.display()))?;
    Ok(cluster)
}

/// The capacity of each daemon when none is given: an equal share of the
/// buffer device, which all of this host's daemons keep their directories
/// on (the whole device to each would promise it several times over).
fn device_share(buffer: &Path, daemons_per_host: u32) -> Option<u64> {
    surge_cluster::fs_space(buffer).ok().map(|(size, _)| size / u64::from(daemons_per_host.max(1)))
}

#[allow(clippy::too_many_arguments)]
fn spawn_daemon(
    plan: &LaunchPlan,
    capacity: Option<u64>,
    index: u32,
    total: u32,
    cluster_id: &str,
    secret: &Path,
    reg: &Path,
) -> Result<Starting, String> {
    let dir = plan.buffer.join(format!("daemon-{index}"));
    surge_cluster::private_dir(&dir, "daemon directory").map_err(|e| e.to_string())?;
    let mut cmd = Command::new(crate::install::surged()?);
    cmd.arg("--index")
        .arg(index.to_string())
        .arg("--daemons")
        .arg(total.to_string())
        .arg("--buffer")
        .arg(&dir)
        .arg("--pfs")
        .arg(&plan.pfs)
        .arg("--secret-file")
        .arg(secret)
        .arg("--cluster-id")
        .arg(cluster_id)
        .arg("--register-dir")
        .arg(reg)
        .arg("--listen")
        .arg(format!("{}:0", plan.listen))
        .arg("--stripe-size")
        .arg(plan.stripe_size.to_string())
        .arg("--stripe-count")
        .arg(plan.stripe_count.to_string());
    if plan.placement == LayoutPlacement::Local {
        cmd.arg("--placement").arg("local");
    }
    cmd.arg("--namespace").arg(plan.namespace.to_string());
    if let Some(cap) = capacity {
        cmd.arg("--capacity").arg(cap.to_string());
    }
    if let Some(rate) = plan.conn_rate {
        cmd.arg("--conn-rate").arg(rate.to_string());
    }
    if let Some(secs) = plan.collect_every {
        cmd.arg("--collect-every").arg(secs.to_string());
    }
    if let Some(secs) = plan.orphan_grace {
        cmd.arg("--orphan-grace").arg(secs.to_string());
    }
    if let Some(base) = plan.metrics_port {
        let port = if base == 0 { 0 } else { u32::from(base) + index % plan.daemons_per_host };
        cmd.arg("--metrics").arg(format!("{}:{port}", plan.listen));
    }
    plan.drain.apply(&mut cmd);
    plan.stages.apply(&mut cmd);
    let lossy = |s: &std::ffi::OsStr| s.to_string_lossy().into_owned();
    let recipe = Recipe {
        surged_args: cmd.get_args().map(lossy).collect(),
        surged_env: cmd.get_envs().filter_map(|(k, v)| Some((lossy(k), lossy(v?)))).collect(),
    };
    recipe.save(reg, index)?;
    // Only this first start may make a store; a restart needs its store whole (`restart`).
    cmd.args(["--store-start", "new"]);
    run_daemon(cmd, index, dir)
}

/// A daemon being started: its index, its process and its directory (where its log is).
struct Starting {
    index: u32,
    child: Child,
    dir: PathBuf,
}

/// How a daemon was started, kept in the registration directory so that
/// `surge start --daemon N` can start it again the same way.
#[derive(serde::Serialize, serde::Deserialize)]
struct Recipe {
    surged_args: Vec<String>,
    /// Variables set for surged beyond the launcher's environment (the drain state's address).
    #[serde(default)]
    surged_env: Vec<(String, String)>,
}

impl Recipe {
    fn path(reg: &Path, index: u32) -> PathBuf {
        reg.join(format!("daemon-{index}.command"))
    }

    fn save(&self, reg: &Path, index: u32) -> Result<(), String> {
        let path = Recipe::path(reg, index);
        let text = toml::to_string(self).map_err(|e| e.to_string())?;
        surge_cluster::write_atomically(&path, text.as_bytes(), 0o600)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    fn load(reg: &Path, index: u32) -> Result<Recipe, String> {
        let path = Recipe::path(reg, index);
        let text = fs::read_to_string(&path)
            .map_err(|e| format!("cannot read how daemon {index} was started ({}): {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The arguments, listening on `addr` (the address clients know).
    fn args_at(&self, addr: &str) -> Vec<String> {
        let mut args = self.surged_args.clone();
        if let Some(at) = args.iter().position(|a| a == "--listen") {
            if let Some(value) = args.get_mut(at + 1) {
                *value = addr.to_string();
            }
        }
        args
    }
}

/// Runs surged as `cmd`, logging to `dir`/surged.log, in its own process group.
fn run_daemon(mut cmd: Command, index: u32, dir: PathBuf) -> Result<Starting, String> {
    use std::os::unix::process::CommandExt;
    let log_path = dir.join("surged.log");
    let log =
        surge_cluster::open_private_log(&log_path).map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        // Own process group: a Ctrl-C aimed at the launching shell must not kill the daemons.
        .process_group(0)
        // A profiler preloaded for the job (`LD_PRELOAD=libdarshan.so surge run`) is the job's:
        // it would log the daemons' own files as a program of the job's.
        .env_remove("LD_PRELOAD");
    let child = cmd.spawn().map_err(|e| format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()))?;
    Ok(Starting { index, child, dir })
}

/// The address daemons listen on: an IP as given; for `hostname`, this
/// host's own address; for a list of host names or IPs (`a,b,c`: the nodes
/// of an allocation), the address of the one entry that is this host. The
/// last two let one launcher command line serve every host.
pub fn listen_ip(spec: &str) -> Result<String, String> {
    use std::net::IpAddr;
    if spec.parse::<IpAddr>().is_ok() {
        return Ok(spec.to_string());
    }
    if spec == "hostname" {
        let host = surge_cluster::hostname();
        let addrs =
            resolve(&host).map_err(|e| format!("cannot resolve this host's name {host:?}: {e}; pass --listen IP"))?;
        return addrs
            .iter()
            .find(|ip| ip.is_ipv4() && !ip.is_loopback())
            .or_else(|| addrs.first())
            .map(|ip| ip.to_string())
            .ok_or_else(|| format!("{host:?} resolves to no address; pass --listen IP"));
    }
    let nodes: Vec<&str> = spec.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    own_address(&nodes).map_err(|why| {
        format!("--listen {spec:?}: {why}; give an IP address, `hostname` for this host's address, or the host names of the allocation")
    })
}

fn resolve(host: &str) -> std::io::Result<Vec<std::net::IpAddr>> {
    use std::net::ToSocketAddrs;
    Ok((host, 0).to_socket_addrs()?.map(|a| a.ip()).collect())
}

/// The address of the node among `nodes` that is this host: by name first
/// (no lookups, which matters on a thousand nodes), else the first address
/// a node resolves to that this host can bind, i.e. one of its own.
fn own_address(nodes: &[&str]) -> Result<String, String> {
    let me = surge_cluster::hostname();
    let short = |name: &str| name.split('.').next().unwrap_or(name).to_string();
    let by_name = nodes.iter().find(|n| **n == me || short(n) == short(&me));
    let bindable = |ip: &std::net::IpAddr| std::net::UdpSocket::bind((*ip, 0)).is_ok() && !ip.is_loopback();
    if let Some(node) = by_name {
        let addrs = resolve(node).map_err(|e| format!("cannot resolve this host's name {node:?}: {e}"))?;
        if let Some(ip) = addrs.iter().find(|ip| ip.is_ipv4() && bindable(ip)).or_else(|| addrs.first()) {
            return Ok(ip.to_string());
        }
    }
    for node in nodes {
        if let Some(ip) = resolve(node).unwrap_or_default().iter().find(|ip| bindable(ip)) {
            return Ok(ip.to_string());
        }
    }
    Err(format!("none of {} is this host ({me})", nodes.join(",")))
}

fn log_tail(dir: &Path) -> String {
    let path = dir.join("surged.log");
    let lines: Vec<String> =
        fs::File::open(&path).map(|f| BufReader::new(f).lines().map_while(Result::ok).collect()).unwrap_or_default();
    let tail = lines[lines.len().saturating_sub(5)..].join("\n  ");
    // A daemon cannot log why it stopped on a full device: say it here.
    let full = match surge_cluster::fs_space(dir) {
        Ok((_, 0)) => format!(
            "\nthe buffer device of {} is full: free space on it (or start with another --buffer)",
            dir.display()
        ),
        _ => String::new(),
    };
    format!("{} says:\n  {tail}{full}", path.display())
}

fn wait_for_registrations(
    reg: &Path,
    done: impl Fn(&[DaemonEntry]) -> bool,
    children: &mut [Starting],
    timeout: Duration,
) -> Result<Vec<DaemonEntry>, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let found = registrations(reg);
        if done(&found) {
            return Ok(found);
        }
        let present: Vec<u32> = found.iter().map(|d| d.index).collect();
        let exited = children.iter_mut().find_map(|c| Some((c.index, c.child.try_wait().ok()??, c.dir.clone())));
        if let Some((index, status, dir)) = exited {
            kill_all(children);
            return Err(format!("daemon {index} exited during start-up ({status}); {}", log_tail(&dir)));
        }
        if Instant::now() > deadline {
            kill_all(children);
            return Err(format!(
                "daemons did not all register in {:?} within {}s (registered: {present:?}); \
                 on several hosts, is the cluster file's directory shared by all of them?",
                reg,
                timeout.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill_all(children: &mut [Starting]) {
    for c in children.iter_mut() {
        c.child.kill().ok();
        c.child.wait().ok();
    }
}

fn wait_for_launch_marker(marker: &Path, launch_id: &str, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(text) = fs::read_to_string(marker) {
            let mut lines = text.lines();
            if lines.next() == Some(launch_id) {
                if let Some(id) = lines.next() {
                    return Ok(id.to_string());
                }
            }
        }
        if Instant::now() > deadline {
            return Err(format!("rank 0 did not prepare {} within {}s", marker.display(), timeout.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_for_cluster_file(path: &Path, cluster_id: &str, timeout: Duration) -> Result<ClusterFile, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(c) = ClusterFile::load(path) {
            if c.cluster_id == cluster_id {
                return Ok(c);
            }
        }
        if Instant::now() > deadline {
            return Err(format!("rank 0 did not write {} within {}s", path.display(), timeout.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a restarted daemon may find of its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comeback {
    /// Its store whole; a lost one is refused, saying what was lost.
    Whole,
    /// Whatever is left (`--accept-loss`): the files that lost data are marked lost.
    AcceptingLoss,
}

/// Starts daemon `index` of a running cluster again, after it died: same
/// arguments, same directories (so it comes back with its objects and, on
/// daemon 0, the namespace) and the same address, so clients reconnect to
/// it without a new cluster file. Returns its new entry.
pub fn restart(cluster_file: &Path, index: u32, comeback: Comeback, timeout: Duration) -> Result<DaemonEntry, String> {
    let mut cluster = ClusterFile::load(cluster_file).map_err(|e| e.to_string())?;
    let slot = cluster.daemons.iter().position(|d| d.index == index).ok_or_else(|| {
        format!("the cluster in {} has no daemon {index} (it has 0..{})", cluster_file.display(), cluster.daemons.len())
    })?;
    let old = cluster.daemons[slot].clone();
    if old.host != surge_cluster::hostname() {
        return Err(format!("daemon {index} runs on host {}: run `surge start --daemon {index}` there", old.host));
    }
    if pid_alive(old.pid) {
        return Err(format!(
            "daemon {index} is running (pid {}); restart only a daemon that died (stop it first with kill {})",
            old.pid, old.pid
        ));
    }
    let reg = registration_dir(cluster_file);
    let recipe = Recipe::load(&reg, index)?;
    let mut cmd = Command::new(crate::install::surged()?);
    cmd.args(recipe.args_at(&old.addr)).envs(recipe.surged_env.iter().map(|(k, v)| (k, v)));
    cmd.args(["--store-start", if comeback == Comeback::Whole { "existing" } else { "accept-loss" }]);
    let new_entry = |found: &[DaemonEntry]| found.iter().find(|d| d.index == index && d.pid != old.pid).cloned();
    // A directory wiped meanwhile is made again for the log; the daemon then refuses or accepts the loss.
    surge_cluster::private_dir(&old.buffer, "daemon directory").map_err(|e| e.to_string())?;
    let mut child = [run_daemon(cmd, index, old.buffer.clone())?];
    let found = wait_for_registrations(&reg, |found| new_entry(found).is_some(), &mut child, timeout)?;
    let entry = new_entry(&found).ok_or_else(|| format!("daemon {index} did not register again"))?;
    if entry.addr != old.addr {
        return Err(format!("daemon {index} came back at {} instead of {}", entry.addr, old.addr));
    }
    cluster.daemons[slot] = entry.clone();
    cluster.save(cluster_file).map_err(|e| format!("cannot write {}: {e}", cluster_file.display()))?;
    Ok(entry)
}

/// Shuts every daemon down (over the protocol, so it works across hosts),
/// waits for them, kills local stragglers by pid, and removes the cluster's files.
pub fn stop(cluster_file: &Path, timeout: Duration) -> Result<Vec<String>, String> {
    let cluster = ClusterFile::load(cluster_file).map_err(|e| e.to_string())?;
    let mut notes = Vec::new();
    let client = Client::connect(cluster_file).map_err(|e| e.to_string())?;
    let host = surge_cluster::hostname();
    for d in &cluster.daemons {
        if let Err(e) = client.shutdown_daemon(d.index) {
            notes.push(format!("daemon {} ({}): not reachable ({e}); ", d.index, d.addr));
        }
    }
    for d in &cluster.daemons {
        if d.host != host {
            continue;
        }
        let deadline = Instant::now() + timeout;
        while pid_alive(d.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if pid_alive(d.pid) {
            // SAFETY: plain kill(2) on a pid this cluster file recorded as its daemon.
            unsafe { libc::kill(d.pid as i32, libc::SIGKILL) };
            notes.push(format!(
                "daemon {} (pid {}) did not exit in {}s and was killed",
                d.index,
                d.pid,
                timeout.as_secs()
            ));
        }
    }
    fs::remove_file(cluster_file).ok();
    fs::remove_dir_all(registration_dir(cluster_file)).ok();
    fs::remove_file(&cluster.secret_file).ok();
    Ok(notes)
}

/// The buffer directories of the cluster's daemons on this host, as they
/// were started (for `surge stop --purge`).
pub fn local_buffers(cluster_file: &Path) -> Result<Vec<PathBuf>, String> {
    let cluster = ClusterFile::load(cluster_file).map_err(|e| e.to_string())?;
    let reg = registration_dir(cluster_file);
    let host = surge_cluster::hostname();
    let mut dirs = Vec::new();
    for d in cluster.daemons.iter().filter(|d| d.host == host) {
        let recipe = Recipe::load(&reg, d.index)?;
        let at = recipe.surged_args.iter().position(|a| a == "--buffer");
        let dir = at.and_then(|at| recipe.surged_args.get(at + 1));
        dirs.push(PathBuf::from(dir.ok_or_else(|| format!("daemon {} was started without --buffer", d.index))?));
    }
    Ok(dirs)
}

/// Stays until the daemons `rank` started on this host have all exited (shut
/// down by `surge stop`, or dead), for launchers that end a step's processes
/// with the step (srun) and so would take the daemons with an exiting
/// `surge start`. SIGTERM, SIGINT or SIGHUP (the launcher or the batch system
/// ending the step) stop the daemons first. Returns what happened to them.
pub fn stay_with_daemons(cluster: &ClusterFile, plan: &LaunchPlan, rank: &Rank) -> Vec<String> {
    let first = rank.rank * plan.daemons_per_host;
    let mine: Vec<&DaemonEntry> =
        cluster.daemons.iter().filter(|d| (first..first + plan.daemons_per_host).contains(&d.index)).collect();
    // SAFETY: plain signal-set manipulation; the signals are blocked in this
    // thread and taken synchronously by sigtimedwait below.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let poll = libc::timespec { tv_sec: 0, tv_nsec: 200_000_000 };
    while mine.iter().any(|d| pid_alive(d.pid)) {
        // SAFETY: set and poll are valid; no siginfo is asked for.
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &poll) };
        if sig > 0 {
            return stop_local(&mine, sig, plan.timeout.min(Duration::from_secs(5)));
        }
    }
    mine.iter().map(|d| format!("daemon {} (pid {}) has exited", d.index, d.pid)).collect()
}

/// Ends `daemons` (processes of this host): SIGTERM, then SIGKILL after `grace`.
fn stop_local(daemons: &[&DaemonEntry], why: libc::c_int, grace: Duration) -> Vec<String> {
    for d in daemons {
        // SAFETY: kill(2) on pids this launch started.
        unsafe { libc::kill(d.pid as i32, libc::SIGTERM) };
    }
    let deadline = Instant::now() + grace;
    while daemons.iter().any(|d| pid_alive(d.pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    daemons
        .iter()
        .map(|d| {
            if pid_alive(d.pid) {
                // SAFETY: as above.
                unsafe { libc::kill(d.pid as i32, libc::SIGKILL) };
                format!(
                    "signal {why}: daemon {} (pid {}) did not exit in {}s and was killed",
                    d.index,
                    d.pid,
                    grace.as_secs()
                )
            } else {
                format!("signal {why}: daemon {} (pid {}) stopped", d.index, d.pid)
            }
        })
        .collect()
}

/// Is `pid` a live process: has it a thread that is not a zombie? A killed
/// daemon's main thread turns zombie before its other threads have let go
/// of its port and state database, and a daemon started in its place then
/// fails; so every thread counts.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(threads) = fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    threads.flatten().any(|t| thread_alive(&t.path().join("stat")))
}

fn thread_alive(stat: &std::path::Path) -> bool {
    // Field 3 is the state; 'Z' (zombie) and 'X' (dead) count as gone.
    fs::read_to_string(stat).is_ok_and(|stat| {
        stat.rsplit_once(')').is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_defaults_to_a_single_local_rank() {
        if std::env::var("OMPI_COMM_WORLD_RANK").is_err()
            && std::env::var("PMI_RANK").is_err()
            && std::env::var("SLURM_PROCID").is_err()
        {
            let r = Rank::from_env();
            assert_eq!((r.rank, r.size), (0, 1));
        }
    }

    #[test]
    fn listen_accepts_an_ip_or_hostname_only() {
        assert_eq!(listen_ip("10.0.0.7").unwrap(), "10.0.0.7");
        assert!(listen_ip("hostname").is_ok());
        assert!(listen_ip("eth0").unwrap_err().contains("hostname"));
    }

    #[test]
    fn listen_on_an_allocation_picks_the_node_that_is_this_host() {
        // 127.0.0.2 is bindable on every Linux host but loopback, so never chosen.
        let me = surge_cluster::hostname();
        let mine = listen_ip(&format!("192.0.2.1.invalid,{me}")).unwrap();
        assert_eq!(mine, listen_ip("hostname").unwrap());
        let e = listen_ip("192.0.2.77,127.0.0.2").unwrap_err();
        assert!(e.contains("none of 192.0.2.77,127.0.0.2 is this host") && e.contains("--listen"), "{e}");
    }

    #[test]
    fn pid_alive_tells_live_from_gone() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(u32::MAX - 1));
        // A child that exited and is not reaped yet: every thread a zombie.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pid_alive(child.id()) {
            assert!(std::time::Instant::now() < deadline, "an exited child still counts as alive");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
    }
}
