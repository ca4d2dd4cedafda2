//! A multi-host Surge test bed on one machine: `up` makes K "hosts" out of
//! network namespaces joined by veth pairs to a bridge (each link shaped
//! with tc when a rate is given), starts daemons on some of them, and
//! records it all in a state file; `down` removes everything again, also
//! after a crash half way. Traffic between hosts never leaves these
//! namespaces. See docs/testbed.md.

mod addressing;
pub mod cli;
mod daemons;
mod defaults;
mod error;
mod launch_agent;
mod netns;
mod records;
mod shaping;
mod state;

pub use addressing::{host_ip, subnet, validate_name, MAX_HOSTS};
pub use defaults::{DEFAULT_MTU, DEFAULT_NAME};
pub use error::Error;
pub use netns::check_host;
pub use records::{Daemon, Host, HostStatus, Role, Spec, Testbed};
pub use shaping::{Rate, Tbf};
pub use state::default_state_dir;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// IPv4 needs 576; veth and the bridge take at most 65535.
const MTU_RANGE: std::ops::RangeInclusive<u32> = 576..=65535;

/// How long `down` lets processes exit after SIGTERM before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(3);
/// How long `down` gives `surge stop` before killing the daemons itself.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

impl Spec {
    /// `hosts` hosts, all but the last running one daemon each, 9000-byte
    /// MTU, unshaped links, state in `/tmp/surge-testbed-<name>`.
    pub fn new(name: &str, hosts: u32, surge_bin: impl Into<PathBuf>) -> Spec {
        Spec {
            name: name.to_string(),
            hosts,
            daemon_hosts: hosts.saturating_sub(1),
            daemons_per_host: 1,
            rate: None,
            mtu: DEFAULT_MTU,
            surge_bin: surge_bin.into(),
            start_args: Vec::new(),
            state_dir: default_state_dir(name),
            buffer_dir: None,
        }
    }

    /// Checks everything that can be checked without touching the system.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |why: String| Err(Error::InvalidSpec(why));
        validate_name(&self.name)?;
        if !(2..=MAX_HOSTS).contains(&self.hosts) {
            return invalid(format!(
                "--hosts {} is out of range: give 2 to {MAX_HOSTS} (at least one daemon host and one client host)",
                self.hosts
            ));
        }
        if self.daemon_hosts >= self.hosts {
            return invalid(format!(
                "--daemon-hosts {} with --hosts {}: give 0 to {} so that at least one host is left for clients",
                self.daemon_hosts,
                self.hosts,
                self.hosts - 1
            ));
        }
        if self.daemons_per_host == 0 {
            return invalid("--daemons-per-host must be at least 1".into());
        }
        if !MTU_RANGE.contains(&self.mtu) {
            return invalid(format!(
                "--mtu {} is out of range: give {} to {}",
                self.mtu,
                MTU_RANGE.start(),
                MTU_RANGE.end()
            ));
        }
        if self.state_dir.as_os_str().is_empty() {
            return invalid("the state dir must not be empty".into());
        }
        Ok(())
    }

    /// The `surge` binary as an absolute path, checked to have `surged` beside it.
    fn resolve_surge_bin(&self) -> Result<PathBuf, Error> {
        let bin = std::fs::canonicalize(&self.surge_bin).map_err(|e| {
            Error::InvalidSpec(format!(
                "the surge binary {} is unusable ({e}): build it with `cargo build -p surge-cli -p surged`",
                self.surge_bin.display()
            ))
        })?;
        let surged = bin.with_file_name("surged");
        if !surged.is_file() {
            return Err(Error::InvalidSpec(format!(
                "no surged next to {} (`surge start` runs {}): build it with `cargo build -p surge-cli -p surged`",
                bin.display(),
                surged.display()
            )));
        }
        Ok(bin)
    }
}

impl Testbed {
    /// The testbed `name` from its state file (in `state_dir`, else where `up` put it).
    pub fn load(name: &str, state_dir: Option<&Path>) -> Result<Testbed, Error> {
        validate_name(name)?;
        state::load(name, &state::resolve_state_dir(name, state_dir))
    }

