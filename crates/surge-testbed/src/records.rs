//! The test bed's records: what `up` is asked for ([`Spec`]) and what is
//! up ([`Testbed`], its hosts and daemons, as the state file keeps them).
//! Plain data, so that every module may name them without depending on the
//! crate root; what they do (bringing a testbed up, its status) is in
//! lib.rs, which composes the modules.

use crate::shaping::Rate;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// What to bring up.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Every namespace is named `surge-<name>-...`; 1 to 8 of a-z0-9.
    pub name: String,
    /// Number of hosts, at least 2.
    pub hosts: u32,
    /// Hosts 0..daemon_hosts run daemons; the rest are client hosts. With 0,
    /// no host runs daemons (nor is there a cluster file): for programs that
    /// start their own, such as `surge run --hosts`.
    pub daemon_hosts: u32,
    pub daemons_per_host: u32,
    /// Each host's link rate, in both directions; `None` leaves links unshaped.
    pub rate: Option<Rate>,
    pub mtu: u32,
    /// The `surge` binary that starts the daemons (`surged` must sit next to it).
    pub surge_bin: PathBuf,
    /// Extra arguments for every `surge start`.
    pub start_args: Vec<String>,
    /// Holds the cluster file, buffers, PFS, logs and the state file.
    pub state_dir: PathBuf,
    /// Where the hosts' buffers go instead (`<dir>/buffer-h<h>`), e.g. memory
    /// while the PFS stays in the state dir on a disk; `down` does not
    /// remove it, the caller does.
    pub buffer_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Daemon,
    Client,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Daemon => "daemon",
            Role::Client => "client",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub index: u32,
    pub netns: String,
    pub ip: Ipv4Addr,
    pub role: Role,
}

/// A daemon as the cluster file listed it when the testbed came up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Daemon {
    pub index: u32,
    /// Index of the host it runs on.
    pub host: u32,
    pub addr: SocketAddr,
    pub pid: u32,
}

/// A testbed that is up, as its state file records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Testbed {
    pub name: String,
    /// The namespace holding the bridge.
    pub hub_netns: String,
    pub rate: Option<Rate>,
    pub mtu: u32,
    pub surge_bin: PathBuf,
    pub cluster_file: PathBuf,
    pub state_dir: PathBuf,
    pub hosts: Vec<Host>,
    pub daemons: Vec<Daemon>,
}

/// One host as it is now, for `surge testbed status`.
#[derive(Debug, Clone)]
pub struct HostStatus {
    pub host: Host,
    pub netns_present: bool,
    /// The rate tc reports for the host's end of its link ("200Mbit").
    pub shaped_rate: Option<String>,
    pub daemons: u32,
    pub daemons_alive: u32,
}
