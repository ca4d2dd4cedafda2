//! The data manager from the command line: `--drain*` settings on
//! `surge start` and `surge run`, refused before anything starts when
//! they are wrong; and files held open through the client library across
//! a restart of daemon 0 (`surge start --daemon 0`).

use std::time::Duration;
use surge_client::{Client, ClientConfig, File, JobIdentity};
use surge_proto::{Layout, Tier};
use surge_testkit::cluster::Cluster;
use surge_testkit::{eventually, pattern};

const MIB: usize = 1 << 20;

#[test]
fn bad_drain_settings_are_refused_before_any_daemon_starts() {
    let c = Cluster::unstarted();
    let refusals: [(&[&str], &str); 8] = [
        (&["start", "--drain", "fastest"], "possible values: off, bbos, maxeff, maxbw, dedicated"),
        (&["start", "--drain", "bbos", "--drain-state", "redis"], "is for surge run"),
        (&["start", "--drain", "bbos", "--drain-state", "127.0.0.1:6379"], "redis://HOST:PORT"),
        (&["start", "--drain-state", "redis://127.0.0.1:6379"], "add --drain bbos"),
        (&["start", "--drain", "bbos", "--drain-rates", "40,30,16"], "got 3 figure(s)"),
        (&["start", "--drain", "bbos", "--drain-period", "0"], "--drain-period"),
        (&["start", "--drain", "bbos", "--drain-trim-rate", "-5"], "\"-5\" is not 0 or more"),
        (&["start", "--drain", "bbos", "--drain-trim-rate", "fast"], "\"fast\" is not a number"),
    ];
    for (args, why) in refusals {
        let err = c.fails(args);
        assert!(err.contains(why), "surge {}: {err}", args.join(" "));
    }
    let err = c.fails(&["run", "--drain-rates", "4,3,2,1", "--", "true"]);
    assert!(err.contains("need a drain policy"), "{err}");
    assert!(c.pids().is_empty(), "no daemon was started");
}

#[test]
fn a_cluster_started_with_a_drain_policy_reports_it_and_takes_a_jobs_mtbf() {
    let drain = ["--drain", "bbos", "--drain-rates", "40,30,16,1", "--drain-period", "60", "--drain-trim-rate", "250"];
    let c = Cluster::start(2, &drain);
    let text = c.ok(&["drain", "status"]);
    assert!(text.contains("policy: bbos") && text.contains("device rates (given)"), "{text}");
    assert!(text.contains(", rate cap 250.0 MB/s;"), "the trim rate in force: {text}");
    let json: serde_json::Value = serde_json::from_str(&c.ok(&["drain", "status", "--json"])).unwrap();
    assert_eq!((json["policy"].as_str(), json["period_s"].as_u64()), (Some("bbos"), Some(60)));
    assert_eq!(json["trim"]["rate_bps"].as_u64(), Some(250_000_000));
    assert_eq!(json["rates"]["write_max"].as_u64(), Some(40_000_000));
    let set = c.ok(&["ckpt", "mtbf", "4242", "3600"]);
    assert!(set.contains("job 4242") && set.contains("3600 s"), "{set}");
    let err = c.fails(&["ckpt", "mtbf", "4242", "0"]);
    assert!(err.contains("0 is not in 1.."), "{err}");
}

#[test]
fn surge_run_keeps_the_drain_state_in_a_redis_of_its_own_and_stops_it_after() {
    let c = Cluster::unstarted();
    let buffer = c.buffer();
    let out = c
        .command(&["run", "--buffer", buffer.to_str().unwrap(), "--pfs", c.pfs().to_str().unwrap(), "--no-fuse"])
        .args(["--drain", "bbos", "--drain-state", "redis", "--drain-rates", "40,30,16,1", "--"])
        .args([surge_testkit::cluster::surge_bin().to_str().unwrap(), "drain", "status"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if surge_testkit::skip_unless_ready(
        "surge_run_keeps_the_drain_state_in_a_redis_of_its_own",
        if stderr.contains("cannot run redis-server") { Err("redis-server is not installed") } else { Ok(()) },
    )
    .is_none()
    {
        return;
    }
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("policy: bbos") && stdout.contains("state: redis://:***@127.0.0.1:"), "{stdout}");
    let pid: u32 = stderr
        .split("redis-server of the job's own on ")
        .nth(1)
        .and_then(|rest| rest.split("(pid ").nth(1))
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no redis pid in: {stderr}"));
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "redis-server {pid} still runs after the job");
    assert!(!buffer.exists(), "the job's buffer (with the Redis configuration) is removed after a full stage-out");
}

fn client(c: &Cluster, job: &str) -> Client {
    let config = ClientConfig { job: JobIdentity::named(job), ..ClientConfig::from_env().unwrap() };
    Client::connect_with(&c.cluster_file(), config).unwrap()
}

fn write(client: &Client, path: &str, data: &[u8]) {
    let dir = &path[..path.rfind('/').unwrap()];
    if let Err(e) = client.mkdir(dir, 0o755) {
        assert_eq!(e.errno(), libc::EEXIST, "{e}");
    }
    let file = client.create(path, 0o644, Layout::INHERIT).unwrap();
    assert_eq!(file.write_at(data, 0).unwrap(), data.len(), "{path}");
    file.fsync().unwrap();
}

