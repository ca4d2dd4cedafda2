//! The request stages are seams: daemons started in this process with the
//! second implementations of `surged::testing` use them, and the rules of
//! the request path (ticket until the reply is sent, the cache's
//! generation rule, errnos kept, every checksum through the checksum stage)
//! hold whatever is plugged in.

mod common;

use common::{Client, Fixture};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use surge_proto::msg::{DaemonStatus, JobStatus, ObjStatReply, ObjVerifyReply, WriteReply};
use surge_proto::{Errno, Request};
use surge_testkit::pattern;
use surge_testkit::wire::JOB;
use surged::testing::{CountingCrc, FailingStore, PriorityScheduler, StoreOp, StoreProbe};
use surged::{DaemonConfig, RunningDaemon, StageNames, Stages};

const URGENT: u64 = 77;

fn start(f: &Fixture, stages: Stages) -> RunningDaemon {
    let cfg = DaemonConfig {
        register_dir: Some(f.registrations()),
        ..DaemonConfig::new(0, 1, f.buffer(0), f.pfs(), f.path("secret"), &f.cluster_id)
    };
    surged::start_with(cfg, stages).unwrap()
}

/// The default stages with the registry's `lru` read cache.
fn registered_lru() -> Stages {
    StageNames { cache: "lru".into(), ..StageNames::default() }.build().unwrap()
}

/// Reads the daemon's read cache served so far (`Status`).
fn cache_hits(c: &mut Client) -> u64 {
    c.ok::<DaemonStatus>(&Request::Status).cache_hits
}

/// Polls `done` until it holds (10 s at most).
fn until(what: &str, done: impl FnMut() -> bool) {
    surge_testkit::eventually(what, Duration::from_secs(10), done);
}

#[test]
fn the_waiting_request_of_a_higher_priority_job_is_served_first() {
    let f = Fixture::new();
    let scheduler = Arc::new(PriorityScheduler::new(&[(URGENT, 1)]));
    let d = start(&f, Stages { scheduler: scheduler.clone(), ..Stages::default() });
    let mut batch = Client::authenticated(d.addr(), &f.secret);
    let mut urgent = Client::authenticated(d.addr(), &f.secret);
    urgent.job = URGENT;

    scheduler.pause();
    batch.send(&Request::Write { ino: 5, offset: 0, data: b"batch" });
    until("the batch write waits", || scheduler.waiting() == 1);
    urgent.send(&Request::Write { ino: 5, offset: 0, data: b"first" });
    until("both writes wait", || scheduler.waiting() == 2);
    scheduler.resume();
    assert_eq!(urgent.recv().unwrap().errno(), None);
    assert_eq!(batch.recv().unwrap().errno(), None);

    assert_eq!(scheduler.admitted(), [URGENT, JOB]);
    // The write served last is the one the object keeps.
    assert_eq!(batch.read(&Request::Read { ino: 5, offset: 0, len: 5 }), b"batch");
}

/// What the daemon's status says of `job`'s requests (the counters of the
/// scheduling point, whatever the scheduler).
fn load_of(watcher: &mut Client, job: u64) -> Option<JobStatus> {
    watcher.ok::<DaemonStatus>(&Request::Status).jobs.into_iter().find(|l| l.job == job)
}

