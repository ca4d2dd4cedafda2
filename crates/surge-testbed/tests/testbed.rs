//! Real testbeds: namespaces, links, daemons and clients. They need root
//! and iproute2 (otherwise each shows "SKIPPED: <test>: <reason>", and
//! under CI=true as root fails) and the `surge` and
//! `surged` binaries: SURGE_BIN, else the workspace's target/debug/surge.
//! Every test uses its own testbed name so they run in parallel.

use clap::Parser;
use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use surge_testbed::cli::{self, TestbedCommand};
use surge_testbed::{down, up, Error, Spec, Testbed};
use surge_testkit::pattern;

/// The `surge` binary, or `None` where a testbed cannot be made: the test
/// then shows "SKIPPED: <test>: <reason>" (and fails instead under
/// CI=true as root, where it must run).
fn surge_bin(test: &str) -> Option<PathBuf> {
    surge_testkit::skip_unless_ready(test, surge_testbed::check_host(true))?;
    let bin = std::env::var_os("SURGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/surge"));
    assert!(
        bin.is_file() && bin.with_file_name("surged").is_file(),
        "{} (or surged beside it) is missing: build them with `cargo build -p surge-cli -p surged` \
         in the workspace, or point SURGE_BIN at a built surge",
        bin.display()
    );
    Some(bin)
}

/// Takes a testbed down when the test ends, passed or failed.
struct DownOnDrop(&'static str);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if let Err(e) = down(self.0, None) {
            eprintln!("down {} after the test: {e}", self.0);
        }
    }
}

fn namespaces_of(name: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let prefix = format!("surge-{name}-");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// Runs `surge ARGS` on `host` of the testbed, asserting success.
fn surge_on(tb: &Testbed, host: u32, args: &[&str]) -> Output {
    let out = tb.command(host, &tb.surge_bin).args(args).env("SURGE_TIMEOUT", "10").output().unwrap();
    assert!(
        out.status.success(),
        "surge {args:?} on host {host} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Is `pid` running? A zombie is not: it has ended, and on a machine whose
/// init does not reap orphans it stays listed in /proc.
fn running(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])))
}

fn exit_code(cmd: TestbedCommand) -> String {
    format!("{:?}", cli::run(cmd, PathBuf::from("/nonexistent/surge")).unwrap())
}

#[derive(Parser)]
struct TestCli {
    #[command(subcommand)]
    cmd: TestbedCommand,
}

fn parse(args: &[&str]) -> TestbedCommand {
    TestCli::try_parse_from(std::iter::once("testbed").chain(args.iter().copied())).unwrap().cmd
}

#[test]
fn three_hosts_copy_in_and_out_stay_isolated_and_go_down_whole() {
    let Some(bin) = surge_bin("three_hosts_copy_in_and_out_stay_isolated_and_go_down_whole") else { return };
    let _guard = DownOnDrop("t1");
    let started = Instant::now();
    let tb = up(&Spec::new("t1", 3, bin)).unwrap();
    eprintln!("up took {:?}", started.elapsed());
    assert_eq!(tb.hosts.len(), 3);
    assert_eq!(tb.daemon_hosts().map(|h| h.index).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(tb.client_hosts().map(|h| h.index).collect::<Vec<_>>(), [2]);
    assert_eq!(tb.daemons.len(), 2);
    for d in &tb.daemons {
        assert_eq!(std::net::IpAddr::V4(tb.hosts[d.host as usize].ip), d.addr.ip());
    }

    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("in.bin");
    let back = local.path().join("back.bin");
    let data = pattern(1, 5 * 1024 * 1024 + 13);
    fs::write(&src, &data).unwrap();
    surge_on(&tb, 2, &["cp", src.to_str().unwrap(), "/surge/in.bin"]);
    surge_on(&tb, 2, &["cp", "/surge/in.bin", back.to_str().unwrap()]);
    assert!(fs::read(&back).unwrap() == data, "the copy that came back differs");

    let status = String::from_utf8(surge_on(&tb, 2, &["status"]).stdout).unwrap();
    assert!(status.contains("(2 daemons)") && status.contains("2/2 daemons up"), "{status}");

    // The daemons live only inside the testbed: the root namespace has no route to them.
    for d in &tb.daemons {
        let outside = TcpStream::connect_timeout(&d.addr, Duration::from_millis(500));
        assert!(outside.is_err(), "daemon {} at {} is reachable from the root namespace", d.index, d.addr);
    }

    // The command-line face: status is healthy, exec passes the exit status through.
    assert_eq!(exit_code(parse(&["status", "--name", "t1"])), format!("{:?}", std::process::ExitCode::SUCCESS));
    let exec =
        parse(&["exec", "--name", "t1", "--host", "2", "--", "sh", "-c", "test -n \"$SURGE_CLUSTER\" && exit 3"]);
    assert_eq!(exit_code(exec), format!("{:?}", std::process::ExitCode::from(3)));

    let report = down("t1", None).unwrap();
    assert!(report.stopped_cleanly, "{report:?}");
    assert_eq!(report.namespaces, ["surge-t1-h0", "surge-t1-h1", "surge-t1-h2", "surge-t1-hub"]);
    assert_eq!(report.state_dir.as_deref(), Some(tb.state_dir.as_path()));
    assert!(namespaces_of("t1").is_empty());
    assert!(!tb.state_dir.exists());
    for d in &tb.daemons {
        assert!(!running(d.pid), "daemon pid {} survived down", d.pid);
    }
    assert!(down("t1", None).unwrap().is_empty(), "a second down should find nothing");
}

#[test]
fn rate_shapes_both_ends_of_every_link() {
    let Some(bin) = surge_bin("rate_shapes_both_ends_of_every_link") else { return };
    let _guard = DownOnDrop("t2");
    let state = tempfile::tempdir().unwrap();
    let mut spec = Spec::new("t2", 3, bin);
    spec.rate = Some("200mbit".parse().unwrap());
    spec.state_dir = state.path().join("state");
    let tb = up(&spec).unwrap();

    for h in &tb.hosts {
        for (netns, dev) in
            [(h.netns.clone(), "eth0".to_string()), (tb.hub_netns.clone(), format!("veth-h{}", h.index))]
        {
            let out = Command::new("tc").args(["-n", &netns, "qdisc", "show", "dev", &dev]).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("tbf") && text.contains("rate 200Mbit"), "{netns} {dev}: {text}");
        }
    }
    // Found by name alone: `up` recorded where its state dir is.
    let loaded = Testbed::load("t2", None).unwrap();
    assert_eq!(loaded, tb);
    assert!(loaded.status().iter().all(|s| s.shaped_rate.as_deref() == Some("200Mbit")));

    // 16 MiB leave the client through one 200 Mbit/s link: at least 0.67 s less one burst.
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("16m.bin");
    fs::write(&src, pattern(2, 16 * 1024 * 1024)).unwrap();
    let started = Instant::now();
    surge_on(&tb, 2, &["cp", src.to_str().unwrap(), "/surge/16m.bin"]);
    let took = started.elapsed();
    eprintln!("16 MiB over 200mbit took {took:?}");
    assert!(took >= Duration::from_millis(600), "16 MiB took only {took:?}: the link is not shaped");

    let report = down("t2", None).unwrap();
    assert_eq!(report.namespaces.len(), 4);
    assert!(!spec.state_dir.exists());
}

