//! `surge bench bbos` end to end: the simulated policy comparison prints
//! its figures, says they are simulated, and gives every target a verdict;
//! the measured parts run through real daemons, on localhost and on the
//! multi-host test bed (that test shows "SKIPPED: <test>: <reason>" where
//! the test bed cannot be made, and fails under CI=true as root).

use std::process::Command;
use surge_testkit::cluster::surge_bin;

#[test]
fn the_simulated_bbos_benchmark_prints_every_policy_and_a_verdict_per_target() {
    let out = Command::new(surge_bin())
        .args(["bench", "bbos", "--seeds", "1", "--periods", "1", "--part", "simulated"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("SIMULATED, not measured"), "{text}");
    for policy in ["| Dedicated |", "| MaxEff |", "| MaxBW |", "| BBOS |"] {
        assert!(text.contains(policy), "{policy} missing: {text}");
    }
    let targets = text.split("Targets").nth(1).expect("a targets table");
    let verdicts = targets.lines().filter(|l| l.contains("met")).count();
    assert_eq!(verdicts, 6, "{targets}");
}

#[test]
fn zero_seeds_is_refused_with_the_accepted_range() {
    let out = Command::new(surge_bin()).args(["bench", "bbos", "--seeds", "0"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--seeds") && err.contains("1..=64"), "{err}");
}

/// One period of 2 applications into 24 MiB: a small run of a measured policy comparison.
const SMALL_POLICY_RUN: [&str; 6] = ["--measured-periods", "1", "--apps", "2", "--capacity-mib", "24"];

/// `surge bench bbos` with `args`, 2 MiB checkpoints, buffer and PFS in a temporary directory.
fn measured_run(args: &[&str]) -> std::process::Output {
    let scratch = tempfile::tempdir().unwrap();
    Command::new(surge_bin())
        .args(["bench", "bbos", "--runs", "1", "--checkpoint-mib", "2", "--scratch"])
        .arg(scratch.path())
        .arg("--buffer-dir")
        .arg(scratch.path())
        .args(args)
        .output()
        .unwrap()
}

/// The output of one successful run of a measured part of `surge bench bbos` with `args`.
fn measured(args: &[&str]) -> String {
    let out = measured_run(args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// What every measured policy comparison prints: both congestions of every
/// policy, no failed checkpoint, data demoted by BBOS, the ENOSPC target met.
fn assert_policy_table(text: &str) {
    for policy in ["| Dedicated |", "| MaxEff |", "| MaxBW |", "| BBOS |"] {
        assert_eq!(text.matches(policy).count(), 2, "{policy} at low and high congestion: {text}");
    }
    assert!(!text.contains("first failure"), "a checkpoint failed: {text}");
    let demoted: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("| Low | BBOS") || l.starts_with("| High | BBOS"))
        .filter_map(|l| l.split('|').nth(9)?.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(demoted.len() == 2 && demoted.iter().all(|&mib| mib > 0.0), "BBOS demoted nothing: {text}");
    assert!(text.contains("BBOS checkpoints failing") && text.contains("| met |"), "{text}");
}

#[test]
fn the_measured_bbos_benchmark_runs_every_policy_through_the_daemons_with_no_failed_checkpoint() {
    let text = measured(&[&["--part", "measured", "--period-secs", "3"], &SMALL_POLICY_RUN[..]].concat());
    assert!(text.contains("MEASURED through the daemons on this machine"), "{text}");
    assert_policy_table(&text);
}

#[test]
fn on_the_test_bed_every_policy_runs_with_a_host_per_daemon_and_per_application() {
    let test = "on_the_test_bed_every_policy_runs_with_a_host_per_daemon_and_per_application";
    let out =
        measured_run(&[&["--part", "measured", "--testbed", "--period-secs", "3"], &SMALL_POLICY_RUN[..]].concat());
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let ready = if out.status.code() == Some(2) { Err(err.trim().to_string()) } else { Ok(()) };
    if surge_testkit::skip_unless_ready(test, ready).is_none() {
        return;
    }
    assert!(out.status.success(), "{text}{err}");
    assert!(
        text.contains(
            "MEASURED through the daemons on the test bed (a host per daemon and per application, 400mbit links)"
        ),
        "{text}"
    );
    assert_policy_table(&text);
}

#[test]
fn without_the_capabilities_of_root_the_test_bed_variant_says_why_and_exits_2() {
    for part in ["measured", "restarts"] {
        // As root, setpriv drops every capability (the test bed needs CAP_NET_ADMIN and CAP_SYS_ADMIN).
        // SAFETY: geteuid cannot fail.
        let mut bench = if unsafe { libc::geteuid() } == 0 {
            let mut setpriv = Command::new("setpriv");
            setpriv.args(["--bounding-set=-all", "--inh-caps=-all"]).arg(surge_bin());
            setpriv
        } else {
            Command::new(surge_bin())
        };
        let out = bench.args(["bench", "bbos", "--part", part, "--testbed"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--part {part}: {err}");
        assert!(err.contains("the test bed cannot run here") && err.contains("root"), "--part {part}: {err}");
        assert!(out.stdout.is_empty(), "nothing measured: {}", String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn the_test_bed_variant_of_the_simulated_part_is_refused() {
    let out = Command::new(surge_bin()).args(["bench", "bbos", "--part", "simulated", "--testbed"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--testbed applies to --part measured, --part direct and --part restarts"), "{err}");
}

/// A tiny restart case: 3 applications writing 2 MiB checkpoints into 16 MiB every 3 s, MTBFs of
/// at most 2 s, failures over 1 period.
const SMALL_RESTART_RUN: [&str; 12] = [
    "--part",
    "restarts",
    "--restart-apps",
    "3",
    "--restart-periods",
    "1",
    "--restart-period-secs",
    "3",
    "--mtbf-max-secs",
    "2",
    "--restart-capacity-mib",
    "16",
];

/// What every restart run prints: a row per eviction order with the same
/// restarts (the same failures), hit ratios within 0..1, the target line.
fn assert_restart_table(text: &str) {
    assert!(text.contains("MEASURED restart hit ratio through the daemons"), "{text}");
    let rows: Vec<(u32, f64)> = ["| BBOS |", "| LRU |", "| FIFO |"]
        .iter()
        .map(|order| {
            let line = text.lines().find(|l| l.starts_with(order)).unwrap_or_else(|| panic!("{order} missing: {text}"));
            let cell = |i: usize| line.split('|').nth(i).unwrap().split_whitespace().next().unwrap().to_string();
            (cell(2).parse().unwrap(), cell(3).parse().unwrap())
        })
        .collect();
    // Every order saw the same failures, with MTBFs of at most 2 s over 3 s: some restarts.
    assert!(rows[0].0 > 0 && rows.iter().all(|r| r.0 == rows[0].0), "{text}");
    assert!(rows.iter().all(|r| (0.0..=1.0).contains(&r.1)), "{text}");
    assert!(text.contains("| BBOS restart hit ratio / LRU's, high MTBF variance | ≥ 2 |"), "{text}");
}

#[test]
fn the_measured_restart_benchmark_compares_the_eviction_orders_on_the_same_failures() {
    let text = measured(&SMALL_RESTART_RUN);
    assert!(text.contains("through the daemons on this machine"), "{text}");
    assert_restart_table(&text);
}

#[test]
fn on_the_test_bed_the_restart_runs_give_each_application_a_host_and_the_orders_the_same_failures() {
    let test = "on_the_test_bed_the_restart_runs_give_each_application_a_host_and_the_orders_the_same_failures";
    let out = measured_run(&[&SMALL_RESTART_RUN[..], &["--testbed"]].concat());
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let ready = if out.status.code() == Some(2) { Err(err.trim().to_string()) } else { Ok(()) };
    if surge_testkit::skip_unless_ready(test, ready).is_none() {
        return;
    }
    assert!(out.status.success(), "{text}{err}");
    assert!(text.contains("through the daemons on the test bed (a host per daemon and per application"), "{text}");
    assert_restart_table(&text);
}

#[test]
fn the_direct_part_compares_bbos_with_and_without_direct_placement_and_gives_a_verdict() {
    let text = measured(&[&["--part", "direct", "--period-secs", "4"], &SMALL_POLICY_RUN[..]].concat());
    assert!(text.contains("surge bench bbos --part direct: MEASURED") && text.contains("MTBFs 300, 600 s"), "{text}");
    assert!(text.contains("| buffer only (BBOS) |") && text.contains("(BBOS+direct) |"), "{text}");
    assert!(text.contains("| less data demoted or to demote with direct-to-PFS | ≥ 0.30 |"), "{text}");
    assert!(!text.contains("first failed checkpoint"), "a checkpoint failed: {text}");
}