    /// `ip netns exec <host's namespace> program`, with SURGE_CLUSTER set to
    /// the testbed's cluster file and Open MPI's launch agent set to the
    /// testbed's (so `mpirun --host IP,IP ...` reaches the other hosts).
    /// Panics if there is no host `host`.
    pub fn command(&self, host: u32, program: impl AsRef<OsStr>) -> Command {
        let host = self.hosts.get(host as usize).unwrap_or_else(|| panic!("testbed {} has no host {host}", self.name));
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &host.netns]).arg(program).env("SURGE_CLUSTER", &self.cluster_file);
        cmd.envs(launch_agent::mpi_env(&self.state_dir));
        cmd
    }

    /// The script Open MPI runs instead of ssh to start processes on a host of this testbed.
    pub fn launch_agent(&self) -> PathBuf {
        launch_agent::path(&self.state_dir)
    }

    pub fn client_hosts(&self) -> impl Iterator<Item = &Host> {
        self.hosts.iter().filter(|h| h.role == Role::Client)
    }

    pub fn daemon_hosts(&self) -> impl Iterator<Item = &Host> {
        self.hosts.iter().filter(|h| h.role == Role::Daemon)
    }

    /// Namespaces present, link rates in force, daemons alive.
    pub fn status(&self) -> Vec<HostStatus> {
        let present = netns::list().unwrap_or_default();
        self.hosts
            .iter()
            .map(|host| {
                let netns_present = present.contains(&host.netns);
                let mine: Vec<&Daemon> = self.daemons.iter().filter(|d| d.host == host.index).collect();
                HostStatus {
                    host: host.clone(),
                    netns_present,
                    shaped_rate: if netns_present { shaping::shaped_rate(&host.netns, netns::HOST_DEV) } else { None },
                    daemons: mine.len() as u32,
                    daemons_alive: mine.iter().filter(|d| netns::alive(d.pid)).count() as u32,
                }
            })
            .collect()
    }
}

/// Brings a testbed up. On failure part way it removes what it made
/// before returning the error.
pub fn up(spec: &Spec) -> Result<Testbed, Error> {
    spec.validate()?;
    check_host(spec.rate.is_some())?;
    let surge_bin = spec.resolve_surge_bin()?;
    let spec = Spec {
        state_dir: std::path::absolute(&spec.state_dir).map_err(|e| Error::io("cannot resolve the state dir", e))?,
        ..spec.clone()
    };
    if is_up(&spec.name, &spec.state_dir)? {
        return Err(Error::AlreadyUp { name: spec.name.clone() });
    }
    state::create_state_dir(&spec.name, &spec.state_dir)?;
    match build(&spec, surge_bin) {
        Ok(testbed) => Ok(testbed),
        Err(e) => {
            // Best effort: the error that stopped `up` matters more than one from the clean-up.
            let _ = down(&spec.name, Some(&spec.state_dir));
            Err(e)
        }
    }
}

/// Is anything of testbed `name` left: a namespace, a state dir or a pointer to one?
fn is_up(name: &str, state_dir: &Path) -> Result<bool, Error> {
    let prefix = addressing::netns_prefix(name);
    Ok(netns::list()?.iter().any(|n| n.starts_with(&prefix))
        || state::is_state_dir_of(name, state_dir)
        || state::has_pointer(name))
}

fn build(spec: &Spec, surge_bin: PathBuf) -> Result<Testbed, Error> {
    state::record_state_dir(&spec.name, &spec.state_dir)?;
    let hub = addressing::hub_netns(&spec.name);
    netns::create(&hub)?;
    netns::create_bridge(&hub, spec.mtu)?;
    let shaper = spec.rate.map(|rate| Tbf::for_link(rate, spec.mtu));
    let mut hosts = Vec::new();
    for index in 0..spec.hosts {
        let host = Host {
            index,
            netns: addressing::host_netns(&spec.name, index),
            ip: host_ip(&spec.name, index),
            role: if index < spec.daemon_hosts { Role::Daemon } else { Role::Client },
        };
        netns::create(&host.netns)?;
        netns::connect_host(&hub, &host.netns, index, &format!("{}/24", host.ip), spec.mtu)?;
        if let Some(tbf) = &shaper {
            // Both ends: the host's end shapes what it sends, the hub's end what it receives.
            tbf.apply(&host.netns, netns::HOST_DEV)?;
            tbf.apply(&hub, &netns::hub_dev(index))?;
        }
        hosts.push(host);
    }
    launch_agent::write(&spec.state_dir, &hosts)?;
    let daemon_hosts: Vec<Host> = hosts.iter().filter(|h| h.role == Role::Daemon).cloned().collect();
    let daemons = if daemon_hosts.is_empty() { Vec::new() } else { daemons::start(spec, &surge_bin, &daemon_hosts)? };
    let testbed = Testbed {
        name: spec.name.clone(),
        hub_netns: hub,
        rate: spec.rate,
        mtu: spec.mtu,
        surge_bin,
        cluster_file: daemons::cluster_file(&spec.state_dir),
        state_dir: spec.state_dir.clone(),
        hosts,
        daemons,
    };
    state::save(&testbed)?;
    Ok(testbed)
}

