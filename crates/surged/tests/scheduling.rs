//! The scheduling point in a running daemon: the per-job counters that
//! `surge status` and the metrics show are the point's, exact whatever the
//! scheduler plugged in, and `JobRoundRobin` serves jobs in turn under the
//! real connection threads.

mod common;

use common::{Client, Fixture};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use surge_proto::msg::{DaemonStatus, JobOpStatus, JobStatus};
use surge_proto::{Op, Request};
use surge_testkit::pattern;
use surge_testkit::wire::JOB;
use surged::sched::JobRoundRobin;
use surged::testing::PriorityScheduler;
use surged::{DaemonConfig, RunningDaemon, Stages};

const OTHER: u64 = 77;

fn start(f: &Fixture, metrics: Option<SocketAddr>, stages: Stages) -> RunningDaemon {
    let cfg = DaemonConfig {
        register_dir: Some(f.registrations()),
        metrics,
        ..DaemonConfig::new(0, 1, f.buffer(0), f.pfs(), f.path("secret"), &f.cluster_id)
    };
    surged::start_with(cfg, stages).unwrap()
}

/// Polls `done` until it holds (10 s at most).
fn until(what: &str, done: impl FnMut() -> bool) {
    surge_testkit::eventually(what, Duration::from_secs(10), done);
}

fn status(watcher: &mut Client) -> DaemonStatus {
    watcher.ok(&Request::Status)
}

/// (job, waiting, in service, requests, bytes) of every job in the status.
fn loads(watcher: &mut Client) -> Vec<(u64, u64, u64, u64, u64)> {
    status(watcher)
        .jobs
        .iter()
        .map(|&JobStatus { job, waiting, in_service, requests, bytes }| (job, waiting, in_service, requests, bytes))
        .collect()
}

fn load_of(watcher: &mut Client, job: u64) -> JobStatus {
    status(watcher).jobs.into_iter().find(|l| l.job == job).unwrap_or_else(|| panic!("job {job} not in the status"))
}

/// Sends `req` as `surge-client` does: its header gives the bytes of file
/// data it moves (`io_size`, also for a read, which carries none).
fn send_sized(c: &mut Client, req: &Request<'_>) {
    let mut head = surge_proto::Encoder::new();
    let bulk = req.encode(&mut head);
    let (op, job) = (req.op() as u8, c.job);
    surge_proto::frame::write_request(&mut c.stream, op, 1, job, req.io_size(), &head.buf, bulk).unwrap();
}

