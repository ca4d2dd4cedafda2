//! The node-local data path against real daemons on this node: the client
//! moves the bytes through the object files the daemons hand it, the
//! daemon keeps every checksum, and a client gone mid-write leaves nothing
//! locked, unchecked or open behind.

mod common;

use common::{LocalConn, TestCluster};
use std::fs;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};
use surge_client::{Client, ClientConfig, Layout};
use surge_proto::frame::REPLY_HEADER_LEN;
use surge_proto::msg::WriteGrant;
use surge_proto::sums::{ENTRY, HEADER_LEN, UNSURE};
use surge_proto::Request;
use surge_testkit::{flip_byte, pattern};

const MIB: usize = 1 << 20;

/// Descriptors of this process open on files under `dir`.
fn descriptors_under(pid: u32, dir: &Path) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten().filter(|fd| fs::read_link(fd.path()).is_ok_and(|target| target.starts_with(dir))).count()
        })
        .unwrap_or(0)
}

fn waits_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn writes_and_reads_on_the_daemons_node_go_through_the_object_files_and_read_back_whole() {
    let cluster = TestCluster::start(2);
    let buffers = cluster.dir.path();
    let me = std::process::id();
    for local in [true, false] {
        let config = ClientConfig { local, ..ClientConfig::from_env().unwrap() };
        let client = Client::connect_with(&cluster.cluster_file, config).unwrap();
        let path = format!("/local-{local}");
        let f = client.create(&path, 0o644, Layout { stripe_count: 2, stripe_size: MIB as u64, first: 1 }).unwrap();
        let data = pattern(7, 3 * MIB + 12_345);
        // Unaligned at both ends, across stripes; then a rewrite inside one block.
        assert_eq!(f.write_at(&data, 100).unwrap(), data.len());
        assert_eq!(f.write_at(b"inside", MIB as u64 + 4097).unwrap(), 6);
        let mut want = vec![0u8; 100];
        want.extend_from_slice(&data);
        want[MIB + 4097..MIB + 4103].copy_from_slice(b"inside");
        let mut back = vec![0xee; want.len() + 10];
        assert_eq!(f.read_at(&mut back, 0).unwrap(), want.len());
        assert!(back[..want.len()] == want[..], "read back differs (local path {local})");
        let mut middle = vec![0; 5000];
        assert_eq!(f.read_at(&mut middle, MIB as u64 + 3000).unwrap(), 5000);
        assert!(middle[..] == want[MIB + 3000..MIB + 8000]);
        let held = descriptors_under(me, buffers);
        assert_eq!(held > 0, local, "object descriptors held while open: {held} (local path {local})");
        drop(f);
        assert_eq!(descriptors_under(me, buffers), 0, "the last close lets go of the object descriptors");
        let f = client.open(&path, libc::O_RDONLY, 0).unwrap();
        let mut again = vec![0; want.len()];
        assert_eq!(f.read_at(&mut again, 0).unwrap(), want.len());
        assert!(again == want);
    }
}

#[test]
fn a_byte_damaged_in_an_object_is_eio_through_the_local_path_and_its_neighbours_still_read() {
    let cluster = TestCluster::start(1);
    let client = cluster.client();
    let f = client.create("/bad", 0o644, Layout { stripe_count: 1, stripe_size: MIB as u64, first: 0 }).unwrap();
    let data = pattern(3, 64 << 10);
    f.write_at(&data, 0).unwrap();
    flip_byte(&cluster.object_file(0, f.ino()), 20_000);
    let mut back = vec![0; data.len()];
    let e = f.read_at(&mut back, 0).expect_err("a damaged byte is never served");
    assert_eq!(e.errno(), libc::EIO, "{e}");
    let mut first = vec![0; 16 << 10];
    assert_eq!(f.read_at(&mut first, 0).unwrap(), first.len());
    assert!(first[..] == data[..16 << 10]);
}