/// The frames of `requests`, as one client sends them in one go.
fn pipelined(requests: &[Request<'_>]) -> Vec<u8> {
    let mut wire = Vec::new();
    for (id, req) in (1..).zip(requests) {
        let mut head = surge_proto::Encoder::new();
        let bulk = req.encode(&mut head);
        surge_proto::frame::write_request(&mut wire, req.op() as u8, id, JOB, 0, &head.buf, bulk).unwrap();
    }
    wire
}

#[test]
fn every_pipelined_request_waits_at_the_scheduling_point_and_leaves_it_with_its_connection() {
    let f = Fixture::new();
    let scheduler = Arc::new(PriorityScheduler::default());
    let d = start(&f, Stages { scheduler: scheduler.clone(), ..Stages::default() });
    let mut watcher = Client::authenticated(d.addr(), &f.secret);
    let mut waiting = || load_of(&mut watcher, JOB).map_or(0, |l| l.waiting);
    let mut c = Client::authenticated(d.addr(), &f.secret);
    scheduler.pause();
    let stat = Request::ObjStat { ino: 1 };
    c.stream.write_all(&pipelined(&[stat.clone(), stat.clone(), stat.clone()])).unwrap();
    until("all three requests wait", || waiting() == 3);
    scheduler.resume();
    for id in 1..=3 {
        let answer = c.recv().unwrap();
        assert_eq!((answer.header.request_id, answer.errno()), (id, None));
    }

    // A request read ahead of one that ends the connection is withdrawn.
    let mut c = Client::authenticated(d.addr(), &f.secret);
    let mut wire = pipelined(std::slice::from_ref(&stat));
    surge_proto::frame::write_request(&mut wire, 0xee, 2, JOB, 0, b"", b"").unwrap();
    wire.extend_from_slice(&pipelined(&[stat]));
    c.stream.write_all(&wire).unwrap();
    assert_eq!(c.recv().unwrap().errno(), None);
    assert_eq!(c.recv().unwrap().errno(), Some(Errno::ENOSYS));
    assert!(c.is_closed());
    until("the request behind is withdrawn", || waiting() == 0);
    assert_eq!(scheduler.admitted().len(), 4);
}

#[test]
fn a_read_stays_in_service_until_its_reply_has_been_sent() {
    let f = Fixture::new();
    let scheduler = Arc::new(PriorityScheduler::default());
    let d = start(&f, Stages { scheduler: scheduler.clone(), ..Stages::default() });
    let mut reader = Client::authenticated(d.addr(), &f.secret);
    let mut other = Client::authenticated(d.addr(), &f.secret);
    other.job = URGENT;
    let mut watcher = Client::authenticated(d.addr(), &f.secret);
    // Far more than the socket buffers hold: the reply cannot go out
    // before the reader reads it.
    const LEN: u64 = 32 << 20;
    assert_eq!(reader.call(&Request::ObjTruncate { ino: 9, len: LEN }).errno(), None);

    reader.send(&Request::Read { ino: 9, offset: 0, len: LEN as u32 });
    until("the store has served the read", || watcher.ok::<DaemonStatus>(&Request::Status).store_bytes >= LEN);
    other.send(&Request::ObjStat { ino: 9 });
    until("the other job's request waits", || scheduler.waiting() == 1);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(scheduler.waiting(), 1, "admitted while the read's reply was still being sent");
    assert_eq!(load_of(&mut watcher, JOB).unwrap().in_service, 1);

    assert_eq!(reader.recv().unwrap().body.len() as u64, LEN);
    let stat: ObjStatReply = surge_proto::msg::Reply::from_body(&other.recv().unwrap().body).unwrap();
    assert_eq!(stat.size, LEN);
    // `Status` reports the scheduler's per-job load (what `surge status` shows).
    let status: DaemonStatus = watcher.ok(&Request::Status);
    let jobs: Vec<_> = status.jobs.iter().map(|j| (j.job, j.in_service, j.requests)).collect();
    assert_eq!(jobs, [(URGENT, 0, 1), (JOB, 0, 2)]);
}

#[test]
fn the_cache_serves_a_reread_without_the_store_until_a_write_changes_the_bytes() {
    let f = Fixture::new();
    let probe = Arc::new(StoreProbe::default());
    let stages = Stages { store: FailingStore::around_dir_store(probe.clone()), ..registered_lru() };
    let d = start(&f, stages);
    let mut c = Client::authenticated(d.addr(), &f.secret);
    let data = pattern(1, 10_000);
    c.ok::<WriteReply>(&Request::Write { ino: 3, offset: 0, data: &data });
    let read = Request::Read { ino: 3, offset: 0, len: 20_000 };

    assert_eq!(c.read(&read), data);
    assert_eq!((probe.calls(StoreOp::Read), cache_hits(&mut c)), (1, 0));
    assert_eq!(c.read(&read), data);
    assert_eq!((probe.calls(StoreOp::Read), cache_hits(&mut c)), (1, 1));

    c.ok::<WriteReply>(&Request::Write { ino: 3, offset: 12_000, data: b"past the end" });
    let mut grown = data.clone();
    grown.resize(12_000, 0);
    grown.extend_from_slice(b"past the end");
    assert_eq!(c.read(&read), grown);
    assert_eq!(probe.calls(StoreOp::Read), 2);

    assert_eq!(c.call(&Request::ObjTruncate { ino: 3, len: 100 }).errno(), None);
    assert_eq!(c.read(&read), &data[..100]);
    assert_eq!(probe.calls(StoreOp::Read), 3);
}

#[test]
fn pfs_reads_pass_the_cache_once_the_file_has_settled() {
    let f = Fixture::new();
    let d = start(&f, registered_lru());
    let mut c = Client::authenticated(d.addr(), &f.secret);
    let host = f.pfs().join("results");
    std::fs::write(&host, pattern(2, 3000)).unwrap();
    let read = Request::PfsRead { path: "/results", offset: 0, len: 5000 };

    // Just written: it may still change within its timestamps' tick.
    assert_eq!(c.read(&read), pattern(2, 3000));
    assert_eq!(c.read(&read), pattern(2, 3000));
    assert_eq!(cache_hits(&mut c), 0);
    until("a reread of the settled file hits", || {
        assert_eq!(c.read(&read), pattern(2, 3000));
        cache_hits(&mut c) > 0
    });
    // Changed behind the daemon's back: its new bytes are served.
    std::fs::write(&host, pattern(3, 3000)).unwrap();
    assert_eq!(c.read(&read), pattern(3, 3000));
}

#[test]
fn an_errno_the_store_fails_with_reaches_the_client_unchanged() {
    let f = Fixture::new();
    let probe = Arc::new(StoreProbe::default());
    let d = start(&f, Stages { store: FailingStore::around_dir_store(probe.clone()), ..Stages::default() });
    // `ObjRemove` is daemon 0's deleter's: a peer connection.
    let mut c = Client::peer(d.addr(), &f.registrations());
    let cases = [
        (StoreOp::Write, Request::Write { ino: 4, offset: 0, data: b"bytes" }, Errno(libc::EDQUOT)),
        (StoreOp::Read, Request::Read { ino: 4, offset: 0, len: 5 }, Errno(libc::ENOLINK)),
        (StoreOp::Stat, Request::ObjStat { ino: 4 }, Errno(libc::ESTALE)),
        (StoreOp::Truncate, Request::ObjTruncate { ino: 4, len: 1 }, Errno(libc::EROFS)),
        (StoreOp::Sync, Request::ObjSync { ino: 4 }, Errno::EIO),
        (StoreOp::Remove, Request::ObjRemove { ino: 4 }, Errno(libc::EBUSY)),
    ];
    for (op, req, errno) in cases {
        probe.fail(op, errno);
        assert_eq!(c.fails(&req).0, errno, "{op:?}");
        probe.heal(op);
        assert_eq!(c.call(&req).errno(), None, "{op:?} after healing");
    }
}

#[test]
fn a_write_body_is_checked_piece_by_piece_while_the_rest_of_it_is_still_on_its_way() {
    let f = Fixture::new();
    let checksum = Arc::new(CountingCrc::default());
    let d = start(&f, Stages { checksum: checksum.clone(), ..Stages::default() });
    let mut c = Client::authenticated(d.addr(), &f.secret);
    let data = pattern(3, 1 << 20);
    let wire = pipelined(&[Request::Write { ino: 9, offset: 0, data: &data }]);
    let blocks = || checksum.counts().blocks;
    let before = blocks();

    c.stream.write_all(&wire[..wire.len() / 2]).unwrap();
    until("the first half is checked before the second is sent", || blocks() - before >= 64);
    c.stream.write_all(&wire[wire.len() / 2..]).unwrap();
    assert_eq!(c.recv().unwrap().errno(), None);
    // Each of the 256 blocks checksummed once, in the pass that checked the body.
    assert_eq!(blocks() - before, 256);
    assert_eq!(c.read(&Request::Read { ino: 9, offset: 0, len: 1 << 20 }), data);
}

#[test]
fn reads_and_verification_check_data_at_rest_through_the_checksum_stage() {
    let f = Fixture::new();
    let checksum = Arc::new(CountingCrc::default());
    let d = start(&f, Stages { checksum: checksum.clone(), ..Stages::default() });
    let mut c = Client::authenticated(d.addr(), &f.secret);
    let data = pattern(4, 64 * 4096);
    let _: WriteReply = c.ok(&Request::Write { ino: 2, offset: 0, data: &data });

    let before = checksum.counts();
    assert_eq!(c.read(&Request::Read { ino: 2, offset: 0, len: data.len() as u32 }), data);
    let after_read = checksum.counts();
    assert_eq!(after_read.blocks - before.blocks, 64);
    assert_eq!(after_read.batches - before.batches, 1, "the read's 64 blocks are checksummed in one batch");
    // The reply's checksum is built from the checked blocks', not a second pass over the bytes.
    assert!(after_read.bytes - before.bytes < 100, "{before:?} then {after_read:?}");

    let reply: ObjVerifyReply = c.ok(&Request::ObjVerify { ino: 2, offset: 0, len: u64::MAX });
    assert_eq!(reply.damaged, Vec::<u64>::new());
    assert_eq!(checksum.counts().blocks - after_read.blocks, 64);
}
