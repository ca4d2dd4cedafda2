//! Which machine, as the data path sees it: a node is one kernel (its boot
//! id) seen from one network namespace. Two processes on the same node can
//! share descriptors and memory, so a client uses a daemon of its own node
//! without the network (the node-local data path) and places file-per-process
//! output there (the `local` placement). A network namespace counts as a node
//! of its own because the test bed (docs/testbed.md) models hosts as
//! namespaces of one kernel with shaped links between them: a client in one
//! must reach the others' daemons over those links, as on a real cluster.

use std::fs;
use std::os::unix::fs::MetadataExt;

/// This process's node: `<boot id>/<network namespace inode>`, or "" when
/// the kernel does not say (no /proc), which matches no daemon.
pub fn this_node() -> String {
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id");
    let net = fs::metadata("/proc/self/ns/net");
    match (boot, net) {
        (Ok(boot), Ok(net)) => format!("{}/{}", boot.trim(), net.ino()),
        _ => String::new(),
    }
}

impl crate::ClusterFile {
    /// The daemons running on this process's node, by index (none when the
    /// cluster file predates node identities or `/proc` is missing).
    pub fn local_daemons(&self) -> Vec<u32> {
        let here = this_node();
        if here.is_empty() {
            return Vec::new();
        }
        self.daemons.iter().filter(|d| d.node == here).map(|d| d.index).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_and_its_thread_are_on_one_node() {
        let here = this_node();
        assert!(here.contains('/'), "{here}");
        assert_eq!(std::thread::spawn(this_node).join().unwrap(), here);
    }

    #[test]
    fn only_daemons_registered_from_this_node_are_local() {
        let daemon = |index: u32, node: &str| crate::DaemonEntry {
            index,
            addr: "127.0.0.1:1".into(),
            host: "h".into(),
            pid: 1,
            buffer: "/b".into(),
            node: node.into(),
            local_socket: None,
        };
        let cluster = crate::ClusterFile {
            version: crate::CLUSTER_FILE_VERSION,
            cluster_id: "c".into(),
            secret_file: "/s".into(),
            pfs: "/p".into(),
            daemons: vec![daemon(0, "other-boot/1"), daemon(1, &this_node()), daemon(2, "")],
            connections: Default::default(),
            namespace: Default::default(),
        };
        assert_eq!(cluster.local_daemons(), vec![1]);
    }
}
