//! POSIX conformance of the mount, measured with pjdfstest through
//! `scripts/conformance.sh` on the real binaries (`cargo build --workspace`
//! first; `make test` does). The whole suite takes about 9 minutes with
//! debug binaries, so this runs the directories of what the namespace's
//! inodes do (hard links, FIFOs and device nodes, times, removal), about
//! 1,200 tests in 2-5 minutes (the machine's load decides); `make
//! conformance` runs all of it.
//! Skipped, with the reason, without root, FUSE, autotools, prove or the
//! pjdfstest tarball.

use std::path::{Path, PathBuf};
use std::process::Command;

/// pjdfstest's directories this test runs.
const SUBSET: [&str; 5] = ["link", "mknod", "mkfifo", "utimensat", "unlink"];
/// What the subset must reach; its only failures are the paths longer
/// than PATH_MAX from the mount's root (docs/fuse.md).
const MIN_PERCENT: &str = "95";
/// `scripts/conformance.sh` could not run here (and said why).
const CANNOT_RUN: i32 = 77;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where `surge` and `surged` of this build are.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

#[test]
fn pjdfstest_passes_at_least_95_percent_of_its_link_node_time_and_unlink_tests_on_the_mount() {
    let test = "pjdfstest_passes_at_least_95_percent_of_its_link_node_time_and_unlink_tests_on_the_mount";
    let out = Command::new(repo().join("scripts/conformance.sh"))
        .arg("--bin")
        .arg(bin_dir())
        .args(["--min", MIN_PERCENT])
        .args(SUBSET)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.code() == Some(CANNOT_RUN) {
        surge_testkit::skip_unless_ready::<(), _>(test, Err(stderr.trim().to_string()));
        return;
    }
    assert!(out.status.success(), "{stdout}{stderr}");
    let summary = stdout.lines().find(|l| l.starts_with("conformance:")).unwrap_or_default();
    // "conformance: pjdfstest on the Surge mount: P of T tests passed (X%)"
    let counts: Vec<u64> = summary.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let [passed, planned] = counts[..] else { panic!("no counts in {summary:?}\n{stderr}") };
    assert!(planned > 1000, "the subset has over 1,000 tests, not {planned}: {summary}\n{stderr}");
    assert!(passed * 100 >= planned * 95, "{summary}\n{stderr}");
    eprintln!("{summary}");
}
