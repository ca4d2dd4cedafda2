//! The registry of drain policies (`surge_bbos::policy::DrainPolicyKind`)
//! reaches every command that takes one: each registered policy is
//! described in `surged --help`, `surge start --help` and `surge run --help`,
//! and `surge start --drain NAME` runs daemons whose data manager reports
//! that policy. A policy added to the registry is tested here with no edit.

use clap::ValueEnum;
use std::process::Command;
use surge_bbos::policy::DrainPolicyKind;
use surge_testkit::cluster::{surge_bin, Cluster};

/// `text` with every run of white space made one space (clap may wrap help lines).
fn squeezed(text: &[u8]) -> String {
    String::from_utf8_lossy(text).split_whitespace().collect::<Vec<_>>().join(" ")
}

fn long_help(program: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(program).args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "{} {args:?} --help: {}", program.display(), String::from_utf8_lossy(&out.stderr));
    squeezed(&out.stdout)
}

#[test]
fn every_registered_drain_policy_is_described_in_the_help_of_surged_surge_start_and_surge_run() {
    let surge = surge_bin();
    let surged = surge.with_file_name("surged");
    let helps = [
        ("surged --help", long_help(&surged, &[])),
        ("surge start --help", long_help(&surge, &["start"])),
        ("surge run --help", long_help(&surge, &["run"])),
    ];
    for policy in DrainPolicyKind::value_variants() {
        let value = policy.to_possible_value().expect("every policy has a name");
        let about = value.get_help().map(|h| h.to_string()).unwrap_or_default();
        assert!(!about.is_empty(), "{policy} has no description: give its variant a doc comment");
        let line = format!("- {}: {}", policy.name(), squeezed(about.as_bytes()));
        for (which, help) in &helps {
            assert!(help.contains(&line), "{which} does not describe {policy} as {line:?}:\n{help}");
        }
    }
}

#[test]
fn every_registered_drain_policy_is_selectable_by_name_on_surge_start_and_reported_by_the_daemons() {
    for policy in DrainPolicyKind::value_variants() {
        let name = policy.name();
        // Given rates: no calibration at start, which the policy does not change.
        let drain: &[&str] = match policy {
            DrainPolicyKind::Off => &["--drain", "off"],
            _ => &["--drain", &name, "--drain-rates", "40,30,16,1"],
        };
        let c = Cluster::start(1, drain);
        let json: serde_json::Value = serde_json::from_str(&c.ok(&["drain", "status", "--json"])).unwrap();
        assert_eq!(json["policy"].as_str(), Some(name.as_str()), "surge start --drain {name}: {json}");
    }
}
