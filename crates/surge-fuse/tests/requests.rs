//! The work the mount does per create and stat, and what it keeps, with
//! the real binaries (`cargo build --workspace` first; `make test` does):
//! a name looked up missing is cached by the kernel and shows at once
//! when another client makes it; create, stat and unlink answer as a
//! plain directory does; a create and a stat cost at most so many daemon
//! requests; bytes written and fsynced through the mount read back the
//! same after both daemons are killed and started again. Skipped, with the
//! reason, where FUSE mounts cannot be made.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use surge_client::{Client, ClientConfig, JobIdentity, Layout};
use surge_proto::Op;
use surge_testkit::cluster::Cluster;

/// What the test allows the change feed (one round trip after the commit, on a busy test machine).
const FEED_BOUND: Duration = Duration::from_secs(2);

/// `Some` where FUSE can be used; otherwise the skip shows (see surge_testkit::skip).
fn fuse_ready(test: &str) -> Option<()> {
    let ready = surge_fuse::mountpoint::unavailable().map_or(Ok(()), |why| Err(format!("FUSE is unavailable ({why})")));
    surge_testkit::skip_unless_ready(test, ready)
}

/// A cluster of 2 daemons with a mount, unmounted on drop (before the cluster stops).
struct Mounted {
    at: PathBuf,
    cluster: Cluster,
}

impl Mounted {
    /// The cluster and its mount for `test`; `None` (the skip shown) where FUSE cannot be used.
    fn start(test: &str) -> Option<Mounted> {
        fuse_ready(test)?;
        let cluster = Cluster::start(2, &[]);
        let at = cluster.local("mnt");
        cluster.ok(&["mount", at.to_str().unwrap()]);
        Some(Mounted { at, cluster })
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.at.join(rel)
    }

    /// A client of its own, as another node is: its own node clock, so only
    /// daemon 0's change feed tells the mount of its changes.
    fn other_node(&self) -> Client {
        let config = ClientConfig {
            job: JobIdentity::named("other-node"),
            node_clock: self.cluster.dir.path().join("other-node-clock"),
            ..ClientConfig::from_env().unwrap()
        };
        Client::connect_with(&self.cluster.cluster_file(), config).unwrap()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.cluster.surge_with(&["umount", self.at.to_str().unwrap()]);
    }
}

fn errno_of(result: std::io::Result<impl Sized>) -> Option<i32> {
    result.err().and_then(|e| e.raw_os_error())
}

/// Requests every daemon served, by operation code, all jobs together
/// (`Status`, which asks it, and `Watch`, the change feed, left out).
fn requests_served(client: &Client) -> BTreeMap<u8, u64> {
    let mut served = BTreeMap::new();
    for (_, status) in client.status() {
        for o in status.unwrap().job_ops.into_iter().filter(|o| o.op != Op::Status as u8 && o.op != Op::Watch as u8) {
            *served.entry(o.op).or_default() += o.requests;
        }
    }
    served
}

/// The requests served while `work` ran: their total, and each operation's count.
fn requests_during(client: &Client, work: impl FnOnce()) -> (u64, BTreeMap<u8, u64>) {
    let before = requests_served(client);
    work();
    let mut during = requests_served(client);
    for (op, n) in &before {
        *during.entry(*op).or_default() -= n;
    }
    during.retain(|_, n| *n > 0);
    (during.values().sum(), during)
}

fn stats_on_daemon_0(client: &Client) -> u64 {
    let (_, status) = client.status().into_iter().next().unwrap();
    status.unwrap().job_ops.iter().filter(|o| o.op == Op::Stat as u8).map(|o| o.requests).sum()
}

#[test]
fn a_name_looked_up_missing_is_kept_by_the_kernel_and_shows_at_once_when_made() {
    let Some(m) = Mounted::start("a_name_looked_up_missing_is_kept_by_the_kernel_and_shows_at_once_when_made") else {
        return;
    };
    std::fs::create_dir(m.path("d")).unwrap();
    let other = m.other_node();

    // Asked again and again, a missing name reaches daemon 0 once: the kernel keeps its absence.
    assert_eq!(errno_of(std::fs::metadata(m.path("d/later"))), Some(libc::ENOENT));
    let before = stats_on_daemon_0(&other);
    for _ in 0..50 {
        assert_eq!(errno_of(std::fs::metadata(m.path("d/later"))), Some(libc::ENOENT));
    }
    assert!(stats_on_daemon_0(&other) - before < 5, "50 lookups of a missing name reached daemon 0");

    // Another node makes it: the feed drops the kernel's negative entry.
    other.create("/d/later", 0o644, Layout::INHERIT).unwrap();
    let started = Instant::now();
    while std::fs::metadata(m.path("d/later")).is_err() {
        assert!(started.elapsed() < FEED_BOUND, "another node's new file still looks missing");
        std::thread::sleep(Duration::from_millis(1));
    }
    other.mkdir("/d/dir", 0o755).unwrap();
    let started = Instant::now();
    while !m.path("d/dir").is_dir() {
        assert!(started.elapsed() < FEED_BOUND, "another node's new directory still looks missing");
        std::thread::sleep(Duration::from_millis(1));
    }

    // Through the mount: at once, and gone again at once.
    assert_eq!(errno_of(std::fs::metadata(m.path("d/mine"))), Some(libc::ENOENT));
    std::fs::write(m.path("d/mine"), b"abc").unwrap();
    assert_eq!(std::fs::metadata(m.path("d/mine")).unwrap().len(), 3);
    std::fs::remove_file(m.path("d/mine")).unwrap();
    assert_eq!(errno_of(std::fs::metadata(m.path("d/mine"))), Some(libc::ENOENT));
    std::fs::rename(m.path("d/later"), m.path("d/mine")).unwrap();
    assert!(m.path("d/mine").exists() && !m.path("d/later").exists());
    assert_eq!(other.stat("/d/mine").unwrap().kind, surge_client::FileKind::File, "the other node sees it too");
}

