//! The mount's cached names and attributes, with the real binaries
//! (`cargo build --workspace` first; `make test` does): a change another
//! node makes (a client of its own in this test process) reaches the
//! kernel's caches through daemon 0's change feed well within the cache's
//! lifetime, a change through the mount is seen at once, and stats of an
//! unchanged file do not reach daemon 0. Skipped, with the reason, where
//! FUSE mounts cannot be made.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use surge_client::{AttrUpdate, Client, ClientConfig, JobIdentity, Layout};
use surge_proto::Op;
use surge_testkit::cluster::Cluster;

/// What the test allows the feed (one round trip after the commit, on a busy test machine);
/// the cache's lifetime (`SURGE_META_CACHE`, 10 s by default) is far longer.
const FEED_BOUND: Duration = Duration::from_secs(2);

/// `Some` where FUSE can be used; otherwise the skip shows (see surge_testkit::skip).
fn fuse_ready(test: &str) -> Option<()> {
    let ready = surge_fuse::mountpoint::unavailable().map_or(Ok(()), |why| Err(format!("FUSE is unavailable ({why})")));
    surge_testkit::skip_unless_ready(test, ready)
}

struct Mounted<'c> {
    cluster: &'c Cluster,
    at: PathBuf,
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        let _ = self.cluster.surge_with(&["umount", self.at.to_str().unwrap()]);
    }
}

/// How long until `seen` holds of the metadata of `path`, failing past `FEED_BOUND`.
fn seen_within(path: &Path, seen: impl Fn(std::io::Result<std::fs::Metadata>) -> bool) -> Duration {
    let started = Instant::now();
    while !seen(std::fs::metadata(path)) {
        assert!(started.elapsed() < FEED_BOUND, "{}: a change on another node was not seen", path.display());
        std::thread::sleep(Duration::from_millis(1));
    }
    started.elapsed()
}

fn stats_on_daemon_0(client: &Client) -> u64 {
    let (_, status) = client.status().into_iter().next().unwrap();
    status.unwrap().job_ops.iter().filter(|o| o.op == Op::Stat as u8).map(|o| o.requests).sum()
}

#[test]
fn another_nodes_changes_reach_the_kernels_caches_and_unchanged_names_stay_on_this_node() {
    let test = "another_nodes_changes_reach_the_kernels_caches_and_unchanged_names_stay_on_this_node";
    if fuse_ready(test).is_none() {
        return;
    }
    let cluster = Cluster::start(2, &[]);
    let at = cluster.local("mnt");
    cluster.ok(&["mount", at.to_str().unwrap()]);
    let mnt = Mounted { cluster: &cluster, at };
    let on_mount = |rel: &str| mnt.at.join(rel);
    std::fs::create_dir_all(on_mount("d/sub")).unwrap();
    for f in ["d/f", "d/g", "d/sub/x"] {
        std::fs::write(on_mount(f), b"abc").unwrap();
    }
    // Another node: its own node clock, so only daemon 0's feed tells the mount of its changes.
    let config = ClientConfig {
        job: JobIdentity::named("other-node"),
        node_clock: cluster.dir.path().join("other-node-clock"),
        ..ClientConfig::from_env().unwrap()
    };
    let other = Client::connect_with(&cluster.cluster_file(), config).unwrap();

    // Stats of an unchanged file: the kernel asks the server each time
    // (a file's size is never cached), the server asks only the objects.
    for _ in 0..20 {
        std::fs::metadata(on_mount("d/g")).unwrap();
    }
    let before = stats_on_daemon_0(&other);
    for _ in 0..100 {
        assert_eq!(std::fs::metadata(on_mount("d/g")).unwrap().len(), 3);
    }
    assert!(stats_on_daemon_0(&other) - before < 5, "100 stats of an unchanged file reached daemon 0");

    // The kernel caches the directory's attributes and names: another node's chmod, rename,
    // unlink and create still show.
    std::fs::metadata(on_mount("d")).unwrap();
    std::fs::metadata(on_mount("d/sub/x")).unwrap();
    other.set_attr("/d", &AttrUpdate { mode: Some(0o700), ..Default::default() }).unwrap();
    seen_within(&on_mount("d"), |m| m.unwrap().permissions().mode() & 0o777 == 0o700);
    other.rename("/d/sub", "/d/moved").unwrap();
    seen_within(&on_mount("d/sub/x"), |m| m.is_err_and(|e| e.raw_os_error() == Some(libc::ENOENT)));
    assert!(on_mount("d/moved/x").exists());
    other.unlink("/d/f").unwrap();
    seen_within(&on_mount("d/f"), |m| m.is_err_and(|e| e.raw_os_error() == Some(libc::ENOENT)));
    other.create("/d/new", 0o644, Layout::INHERIT).unwrap();
    seen_within(&on_mount("d/new"), |m| m.is_ok());
    other.set_attr("/d/g", &AttrUpdate { mode: Some(0o604), ..Default::default() }).unwrap();
    seen_within(&on_mount("d/g"), |m| m.unwrap().permissions().mode() & 0o777 == 0o604);

    // A write elsewhere changes no name: the size is the objects', seen at once.
    other.open("/d/g", libc::O_WRONLY, 0).unwrap().write_at(&[1u8; 5000], 0).unwrap();
    assert_eq!(std::fs::metadata(on_mount("d/g")).unwrap().len(), 5000);

    // Through the mount itself: at once.
    std::fs::set_permissions(on_mount("d/g"), std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(std::fs::metadata(on_mount("d/g")).unwrap().permissions().mode() & 0o777, 0o640);
    std::fs::rename(on_mount("d/g"), on_mount("d/h")).unwrap();
    assert!(!on_mount("d/g").exists() && on_mount("d/h").exists());
    assert_eq!(other.stat("/d/h").unwrap().mode & 0o777, 0o640, "the other node sees it too");
}