#[test]
fn down_cleans_up_after_a_killed_daemon_and_stray_processes() {
    let Some(bin) = surge_bin("down_cleans_up_after_a_killed_daemon_and_stray_processes") else { return };
    let _guard = DownOnDrop("t3");
    let mut spec = Spec::new("t3", 3, bin);
    spec.daemons_per_host = 2;
    let tb = up(&spec).unwrap();
    assert_eq!(tb.daemons.len(), 4);
    assert!(tb.daemons.iter().filter(|d| d.host == 1).count() == 2);

    // Half broken: one daemon killed outright, a client program left running.
    unsafe { libc::kill(tb.daemons[0].pid as i32, libc::SIGKILL) };
    let mut stray = tb.command(2, "sleep").arg("300").spawn().unwrap();
    let e = up(&spec).unwrap_err();
    assert!(matches!(e, Error::AlreadyUp { .. }), "{e}");
    assert!(e.to_string().contains("`surge testbed down --name t3` first"), "{e}");

    let report = down("t3", None).unwrap();
    assert_eq!(report.namespaces.len(), 4, "{report:?}");
    assert!(report.killed.contains(&stray.id()), "{report:?}");
    assert!(stray.wait().is_ok());
    assert!(namespaces_of("t3").is_empty());
    assert!(!tb.state_dir.exists());
    for d in &tb.daemons {
        assert!(!running(d.pid), "daemon pid {} survived down", d.pid);
    }
    assert!(down("t3", None).unwrap().is_empty());
}

#[test]
fn failed_up_removes_what_it_made() {
    let Some(bin) = surge_bin("failed_up_removes_what_it_made") else { return };
    let _guard = DownOnDrop("t4");
    let mut spec = Spec::new("t4", 3, bin);
    spec.start_args = vec!["--no-such-flag".into()];
    let e = up(&spec).unwrap_err().to_string();
    assert!(e.contains("surge start") && e.contains("--no-such-flag"), "{e}");
    assert!(namespaces_of("t4").is_empty(), "left {:?}", namespaces_of("t4"));
    assert!(!spec.state_dir.exists());
    assert!(down("t4", None).unwrap().is_empty());
}

#[test]
fn bad_input_is_refused_before_anything_is_made() {
    let Some(bin) = surge_bin("bad_input_is_refused_before_anything_is_made") else { return };
    let _guard = DownOnDrop("t5");
    let attempt = |edit: &dyn Fn(&mut Spec)| {
        let mut spec = Spec::new("t5", 3, &bin);
        edit(&mut spec);
        let e = up(&spec).unwrap_err();
        assert!(matches!(e, Error::InvalidSpec(_)), "{e}");
        assert!(namespaces_of(&spec.name).is_empty() && namespaces_of("t5").is_empty());
        assert!(!spec.state_dir.exists());
        e.to_string()
    };
    assert!(attempt(&|s| s.hosts = 1).contains("--hosts 1"));
    assert!(attempt(&|s| s.daemon_hosts = 3).contains("left for clients"));
    assert!(attempt(&|s| s.name = "Bad-1".into()).contains("a-z and 0-9"));
    assert!(attempt(&|s| s.name = "waytoolong".into()).contains("1 to 8"));
    assert!(attempt(&|s| s.surge_bin = "/nonexistent/surge".into()).contains("cargo build"));
    let rate = "200 mbit".parse::<surge_testbed::Rate>().unwrap_err().to_string();
    assert!(rate.contains("tc unit"), "{rate}");
    assert!(TestCli::try_parse_from(["testbed", "up", "--hosts", "3", "--rate", "lots"]).is_err());
    // A state dir with someone's files in it is never taken (down would delete it whole).
    let busy = tempfile::tempdir().unwrap();
    fs::write(busy.path().join("precious"), "x").unwrap();
    let mut spec = Spec::new("t5", 3, &bin);
    spec.state_dir = busy.path().to_path_buf();
    assert!(up(&spec).unwrap_err().to_string().contains("not empty"));
    assert!(busy.path().join("precious").exists() && namespaces_of("t5").is_empty());
    assert!(Testbed::load("t5", None).unwrap_err().to_string().contains("not up"));
}