/// A port free a moment ago, for the metrics endpoint.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// The body of a `GET /metrics` to `addr`.
fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn a_scheduler_that_only_orders_requests_still_gets_exact_counters_in_the_status_and_the_metrics() {
    let f = Fixture::new();
    let scheduler = Arc::new(PriorityScheduler::new(&[(OTHER, 1)]));
    let metrics = free_port();
    let d = start(&f, Some(metrics), Stages { scheduler: scheduler.clone(), ..Stages::default() });
    let mut writer = Client::authenticated(d.addr(), &f.secret);
    let mut reader = Client::authenticated(d.addr(), &f.secret);
    reader.job = OTHER;
    let mut watcher = Client::authenticated(d.addr(), &f.secret);
    assert_eq!(writer.call(&Request::Write { ino: 7, offset: 0, data: &pattern(1, 60) }).errno(), None);

    scheduler.pause();
    let data = pattern(2, 5000);
    writer.send(&Request::Write { ino: 5, offset: 0, data: &data });
    // Asks for 100 bytes; the object holds 60.
    send_sized(&mut reader, &Request::Read { ino: 7, offset: 0, len: 100 });
    until("both requests wait", || scheduler.waiting() == 2);
    assert_eq!(loads(&mut watcher), [(OTHER, 1, 0, 0, 0), (JOB, 1, 0, 1, 60)]);
    scheduler.resume();
    assert_eq!(reader.recv().unwrap().body.len(), 60);
    assert_eq!(writer.recv().unwrap().errno(), None);
    assert_eq!(scheduler.admitted(), [JOB, OTHER, JOB]);

    // What the requests asked for, and by operation what they moved.
    until("both tickets are released", || load_of(&mut watcher, JOB).in_service == 0);
    until("both tickets are released", || load_of(&mut watcher, OTHER).in_service == 0);
    let s = status(&mut watcher);
    let loads: Vec<_> = s.jobs.iter().map(|j| (j.job, j.waiting, j.in_service, j.requests, j.bytes)).collect();
    assert_eq!(loads, [(OTHER, 0, 0, 1, 100), (JOB, 0, 0, 2, 5060)]);
    let by_op: Vec<_> =
        s.job_ops.iter().map(|&JobOpStatus { job, op, requests, bytes }| (job, op, requests, bytes)).collect();
    assert_eq!(by_op, [(OTHER, Op::Read as u8, 1, 60), (JOB, Op::Write as u8, 2, 5060)]);

    let text = scrape(metrics);
    for line in [
        r#"surge_requests_total{daemon="0",job="77",op="read"} 1"#,
        r#"surge_io_bytes_total{daemon="0",job="77",op="read"} 60"#,
        &format!(r#"surge_io_bytes_total{{daemon="0",job="{JOB}",op="write"}} 5060"#),
        r#"surge_requests_waiting{daemon="0",job="77"} 0"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
    }
}

#[test]
fn job_round_robin_serves_another_jobs_request_before_the_third_of_a_job_already_served() {
    let f = Fixture::new();
    let one_at_a_time = Arc::new(JobRoundRobin::new(NonZeroUsize::MIN));
    let d = start(&f, None, Stages { scheduler: one_at_a_time, ..Stages::default() });
    let busy: Vec<Client> = (0..3).map(|_| Client::authenticated(d.addr(), &f.secret)).collect();
    let [mut first, mut second, mut third] = <[Client; 3]>::try_from(busy).ok().unwrap();
    let mut other = Client::authenticated(d.addr(), &f.secret);
    other.job = OTHER;
    let mut watcher = Client::authenticated(d.addr(), &f.secret);
    // Far more than the socket buffers hold: a read stays in service (and
    // holds the only slot) until its client reads the reply.
    const LEN: u64 = 32 << 20;
    assert_eq!(first.call(&Request::ObjTruncate { ino: 9, len: LEN }).errno(), None);
    let read = Request::Read { ino: 9, offset: 0, len: LEN as u32 };

    send_sized(&mut first, &read);
    until("the first read is served", || status(&mut watcher).store_bytes >= LEN);
    send_sized(&mut second, &read);
    until("the second read waits", || load_of(&mut watcher, JOB).waiting == 1);
    send_sized(&mut third, &read);
    until("the third read waits", || load_of(&mut watcher, JOB).waiting == 2);
    other.send(&Request::ObjStat { ino: 9 });
    until("the other job's request waits", || load_of(&mut watcher, OTHER).waiting == 1);

    // The busy job's turn came first, so its second read has the slot.
    assert_eq!(first.recv().unwrap().body.len() as u64, LEN);
    until("the second read is served", || status(&mut watcher).store_bytes >= 2 * LEN);
    assert_eq!((load_of(&mut watcher, JOB).waiting, load_of(&mut watcher, OTHER).waiting), (1, 1));
    // Then the other job's turn: had the third read been admitted first,
    // it would hold the slot until its reply is read, and this would time out.
    assert_eq!(second.recv().unwrap().body.len() as u64, LEN);
    assert_eq!(other.recv().unwrap().errno(), None);
    assert_eq!(third.recv().unwrap().body.len() as u64, LEN);
    until("every ticket is released", || status(&mut watcher).jobs.iter().all(|j| j.in_service == 0));
    assert_eq!(loads(&mut watcher), [(OTHER, 0, 0, 1, 0), (JOB, 0, 0, 4, 3 * LEN)]);
}