#[test]
fn a_client_gone_between_grant_and_commit_leaves_the_object_unlocked_checksummed_and_no_descriptor_open() {
    let cluster = TestCluster::start(1);
    let client = cluster.client();
    let f = client.create("/torn", 0o644, Layout { stripe_count: 1, stripe_size: MIB as u64, first: 0 }).unwrap();
    f.write_at(&pattern(1, 16 << 10), 0).unwrap();
    let (ino, object) = (f.ino(), cluster.object_file(0, f.ino()));
    let daemon = cluster.cluster.daemons[0].pid;
    let fds = || fs::read_dir(format!("/proc/{daemon}/fd")).unwrap().count();
    let before = fds();

    let mut gone = LocalConn::dial(&cluster, 0);
    let grant: WriteGrant = gone.call(&Request::LocalWriteBegin { ino, offset: 4096 + 10, len: 9000 }).unwrap();
    assert_ne!(grant.grant, 0);
    // The client wrote part of its extent, then died without a commit.
    let torn = pattern(2, 5000);
    std::os::unix::fs::FileExt::write_all_at(&fs::OpenOptions::new().write(true).open(&object).unwrap(), &torn, 4106)
        .unwrap();
    let mut waiting = [0u8; REPLY_HEADER_LEN];
    assert!(gone.stream.set_nonblocking(true).is_ok() && gone.stream.read(&mut waiting).is_err());
    drop(gone);

    // The daemon checksums the range itself: no block stays unsure.
    let sidecar = object.with_extension("sum");
    waits_for("the reclaim of the grant", || {
        let entries = fs::read(&sidecar).unwrap();
        let entry = |block: usize| {
            let at = HEADER_LEN as usize + block * ENTRY as usize;
            u32::from_le_bytes(entries[at..at + 4].try_into().unwrap())
        };
        (1..=3).all(|block| entry(block) != UNSURE)
    });
    // Its bytes read back as written, checked; and the lock is free: the next write lands at once.
    let mut back = vec![0; 5000];
    assert_eq!(f.read_at(&mut back, 4106).unwrap(), 5000);
    assert!(back == torn);
    assert_eq!(f.write_at(b"after", 4106).unwrap(), 5);
    waits_for("the daemon to close the connection's descriptors", || fds() == before);
    assert!(cluster.log(0).contains("went away holding a write grant"), "{}", cluster.log(0));
}

#[test]
fn a_client_that_holds_a_grant_past_the_frame_timeout_loses_it_and_the_next_writer_proceeds() {
    let cluster = TestCluster::start_with(1, &std::env::temp_dir(), &["--frame-timeout", "1"]);
    let client = cluster.client();
    let f = client.create("/stalled", 0o644, Layout { stripe_count: 1, stripe_size: MIB as u64, first: 0 }).unwrap();
    f.write_at(&pattern(1, 8192), 0).unwrap();
    let mut stalled = LocalConn::dial(&cluster, 0);
    let _grant: WriteGrant = stalled.call(&Request::LocalWriteBegin { ino: f.ino(), offset: 0, len: 8192 }).unwrap();
    let started = Instant::now();
    // Waits for the object's lock until the stalled client's grant is taken back.
    assert_eq!(f.write_at(b"next", 0).unwrap(), 4);
    assert!(started.elapsed() >= Duration::from_millis(900), "the grant held the lock: {:?}", started.elapsed());
    let mut back = vec![0; 8192];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), 8192);
    assert!(&back[..4] == b"next" && back[4..] == pattern(1, 8192)[4..]);
    // The daemon closed the stalled connection and says why.
    let mut rest = Vec::new();
    let _ = stalled.stream.read_to_end(&mut rest);
    assert!(cluster.log(0).contains("went away holding a write grant"), "{}", cluster.log(0));
}

#[test]
fn the_node_local_ops_are_refused_over_tcp() {
    let cluster = TestCluster::start(1);
    let mut raw = common::RawConn::dial(&cluster, 0);
    for req in [Request::ObjHandles { ino: 1 }, Request::LocalWriteBegin { ino: 1, offset: 0, len: 1 }] {
        assert_eq!(raw.call::<()>(&req), Err(libc::EOPNOTSUPP));
    }
}
