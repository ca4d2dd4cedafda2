//! The node-local data path's pipelined commits and its wait for space,
//! against real daemons on this node: a commit's reply is read before the
//! connection's next reply (the write returns once its bytes are in the
//! object file and its checksums are sent), yet every acknowledged byte
//! survives with its checksums, a fence still reaches the program, a
//! size or read asked meanwhile includes the write, and every call that
//! finds the buffer full waits its own wait for space.

mod common;

use common::{LocalConn, RawConn, TestCluster};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use surge_client::{AttrUpdate, Client, ClientConfig, Layout};
use surge_proto::msg::{WriteGrant, WriteReply};
use surge_proto::sums::{self, ENTRY, HEADER_LEN, UNSURE};
use surge_proto::Request;
use surge_testkit::pattern;

const MIB: usize = 1 << 20;
const ONE_OBJECT: Layout = Layout { stripe_count: 1, stripe_size: MIB as u64, first: 0 };
/// What the writers below write, in calls of these lengths: whole units,
/// unaligned pieces, and one across a unit's end.
const CALLS: [usize; 5] = [MIB, MIB, 5000, 64 << 10, MIB + 12_345];

fn written() -> Vec<u8> {
    pattern(9, CALLS.iter().sum())
}

/// Writes `written()` into `file`, call after call: each call's last
/// commit is still unanswered when it returns.
fn write_calls(file: &surge_client::File) {
    let data = written();
    let mut at = 0;
    for len in CALLS {
        assert_eq!(file.write_at(&data[at..at + len], at as u64).unwrap(), len);
        at += len;
    }
}

/// `path` read back whole, over the node-local path (checked by this
/// client against the sidecar) and over TCP (checked by the daemon), and
/// no block of object `object`'s sidecar left unsure.
fn assert_whole(cluster: &TestCluster, path: &str, object: &Path) {
    let want = written();
    for local in [true, false] {
        let config = ClientConfig { local, ..ClientConfig::from_env().unwrap() };
        let client = Client::connect_with(&cluster.cluster_file, config).unwrap();
        let f = client.open(path, libc::O_RDONLY, 0).unwrap();
        let mut back = vec![0; want.len() + 1];
        assert_eq!(f.read_at(&mut back, 0).unwrap(), want.len(), "local path {local}");
        assert!(back[..want.len()] == want[..], "a byte acknowledged differs (local path {local})");
    }
    let entries = std::fs::read(object.with_extension("sum")).unwrap();
    let blocks = want.len().div_ceil(4096);
    for block in 0..blocks {
        let at = HEADER_LEN as usize + block * ENTRY as usize;
        let entry = u32::from_le_bytes(entries[at..at + 4].try_into().unwrap());
        assert_ne!(entry, UNSURE, "block {block} was left without its checksum");
    }
}

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