/// Every byte of `file`, read through the handle.
fn read_all(file: &File, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len + 1];
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], done as u64).unwrap_or_else(|e| panic!("{}: {e}", file.path()));
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    buf
}

/// Whether process `pid` is gone with its sockets (reaped, or a zombie whose threads all ended).
fn gone(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return true };
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or_default();
    field("State:").starts_with('Z') && field("Threads:") == "1"
}

/// Daemon 0 killed with SIGKILL and started again in place: it has lost
/// the count of the files clients hold open.
fn restart_daemon_0(c: &Cluster) {
    let daemon_0 = c.pids()[0] as i32;
    // SAFETY: kill with the pid of a daemon this cluster started.
    assert_eq!(unsafe { libc::kill(daemon_0, libc::SIGKILL) }, 0);
    eventually("daemon 0 is gone", Duration::from_secs(10), || gone(daemon_0));
    c.ok(&["start", "--daemon", "0"]);
}

/// What the clients holding a file open do after daemon 0 restarted.
#[derive(PartialEq)]
enum Comeback {
    /// They make a request to daemon 0 before the buffer fills (their new
    /// connection to it announces the files they hold).
    Talk,
    /// They do not talk to daemon 0 until they read or write the file.
    Silent,
}

/// Two daemons of 11 MiB. Job "one"'s 8 MiB checkpoint, the coldest
/// (highest MTBF), is demoted while a reader and a writer of job "one"
/// hold it open; daemon 0 is then killed and restarted, and jobs "three"
/// and "four" write 8 MiB each, so the evicter must take a file. Holders
/// that talked to the restarted daemon 0 keep their file in the buffer
/// (job three's goes); silent ones lose it to the evicter (the restarted
/// daemon 0 does not know it is held). Either way the reader reads every
/// byte as written, and the writer writes and fsyncs, its bytes in the
/// file for a fresh open and on the PFS after a stage-out.
fn files_held_across_a_restart_of_daemon_0(comeback: Comeback) {
    let c = Cluster::start(
        2,
        &["--capacity", "11M", "--drain", "bbos", "--drain-rates", "40,30,16,1", "--drain-period", "5"],
    );
    let one = client(&c, "one");
    let path = "/one/ckpt_0001";
    let written = pattern(1, 8 * MIB);
    write(&one, path, &written);
    one.set_mtbf(JobIdentity::named("one").id, 1_000_000).unwrap();
    one.set_mtbf(JobIdentity::named("three").id, 60).unwrap();
    let reader = client(&c, "one");
    let read_handle = reader.open(path, libc::O_RDONLY, 0).unwrap();
    let writer = client(&c, "one");
    let write_handle = writer.open(path, libc::O_RDWR, 0).unwrap();
    eventually("the checkpoint demoted", Duration::from_secs(60), || one.stat(path).unwrap().tier == Tier::Staged);

    restart_daemon_0(&c);
    if comeback == Comeback::Talk {
        reader.stat(path).unwrap();
        writer.stat(path).unwrap();
        assert_eq!(one.drain_status().unwrap().files_held, 1, "the holders announced the file they hold");
    }
    let three = client(&c, "three");
    write(&three, "/three/ckpt_0001", &pattern(3, 8 * MIB));
    eventually("job three's checkpoint demoted", Duration::from_secs(60), || {
        three.stat("/three/ckpt_0001").unwrap().tier == Tier::Staged
    });
    // 24 MiB into 22: the writer waits for the evicter, which takes the coldest job's file if it may.
    write(&client(&c, "four"), "/four/ckpt_0001", &pattern(4, 8 * MIB));
    let evicted = if comeback == Comeback::Talk { "/three/ckpt_0001" } else { path };
    eventually("a checkpoint evicted", Duration::from_secs(30), || one.stat(evicted).unwrap().tier == Tier::Pfs);
    if comeback == Comeback::Talk {
        assert_eq!(one.stat(path).unwrap().tier, Tier::Staged, "the held checkpoint was evicted");
    }

    assert!(read_all(&read_handle, written.len()) == written, "the reader read other bytes than were written");
    assert_eq!(read_handle.attr().unwrap().size, written.len() as u64, "fstat of the reader's handle");
    let update = pattern(5, MIB);
    let at = 3 * MIB + 17;
    assert_eq!(write_handle.write_at(&update, at as u64).unwrap(), update.len());
    write_handle.fsync().unwrap();
    let mut expected = written;
    expected[at..at + update.len()].copy_from_slice(&update);
    let fresh = one.open(path, libc::O_RDONLY, 0).unwrap();
    assert!(read_all(&fresh, expected.len()) == expected, "a fresh open reads other bytes than were written");
    assert!(read_all(&write_handle, expected.len()) == expected, "the writer reads back other bytes");
    drop((fresh, read_handle, write_handle));
    c.ok(&["stage-out", "--quiet", path]);
    let on_pfs = std::fs::read(c.pfs().join(&path[1..])).unwrap();
    assert!(on_pfs == expected, "the PFS copy differs from what was written");
}

#[test]
fn files_held_by_clients_that_come_back_to_a_restarted_daemon_0_stay_in_the_buffer() {
    files_held_across_a_restart_of_daemon_0(Comeback::Talk);
}

#[test]
fn files_held_by_silent_clients_across_a_restart_of_daemon_0_read_and_write_as_if_nothing_happened() {
    files_held_across_a_restart_of_daemon_0(Comeback::Silent);
}