/// What `down` removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DownReport {
    /// `surge stop` shut the daemons down cleanly.
    pub stopped_cleanly: bool,
    /// Processes that were still running in the namespaces and were killed.
    pub killed: Vec<u32>,
    pub namespaces: Vec<String>,
    pub state_dir: Option<PathBuf>,
    /// Things left behind, and why.
    pub notes: Vec<String>,
}

impl DownReport {
    /// Nothing of the testbed was there.
    pub fn is_empty(&self) -> bool {
        !self.stopped_cleanly && self.killed.is_empty() && self.namespaces.is_empty() && self.state_dir.is_none()
    }
}

/// Removes testbed `name`: stops its daemons, kills whatever still runs in
/// its namespaces, deletes the namespaces (and with them every link and
/// qdisc) and the state dir. Works without a state file, and succeeds with
/// an empty report when there is nothing left.
pub fn down(name: &str, state_dir: Option<&Path>) -> Result<DownReport, Error> {
    validate_name(name)?;
    check_host(false)?;
    let state_dir = state::resolve_state_dir(name, state_dir);
    let prefix = addressing::netns_prefix(name);
    let mut namespaces: Vec<String> = netns::list()?.into_iter().filter(|n| n.starts_with(&prefix)).collect();
    namespaces.sort(); // hosts, then the hub: a stable order for the report
    let mut report = DownReport::default();

    if let Ok(testbed) = state::load(name, &state_dir) {
        report.stopped_cleanly = stop_daemons(&testbed, &namespaces);
    }
    for ns in &namespaces {
        report.killed.extend(netns::kill_all(ns, KILL_GRACE));
    }
    for ns in namespaces {
        match netns::delete(&ns) {
            Ok(()) => report.namespaces.push(ns),
            Err(e) => report.notes.push(e.to_string()),
        }
    }
    if state::is_state_dir_of(name, &state_dir) {
        match std::fs::remove_dir_all(&state_dir) {
            Ok(()) => report.state_dir = Some(state_dir),
            Err(e) => report.notes.push(format!("cannot remove {}: {e}", state_dir.display())),
        }
    } else if state_dir.exists() {
        report.notes.push(format!("left {}: surge testbed did not make it for testbed {name}", state_dir.display()));
    }
    state::remove_pointer(name);
    Ok(report)
}

/// `surge stop` from a client host, so the daemons shut down as they would
/// on a real cluster; true if it succeeded in time.
fn stop_daemons(testbed: &Testbed, namespaces: &[String]) -> bool {
    let Some(client) = testbed.client_hosts().find(|h| namespaces.contains(&h.netns)) else {
        return false;
    };
    if !testbed.cluster_file.is_file() {
        return false;
    }
    let stop_wait = (STOP_TIMEOUT / 2).as_secs().to_string();
    let child = testbed
        .command(client.index, &testbed.surge_bin)
        .arg("--cluster")
        .arg(&testbed.cluster_file)
        .args(["stop", "--timeout", &stop_wait])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return false };
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                child.kill().ok();
                child.wait().ok();
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_defaults_follow_the_issue() {
        let spec = Spec::new("tb", 3, "/bin/surge");
        assert_eq!((spec.daemon_hosts, spec.daemons_per_host, spec.mtu), (2, 1, 9000));
        assert_eq!(spec.state_dir, PathBuf::from("/tmp/surge-testbed-tb"));
        assert!(spec.rate.is_none() && spec.start_args.is_empty());
        spec.validate().unwrap();
    }

    #[test]
    fn bad_specs_are_refused_with_the_reason() {
        let check = |edit: &dyn Fn(&mut Spec), needle: &str| {
            let mut spec = Spec::new("tb", 3, "/bin/surge");
            edit(&mut spec);
            let e = spec.validate().unwrap_err().to_string();
            assert!(e.contains(needle), "{needle}: {e}");
        };
        check(&|s| s.hosts = 1, "--hosts 1 is out of range");
        check(&|s| s.hosts = 255, "2 to 254");
        check(&|s| s.daemon_hosts = 3, "at least one host is left for clients");
        check(&|s| s.daemon_hosts = 4, "give 0 to 2");
        let mut hosts_only = Spec::new("tb", 3, "/bin/surge");
        hosts_only.daemon_hosts = 0;
        hosts_only.validate().unwrap();
        check(&|s| s.daemons_per_host = 0, "--daemons-per-host");
        check(&|s| s.mtu = 100, "--mtu 100");
        check(&|s| s.name = "Bad-Name".into(), "a-z and 0-9");
    }
}
