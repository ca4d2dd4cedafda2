//! `SURGE_TIMEOUT` bounds a whole operation against a daemon that stopped
//! answering (SIGSTOP: its sockets stay open, nothing replies), retries and
//! every daemon the operation touches included.

mod common;

use common::TestCluster;
use std::time::{Duration, Instant};
use surge_client::Layout;
use surge_testkit::pattern;

const TIMEOUT: Duration = Duration::from_secs(2);
/// What a failure may take at most: the timeout, plus slack for a loaded
/// machine, well short of a second timeout.
const BOUND: Duration = Duration::from_millis(3_500);

/// Stops a daemon by pid with SIGSTOP; SIGCONT when dropped, also when a test fails.
struct Stopped(i32);

impl Stopped {
    fn daemon(cluster: &TestCluster, index: usize) -> Stopped {
        let pid = cluster.cluster.daemons[index].pid as i32;
        // SAFETY: kill(2) on the pid of a daemon this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// A file striped over every daemon of the cluster.
fn striped_file(cluster: &TestCluster, path: &str) -> Vec<u8> {
    let data = pattern(7, 3 << 20);
    let layout = Layout { stripe_count: 3, stripe_size: 1 << 20, first: 0 };
    let file = cluster.client().create(path, 0o644, layout).unwrap();
    file.write_at(&data, 0).unwrap();
    data
}

/// Runs `op` and checks it failed with EIO within `BOUND`.
fn fails_in_time<T: std::fmt::Debug>(what: &str, op: impl FnOnce() -> surge_client::Result<T>) {
    let started = Instant::now();
    let result = op();
    let took = started.elapsed();
    let err = result.expect_err(what);
    assert_eq!(err.errno(), libc::EIO, "{what}: {err}");
    assert!(took < BOUND, "{what} failed only after {took:?} (timeout {TIMEOUT:?}): {err}");
}

#[test]
fn stat_read_and_write_fail_within_the_timeout_when_a_daemon_stops_and_work_again_after() {
    let cluster = TestCluster::start(3);
    let data = striped_file(&cluster, "/f");
    let stopped = Stopped::daemon(&cluster, 1);
    // A fresh client for each: every operation meets the silent daemon itself.
    fails_in_time("stat", || cluster.client_with_timeout(TIMEOUT).stat("/f"));
    fails_in_time("open and read", || {
        let mut buf = vec![0; data.len()];
        cluster.client_with_timeout(TIMEOUT).open("/f", libc::O_RDONLY, 0)?.read_at(&mut buf, 0)
    });
    fails_in_time("write", || {
        cluster.client_with_timeout(TIMEOUT).open("/f", libc::O_WRONLY, 0)?.write_at(&pattern(8, 3 << 20), 0)
    });

    // The failed write may have landed on some daemons (the stopped one
    // still holds it, queued): write again, and everything reads back.
    drop(stopped);
    let client = cluster.client_with_timeout(TIMEOUT);
    assert_eq!(client.stat("/f").unwrap().size, data.len() as u64);
    let file = client.open("/f", libc::O_RDWR, 0).unwrap();
    let again = pattern(9, data.len());
    file.write_at(&again, 0).unwrap();
    let mut back = vec![0; data.len()];
    assert_eq!(file.read_at(&mut back, 0).unwrap(), data.len());
    assert!(back == again, "the data read back differs from the data written");
}

#[test]
fn once_a_daemon_did_not_answer_the_next_files_fail_at_once() {
    let cluster = TestCluster::start(3);
    for i in 0..5 {
        striped_file(&cluster, &format!("/f{i}"));
    }
    let client = cluster.client_with_timeout(TIMEOUT);
    let _stopped = Stopped::daemon(&cluster, 2);
    // What `ls -l` does: a stat per file, one client.
    let started = Instant::now();
    for i in 0..5 {
        let err = client.stat(&format!("/f{i}")).unwrap_err();
        assert_eq!(err.errno(), libc::EIO, "{err}");
    }
    let took = started.elapsed();
    assert!(took < BOUND, "5 stats took {took:?} with a {TIMEOUT:?} timeout");
}
