//! The namespace spread over the daemons (`--namespace hashed`), with real
//! daemons: a tree made, listed, renamed, linked and removed across the
//! shards reads as the same steps on a plain directory; an mdtest-easy-like
//! load's namespace requests spread over the daemons; kill -9 of a shard
//! right after a storm of creates (some not fsynced) loses no fsynced name
//! and duplicates none (`surge-cli` storms.rs, run with SURGE_NAMESPACE=hashed,
//! kills daemons in the middle of one).

mod common;

use common::TestCluster;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;
use surge_client::{Client, NamespacePolicy};
use surge_proto::shards::{dir_shard, entry_shard};
use surge_proto::{FileKind, Layout, Op};

/// A cluster of `count` daemons whose namespace is hashed, with its cluster file saying so.
fn hashed(count: u32) -> TestCluster {
    let mut cluster = TestCluster::start_with(count, &std::env::temp_dir(), &["--namespace", "hashed"]);
    cluster.cluster.namespace = NamespacePolicy::Hashed;
    cluster.cluster.save(&cluster.cluster_file).unwrap();
    cluster
}

/// The first of `/<prefix>N` whose name and entries are on different shards of `count`.
fn split_dir(prefix: &str, count: u32) -> String {
    (0..).map(|i| format!("/{prefix}{i}")).find(|d| entry_shard(d, count) != dir_shard(d, count)).unwrap()
}

/// Two directories whose entries are on different shards of `count`.
fn dirs_apart(count: u32) -> (String, String) {
    let a = "/a0".to_string();
    let b = (1..).map(|i| format!("/a{i}")).find(|d| dir_shard(d, count) != dir_shard(&a, count)).unwrap();
    (a, b)
}

fn write_file(c: &Client, path: &str, data: &[u8]) {
    let f = c.create(path, 0o644, Layout::INHERIT).unwrap();
    f.write(data).unwrap();
}

/// Every name under `dir` (recursively) with its kind and, for files, size.
fn tree(c: &Client, dir: &str, out: &mut BTreeMap<String, (FileKind, u64)>) {
    for e in c.readdir(dir).unwrap() {
        let path = if dir == "/" { format!("/{}", e.name) } else { format!("{dir}/{}", e.name) };
        let attr = c.stat(&path).unwrap();
        assert_eq!(attr.kind, e.kind, "{path}: the listing and the stat agree");
        let size = if attr.kind == FileKind::File { attr.size } else { 0 };
        out.insert(path.clone(), (attr.kind, size));
        if e.kind == FileKind::Dir {
            tree(c, &path, out);
        }
    }
}

fn plain_tree(root: &Path, dir: &Path, out: &mut BTreeMap<String, (FileKind, u64)>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let meta = e.metadata().unwrap();
        let path = format!("/{}", e.path().strip_prefix(root).unwrap().display());
        let kind = if meta.is_dir() { FileKind::Dir } else { FileKind::File };
        out.insert(path, (kind, if meta.is_dir() { 0 } else { meta.len() }));
        if meta.is_dir() {
            plain_tree(root, &e.path(), out);
        }
    }
}

