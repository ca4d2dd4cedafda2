//! The node-local data path's pipelined commits and its wait for space,
//! against real daemons on this node: a commit's reply is read before the
//! connection's next reply (the write returns once its bytes are in the
//! object file and its checksums are sent), yet every acknowledged byte
//! survives with its checksums, a failure still reaches the program, and
//! every call that finds the buffer full waits its own wait for space.

mod common;

use common::{RawConn, TestCluster};
use std::time::{Duration, Instant};
use surge_client::{Client, ClientConfig, Layout};
use surge_proto::Request;
use surge_testkit::pattern;

const MIB: usize = 1 << 20;

fn local_client(cluster: &TestCluster) -> Client {
    let config = ClientConfig { local: true, ..ClientConfig::from_env().unwrap() };
    Client::connect_with(&cluster.cluster_file, config).unwrap()
}

#[test]
fn over_the_node_local_path_each_call_into_a_full_buffer_waits_its_own_wait_for_space() {
    let cluster = TestCluster::start_with(2, &std::env::temp_dir(), &["--capacity", "4194304"]);
    let client = local_client(&cluster);
    let layout = Layout { stripe_count: 2, stripe_size: MIB as u64, first: 0 };
    let full = client.create("/full", 0o644, layout).unwrap();
    full.write_at(&pattern(1, 8 * MIB), 0).unwrap();
    for daemon in 0..2 {
        let tick = Request::DrainTick { checkpoint_bps: 0, demote_bps: 0, direct_bps: 0, wait_for_space_ms: 1_000 };
        let _: surge_proto::msg::DrainTickReply = RawConn::dial_as_peer(&cluster, daemon).call(&tick).unwrap();
    }
    let file = client.create("/more", 0o644, layout).unwrap();
    // The first call, then calls of every shape after it: each waits 1 s, once.
    for (k, (offset, len)) in
        [(0, 4 * MIB), (0, MIB), (0, 64 << 10), (4096, 10_000), (3 * MIB as u64, MIB)].into_iter().enumerate()
    {
        let started = Instant::now();
        let err = file.write_at(&pattern(k as u64, len), offset).unwrap_err();
        let took = started.elapsed();
        eprintln!("figures: call {k} ({len} bytes at {offset}) into a full buffer failed after {took:.2?}");
        assert_eq!(err.errno(), libc::ENOSPC, "{err}");
        assert!(took >= Duration::from_millis(950) && took < Duration::from_secs(3), "call {k}: {took:?}");
    }
}
