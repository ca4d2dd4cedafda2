//! The daemons' request-path stages chosen on `surge start`: a read cache
//! that serves rereads, shown by `surge status`, kept by a restarted daemon,
//! the second scheduler and checksum with their options, and a name or
//! option surged does not take refused before any daemon starts.

use std::fs;
use surge_testkit::cluster::Cluster;
use surge_testkit::pattern;

/// The value of `key = ...` in daemon `index`'s table of `surge status --toml`.
fn daemon_value(toml: &str, index: u32, key: &str) -> String {
    let table = toml.split("[[daemon]]").find(|t| t.contains(&format!("\nindex = {index}\n"))).expect("daemon listed");
    let line = table.lines().find(|l| l.starts_with(&format!("{key} = "))).expect("key listed");
    line[key.len() + 3..].trim_matches('"').to_string()
}

#[test]
fn surge_start_with_an_lru_cache_runs_daemons_with_it_and_status_says_so() {
    let c = Cluster::start(2, &["--cache", "lru", "--cache-size", "256M"]);
    let status = c.ok(&["status"]);
    assert!(
        status.contains("stages of daemon(s) 0, 1: scheduler=fifo checksum=crc32c cache=lru(268435456) store=dir"),
        "{status}"
    );

    // Rereads of the same ranges come from the cache.
    let f = c.local("f");
    fs::write(&f, pattern(4, 3 << 20)).unwrap();
    c.ok(&["cp", f.to_str().unwrap(), "/surge/f"]);
    let hits = |c: &Cluster| {
        let toml = c.ok(&["status", "--toml"]);
        (0..2).map(|i| daemon_value(&toml, i, "cache_hits").parse::<u64>().unwrap()).sum::<u64>()
    };
    // Over TCP: a client on the daemons' node reads the object files itself
    // (the node-local path), which the daemons' cache does not sit in front of.
    let cat = |c: &Cluster| c.command(&["cat", "/f"]).env("SURGE_LOCAL", "0").output().unwrap().stdout;
    assert!(cat(&c) == pattern(4, 3 << 20));
    let after_first = hits(&c);
    assert!(cat(&c) == pattern(4, 3 << 20));
    assert!(hits(&c) > after_first, "the reread was not served by the cache");

    // A restarted daemon runs the stages it was started with.
    let pid = c.pids()[1];
    // SAFETY: kill(2) of a daemon this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    surge_testkit::eventually("daemon 1 is gone", std::time::Duration::from_secs(10), || {
        fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| stat.contains(") Z"))
    });
    c.ok(&["start", "--daemon", "1"]);
    let toml = c.ok(&["status", "--toml"]);
    assert_eq!(daemon_value(&toml, 1, "stages"), "scheduler=fifo checksum=crc32c cache=lru(268435456) store=dir");
    c.ok(&["stop"]);
}

#[test]
fn a_stage_name_surged_does_not_know_is_refused_with_the_registered_ones() {
    let c = Cluster::unstarted();
    let (buffer, pfs) = (c.buffer(), c.pfs());
    let out = c.surge_with(&[
        "start",
        "--buffer",
        buffer.to_str().unwrap(),
        "--pfs",
        pfs.to_str().unwrap(),
        "--store",
        "tape",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--store tape: no such store is registered; choose one of dir, dir-sync"), "{err}");
    assert!(!c.cluster_file().exists(), "a daemon was started");
}

#[test]
fn the_second_scheduler_and_checksum_run_with_their_options_and_status_shows_them() {
    let c = Cluster::start(
        2,
        &["--scheduler", "job-rr", "--queue-depth", "3", "--checksum", "crc32c-threads", "--checksum-threads", "2"],
    );
    let status = c.ok(&["status"]);
    assert!(status.contains("scheduler=job-rr(3) checksum=crc32c-threads(2) cache=none store=dir"), "{status}");
    // Bytes written and read back through both: 1 MiB requests, whose
    // blocks the threaded stage splits.
    let f = c.local("f");
    fs::write(&f, pattern(9, 5 << 20)).unwrap();
    c.ok(&["cp", f.to_str().unwrap(), "/surge/f"]);
    assert!(c.surge_with(&["cat", "/f"]).stdout == pattern(9, 5 << 20));
    c.ok(&["stop"]);
}

#[test]
fn a_zero_queue_depth_or_checksum_thread_count_is_refused_before_any_daemon_starts() {
    for flag in ["--queue-depth", "--checksum-threads"] {
        let c = Cluster::unstarted();
        let (buffer, pfs) = (c.buffer(), c.pfs());
        let out =
            c.surge_with(&["start", "--buffer", buffer.to_str().unwrap(), "--pfs", pfs.to_str().unwrap(), flag, "0"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains(&format!("invalid value '0' for '{flag} <N>'")), "{err}");
        assert!(!c.cluster_file().exists(), "a daemon was started");
    }
}
