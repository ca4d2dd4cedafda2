//! The launch agent of a testbed: a script Open MPI's `mpirun` runs in
//! place of ssh to start its daemons on another host (`plm_rsh_agent`). It
//! maps a host's address to the host's namespace and runs the command there
//! with `ip netns exec`, so `mpirun --host IP1,IP2 ...` spans testbed hosts
//! as it spans the nodes of a cluster, without sshd or name resolution.
//! What it starts also gets a host name of its own (a UTS namespace named
//! like the host's network namespace): Open MPI names its shared-memory
//! segments and session directories after the host name, and ranks of two
//! hosts with one name and one /dev/shm would use each other's.

use crate::{Error, Host};
use std::path::{Path, PathBuf};

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("launch-agent")
}

/// The environment that makes Open MPI use the agent, called as `agent HOST
/// COMMAND...` like ssh. No tree spawn: every remote Open MPI daemon is
/// started from the host that runs mpirun, which is where the agent is meant to run.
pub fn mpi_env(state_dir: &Path) -> [(&'static str, String); 2] {
    [("OMPI_MCA_plm_rsh_agent", path(state_dir).display().to_string()), ("OMPI_MCA_plm_rsh_no_tree_spawn", "1".into())]
}

/// The script's text for `hosts`.
fn script(hosts: &[Host]) -> String {
    let mut text = String::from(
        "#!/bin/sh\n# Written by `surge testbed up`: mpirun's launch agent (plm_rsh_agent) for this testbed.\n\
         # Usage (as ssh): launch-agent HOST COMMAND...; HOST is a host's address.\nhost=$1\nshift\ncase $host in\n",
    );
    for h in hosts {
        text.push_str(&format!("{}) ns={} ;;\n", h.ip, h.netns));
    }
    text.push_str(
        "*) echo \"launch-agent: $host is no host of this testbed (give mpirun the hosts' addresses)\" >&2; exit 255 ;;\nesac\n\
         # Like ssh, the command arrives as words for a shell on the other host.\n\
         exec ip netns exec \"$ns\" unshare --uts sh -c 'hostname \"$0\" && exec sh -c \"$1\"' \"$ns\" \"$*\"\n",
    );
    text
}

pub fn write(state_dir: &Path, hosts: &[Host]) -> Result<(), Error> {
    let path = path(state_dir);
    surge_cluster::write_atomically(&path, script(hosts).as_bytes(), 0o755)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;
    use std::net::Ipv4Addr;
    use std::process::Command;

    #[test]
    fn the_agent_maps_each_address_to_its_namespace_and_refuses_others() {
        let t = tempfile::tempdir().unwrap();
        let host = |index: u32, last: u8| Host {
            index,
            netns: format!("surge-tb-h{index}"),
            ip: Ipv4Addr::new(10, 70, 1, last),
            role: Role::Client,
        };
        write(t.path(), &[host(0, 1), host(1, 2)]).unwrap();
        let text = std::fs::read_to_string(path(t.path())).unwrap();
        assert!(text.contains("10.70.1.1) ns=surge-tb-h0 ;;") && text.contains("10.70.1.2) ns=surge-tb-h1 ;;"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(path(t.path())).unwrap().permissions().mode() & 0o111, 0o111);
        // Through sh: exec of a file just written races other tests' forks (ETXTBSY).
        let out = Command::new("sh").arg(path(t.path())).args(["10.70.1.9", "true"]).output().unwrap();
        assert_eq!(out.status.code(), Some(255));
        assert!(String::from_utf8_lossy(&out.stderr).contains("10.70.1.9 is no host of this testbed"));
        let env = mpi_env(t.path());
        assert_eq!(env[0].1, path(t.path()).display().to_string());
    }
}
