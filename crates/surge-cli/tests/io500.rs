//! `surge bench io500 --check` end to end: IOR and mdtest (built from the
//! release archive beside the repository, or reused) run every IO500 phase
//! on Surge through FUSE with the interposer, through the interposer alone,
//! and on tmpfs; every phase gives a positive figure in every mode, and
//! IOR's read- and write-checks and mdtest's verification pass on Surge
//! (the bench fails otherwise, with the failing command and its output).
//! Skips visibly without FUSE, Open MPI, autotools or the archive.

use std::path::PathBuf;
use std::process::Command;
use surge_testkit::cluster::surge_bin;
use surge_testkit::skip::skip_unless_ready;

/// ../shared/third_party/ior-4.0.0.tar.gz beside the repository.
fn ior_tarball() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/third_party/ior-4.0.0.tar.gz")
}

/// What building and running IOR needs here, or what is missing.
fn ready() -> Result<(), String> {
    if let Some(why) = surge_fuse::mountpoint::unavailable() {
        return Err(why);
    }
    for tool in ["mpirun", "mpicc", "autoreconf", "make"] {
        let found = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
        if !found {
            return Err(format!("{tool} is missing (scripts/setup.sh installs it)"));
        }
    }
    let tarball = ior_tarball();
    if !tarball.is_file() {
        return Err(format!("IOR's archive {} is missing", tarball.display()));
    }
    Ok(())
}

#[test]
fn every_io500_phase_runs_verified_on_surge_in_both_modes_and_on_tmpfs() {
    let test = "every_io500_phase_runs_verified_on_surge_in_both_modes_and_on_tmpfs";
    let Some(()) = skip_unless_ready(test, ready()) else { return };
    let out = Command::new(surge_bin())
        .args(["bench", "io500", "--check", "--ior-tarball"])
        .arg(ior_tarball())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let phases = [
        "ior-easy-write",
        "mdtest-easy-write",
        "ior-hard-write",
        "mdtest-hard-write",
        "find",
        "ior-easy-read",
        "mdtest-easy-stat",
        "ior-hard-read",
        "mdtest-hard-stat",
        "mdtest-easy-delete",
        "mdtest-hard-read",
        "mdtest-hard-delete",
        "score",
    ];
    for phase in phases {
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| {phase} |")))
            .unwrap_or_else(|| panic!("no {phase} row: {text}"));
        // | phase | unit | fuse+preload | preload | tmpfs | ratio | ratio |
        let figures: Vec<f64> = row
            .split('|')
            .skip(3)
            .take(3)
            .map(|cell| cell.split_whitespace().next().and_then(|x| x.parse().ok()).unwrap_or(0.0))
            .collect();
        assert!(figures.len() == 3 && figures.iter().all(|&x| x > 0.0), "{phase}: {row}");
    }
    assert!(text.contains("data verification found no errors"), "{text}");
}
