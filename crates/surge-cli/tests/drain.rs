//! The data manager from the command line: `--drain*` settings on
//! `surge start` and `surge run`, refused before anything starts when
//! they are wrong.

use surge_testkit::cluster::Cluster;

#[test]
fn bad_drain_settings_are_refused_before_any_daemon_starts() {
    let c = Cluster::unstarted();
    let refusals: [(&[&str], &str); 6] = [
        (&["start", "--drain", "fastest"], "possible values: off, bbos, maxeff, maxbw, dedicated"),
        (&["start", "--drain", "bbos", "--drain-state", "redis"], "is for surge run"),
        (&["start", "--drain", "bbos", "--drain-state", "127.0.0.1:6379"], "redis://HOST:PORT"),
        (&["start", "--drain-state", "redis://127.0.0.1:6379"], "add --drain bbos"),
        (&["start", "--drain", "bbos", "--drain-rates", "40,30,16"], "got 3 figure(s)"),
        (&["start", "--drain", "bbos", "--drain-period", "0"], "--drain-period"),
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
    let c = Cluster::start(2, &["--drain", "bbos", "--drain-rates", "40,30,16,1", "--drain-period", "60"]);
    let text = c.ok(&["drain", "status"]);
    assert!(text.contains("policy: bbos") && text.contains("device rates (given)"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&c.ok(&["drain", "status", "--json"])).unwrap();
    assert_eq!((json["policy"].as_str(), json["period_s"].as_u64()), (Some("bbos"), Some(60)));
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