#[test]
fn a_tree_made_changed_and_removed_across_shards_reads_as_on_a_plain_directory() {
    let count = 3;
    let cluster = hashed(count);
    let c = cluster.client();
    let plain = tempfile::tempdir().unwrap();
    let p = |path: &str| plain.path().join(&path[1..]);
    assert_eq!(c.stat("/").unwrap().kind, FileKind::Dir);
    assert_eq!(c.mkdir("/", 0o755).unwrap_err().errno(), libc::EEXIST);
    let split = split_dir("d", count);
    let (a, b) = dirs_apart(count);
    for dir in [&split, &a, &b, &format!("{split}/sub"), &format!("{split}/sub/deeper")] {
        c.mkdir(dir, 0o755).unwrap();
        fs::create_dir(p(dir)).unwrap();
    }
    for (i, dir) in [&split, &a, &b, &format!("{split}/sub/deeper")].into_iter().enumerate() {
        for n in 0..3 {
            let path = format!("{dir}/f{n}");
            let data = vec![b'x'; 100 * (i + 1) + n];
            write_file(&c, &path, &data);
            fs::write(p(&path), &data).unwrap();
        }
    }
    // A directory's layout reaches the files made in it, whichever daemon keeps its entries.
    let one_stripe = Layout { stripe_count: 1, ..Layout::INHERIT };
    c.set_layout(&split, one_stripe).unwrap();
    write_file(&c, &format!("{split}/striped-once"), b"one stripe");
    fs::write(p(&format!("{split}/striped-once")), b"one stripe").unwrap();
    assert_eq!(c.stat(&format!("{split}/striped-once")).unwrap().layout.stripe_count, 1);
    assert_eq!(c.stat(&format!("{a}/f0")).unwrap().layout.stripe_count, count, "the root's: every daemon");
    // Within one directory, and between two on one shard: as anywhere.
    c.rename(&format!("{a}/f0"), &format!("{a}/g0")).unwrap();
    fs::rename(p(&format!("{a}/f0")), p(&format!("{a}/g0"))).unwrap();
    c.link(&format!("{a}/f1"), &format!("{a}/h1")).unwrap();
    fs::hard_link(p(&format!("{a}/f1")), p(&format!("{a}/h1"))).unwrap();
    assert_eq!(c.stat(&format!("{a}/h1")).unwrap().nlink, 2);
    // Between shards, and a directory: EXDEV, as between file systems (mv copies).
    let exdev = |r: surge_client::Result<()>| assert_eq!(r.unwrap_err().errno(), libc::EXDEV);
    exdev(c.rename(&format!("{a}/f2"), &format!("{b}/f2")));
    exdev(c.link(&format!("{a}/f2"), &format!("{b}/l2")).map(drop));
    exdev(c.rename(&format!("{split}/sub"), &format!("{split}/moved")));
    // A directory whose entries are on another shard than its name is not
    // empty while it has entries there, and goes once it has none.
    assert_eq!(c.rmdir(&split).unwrap_err().errno(), libc::ENOTEMPTY);
    assert!(c.stat(&split).is_ok(), "a refused rmdir leaves the directory");
    write_file(&c, &format!("{split}/after"), b"still creatable");
    fs::write(p(&format!("{split}/after")), b"still creatable").unwrap();
    let deeper = format!("{split}/sub/deeper");
    for n in 0..3 {
        c.unlink(&format!("{deeper}/f{n}")).unwrap();
        fs::remove_file(p(&format!("{deeper}/f{n}"))).unwrap();
    }
    c.rmdir(&deeper).unwrap();
    fs::remove_dir(p(&deeper)).unwrap();
    assert_eq!(c.stat(&deeper).unwrap_err().errno(), libc::ENOENT);
    assert_eq!(c.create(&format!("{deeper}/x"), 0o644, Layout::INHERIT).unwrap_err().errno(), libc::ENOENT);
    let (mut got, mut want) = (BTreeMap::new(), BTreeMap::new());
    tree(&c, "/", &mut got);
    plain_tree(plain.path(), plain.path(), &mut want);
    assert_eq!(got, want);
    // Every daemon kept part of it.
    let statuses = c.status();
    for (entry, status) in &statuses {
        let status = status.as_ref().unwrap();
        assert!(status.is_metadata, "daemon {} keeps a shard", entry.index);
    }
    let report = c.fsck(false).unwrap();
    let problems: Vec<_> = report.findings.iter().filter(|f| f.class.is_problem()).collect();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn a_directory_left_without_its_anchor_refuses_creates_until_made_again() {
    let count = 2;
    let cluster = hashed(count);
    let c = cluster.client();
    let dir = split_dir("half", count);
    // The first step alone, as a crash between the two leaves it.
    let mut name_shard = common::RawConn::dial(&cluster, entry_shard(&dir, count));
    let _: surge_proto::Attr = name_shard.call(&surge_proto::Request::Mkdir { path: &dir, mode: 0o755 }).unwrap();
    assert_eq!(c.stat(&dir).unwrap().kind, FileKind::Dir);
    let inside = format!("{dir}/f");
    assert_eq!(c.create(&inside, 0o644, Layout::INHERIT).unwrap_err().errno(), libc::ENOENT);
    // mkdir -p's EEXIST gives it its anchor.
    assert_eq!(c.mkdir(&dir, 0o755).unwrap_err().errno(), libc::EEXIST);
    write_file(&c, &inside, b"made");
    assert_eq!(c.readdir(&dir).unwrap().len(), 1);
    // A file of that name never gets an anchor (a create under it is ENOENT,
    // where a plain file system says ENOTDIR: that shard knows no such directory).
    let file = split_dir("file", count);
    write_file(&c, &file, b"a file");
    assert_eq!(c.mkdir(&file, 0o755).unwrap_err().errno(), libc::EEXIST);
    assert_eq!(c.create(&format!("{file}/x"), 0o644, Layout::INHERIT).unwrap_err().errno(), libc::ENOENT);
}

/// Namespace requests served by each daemon so far (`job_ops` of its status).
fn namespace_requests(c: &Client) -> Vec<u64> {
    c.status()
        .into_iter()
        .map(|(_, status)| {
            let ops = status.unwrap().job_ops;
            ops.iter().filter(|o| Op::from_u8(o.op).is_some_and(Op::is_namespace)).map(|o| o.requests).sum()
        })
        .collect()
}

#[test]
fn an_mdtest_easy_load_spreads_its_namespace_requests_over_two_daemons() {
    let cluster = hashed(2);
    let c = cluster.client();
    // mdtest -u's layout: one directory per rank under the test directory.
    c.mkdir("/test-dir.0-0", 0o755).unwrap();
    let ranks: Vec<String> = (0..4).map(|r| format!("/test-dir.0-0/mdtest_tree.{r}.0")).collect();
    for dir in &ranks {
        c.mkdir(dir, 0o755).unwrap();
    }
    let before = namespace_requests(&c);
    for dir in &ranks {
        for i in 0..50 {
            drop(c.create(&format!("{dir}/file.mdtest.{i}"), 0o644, Layout::INHERIT).unwrap());
        }
    }
    for dir in &ranks {
        for i in 0..50 {
            c.stat(&format!("{dir}/file.mdtest.{i}")).unwrap();
        }
    }
    for dir in &ranks {
        for i in 0..50 {
            c.unlink(&format!("{dir}/file.mdtest.{i}")).unwrap();
        }
    }
    let after = namespace_requests(&c);
    let served: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let total: u64 = served.iter().sum();
    println!("namespace requests per daemon: {served:?} of {total}");
    assert!(total >= 4 * 50 * 3, "every create, stat and unlink was counted: {served:?}");
    for (daemon, n) in served.iter().enumerate() {
        assert!(n * 100 <= total * 60, "daemon {daemon} served {n} of {total} namespace requests: {served:?}");
    }
}

#[test]
fn kill_9_of_a_shard_right_after_a_create_storm_loses_no_fsynced_name_and_duplicates_none() {
    let count = 2;
    let mut cluster = hashed(count);
    let dirs: Vec<String> = (0..4).map(|i| format!("/storm{i}")).collect();
    let victim = 1;
    assert!(dirs.iter().any(|d| dir_shard(d, count) == victim), "the storm reaches the killed shard");
    let c = cluster.client_with_timeout(Duration::from_secs(5));
    for d in &dirs {
        c.mkdir(d, 0o755).unwrap();
    }
    let mut durable = Vec::new();
    for i in 0..40 {
        let d = &dirs[i % dirs.len()];
        let path = format!("{d}/f{i}");
        let f = c.create(&path, 0o644, Layout::INHERIT).unwrap();
        f.write(path.as_bytes()).unwrap();
        f.fsync().unwrap();
        durable.push(path);
    }
    // Not fsynced: may be lost, never torn or doubled.
    for i in 40..80 {
        let d = &dirs[i % dirs.len()];
        drop(c.create(&format!("{d}/f{i}"), 0o644, Layout::INHERIT));
    }
    cluster.kill(victim);
    cluster.restart(victim);
    let c = cluster.client();
    for path in &durable {
        let attr = c.stat(path).unwrap_or_else(|e| panic!("{path} was fsynced and is gone: {e}"));
        assert_eq!(attr.size, path.len() as u64, "{path} whole");
    }
    for d in &dirs {
        let names: Vec<String> = c.readdir(d).unwrap().into_iter().map(|e| e.name).collect();
        let mut unique = names.clone();
        unique.dedup();
        assert_eq!(names, unique, "{d}: no name twice");
        // Creates go on in every directory after the restart.
        write_file(&c, &format!("{d}/after"), b"x");
    }
    let report = c.fsck(false).unwrap();
    let problems: Vec<_> = report.findings.iter().filter(|f| f.class.is_problem()).collect();
    assert!(problems.is_empty(), "{problems:?}");
}