/// What each step of a create, stat, write and unlink sequence gives in `dir`.
fn create_stat_unlink(dir: &Path) -> Vec<String> {
    let f = dir.join("f");
    let create = || std::fs::OpenOptions::new().write(true).create_new(true).mode(0o640).open(&f);
    let described = |m: std::io::Result<std::fs::Metadata>| match m {
        Ok(m) => format!("size {} mode {:o} nlink {} file {}", m.len(), m.mode() & 0o7777, m.nlink(), m.is_file()),
        Err(e) => format!("error {:?}", e.raw_os_error()),
    };
    let mut seen = vec![described(std::fs::metadata(&f))];
    let mut file = create().unwrap();
    seen.push(described(std::fs::metadata(&f)));
    seen.push(described(file.metadata()));
    seen.push(format!("again: {:?}", errno_of(create())));
    file.write_all(&[7u8; 5000]).unwrap();
    seen.push(described(std::fs::metadata(&f)));
    file.seek(SeekFrom::Start(10)).unwrap();
    file.write_all(b"xyz").unwrap();
    seen.push(described(file.metadata()));
    drop(file);
    std::fs::remove_file(&f).unwrap();
    seen.push(described(std::fs::metadata(&f)));
    seen.push(format!("open: {:?}", errno_of(std::fs::File::open(&f))));
    seen.push(format!("unlink: {:?}", errno_of(std::fs::remove_file(&f))));
    drop(create().unwrap());
    seen.push(described(std::fs::metadata(&f)));
    std::fs::remove_file(&f).unwrap();
    seen
}

#[test]
fn create_stat_and_unlink_through_the_mount_answer_as_a_plain_directory_does() {
    let Some(m) = Mounted::start("create_stat_and_unlink_through_the_mount_answer_as_a_plain_directory_does") else {
        return;
    };
    let plain = m.cluster.local("plain");
    std::fs::create_dir(&plain).unwrap();
    std::fs::create_dir(m.path("d")).unwrap();
    let expected = create_stat_unlink(&plain);
    for round in 0..3 {
        assert_eq!(create_stat_unlink(&m.path("d")), expected, "round {round}");
    }
}

#[test]
fn a_create_and_a_stat_through_the_mount_cost_at_most_so_many_daemon_requests() {
    const FILES: u64 = 100;
    let Some(m) = Mounted::start("a_create_and_a_stat_through_the_mount_cost_at_most_so_many_daemon_requests") else {
        return;
    };
    std::fs::create_dir(m.path("d")).unwrap();
    let other = m.other_node();

    let (creates, by_op) = requests_during(&other, || {
        for i in 0..FILES {
            let f = std::fs::OpenOptions::new().write(true).create_new(true).open(m.path(&format!("d/f{i}"))).unwrap();
            drop(f);
        }
    });
    eprintln!("daemon requests for {FILES} creates: {creates}, by operation code {by_op:x?}");
    let (stats, by_op) = requests_during(&other, || {
        for i in 0..FILES {
            assert_eq!(std::fs::metadata(m.path(&format!("d/f{i}"))).unwrap().len(), 0);
        }
    });
    eprintln!("daemon requests for {FILES} stats: {stats}, by operation code {by_op:x?}");
    // A create: the lookup of the missing name (`Stat`), `Open`, `Close`
    // and the directory's attributes, which the create changed (`Stat`);
    // now and then the kernel's getattr comes too late for the create's
    // attributes (an `ObjStat` per stripe). It was 8, with an `ObjStat`
    // per stripe for the create's reply and again for that getattr.
    assert!(creates <= FILES * 9 / 2, "{creates} daemon requests for {FILES} creates");
    // A stat: the lookup (`ObjStat` on each of the file's 2 stripes, and
    // `Stat` where the client's cache of names has it not); the kernel's
    // getattr right after is answered from it, where it asked the
    // stripes again (4 in all).
    assert!(stats <= FILES * 7 / 2, "{stats} daemon requests for {FILES} stats");
}

#[test]
fn bytes_written_and_fsynced_through_the_mount_read_back_the_same_after_both_daemons_restart() {
    let Some(m) =
        Mounted::start("bytes_written_and_fsynced_through_the_mount_read_back_the_same_after_both_daemons_restart")
    else {
        return;
    };
    // 1 MiB and 64 KiB writes, and an unaligned tail, of bytes no two blocks share.
    let bytes: Vec<u8> = (0..(3 << 20) + 12_345u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    for (name, piece) in [("big", 1 << 20), ("small", 64 << 10)] {
        let mut file = std::fs::File::create(m.path(name)).unwrap();
        for chunk in bytes.chunks(piece) {
            file.write_all(chunk).unwrap();
        }
        file.sync_all().unwrap();
    }
    for daemon in [1, 0] {
        m.cluster.kill_daemon(daemon);
        m.cluster.ok(&["start", "--daemon", &daemon.to_string()]);
    }
    for name in ["big", "small"] {
        let mut back = Vec::new();
        // The mount's connections to the killed daemons broke: its client dials again.
        std::fs::File::open(m.path(name)).unwrap().read_to_end(&mut back).unwrap();
        assert_eq!(back.len(), bytes.len(), "{name}: length after the restart");
        assert!(back == bytes, "{name}: bytes differ after the restart");
    }
}
