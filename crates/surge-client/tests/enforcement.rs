//! The data manager's enforcement as an application sees it through the
//! client library, on real daemons: a checkpoint cap paces its pipelined,
//! striped writes, a write to a full buffer waits for the space a
//! removal frees instead of failing, but waits once in all, however many
//! pieces it was cut into, and daemon 0 knows which files the application
//! holds open (they are not evicted).

mod common;

use common::{RawConn, TestCluster};
use std::thread;
use std::time::{Duration, Instant};
use surge_client::Layout;
use surge_proto::msg::DrainTickReply;
use surge_proto::Request;
use surge_testkit::pattern;

const MB: u64 = 1_000_000;

/// Sends every daemon of `cluster` the tick a throttler would.
fn tick(cluster: &TestCluster, daemons: u32, checkpoint_bps: u64, wait_for_space_ms: u32) -> Vec<DrainTickReply> {
    (0..daemons)
        .map(|daemon| {
            let tick = Request::DrainTick { checkpoint_bps, demote_bps: 0, direct_bps: 0, wait_for_space_ms };
            RawConn::dial_as_peer(cluster, daemon).call(&tick).unwrap()
        })
        .collect()
}

#[test]
fn a_checkpoint_cap_paces_a_clients_pipelined_writes_on_every_stripe() {
    let cluster = TestCluster::start(2);
    let client = cluster.client();
    let layout = Layout { stripe_count: 2, stripe_size: 1 << 20, first: 0 };
    let data = pattern(5, (40 * MB) as usize);
    let file = client.create("/ckpt_0001", 0o644, layout).unwrap();
    let started = Instant::now();
    file.write_at(&data, 0).unwrap();
    let uncapped = started.elapsed();
    eprintln!("uncapped: {uncapped:?}");

    // 10 MB/s on each of the two daemons: 40 MB in 2 s.
    tick(&cluster, 2, 10 * MB, 0);
    let file = client.create("/ckpt_0002", 0o644, layout).unwrap();
    let started = Instant::now();
    file.write_at(&data, 0).unwrap();
    let took = started.elapsed().as_secs_f64();
    eprintln!("40 MB over two daemons capped at 10 MB/s each: {took:.2} s");
    // A ceiling (not faster than the caps allow); how much slower load makes it is for the benchmarks.
    assert!((1.7..20.0).contains(&took), "{took:.2} s, expected at least 1.7 s (2 s at the caps)");
    let written: u64 = tick(&cluster, 2, 0, 0).iter().flat_map(|r| r.written.iter().map(|&(_, bytes)| bytes)).sum();
    assert_eq!(written, 80 * MB, "every byte counted once, to the client's job");
}

#[test]
fn a_write_to_a_full_buffer_waits_for_the_space_a_removal_frees() {
    let cluster = TestCluster::start_with(1, &std::env::temp_dir(), &["--capacity", "8388608"]);
    let client = cluster.client();
    let layout = Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0 };
    client.mkdir("/step-1", 0o755).unwrap();
    let old = client.create("/step-1/old", 0o644, layout).unwrap();
    old.write_at(&pattern(1, 8 << 20), 0).unwrap();
    let new = client.create("/new", 0o644, layout).unwrap();
    let err = new.write_at(&pattern(2, 1 << 20), 0).unwrap_err();
    assert_eq!(err.errno(), libc::ENOSPC, "without a wait for space: {err}");

    tick(&cluster, 1, 0, 10_000);
    // Closed first: a file removed while a client holds it keeps its space until the last close.
    drop(old);
    let remover = {
        let cluster_file = cluster.cluster_file.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            surge_client::Client::connect(&cluster_file).unwrap().unlink("/step-1/old").unwrap();
        })
    };
    let started = Instant::now();
    new.write_at(&pattern(2, 1 << 20), 0).unwrap();
    let took = started.elapsed();
    remover.join().unwrap();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(5), "{took:?}");
}

/// How long a 4 MiB write into a full buffer with a 2 s wait for space
/// takes to fail, and the next call (1 MiB) after it; over the node-local
/// path (`local`) or TCP.
fn waits_for_space_in_a_full_buffer(local: bool) -> (Duration, Duration) {
    let cluster = TestCluster::start_with(2, &std::env::temp_dir(), &["--capacity", "4194304"]);
    let config = surge_client::ClientConfig { local, ..surge_client::ClientConfig::from_env().unwrap() };
    let client = surge_client::Client::connect_with(&cluster.cluster_file, config).unwrap();
    let layout = Layout { stripe_count: 2, stripe_size: 1 << 20, first: 0 };
    let full = client.create("/full", 0o644, layout).unwrap();
    full.write_at(&pattern(1, 8 << 20), 0).unwrap();
    tick(&cluster, 2, 0, 2_000);
    let file = client.create("/more", 0o644, layout).unwrap();
    let started = Instant::now();
    let err = file.write_at(&pattern(2, 4 << 20), 0).unwrap_err();
    let first = started.elapsed();
    eprintln!(
        "figures: a 4 MiB write into a full buffer with a 2 s wait for space failed after {first:.2?} (local {local})"
    );
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    let started = Instant::now();
    assert_eq!(file.write_at(&pattern(3, 1 << 20), 0).unwrap_err().errno(), libc::ENOSPC);
    (first, started.elapsed())
}

#[test]
fn a_write_into_a_full_buffer_waits_for_space_once_in_all_not_once_per_piece() {
    // 16 pieces of 256 KiB, 8 on each daemon, pipelined: waiting 2 s each
    // would take 16 s. The next call waits its own 2 s, no more.
    let (call, next) = waits_for_space_in_a_full_buffer(false);
    assert!(call >= Duration::from_secs(2) && call < Duration::from_secs(4), "{call:?}");
    assert!(next >= Duration::from_secs(2) && next < Duration::from_secs(4), "{next:?}");
}

#[test]
fn over_the_node_local_path_a_refused_grant_and_its_smaller_retries_share_one_wait_for_space() {
    let (call, _) = waits_for_space_in_a_full_buffer(true);
    assert!(call >= Duration::from_secs(2) && call < Duration::from_secs(4), "{call:?}");
}

#[test]
fn daemon_0_counts_a_file_as_held_from_its_open_until_the_last_handle_is_dropped() {
    let cluster =
        TestCluster::start_with(1, &std::env::temp_dir(), &["--drain", "bbos", "--drain-rates", "40,30,16,1"]);
    let (writer, reader) = (cluster.client(), cluster.client());
    let held = |c: &surge_client::Client| c.drain_status().unwrap().files_held;
    let file = writer.create("/ckpt_1", 0o644, Layout::INHERIT).unwrap();
    file.write_at(&pattern(1, 1 << 20), 0).unwrap();
    assert_eq!(held(&writer), 1);
    let again = reader.open("/ckpt_1", libc::O_RDONLY, 0).unwrap();
    assert_eq!(held(&writer), 1, "one file, two handles");
    drop(file);
    assert_eq!(held(&writer), 1, "the reader still holds it");
    drop(again);
    assert_eq!(held(&writer), 0);
}
