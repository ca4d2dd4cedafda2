//! The `local` placement (docs/core.md "Striping"): a file created under it
//! starts on a daemon of its creator's node. On a test bed of two daemon
//! hosts (two daemons each) and a client host, each host writes four files:
//! a daemon host's go to its own two daemons, both used, and the client
//! host's (no daemon of its own) spread over the cluster as `auto` does. On
//! one node, `surge start --placement local` gives the root that default
//! and files land on the node's daemons.
//!
//! The test bed needs root and iproute2; otherwise its test shows
//! "SKIPPED: <test>: <reason>" (and fails under CI=true as root).

use std::collections::BTreeSet;
use std::path::PathBuf;
use surge_testbed::{down, up, Spec};
use surge_testkit::cluster::Cluster;

fn surge_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_surge"))
}

/// The first daemon of each of `files`, by `surge getstripe -i` on host `host`.
fn first_daemons(tb: &surge_testbed::Testbed, host: u32, files: &[String]) -> Vec<u32> {
    let out = tb.command(host, surge_bin()).arg("getstripe").arg("-i").args(files).output().unwrap();
    assert!(out.status.success(), "getstripe on host {host}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().map(|l| l.rsplit(' ').next().unwrap().parse().unwrap()).collect()
}

#[test]
fn file_per_process_output_lands_on_each_writers_own_hosts_daemons() {
    let test = "file_per_process_output_lands_on_each_writers_own_hosts_daemons";
    let Some(()) = surge_testkit::skip_unless_ready(test, surge_testbed::check_host(false)) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut spec = Spec::new("plc", 3, surge_bin());
    (spec.daemon_hosts, spec.daemons_per_host) = (2, 2);
    spec.state_dir = dir.path().join("testbed");
    spec.start_args = ["--placement", "local", "--stripe-count", "1"].map(String::from).to_vec();
    let _ = down(&spec.name, Some(&spec.state_dir));
    let tb = up(&spec).unwrap();
    let src = dir.path().join("rank.dat");
    std::fs::write(&src, vec![7u8; 300_000]).unwrap();

    let mut firsts = Vec::new();
    for host in 0..3 {
        let files: Vec<String> = (0..4).map(|rank| format!("surge:/out.h{host}.r{rank}")).collect();
        for file in &files {
            let out = tb.command(host, surge_bin()).arg("cp").arg(&src).arg(file).output().unwrap();
            assert!(out.status.success(), "cp on host {host}: {}", String::from_utf8_lossy(&out.stderr));
        }
        firsts.push(first_daemons(&tb, host, &files));
    }
    let host_of = |daemon: u32| tb.daemons.iter().find(|d| d.index == daemon).unwrap().host;
    for host in 0..2 {
        let used: BTreeSet<u32> = firsts[host as usize].iter().copied().collect();
        assert!(used.iter().all(|&d| host_of(d) == host), "host {host}'s files went to daemons {used:?}");
        assert_eq!(used.len(), 2, "host {host}'s files use both of its daemons: {used:?}");
    }
    let hosts_of_client_files: BTreeSet<u32> = firsts[2].iter().map(|&d| host_of(d)).collect();
    assert_eq!(hosts_of_client_files.len(), 2, "a host with no daemon spreads its files: {:?}", firsts[2]);
    down(&tb.name, Some(&tb.state_dir)).unwrap();
}

#[test]
fn surge_start_placement_local_makes_the_roots_files_start_on_this_nodes_daemons() {
    let c = Cluster::start(2, &["--placement", "local", "--stripe-count", "1"]);
    assert_eq!(c.ok(&["getstripe", "-c", "-i", "surge:/"]).trim(), "1 local");
    let src = c.local("rank.dat");
    std::fs::write(&src, vec![3u8; 100_000]).unwrap();
    let mut used = BTreeSet::new();
    for rank in 0..4 {
        let file = format!("surge:/out.r{rank}");
        c.ok(&["cp", src.to_str().unwrap(), &file]);
        used.insert(c.ok(&["getstripe", "-i", &file]).trim().parse::<u32>().unwrap());
        assert_eq!(c.ok(&["getstripe", "-c", &file]).trim(), "1");
    }
    assert_eq!(used, BTreeSet::from([0, 1]), "both of this node's daemons take files");
    c.ok(&["setstripe", "--placement", "auto", "surge:/"]);
    assert_eq!(c.ok(&["getstripe", "-i", "surge:/"]).trim(), "-1");
}
