//! `surge bench bbos` end to end: the simulated policy comparison prints
//! its figures, says they are simulated, and gives every target a verdict;
//! the measured parts run through real daemons.

use std::process::Command;
use surge_testkit::cluster::surge_bin;

/// A small measured run of `--part PART` (2 apps, 2 MiB checkpoints into 24 MiB, one period of
/// `period` s) in a temporary directory; its stdout, asserting success.
fn small_measured_run(part: &str, period: &str) -> String {
    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new(surge_bin())
        .args(["bench", "bbos", "--part", part, "--runs", "1", "--period-secs", period, "--measured-periods", "1"])
        .args(["--apps", "2", "--capacity-mib", "24", "--checkpoint-mib", "2", "--scratch"])
        .arg(scratch.path())
        .args(["--buffer-dir"])
        .arg(scratch.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

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

#[test]
fn the_measured_bbos_benchmark_runs_every_policy_through_the_daemons_with_no_failed_checkpoint() {
    let text = small_measured_run("measured", "3");
    assert!(text.contains("MEASURED through the daemons"), "{text}");
    for policy in ["| Dedicated |", "| MaxEff |", "| MaxBW |", "| BBOS |"] {
        assert_eq!(text.matches(policy).count(), 2, "{policy} at low and high congestion: {text}");
    }
    assert!(!text.contains("first failure"), "a checkpoint failed: {text}");
    let demoted: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("| Low | BBOS") || l.starts_with("| High | BBOS"))
        .filter_map(|l| l.split('|').nth(8)?.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(demoted.len() == 2 && demoted.iter().all(|&mib| mib > 0.0), "BBOS demoted nothing: {text}");
    assert!(text.contains("BBOS checkpoints failing") && text.contains("| met |"), "{text}");
}

#[test]
fn the_direct_part_compares_bbos_with_and_without_direct_placement_and_gives_a_verdict() {
    let text = small_measured_run("direct", "4");
    assert!(text.contains("surge bench bbos --part direct: MEASURED") && text.contains("MTBFs 300, 600 s"), "{text}");
    assert!(text.contains("| buffer only (BBOS) |") && text.contains("(BBOS+direct) |"), "{text}");
    assert!(text.contains("| less data demoted or to demote with direct-to-PFS | ≥ 0.30 |"), "{text}");
    assert!(!text.contains("first failed checkpoint"), "a checkpoint failed: {text}");
}
