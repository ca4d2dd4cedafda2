//! The namespace's group commit end to end (docs/core.md "Durability"):
//! real daemons, daemon 0 killed with SIGKILL and started again. What a
//! client's fsync of a file or a directory covered is back; what nobody
//! fsynced within the (here very long) commit interval is gone whole, and
//! its inode numbers never serve a new file the old bytes.

mod common;

use common::TestCluster;
use surge_client::{Client, Layout};

/// Ten minutes: within the test only a client's fsync makes a change durable.
const LONG_INTERVAL_MS: &str = "600000";

fn names(client: &Client, dir: &str) -> Vec<String> {
    client.readdir(dir).unwrap().into_iter().map(|e| e.name).collect()
}

fn read_all(client: &Client, path: &str) -> Vec<u8> {
    let file = client.open(path, libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 64];
    let n = file.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn after_kill_9_of_daemon_0_every_fsynced_name_is_back_and_the_unsynced_ones_are_gone_whole() {
    let mut cluster = TestCluster::start_with(2, &std::env::temp_dir(), &["--commit-interval", LONG_INTERVAL_MS]);
    let client = cluster.client();
    // fsync of a directory makes the names made in it durable.
    client.mkdir("/e", 0o755).unwrap();
    client.create("/e/x", 0o644, Layout::INHERIT).unwrap().write(b"in e").unwrap();
    client.open("/e", libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap().fsync().unwrap();
    // fsync of a file makes its name, and every namespace change before it, durable.
    client.mkdir("/d", 0o755).unwrap();
    for i in 0..30 {
        let file = client.create(&format!("/d/f{i}"), 0o644, Layout::INHERIT).unwrap();
        file.write(format!("file {i}").as_bytes()).unwrap();
        if i % 3 == 0 {
            file.fsync().unwrap();
        }
    }
    let unsynced_ino = client.stat("/d/f29").unwrap().ino;
    client.unlink("/d/f0").unwrap();
    drop(client);

    cluster.kill(0);
    cluster.restart(0);
    let client = cluster.client();
    assert_eq!(names(&client, "/e"), ["x"]);
    assert_eq!(read_all(&client, "/e/x"), b"in e");
    // The unlink wakes the deleter, which makes removals durable (and with
    // them every change before) before it deletes objects: if it ran before
    // the kill, everything up to the unlink is back; if not, only what the
    // last fsync covered. Never anything in between.
    let sorted = |range: std::ops::RangeInclusive<u32>| {
        let mut names: Vec<String> = range.map(|i| format!("f{i}")).collect();
        names.sort();
        names
    };
    let found = names(&client, "/d");
    let (synced, deleter_ran) = (sorted(0..=27), sorted(1..=29));
    assert!(
        found == synced || found == deleter_ran,
        "f0..f27 (the last fsync's) are back, f28, f29 and the unlink whole or not at all: {found:?}"
    );
    for name in &found {
        let i: u32 = name[1..].parse().unwrap();
        assert_eq!(read_all(&client, &format!("/d/{name}")), format!("file {i}").as_bytes());
    }
    if found == deleter_ran {
        return;
    }
    let new = client.create("/d/f29", 0o644, Layout::INHERIT).unwrap();
    assert!(new.attr().unwrap().ino > unsynced_ino, "a lost create's inode number is handed out again");
    new.write(b"new").unwrap();
    assert_eq!(read_all(&client, "/d/f29"), b"new");
}
