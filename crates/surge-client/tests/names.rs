//! Cached names and attributes against a real cluster: two clients, each
//! with its own cache, watcher and node clock, stand for two nodes. A change one makes
//! is seen by the other through daemon 0's change feed well within the
//! cache's lifetime, by itself at once; repeated stats of unchanged names
//! do not reach daemon 0.

mod common;

use common::TestCluster;
use std::time::{Duration, Instant};
use surge_client::{AttrUpdate, Client, ClientConfig, JobIdentity, Layout};
use surge_proto::Op;

/// Far longer than the feed takes: a change seen sooner came by the feed.
const LIFETIME: Duration = Duration::from_secs(30);
/// What the test allows the feed (one round trip after the commit, on a busy test machine).
const FEED_BOUND: Duration = Duration::from_secs(2);

/// A client on a node of its own (its own node clock, in the cluster's directory).
fn node(cluster: &TestCluster, job: &str, lifetime: Duration) -> Client {
    let config = ClientConfig {
        job: JobIdentity::named(job),
        meta_cache: lifetime,
        node_clock: cluster.dir.path().join(format!("node-clock-{job}")),
        ..ClientConfig::from_env().unwrap()
    };
    Client::connect_with(&cluster.cluster_file, config).unwrap()
}

/// Daemon 0's count of `Stat` requests of `job`.
fn stats_on_daemon_0(client: &Client, job: &str) -> u64 {
    let job = JobIdentity::named(job).id;
    let (_, status) = client.status().into_iter().next().unwrap();
    status.unwrap().job_ops.iter().filter(|o| o.job == job && o.op == Op::Stat as u8).map(|o| o.requests).sum()
}

/// Stats `paths` until the watcher follows the feed (stats stop reaching daemon 0).
fn warm(client: &Client, job: &str, paths: &[&str]) {
    let started = Instant::now();
    loop {
        for p in paths {
            client.stat(p).unwrap();
        }
        let before = stats_on_daemon_0(client, job);
        for p in paths {
            client.stat(p).unwrap();
        }
        if stats_on_daemon_0(client, job) == before {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the cache never served {paths:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long until `seen` holds of what `client` stats at `path`.
fn seen_within(
    client: &Client,
    path: &str,
    seen: impl Fn(surge_client::Result<surge_client::Attr>) -> bool,
) -> Duration {
    let started = Instant::now();
    while !seen(client.stat(path)) {
        assert!(started.elapsed() < LIFETIME, "{path}: the change was not seen within the cache's lifetime");
        std::thread::sleep(Duration::from_millis(1));
    }
    started.elapsed()
}

#[test]
fn repeated_stats_of_unchanged_names_do_not_reach_daemon_0() {
    let cluster = TestCluster::start(2);
    let writer = node(&cluster, "writer", LIFETIME);
    writer.mkdir("/d", 0o755).unwrap();
    let files: Vec<String> = (0..20).map(|i| format!("/d/f{i}")).collect();
    for f in &files {
        writer.create(f, 0o644, Layout::INHERIT).unwrap().write_at(b"abc", 0).unwrap();
    }
    let reader = node(&cluster, "reader", LIFETIME);
    let paths: Vec<&str> = files.iter().map(String::as_str).collect();
    warm(&reader, "reader", &paths);
    let before = stats_on_daemon_0(&reader, "reader");
    for _ in 0..10 {
        for p in &paths {
            assert_eq!(reader.stat(p).unwrap().size, 3, "{p}: the size still comes from the objects");
        }
    }
    assert_eq!(stats_on_daemon_0(&reader, "reader"), before, "200 stats of cached names");

    // Turned off, every stat asks daemon 0, as before the cache.
    let uncached = node(&cluster, "uncached", Duration::ZERO);
    for _ in 0..3 {
        for p in &paths {
            uncached.stat(p).unwrap();
        }
    }
    assert_eq!(stats_on_daemon_0(&uncached, "uncached"), 3 * paths.len() as u64);
}

#[test]
fn another_nodes_changes_are_seen_through_the_feed_and_this_nodes_at_once() {
    let cluster = TestCluster::start(2);
    let other = node(&cluster, "other", LIFETIME);
    let here = node(&cluster, "here", LIFETIME);
    other.mkdir("/d", 0o755).unwrap();
    other.mkdir("/d/sub", 0o755).unwrap();
    for name in ["a", "b", "c", "sub/x", "mine"] {
        other.create(&format!("/d/{name}"), 0o644, Layout::INHERIT).unwrap();
    }
    let paths = ["/d", "/d/a", "/d/b", "/d/c", "/d/sub", "/d/sub/x", "/d/mine"];
    warm(&here, "here", &paths);

    // chmod on the other node.
    other.set_attr("/d/a", &AttrUpdate { mode: Some(0o600), ..Default::default() }).unwrap();
    let chmod = seen_within(&here, "/d/a", |a| a.unwrap().mode & 0o777 == 0o600);
    // unlink.
    other.unlink("/d/b").unwrap();
    let unlink = seen_within(&here, "/d/b", |a| a.is_err_and(|e| e.errno() == libc::ENOENT));
    // rename of a directory: everything under it moves.
    other.rename("/d/sub", "/d/moved").unwrap();
    let rename = seen_within(&here, "/d/sub/x", |a| a.is_err_and(|e| e.errno() == libc::ENOENT));
    assert!(here.stat("/d/moved/x").is_ok());
    // a new name in a cached directory moves its times on.
    let dir_mtime = here.stat("/d").unwrap().mtime_ns;
    std::thread::sleep(Duration::from_millis(5));
    other.create("/d/new", 0o644, Layout::INHERIT).unwrap();
    let create = seen_within(&here, "/d", |a| a.unwrap().mtime_ns > dir_mtime);
    for (what, took) in [("chmod", chmod), ("unlink", unlink), ("rename", rename), ("create", create)] {
        assert!(took < FEED_BOUND, "{what} on another node took {took:?} to be seen");
    }

    // Sizes come from the objects: a write or truncate elsewhere is seen at once.
    let f = other.open("/d/c", libc::O_WRONLY, 0).unwrap();
    f.write_at(&[7u8; 5000], 0).unwrap();
    assert_eq!(here.stat("/d/c").unwrap().size, 5000);
    other.truncate("/d/c", 10).unwrap();
    assert_eq!(here.stat("/d/c").unwrap().size, 10);

    // This node's own changes: at once, without waiting for the feed.
    here.set_attr("/d/mine", &AttrUpdate { mode: Some(0o640), ..Default::default() }).unwrap();
    assert_eq!(here.stat("/d/mine").unwrap().mode & 0o777, 0o640);
    here.rename("/d/mine", "/d/ours").unwrap();
    assert_eq!(here.stat("/d/mine").unwrap_err().errno(), libc::ENOENT);
    here.unlink("/d/ours").unwrap();
    assert_eq!(here.stat("/d/ours").unwrap_err().errno(), libc::ENOENT);
}

#[test]
fn a_file_this_client_staged_out_shows_staged_at_once() {
    let cluster = TestCluster::start(2);
    let client = node(&cluster, "stager", LIFETIME);
    client.create("/f", 0o644, Layout::INHERIT).unwrap().write_at(b"bytes", 0).unwrap();
    warm(&client, "stager", &["/f"]);
    assert_eq!(client.stat("/f").unwrap().tier, surge_client::Tier::Buffer);
    client.stage_out("/f", &mut |_| {}).unwrap();
    assert_eq!(client.stat("/f").unwrap().tier, surge_client::Tier::Staged, "the commit is this client's change");
}