/// The writer that the test below runs in a process of its own and kills.
#[test]
#[ignore = "run by a_writer_killed_with_its_last_commit_unanswered_loses_no_acknowledged_byte, in its own process"]
fn writer_killed_after_its_writes_returned() {
    let cluster_file = std::env::var("LOCAL_WINDOW_CLUSTER").expect("the killing test names the cluster");
    let config = ClientConfig { local: true, ..ClientConfig::from_env().unwrap() };
    let client = Client::connect_with(Path::new(&cluster_file), config).unwrap();
    let file = client.create("/killed", 0o644, ONE_OBJECT).unwrap();
    write_calls(&file);
    println!("written {}", file.ino());
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_writer_killed_with_its_last_commit_unanswered_loses_no_acknowledged_byte() {
    let cluster = TestCluster::start(1);
    let mut writer = Command::new(std::env::current_exe().unwrap())
        .args(["writer_killed_after_its_writes_returned", "--exact", "--ignored", "--nocapture"])
        .env("LOCAL_WINDOW_CLUSTER", &cluster.cluster_file)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let said = BufReader::new(writer.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("written ").map(|ino| ino.parse::<u64>().unwrap()));
    writer.kill().unwrap();
    writer.wait().unwrap();
    let ino = said.expect("the writer's writes returned");
    assert_whole(&cluster, "/killed", &cluster.object_file(0, ino));
}

#[test]
fn a_file_fenced_while_a_commit_is_unanswered_fails_the_next_write_with_estale_and_keeps_what_was_written() {
    let cluster = TestCluster::start(1);
    let client = local_client(&cluster);
    let file = client.create("/fenced", 0o644, ONE_OBJECT).unwrap();
    write_calls(&file);
    let ino = file.ino();
    // An eviction's fence, from the daemon's peer (the data manager's side).
    let retire = Request::ObjRetire { ino, checked: false, size: 0, mtime_ns: 0 };
    RawConn::dial_as_peer(&cluster, 0).call::<()>(&retire).unwrap();
    let e = file.write_at(b"after", 0).expect_err("a write to a fenced file is never taken silently");
    assert_eq!(e.errno(), libc::ESTALE, "{e}");
    RawConn::dial_as_peer(&cluster, 0).call::<()>(&Request::ObjReinstate { ino }).unwrap();
    drop(file);
    assert_whole(&cluster, "/fenced", &cluster.object_file(0, ino));
}

/// A write of `data` at 0 of a new one-object file `path`, granted and
/// written into the object file over a raw node-local connection, its
/// commit not yet sent: a writer whose call returned, its commit on its way.
struct CommitOnItsWay {
    client: Client,
    file: surge_client::File,
    writer: LocalConn,
    grant: WriteGrant,
    data: Vec<u8>,
}

impl CommitOnItsWay {
    fn new(cluster: &TestCluster, path: &str, data: Vec<u8>) -> CommitOnItsWay {
        let client = local_client(cluster);
        let file = client.create(path, 0o644, ONE_OBJECT).unwrap();
        let ino = file.ino();
        let mut writer = LocalConn::dial(cluster, 0);
        let grant: WriteGrant =
            writer.call(&Request::LocalWriteBegin { ino, offset: 0, len: data.len() as u64 }).unwrap();
        let object = std::fs::OpenOptions::new().write(true).open(cluster.object_file(0, ino)).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&object, &data, 0).unwrap();
        CommitOnItsWay { client, file, writer, grant, data }
    }

    /// Sends the commit; the bytes the daemon says were written.
    fn commit(writer: &mut LocalConn, grant: &WriteGrant, data: &[u8]) -> u64 {
        let crcs = data.chunks(4096).map(sums::block_crc).collect();
        let reply: WriteReply = writer.call(&Request::LocalWriteCommit { grant: grant.grant, crcs }).unwrap();
        reply.written
    }
}

#[test]
fn a_size_or_a_read_asked_while_a_commit_is_on_its_way_waits_for_it() {
    // A writer's call returns before its commit's reply: any process's
    // stat or read after it must include the write, so the daemon answers
    // them once the open grant is committed.
    let cluster = TestCluster::start(1);
    let CommitOnItsWay { client, file, mut writer, grant, data } =
        CommitOnItsWay::new(&cluster, "/on-its-way", pattern(6, 3 * 4096));
    let committer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        CommitOnItsWay::commit(&mut writer, &grant, &data)
    });
    let started = Instant::now();
    assert_eq!(client.stat("/on-its-way").unwrap().size, 3 * 4096, "the size includes the returned write");
    let mut back = vec![0; 3 * 4096];
    assert_eq!(file.read_at(&mut back, 0).unwrap(), back.len());
    assert!(back == pattern(6, 3 * 4096));
    assert!(started.elapsed() >= Duration::from_millis(300), "answered before the commit: {:?}", started.elapsed());
    assert_eq!(committer.join().unwrap(), 3 * 4096);
}

#[test]
fn a_time_set_while_a_commit_is_on_its_way_is_not_overtaken_by_the_write() {
    // tar and cp -a set a file's times right after its last write returned,
    // maybe before that write's commit lands: the write happened before the
    // times were set, so the times set must stay.
    let cluster = TestCluster::start(1);
    let mut way = CommitOnItsWay::new(&cluster, "/times-kept", pattern(7, 2 * 4096));
    let set = 959_860_800 * 1_000_000_000;
    let update = AttrUpdate { mtime_ns: Some(set), atime_ns: Some(set), ..Default::default() };
    way.client.set_attr("/times-kept", &update).unwrap();
    assert_eq!(CommitOnItsWay::commit(&mut way.writer, &way.grant, &way.data), way.data.len() as u64);
    let attr = way.client.stat("/times-kept").unwrap();
    assert_eq!((attr.size, attr.mtime_ns), (way.data.len() as u64, set), "the commit's stamp overtook the time set");
}
