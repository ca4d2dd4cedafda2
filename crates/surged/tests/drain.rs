//! The data manager (BBOS, docs/bbos.md) of real `surged` processes: its
//! flags, `DrainStatus` and `SetMtbf`, the drain off, checkpoints of three
//! jobs passing through a buffer smaller than what they write, a daemon 0
//! killed in the middle of a demotion, files held open (`Close`) kept
//! from eviction and where an evicted one went (`Evicted`), and the
//! replicator (`--drain-replica`): replicas that follow the namespace, a
//! daemon 0 killed mid-replication, and a replica directory missing or
//! full, or a PFS copy gone.

mod common;

use common::{Client, Daemon, Fixture};
use std::time::{Duration, Instant};
use surge_proto::drain::DrainReport;
use surge_proto::msg::open_flags::{CREATE, TRUNC, WRITE};
use surge_proto::msg::WriteReply;
use surge_proto::{Attr, Errno, Layout, Request, Tier};

const MIB: usize = 1 << 20;

/// Bytes that differ from file to file and from offset to offset.
fn contents(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i as u64).wrapping_mul(31).wrapping_add(seed.wrapping_mul(7919)) >> 3) as u8).collect()
}

/// A cluster of `n` daemons sharing a fixture; `extra(i)` gives daemon i's flags.
fn cluster(f: &Fixture, n: u32, extra: impl Fn(u32) -> Vec<String>) -> Vec<Daemon> {
    (0..n)
        .map(|i| {
            let flags = extra(i);
            f.spawn(i, n, &flags.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .collect()
}

/// Two daemons of `capacity` bytes each, daemon 0 draining with BBOS at given rates.
fn bbos_cluster(f: &Fixture, capacity: usize) -> Vec<Daemon> {
    cluster(f, 2, |i| {
        let mut flags = vec!["--capacity".to_string(), capacity.to_string()];
        if i == 0 {
            flags.extend(["--drain", "bbos", "--drain-rates", "40,30,16,1", "--drain-period", "5"].map(String::from));
        }
        flags
    })
}

/// One client per daemon, charged to `job`, with room to wait for space.
fn clients(f: &Fixture, daemons: &[Daemon], job: u64) -> Vec<Client> {
    daemons
        .iter()
        .map(|d| {
            let mut c = d.client(f);
            c.job = job;
            c.stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
            c
        })
        .collect()
}

/// Writes `data` as file `path` through the namespace (daemon 0) and each
/// stripe's daemon, and closes it, as the client library does.
fn write_file(clients: &mut [Client], path: &str, data: &[u8]) -> Attr {
    let dirs: Vec<usize> = path.match_indices('/').map(|(i, _)| i).filter(|&i| i > 0).collect();
    for end in dirs {
        let answer = clients[0].call(&Request::Mkdir { path: &path[..end], mode: 0o755 });
        assert!(matches!(answer.errno(), None | Some(Errno::EEXIST)), "mkdir: {}", answer.message());
    }
    let open =
        Request::Open { path, flags: CREATE | WRITE | TRUNC, mode: 0o644, layout: Layout::INHERIT, local: vec![] };
    let attr: Attr = clients[0].ok(&open);
    let daemons = clients.len() as u32;
    for piece in attr.layout.pieces(0, data.len()) {
        let daemon = attr.layout.daemon_of(piece.stripe, daemons) as usize;
        let chunk = &data[piece.buf_offset..piece.buf_offset + piece.len];
        let write = Request::Write { ino: attr.ino, offset: piece.object_offset, data: chunk };
        let reply: WriteReply = clients[daemon].ok(&write);
        assert_eq!(reply.written, chunk.len() as u64, "short write to {path}");
    }
    let _: () = clients[0].ok(&Request::Close { ino: attr.ino });
    attr
}

/// Reads `len` bytes of buffer file `attr` from its stripes' daemons.
fn read_file(clients: &mut [Client], attr: &Attr, len: usize) -> Vec<u8> {
    let daemons = clients.len() as u32;
    let mut data = vec![0; len];
    for piece in attr.layout.pieces(0, len) {
        let daemon = attr.layout.daemon_of(piece.stripe, daemons) as usize;
        let read = Request::Read { ino: attr.ino, offset: piece.object_offset, len: piece.len as u32 };
        data[piece.buf_offset..piece.buf_offset + piece.len].copy_from_slice(&clients[daemon].read(&read));
    }
    data
}

fn report(c: &mut Client) -> DrainReport {
    c.ok(&Request::DrainStatus)
}

/// Waits (up to `limit`) until `done` holds, showing the last report if it never does.
fn wait_for(c: &mut Client, limit: Duration, what: &str, done: impl Fn(&DrainReport) -> bool) -> DrainReport {
    let deadline = Instant::now() + limit;
    loop {
        let r = report(c);
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "{what} did not happen within {limit:?}; last report:\n{r:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn drain_flags_with_bad_values_stop_the_daemon_with_a_clear_message() {
    let f = Fixture::new();
    let run = |extra: &[&str]| {
        let out = f.command(0, 1, extra).stderr(std::process::Stdio::piped()).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for (extra, says) in [
        (&["--drain", "fastest"][..], "possible values: off, bbos, maxeff, maxbw, dedicated"),
        (&["--drain-period", "0"][..], "--drain-period"),
        (&["--drain-rates", "40,30,16"][..], "BWMAX,BWMIN,BRMAX,BRMIN"),
        (&["--drain-rates", "40,30,1,16"][..], "BRMIN (16 MB/s"),
        (&["--drain-state", "localhost:6379"][..], "redis://127.0.0.1:6379"),
        (&["--drain-evict", "mru"][..], "possible values: bbos, lru, fifo"),
        (&["--drain-trim", "always"][..], "possible values: off, auto"),
        (&["--drain-trim-rate", "-1"][..], "\"-1\" is not 0 or more"),
        (&["--drain-trim-rate", "1,5"][..], "\"1,5\" is not a number"),
    ] {
        let (code, err) = run(extra);
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?} should say {says:?}:\n{err}");
    }
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_surged")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let flags = [
        "--drain ",
        "--drain-period",
        "--drain-rates",
        "--drain-state",
        "--drain-evict",
        "--drain-trim ",
        "--drain-trim-rate",
    ];
    for flag in flags {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
}

#[test]
fn daemon_0_reports_the_drain_and_takes_mtbfs_and_other_daemons_refuse() {
    let f = Fixture::new();
    let d0 = f.spawn(0, 2, &["--drain-period", "30", "--drain-evict", "lru"]);
    let d1 = f.spawn(1, 2, &[]);
    let mut c0 = d0.client(&f);
    let r = report(&mut c0);
    assert_eq!((r.policy.as_str(), r.evict_order.as_str(), r.period_s, r.state_healthy), ("off", "lru", 30, true));
    let () = c0.ok(&Request::SetMtbf { job: 42, seconds: 3600 });
    let app = report(&mut c0).apps.into_iter().find(|a| a.job == 42).expect("job 42 in the report");
    assert_eq!(app.mtbf_s, 3600);
    assert_eq!(c0.fails(&Request::SetMtbf { job: 42, seconds: 0 }).0, Errno::EINVAL);
    let (errno, message) = d1.client(&f).fails(&Request::DrainStatus);
    assert_eq!((errno, message.as_str()), (Errno::EINVAL, "drain status is kept by daemon 0"));
}

#[test]
fn with_the_drain_off_checkpoints_stay_in_the_buffer() {
    let f = Fixture::new();
    let daemons = cluster(&f, 1, |_| Vec::new());
    let mut c = clients(&f, &daemons, 7);
    write_file(&mut c, "/ckpt_1", &contents(1, MIB));
    write_file(&mut c, "/ckpt_2", &contents(2, MIB));
    std::thread::sleep(Duration::from_secs(2));
    let r = report(&mut c[0]);
    assert_eq!((r.policy.as_str(), r.demoted_files, r.apps.len()), ("off", 0, 0), "{r:#?}");
    let attr: Attr = c[0].ok(&Request::Stat { path: "/ckpt_1" });
    assert_eq!(attr.tier, Tier::Buffer);
    assert!(!f.pfs().join("ckpt_1").exists() && !f.buffer(0).join("drain.redb").exists());
}

/// Every file is on the PFS with exactly the bytes written.
fn assert_on_pfs(f: &Fixture, files: &[(String, Vec<u8>)]) {
    assert_copies_in(&f.pfs(), files);
}

/// Each file of `files` is under `root` with the bytes written.
fn assert_copies_in(root: &std::path::Path, files: &[(String, Vec<u8>)]) {
    for (path, data) in files {
        let copy = std::fs::read(root.join(&path[1..])).unwrap_or_else(|e| panic!("{path} not in {root:?}: {e}"));
        assert!(copy == *data, "{path}: the copy in {root:?} differs from what was written");
    }
}

/// The jobs' directories (no digits: a checkpoint's version is the largest number in its path).
const APPS: [&str; 3] = ["alpha", "beta", "gamma"];

#[test]
fn three_jobs_writing_more_than_the_buffer_holds_all_land_on_the_pfs_byte_exact() {
    let f = Fixture::new();
    // Two daemons of 20 MiB: 40 MiB of buffer, and each of the three jobs
    // writes 3 versions of 2 files of 4 MiB, 72 MiB in all.
    let daemons = bbos_cluster(&f, 20 * MIB);
    let began = Instant::now();
    let written: Vec<Vec<(String, Vec<u8>)>> = std::thread::scope(|scope| {
        let writers: Vec<_> = (1..=3u64)
            .map(|job| {
                let (f, daemons) = (&f, &daemons);
                scope.spawn(move || {
                    let mut c = clients(f, daemons, job);
                    let mut files = Vec::new();
                    for version in 1..=3u64 {
                        for rank in 0..2u64 {
                            let path = format!("/{}/ckpt_{version:04}.r{rank}", APPS[job as usize - 1]);
                            let data = contents(job * 100 + version * 10 + rank, 4 * MIB);
                            if job == 3 {
                                // Written under a temporary name, renamed into place (as SCR does).
                                let temp = format!("/{}/tmp.r{rank}", APPS[job as usize - 1]);
                                write_file(&mut c, &temp, &data);
                                let _: surge_proto::msg::Removed =
                                    c[0].ok(&Request::Rename { from: &temp, to: &path, keep: false });
                            } else {
                                write_file(&mut c, &path, &data);
                            }
                            files.push((path, data));
                        }
                    }
                    files
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let mut c0 = clients(&f, &daemons, 99);
    let all: Vec<(String, Vec<u8>)> = written.concat();
    let r = wait_for(&mut c0[0], Duration::from_secs(120), "every file demoted", |r| {
        r.apps.iter().all(|a| a.pending_files == 0) && r.demoted_files >= all.len() as u64
    });
    let written_in = began.elapsed();
    assert_on_pfs(&f, &all);
    assert_eq!((r.policy.as_str(), r.failed_demotions), ("bbos", 0), "{r:#?}");
    eprintln!(
        "figures: 72 MiB of checkpoints through a 40 MiB buffer, all on the PFS after {written_in:.1?}: \
         {} files ({} bytes) demoted, {} evicted; pattern {:?}, rates {}/{} B/s per daemon",
        r.demoted_files, r.demoted_bytes, r.evicted_files, r.pattern, r.checkpoint_bps, r.demote_bps
    );
    assert!(r.evicted_files > 0, "the buffer had to make room:\n{r:#?}");
    for job in 1..=3u64 {
        let app = r.apps.iter().find(|a| a.job == job).unwrap_or_else(|| panic!("job {job} missing:\n{r:#?}"));
        assert_eq!((app.demoted_files, app.demoted_bytes), (6, 24 * MIB as u64), "{app:?}");
        // Older versions went first: none of them is still in the buffer.
        assert!(app.versions.iter().all(|&v| v == 3), "job {job} keeps old versions: {app:?}");
        for version in 1..=2 {
            let path = format!("/{}/ckpt_{version:04}.r0", APPS[job as usize - 1]);
            let attr: Attr = c0[0].ok(&Request::Stat { path: &path });
            assert_eq!(attr.tier, Tier::Pfs, "{path} was not evicted");
        }
    }
    // A read by another job of a job's latest checkpoint is a restart read.
    let restart =
        Request::Open { path: "/alpha/ckpt_0003.r0", flags: 0, mode: 0, layout: Layout::INHERIT, local: vec![] };
    let attr: Attr = c0[0].ok(&restart);
    let _: () = c0[0].ok(&Request::Close { ino: attr.ino });
    let r = report(&mut c0[0]);
    assert_eq!(r.apps.iter().find(|a| a.job == 1).map(|a| a.restarts), Some(1), "{r:#?}");
}

#[test]
fn daemons_killed_mid_demotion_resume_and_demote_every_file_exactly_once() {
    let f = Fixture::new();
    // Demotion at 2 MB/s per daemon: the kill lands in the middle of an 8 MiB
    // file's copy (4 MiB on each daemon, 2 s).
    let drain = |rates: &str| {
        let rates = rates.to_string();
        move |i: u32| match i {
            0 => ["--drain", "maxbw", "--drain-rates", &rates, "--drain-period", "5"].map(String::from).to_vec(),
            _ => Vec::new(),
        }
    };
    let mut daemons = cluster(&f, 2, drain("40,30,2,1"));
    let mut c = clients(&f, &daemons, 5);
    let files: Vec<(String, Vec<u8>)> =
        (1..=4u64).map(|n| (format!("/run/step{n}/rank0.dat"), contents(n, 8 * MIB))).collect();
    for (path, data) in &files {
        write_file(&mut c, path, data);
    }
    wait_for(&mut c[0], Duration::from_secs(60), "a first demotion", |r| r.demoted_files >= 1);
    std::thread::sleep(Duration::from_millis(700));
    daemons.iter_mut().for_each(Daemon::kill9);
    drop((c, daemons));
    let daemons = cluster(&f, 2, drain("40,30,16,1"));
    let resumed = daemons[0].log();
    let to_demote: u64 = resumed
        .split("checkpoint file(s) in the buffer (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no resume line in the log:\n{resumed}"));
    assert!((1..4).contains(&to_demote), "the kill should leave some files demoted and some not:\n{resumed}");
    // Daemon 0 removes the temps it recorded, before the resume looks for any.
    assert!(resumed.contains("stage-out temp(s) left by the last run"), "the kill should cut a copy short:\n{resumed}");
    let mut c = clients(&f, &daemons, 5);
    let r = wait_for(&mut c[0], Duration::from_secs(60), "the rest demoted", |r| {
        r.apps.iter().all(|a| a.pending_files == 0) && r.demoted_files >= to_demote
    });
    assert_eq!(r.demoted_files, to_demote, "a file was demoted twice:\n{r:#?}");
    assert_on_pfs(&f, &files);
    let temps: Vec<_> = walk(&f.pfs()).into_iter().filter(|p| p.contains(".surge-stage.")).collect();
    assert!(temps.is_empty(), "unfinished demotion copies left on the PFS: {temps:?}");
}

#[test]
fn with_a_data_daemon_down_the_demoters_back_off_and_log_once_then_finish_when_it_returns() {
    let f = Fixture::new();
    let drain = |i: u32| match i {
        0 => ["--drain", "maxbw", "--drain-rates", "40,30,2,1", "--drain-period", "5"].map(String::from).to_vec(),
        _ => Vec::new(),
    };
    let mut daemons = cluster(&f, 2, drain);
    let mut c = clients(&f, &daemons, 5);
    let files: Vec<(String, Vec<u8>)> =
        (1..=3u64).map(|n| (format!("/down/step{n}.dat"), contents(n, 4 * MIB))).collect();
    for (path, data) in &files {
        write_file(&mut c, path, data);
    }
    // At 2 MB/s a demotion is still copying the first file.
    daemons[1].kill9();
    let first = wait_for(&mut c[0], Duration::from_secs(30), "a failed demotion", |r| r.failed_demotions > 0);
    let (log_before, watched) = (daemons[0].log().len(), Instant::now());
    std::thread::sleep(Duration::from_secs(8));
    let r = report(&mut c[0]);
    let (tries, logged) = (r.failed_demotions - first.failed_demotions, daemons[0].log().len() - log_before);
    eprintln!(
        "figures: with daemon 1 down, {tries} failed demotions and {logged} log bytes in {:.1?}",
        watched.elapsed()
    );
    // Two demoters, each trying again 1, 2, 4 s after its last failure (and
    // some slack for when the window began): without a back-off, thousands.
    assert!(tries <= 10, "{tries} demotions tried in 8 s:\n{r:#?}");
    assert!(logged < 4096, "daemon 0 logged {logged} bytes in 8 s:\n{}", daemons[0].log());
    let failing = daemons[0].log().matches("demoter: demoting").count();
    assert!((1..=2).contains(&failing), "logged {failing} times (once per demoter):\n{}", daemons[0].log());

    daemons[1] = f.spawn(1, 2, &[]);
    wait_for(&mut c[0], Duration::from_secs(90), "every file demoted", |r| r.apps.iter().all(|a| a.pending_files == 0));
    assert_on_pfs(&f, &files);
    let log = daemons[0].log();
    assert!(log.contains("demoter: working again after"), "{log}");
    assert!(log.contains("the throttler reaches daemon 1 again"), "{log}");
}

/// Every path under `dir`./// Every path under `dir`.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path.display().to_string());
    }
    out
}

/// A `redis-server` of the test's own on a free port, killed when dropped.
struct Redis {
    child: std::process::Child,
    url: String,
}

impl Redis {
    fn start(dir: &std::path::Path) -> Result<Redis, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run redis-server ({e}); scripts/setup.sh installs it"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server on port {port} did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Redis { child, url: format!("redis://127.0.0.1:{port}") })
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
fn a_redis_that_dies_mid_job_hands_the_drain_state_to_the_embedded_store_and_no_file_is_lost() {
    let f = Fixture::new();
    let Some(mut redis) = surge_testkit::skip_unless_ready(
        "a_redis_that_dies_mid_job_hands_the_drain_state_to_the_embedded_store_and_no_file_is_lost",
        Redis::start(f.dir.path()),
    ) else {
        return;
    };
    let flags = ["--drain", "maxeff", "--drain-rates", "40,30,16,1", "--drain-state", &redis.url];
    let daemons = cluster(&f, 1, |_| flags.map(String::from).to_vec());
    let mut c = clients(&f, &daemons, 11);
    let files: Vec<(String, Vec<u8>)> = (1..=4u64).map(|n| (format!("/ckpt_{n}"), contents(n, 2 * MIB))).collect();
    for (path, data) in &files[..2] {
        write_file(&mut c, path, data);
    }
    let r = report(&mut c[0]);
    assert_eq!((r.state_backend.as_str(), r.state_healthy), (redis.url.as_str(), true), "{r:#?}");
    redis.kill();
    for (path, data) in &files[2..] {
        write_file(&mut c, path, data);
    }
    let r = wait_for(&mut c[0], Duration::from_secs(60), "every file demoted", |r| {
        r.apps.iter().all(|a| a.pending_files == 0) && r.demoted_files >= files.len() as u64
    });
    assert!(!r.state_healthy && r.state_note.contains(&redis.url), "the failover is not reported:\n{r:#?}");
    assert_on_pfs(&f, &files);
    assert!(daemons[0].log().contains("the embedded store"), "the failover is not logged:\n{}", daemons[0].log());
}

#[test]
fn without_rates_daemon_0_measures_them_once_and_a_restart_plans_with_the_same() {
    let f = Fixture::new();
    let mut daemon = f.spawn(0, 1, &["--drain", "bbos"]);
    let mut c = daemon.client(&f);
    let measured =
        wait_for(&mut c, Duration::from_secs(60), "the rates measured", |r| !r.rates.source.is_empty()).rates;
    assert_eq!(measured.source, "measured", "{measured:?}\n{}", daemon.log());
    assert!(measured.write_min <= measured.write_max && measured.read_min < measured.read_max, "{measured:?}");
    assert!(measured.read_min > 0 && measured.m < 0.0, "{measured:?}");
    assert!(daemon.log().contains("drain: measured the buffer's rates"), "{}", daemon.log());
    daemon.kill9();
    let daemon = f.spawn(0, 1, &["--drain", "bbos"]);
    let mut c = daemon.client(&f);
    let stored = wait_for(&mut c, Duration::from_secs(30), "the rates read back", |r| !r.rates.source.is_empty()).rates;
    assert_eq!(stored.source, "stored");
    assert_eq!(
        (stored.write_max, stored.write_min, stored.read_max, stored.read_min),
        (measured.write_max, measured.write_min, measured.read_max, measured.read_min)
    );
}

#[test]
fn a_removed_or_renamed_checkpoint_leaves_no_stale_entry_even_across_a_restart() {
    let f = Fixture::new();
    let flags = ["--drain", "maxbw", "--drain-rates", "40,30,16,1"];
    let mut daemon = f.spawn(0, 1, &flags);
    let mut c = clients(&f, std::slice::from_ref(&daemon), 8);
    let kept = contents(7, MIB);
    write_file(&mut c, "/a/ckpt_1", &kept);
    write_file(&mut c, "/a/ckpt_2", &contents(2, MIB));
    let _: surge_proto::msg::Removed = c[0].ok(&Request::Unlink { path: "/a/ckpt_2", keep: false });
    let _: Attr = c[0].ok(&Request::Mkdir { path: "/b", mode: 0o755 });
    let _: surge_proto::msg::Removed = c[0].ok(&Request::Rename { from: "/a/ckpt_1", to: "/b/final_7", keep: false });
    let r = wait_for(&mut c[0], Duration::from_secs(30), "the renamed file demoted", |r| r.demoted_files >= 1);
    let app = r.apps.iter().find(|a| a.job == 8).unwrap_or_else(|| panic!("job 8 missing:\n{r:#?}"));
    assert_eq!((app.versions.as_slice(), app.pending_files, r.demoted_files), (&[7][..], 0, 1), "{r:#?}");
    assert_on_pfs(&f, &[("/b/final_7".to_string(), kept)]);
    assert!(!f.pfs().join("a/ckpt_1").exists() && !f.pfs().join("a/ckpt_2").exists());
    daemon.kill9();
    let daemon = f.spawn(0, 1, &flags);
    assert!(
        daemon.log().contains("resumed with 1 checkpoint file(s) in the buffer (0 to demote); 0 gone since"),
        "{}",
        daemon.log()
    );
}

/// How the client holding a checkpoint open lets go of it.
enum LetGo {
    /// It sends `Close`.
    Close,
    /// Its process is killed (the kernel closes its connection).
    Killed,
}

/// Two daemons of 11 MiB; job 1's 8 MiB checkpoint, the coldest (highest
/// MTBF), is held open by a reader (job 2) while jobs 3 and 4 write 8 MiB
/// each: the evicter must take job 3's instead, and the reader reads the
/// buffer copy intact. Once the reader lets go, job 5's checkpoint makes
/// the evicter take job 1's.
fn a_held_checkpoint_is_evicted_only_once_let_go(let_go: LetGo) {
    let f = Fixture::new();
    let daemons = bbos_cluster(&f, 11 * MIB);
    let mut admin = clients(&f, &daemons, 99);
    let held = contents(1, 8 * MIB);
    write_file(&mut clients(&f, &daemons, 1), "/one/ckpt_0001", &held);
    let _: () = admin[0].ok(&Request::SetMtbf { job: 1, seconds: 1_000_000 });
    let _: () = admin[0].ok(&Request::SetMtbf { job: 3, seconds: 60 });
    let mut reader = clients(&f, &daemons, 2);
    let open = Request::Open { path: "/one/ckpt_0001", flags: 0, mode: 0, layout: Layout::INHERIT, local: vec![] };
    let attr: Attr = reader[0].ok(&open);
    assert_eq!(report(&mut admin[0]).files_held, 1);
    wait_for(&mut admin[0], Duration::from_secs(60), "job 1's checkpoint demoted", |r| r.demoted_files >= 1);
    write_file(&mut clients(&f, &daemons, 3), "/three/ckpt_0001", &contents(3, 8 * MIB));
    wait_for(&mut admin[0], Duration::from_secs(60), "job 3's checkpoint demoted", |r| r.demoted_files >= 2);
    // 24 MiB into 22: the writer waits for the evicter.
    write_file(&mut clients(&f, &daemons, 4), "/four/ckpt_0001", &contents(4, 8 * MIB));
    let stat = |c: &mut Client, path: &str| c.ok::<Attr>(&Request::Stat { path }).tier;
    assert_eq!(stat(&mut admin[0], "/three/ckpt_0001"), Tier::Pfs, "job 3's checkpoint made the room");
    assert_eq!(stat(&mut admin[0], "/one/ckpt_0001"), Tier::Staged, "the held checkpoint was evicted");
    assert!(read_file(&mut reader, &attr, held.len()) == held, "the reader read other bytes than were written");
    match let_go {
        LetGo::Close => {
            let _: () = reader[0].ok(&Request::Close { ino: attr.ino });
        }
        LetGo::Killed => {
            // The connection that holds the file passes to a child process,
            // which is then killed: its connection dies with it.
            let stream = reader.remove(0).stream;
            let mut child = std::process::Command::new("sleep")
                .arg("600")
                .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(stream)))
                .spawn()
                .unwrap();
            drop(reader);
            assert_eq!(report(&mut admin[0]).files_held, 1, "the child holds the connection");
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
    wait_for(&mut admin[0], Duration::from_secs(10), "the checkpoint let go", |r| r.files_held == 0);
    write_file(&mut clients(&f, &daemons, 5), "/five/ckpt_0001", &contents(5, 8 * MIB));
    let deadline = Instant::now() + Duration::from_secs(30);
    while stat(&mut admin[0], "/one/ckpt_0001") != Tier::Pfs {
        assert!(Instant::now() < deadline, "job 1's checkpoint was not evicted:\n{:#?}", report(&mut admin[0]));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_on_pfs(&f, &[("/one/ckpt_0001".to_string(), held)]);
    evicted_is_answered_only_for_the_file_evicted_while_its_path_names_its_copy(&f, &mut admin[0], &attr);
}

/// `Evicted` of checkpoint `held` (evicted from /one/ckpt_0001): its PFS
/// copy, and ESTALE for another inode or path, then once another file
/// replaced the copy, and once the path is gone.
fn evicted_is_answered_only_for_the_file_evicted_while_its_path_names_its_copy(
    f: &Fixture,
    c: &mut Client,
    held: &Attr,
) {
    let path = "/one/ckpt_0001";
    let copy: Attr = c.ok(&Request::Evicted { path, ino: held.ino });
    assert_eq!((copy.tier, copy.size), (Tier::Pfs, 8 * MIB as u64));
    assert_eq!(copy.ino, c.ok::<Attr>(&Request::Stat { path }).ino);
    let stale = |c: &mut Client, path: &str, ino: u64| {
        let (errno, message) = c.fails(&Request::Evicted { path, ino });
        assert_eq!(errno, Errno(libc::ESTALE), "{message}");
        message
    };
    let message = stale(c, path, held.ino + 1);
    assert!(message.contains("not evicted"), "{message}");
    let message = stale(c, "/five/ckpt_0001", held.ino);
    assert!(message.contains("evicted from /one/ckpt_0001"), "{message}");
    // Another file put in place of the copy on the PFS: the path names another file.
    std::fs::write(f.pfs().join("one/other"), b"another file").unwrap();
    std::fs::rename(f.pfs().join("one/other"), f.pfs().join("one/ckpt_0001")).unwrap();
    let message = stale(c, path, held.ino);
    assert!(message.contains("names another file"), "{message}");
    let _: surge_proto::msg::Removed = c.ok(&Request::Unlink { path, keep: false });
    let message = stale(c, path, held.ino);
    assert!(message.contains("removed or renamed"), "{message}");
}

#[test]
fn a_reader_holding_a_checkpoint_reads_its_buffer_copy_under_pressure_and_it_is_evicted_only_after_close() {
    a_held_checkpoint_is_evicted_only_once_let_go(LetGo::Close);
}

#[test]
fn a_client_killed_with_a_checkpoint_open_lets_it_go() {
    a_held_checkpoint_is_evicted_only_once_let_go(LetGo::Killed);
}

#[test]
fn pfs_writes_and_syncs_are_refused_for_a_file_not_placed_on_the_pfs_directly() {
    let f = Fixture::new();
    let d0 = f.spawn(0, 1, &["--drain", "bbos", "--drain-rates", "40,30,16,1", "--drain-direct", "cold"]);
    let mut c0 = d0.client(&f);
    std::fs::write(f.pfs().join("old.dat"), b"on the PFS, not placed there").unwrap();
    for path in ["/old.dat", "/never-made.dat"] {
        let (errno, message) = c0.fails(&Request::PfsWrite { path, offset: 0, data: b"x" });
        assert_eq!(errno, Errno(libc::EPERM), "{message}");
        assert!(message.contains("not placed on the PFS directly"), "{message}");
        assert_eq!(c0.fails(&Request::PfsSync { path }).0, Errno(libc::EPERM));
    }
    assert_eq!(std::fs::read(f.pfs().join("old.dat")).unwrap(), b"on the PFS, not placed there");
    // Without a drain policy, direct placement is refused at start.
    let out = f.command(0, 1, &["--drain-direct", "cold"]).stderr(std::process::Stdio::piped()).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--drain-direct cold needs a drain policy"));
}

/// Daemon 0 of `n` daemons (of `capacity` bytes each) draining with MaxBW at
/// given rates, its replicas in `replica`, with `extra` flags.
fn replicating(f: &Fixture, n: u32, capacity: usize, replica: &std::path::Path, extra: &[&str]) -> Vec<Daemon> {
    cluster(f, n, |i| {
        let mut flags = vec!["--capacity".to_string(), capacity.to_string()];
        if i == 0 {
            flags.extend(["--drain", "maxbw", "--drain-rates", "40,30,16,1", "--drain-period", "5"].map(String::from));
            flags.extend(["--drain-replica".to_string(), replica.display().to_string()]);
            flags.extend(extra.iter().map(|s| s.to_string()));
        }
        flags
    })
}

/// The replicas' temps left under `replica`.
fn replica_temps(replica: &std::path::Path) -> Vec<String> {
    walk(replica).into_iter().filter(|p| p.ends_with(".surge-replica")).collect()
}

#[test]
fn demoted_files_get_a_verified_replica_that_follows_renames_removals_and_newer_versions() {
    let f = Fixture::new();
    let replica = f.path("replica");
    std::fs::create_dir(&replica).unwrap();
    let daemons = replicating(&f, 2, 64 * MIB, &replica, &[]);
    let mut c = clients(&f, &daemons, 4);
    let files: Vec<(String, Vec<u8>)> =
        (0..2u64).map(|rank| (format!("/a/ckpt_1.r{rank}"), contents(rank, 2 * MIB + 1000))).collect();
    for (path, data) in &files {
        write_file(&mut c, path, data);
    }
    let r = wait_for(&mut c[0], Duration::from_secs(60), "two replicas", |r| {
        r.replicas.files >= 2 && r.replicas.pending == 0
    });
    assert_eq!((r.replicas.files, r.replicas.bytes, r.replicas.failures), (2, 2 * (2 * MIB as u64 + 1000), 0));
    assert_eq!(r.replicas.dir, replica.display().to_string());
    assert_copies_in(&replica, &files);
    // A rename moves the replica; a removal removes it.
    let _: Attr = c[0].ok(&Request::Mkdir { path: "/b", mode: 0o755 });
    let _: surge_proto::msg::Removed =
        c[0].ok(&Request::Rename { from: "/a/ckpt_1.r1", to: "/b/ckpt_1.r1", keep: false });
    let _: surge_proto::msg::Removed = c[0].ok(&Request::Unlink { path: "/a/ckpt_1.r0", keep: false });
    assert_copies_in(&replica, &[("/b/ckpt_1.r1".to_string(), files[1].1.clone())]);
    assert!(!replica.join("a/ckpt_1.r0").exists() && !replica.join("a/ckpt_1.r1").exists());
    // Written again (as long: this raw client does not truncate objects): demoted and replicated again.
    let newer = contents(9, 2 * MIB + 1000);
    write_file(&mut c, "/b/ckpt_1.r1", &newer);
    wait_for(&mut c[0], Duration::from_secs(60), "the newer version replicated", |r| {
        r.replicas.files >= 3 && r.replicas.pending == 0
    });
    assert_copies_in(&replica, &[("/b/ckpt_1.r1".to_string(), newer)]);
    assert_eq!(replica_temps(&replica), Vec::<String>::new());
}

/// A daemon 0 killed while it copies a replica (at 2 MB/s, 2 s a file):
/// after its restart every file has its replica, none was made twice, and
/// no temp is left.
fn killed_mid_replication_resumes(f: &Fixture, state: &[&str]) {
    let replica = f.path("replica");
    std::fs::create_dir(&replica).unwrap();
    let slow: Vec<&str> = ["--drain-replica-rate", "2M"].iter().chain(state).copied().collect();
    let mut daemons = replicating(f, 1, 64 * MIB, &replica, &slow);
    let mut c = clients(f, &daemons, 6);
    let files: Vec<(String, Vec<u8>)> = (1..=3u64).map(|n| (format!("/r/ckpt_{n}"), contents(n, 4 * MIB))).collect();
    for (path, data) in &files {
        write_file(&mut c, path, data);
    }
    wait_for(&mut c[0], Duration::from_secs(60), "a first replica", |r| r.replicas.files >= 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while replica_temps(&replica).is_empty() {
        assert!(Instant::now() < deadline, "no second replication under way");
        std::thread::sleep(Duration::from_millis(20));
    }
    daemons.iter_mut().for_each(Daemon::kill9);
    drop((c, daemons));
    let made_before = files.iter().filter(|(path, _)| replica.join(&path[1..]).exists()).count() as u64;
    assert!(made_before < 3, "the kill should cut a replication short");
    let daemons = replicating(f, 1, 64 * MIB, &replica, state);
    let mut c = clients(f, &daemons, 6);
    let r = wait_for(&mut c[0], Duration::from_secs(60), "the rest replicated", |r| {
        r.replicas.pending == 0 && r.replicas.files + made_before >= 3
    });
    assert_eq!(r.replicas.files + made_before, 3, "a replica was made twice:\n{r:#?}");
    assert_copies_in(&replica, &files);
    assert_eq!(replica_temps(&replica), Vec::<String>::new());
}

#[test]
fn a_daemon_0_killed_mid_replication_resumes_with_the_embedded_store() {
    killed_mid_replication_resumes(&Fixture::new(), &[]);
}

#[test]
fn a_daemon_0_killed_mid_replication_resumes_with_redis() {
    let f = Fixture::new();
    let Some(redis) = surge_testkit::skip_unless_ready(
        "a_daemon_0_killed_mid_replication_resumes_with_redis",
        Redis::start(f.dir.path()),
    ) else {
        return;
    };
    killed_mid_replication_resumes(&f, &["--drain-state", &redis.url]);
}

#[test]
fn a_missing_replica_directory_is_reported_and_demotion_and_eviction_go_on() {
    let f = Fixture::new();
    let replica = f.path("replica");
    // Two daemons of 12 MiB, four files of 8 MiB: some must be evicted.
    let daemons = replicating(&f, 2, 12 * MIB, &replica, &[]);
    let mut c = clients(&f, &daemons, 7);
    let files: Vec<(String, Vec<u8>)> = (1..=4u64).map(|n| (format!("/m/ckpt_{n}"), contents(n, 8 * MIB))).collect();
    for (path, data) in &files {
        write_file(&mut c, path, data);
    }
    // The replicator backs off, so another error may be the last one for a while.
    let r =
        wait_for(&mut c[0], Duration::from_secs(120), "every file demoted, some evicted, the error reported", |r| {
            let reported = r.last_error.contains("replica directory") && r.last_error.contains("missing");
            r.demoted_files >= 4 && r.evicted_files >= 1 && r.replicas.failures >= 1 && reported
        });
    assert_eq!((r.demoted_files, r.replicas.files, r.replicas.pending), (4, 0, 4), "{r:#?}");
    assert_on_pfs(&f, &files);
    assert!(!replica.exists(), "the replicator made its missing directory");
    std::fs::create_dir(&replica).unwrap();
    wait_for(&mut c[0], Duration::from_secs(60), "the replicas once the directory is there", |r| {
        r.replicas.files >= 4 && r.replicas.pending == 0
    });
    assert_copies_in(&replica, &files);
}

#[test]
fn a_full_replica_device_is_reported_retried_and_loses_nothing() {
    let f = Fixture::new();
    let replica = f.path("replica");
    let Some(device) = surge_testkit::device::SmallDevice::mount(
        "a_full_replica_device_is_reported_retried_and_loses_nothing",
        &replica,
        "16m",
    ) else {
        return;
    };
    let filler = device.fill();
    let daemons = replicating(&f, 2, 64 * MIB, &replica, &[]);
    let mut c = clients(&f, &daemons, 8);
    let files: Vec<(String, Vec<u8>)> = (1..=2u64).map(|n| (format!("/n/ckpt_{n}"), contents(n, 4 * MIB))).collect();
    for (path, data) in &files {
        write_file(&mut c, path, data);
    }
    let r = wait_for(&mut c[0], Duration::from_secs(60), "a replication refused for space", |r| {
        r.demoted_files >= 2 && r.replicas.failures >= 1
    });
    assert!(r.last_error.contains("No space left on device"), "{r:#?}");
    assert_eq!((r.replicas.files, r.replicas.pending), (0, 2), "{r:#?}");
    std::fs::remove_file(filler).unwrap();
    let r = wait_for(&mut c[0], Duration::from_secs(60), "the replicas once there is room", |r| {
        r.replicas.files >= 2 && r.replicas.pending == 0
    });
    assert_copies_in(&replica, &files);
    // The failed copies' temps were removed: the device held both replicas and nothing else.
    assert_eq!(replica_temps(&replica), Vec::<String>::new());
    assert_eq!(r.replicas.files, 2, "{r:#?}");
}

#[test]
fn a_file_whose_pfs_copy_disappeared_is_dropped_from_r_order_and_reported() {
    let f = Fixture::new();
    let replica = f.path("replica");
    let daemons = replicating(&f, 1, 64 * MIB, &replica, &[]);
    let mut c = clients(&f, &daemons, 9);
    write_file(&mut c, "/g/ckpt_1", &contents(1, MIB));
    wait_for(&mut c[0], Duration::from_secs(60), "a demotion waiting for its replica", |r| {
        r.demoted_files >= 1 && r.replicas.failures >= 1
    });
    std::fs::remove_file(f.pfs().join("g/ckpt_1")).unwrap();
    std::fs::create_dir(&replica).unwrap();
    let r = wait_for(&mut c[0], Duration::from_secs(60), "the file dropped", |r| r.replicas.pending == 0);
    assert!(r.last_error.contains("/g/ckpt_1 has no PFS copy to replicate"), "{r:#?}");
    assert_eq!(r.replicas.files, 0, "{r:#?}");
    assert!(!replica.join("g/ckpt_1").exists());
}

#[test]
fn a_file_removed_while_its_replica_is_copied_leaves_neither_replica_nor_temp() {
    let f = Fixture::new();
    let replica = f.path("replica");
    std::fs::create_dir(&replica).unwrap();
    // 8 MiB at 2 MB/s: 4 s of copying to remove the file in.
    let daemons = replicating(&f, 1, 64 * MIB, &replica, &["--drain-replica-rate", "2M"]);
    let mut c = clients(&f, &daemons, 11);
    write_file(&mut c, "/x/ckpt_1", &contents(11, 8 * MIB));
    let deadline = Instant::now() + Duration::from_secs(30);
    while replica_temps(&replica).is_empty() {
        assert!(Instant::now() < deadline, "no replication under way");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _: surge_proto::msg::Removed = c[0].ok(&Request::Unlink { path: "/x/ckpt_1", keep: false });
    // The copy under way ends stale (its temp removed), not put in place.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !replica_temps(&replica).is_empty() {
        assert!(Instant::now() < deadline, "the stale copy's temp stays: {:?}", replica_temps(&replica));
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = report(&mut c[0]);
    assert_eq!((r.replicas.files, r.replicas.pending, r.replicas.failures), (0, 0, 0), "{r:#?}");
    assert!(!replica.join("x/ckpt_1").exists(), "a removed file got a replica");
}

#[test]
fn checkpoints_written_while_the_pfs_root_is_absent_stay_booked_and_are_demoted_once_it_is_back() {
    let f = Fixture::new();
    let _daemons = bbos_cluster(&f, 20 * MIB);
    // Lustre not mounted yet: the PFS root is not there.
    let away = f.path("pfs-not-mounted");
    std::fs::rename(f.pfs(), &away).unwrap();
    let mut c = clients(&f, &_daemons, 5);
    let files: Vec<(String, Vec<u8>)> = (1..=2).map(|v| (format!("/run/ckpt_{v}"), contents(v, 2 * MIB))).collect();
    for (path, data) in &files {
        write_file(&mut c, path, data);
    }
    let r = wait_for(&mut c[0], Duration::from_secs(20), "a demotion meeting the absent PFS", |r| {
        r.last_error.contains("the PFS root is not there")
    });
    let app = r.apps.iter().find(|a| a.job == 5).expect("job 5 is booked");
    assert_eq!((app.pending_files, r.demoted_files), (2, 0), "{r:#?}");
    std::fs::rename(&away, f.pfs()).unwrap();
    wait_for(&mut c[0], Duration::from_secs(30), "demotion once the PFS is back", |r| r.demoted_files == 2);
    assert_on_pfs(&f, &files);
}

#[test]
fn buffer_files_the_drain_state_does_not_record_are_booked_and_demoted_when_daemon_0_starts() {
    let f = Fixture::new();
    // Written with the drain off: no state records them.
    let mut daemons = cluster(&f, 2, |_| vec!["--capacity".to_string(), (20 * MIB).to_string()]);
    let mut c = clients(&f, &daemons, 6);
    let files: Vec<(String, Vec<u8>)> = (1..=2).map(|v| (format!("/old/ckpt_{v}"), contents(v + 10, MIB))).collect();
    for (path, data) in &files {
        write_file(&mut c, path, data);
    }
    // As a client's fsync does: the names are durable.
    c[0].ok::<()>(&Request::Sync);
    drop(c);
    daemons[0].kill9();
    let flags = ["--capacity", "20971520", "--drain", "bbos", "--drain-rates", "40,30,16,1", "--drain-period", "5"];
    daemons[0] = f.spawn(0, 2, &flags);
    let mut c = clients(&f, &daemons, 6);
    let r = wait_for(&mut c[0], Duration::from_secs(30), "the unbooked files' demotion", |r| r.demoted_files == 2);
    assert!(r.apps.iter().any(|a| a.label == "unbooked"), "{r:#?}");
    assert_on_pfs(&f, &files);
    assert!(daemons[0].log().contains("2 found unbooked in the namespace"), "{}", daemons[0].log());
}
