//! `surge bench bbos` end to end: the simulated policy comparison prints
//! its figures, says they are simulated, and gives every target a verdict.

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
