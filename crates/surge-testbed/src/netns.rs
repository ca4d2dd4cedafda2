//! Network namespaces, veth pairs and the bridge, made with the `ip`
//! command (iproute2) so that what the testbed does can be read, and
//! repeated by hand, as ordinary `ip` commands.

use crate::Error;
use std::io;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The bridge inside the hub namespace that joins every host's link.
pub const BRIDGE: &str = "br0";
/// Each host's end of its link, inside the host's namespace.
pub const HOST_DEV: &str = "eth0";

/// The hub's end of host `index`'s link (interface names are per namespace,
/// so short names cannot clash with anything outside the testbed).
pub fn hub_dev(index: u32) -> String {
    format!("veth-h{index}")
}

/// Runs `tool args...`, returning its standard output, or an error quoting
/// the command and what it wrote to standard error.
pub fn run_tool(tool: &'static str, args: &[&str]) -> Result<String, Error> {
    let out = Command::new(tool).args(args).stdin(Stdio::null()).output().map_err(|e| missing_or_io(tool, e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Command {
            command: format!("{tool} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

fn ip(args: &[&str]) -> Result<(), Error> {
    run_tool("ip", args).map(drop)
}

fn missing_or_io(tool: &'static str, e: io::Error) -> Error {
    if e.kind() == io::ErrorKind::NotFound {
        Error::MissingTool { tool, package: "iproute2" }
    } else {
        Error::io(format!("cannot run {tool}"), e)
    }
}

/// Checks that this process may make network namespaces and that `ip`
/// (and `tc`, when links are shaped) are installed.
pub fn check_host(needs_tc: bool) -> Result<(), Error> {
    // `ip netns add` needs CAP_SYS_ADMIN (it bind-mounts the namespace) as
    // well as CAP_NET_ADMIN; root in an unprivileged container has neither.
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    let status =
        std::fs::read_to_string("/proc/self/status").map_err(|e| Error::io("cannot read /proc/self/status", e))?;
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    if effective & (1 << CAP_NET_ADMIN) == 0 || effective & (1 << CAP_SYS_ADMIN) == 0 {
        return Err(Error::NotRoot);
    }
    run_tool("ip", &["-V"])?;
    if needs_tc {
        run_tool("tc", &["-V"])?;
    }
    Ok(())
}

/// Every named network namespace (`ip netns list`), without the "(id: N)" notes.
pub fn list() -> Result<Vec<String>, Error> {
    let text = run_tool("ip", &["netns", "list"])?;
    Ok(text.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect())
}

/// A new namespace with its loopback up (daemons and clients may use 127.0.0.1 inside it).
pub fn create(netns: &str) -> Result<(), Error> {
    ip(&["netns", "add", netns])?;
    ip(&["-n", netns, "link", "set", "lo", "up"])
}

pub fn delete(netns: &str) -> Result<(), Error> {
    ip(&["netns", "delete", netns])
}

pub fn create_bridge(netns: &str, mtu: u32) -> Result<(), Error> {
    let mtu = mtu.to_string();
    ip(&["-n", netns, "link", "add", "name", BRIDGE, "mtu", &mtu, "type", "bridge"])?;
    ip(&["-n", netns, "link", "set", BRIDGE, "up"])
}

/// Host `index`'s link: a veth pair made directly between the hub and the
/// host namespace (no end ever exists in the root namespace), the hub end
/// enslaved to the bridge, the host end `eth0` with `ip/24`.
pub fn connect_host(hub: &str, host_ns: &str, index: u32, ip_cidr: &str, mtu: u32) -> Result<(), Error> {
    let mtu = mtu.to_string();
    let hub_end = hub_dev(index);
    ip(&[
        "-n", hub, "link", "add", "name", &hub_end, "mtu", &mtu, "type", "veth", "peer", "name", HOST_DEV, "mtu", &mtu,
        "netns", host_ns,
    ])?;
    ip(&["-n", hub, "link", "set", &hub_end, "master", BRIDGE, "up"])?;
    ip(&["-n", host_ns, "addr", "add", ip_cidr, "dev", HOST_DEV])?;
    ip(&["-n", host_ns, "link", "set", HOST_DEV, "up"])
}

/// Processes whose network namespace is `netns` (`ip netns pids`).
pub fn pids(netns: &str) -> Vec<u32> {
    run_tool("ip", &["netns", "pids", netns])
        .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Ends every process in `netns` but this one: SIGTERM, then SIGKILL for
/// those still alive after `grace`. Returns the pids it signalled.
pub fn kill_all(netns: &str, grace: Duration) -> Vec<u32> {
    let me = std::process::id();
    let victims: Vec<u32> = pids(netns).into_iter().filter(|&p| p != me).collect();
    for &pid in &victims {
        signal(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while victims.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pid in victims.iter().filter(|&&p| alive(p)) {
        signal(pid, libc::SIGKILL);
    }
    // SIGKILL is delivered asynchronously; wait so the namespace is really empty.
    let deadline = Instant::now() + Duration::from_secs(5);
    while victims.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    victims
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid the kernel just listed in the namespace; no memory is involved.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Is `pid` a live process (a zombie has finished and counts as gone)?
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => {
            stat.rsplit_once(')').is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alive_tells_live_from_gone() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX - 1));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        while alive(pid) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Unreaped, it is a zombie: finished, not alive.
        assert!(std::fs::metadata(format!("/proc/{pid}")).is_ok());
        child.wait().unwrap();
    }
}
