//! The `surge` command keeps coreutils' and Lustre `lfs`'s conventions
//! (docs/core.md, "The command line"): results on stdout, diagnostics and
//! progress on stderr; `-h` for human-readable sizes; one path rule; `lfs`'s
//! stripe flags over several paths; no mount that silently hides files.
//! Each test drives the real binary against a cluster `surge start` brought up.

use std::fs;
use std::process::Output;
use surge_testkit::cluster::Cluster;
use surge_testkit::{pattern, skip_unless_ready};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The size column (the second field) of each `ls -l` line.
fn sizes(listing: &str) -> Vec<String> {
    listing.lines().map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_string()).collect()
}

#[test]
fn ls_and_status_print_bytes_and_with_h_sizes_as_coreutils_does() {
    let c = Cluster::start(2, &["--capacity", "64M"]);
    let f = c.local("f");
    fs::write(&f, pattern(1, 1536)).unwrap();
    c.ok(&["cp", f.to_str().unwrap(), "/surge/f"]);

    assert_eq!(sizes(&c.ok(&["ls", "-l", "/"])), ["1536"]);
    assert_eq!(sizes(&c.ok(&["ls", "-lh", "/"])), ["1.5K"]);
    assert_eq!(sizes(&c.ok(&["ls", "-l", "--human-readable", "/f"])), ["1.5K"]);
    assert!(c.ok(&["ls", "--help"]).contains("--human-readable"), "help moved to --help only");

    let status = c.ok(&["status"]);
    assert!(status.contains(&(64u64 << 20).to_string()), "capacity in bytes: {status}");
    let human = c.ok(&["status", "-h"]);
    assert!(human.contains(" 64M ") && !human.contains(&(64u64 << 20).to_string()), "{human}");
    assert!(c.ok(&["status", "--help"]).contains("--human-readable"));
}

#[test]
fn results_go_to_stdout_and_diagnostics_and_progress_to_stderr() {
    let c = Cluster::start(2, &[]);
    let big = c.local("big");
    fs::write(&big, pattern(2, 12 << 20)).unwrap();

    // A long copy: nothing on stdout, one closing line on stderr (no terminal, so no bar).
    let out = c.surge_with(&["cp", big.to_str().unwrap(), "/surge/big"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("surge: copied 1 file(s), 12.0 MiB in "), "{err}");

    // A short copy says nothing at all, as cp does.
    let small = c.local("small");
    fs::write(&small, b"x").unwrap();
    let out = c.surge_with(&["cp", small.to_str().unwrap(), "/surge/small"]);
    assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(), "{}", stderr(&out));

    // A listing that partly fails: what could be listed on stdout, the failure on stderr.
    let out = c.surge_with(&["ls", "/big", "/missing"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "/big\n");
    assert!(stderr(&out).contains("/missing: "), "{}", stderr(&out));

    // cat's bytes are the file's, nothing else.
    assert_eq!(c.surge_with(&["cat", "/surge/small"]).stdout, b"x");
}

#[test]
fn a_recursive_copy_reports_its_files_and_bytes_once() {
    let c = Cluster::start(2, &[]);
    let tree = c.local("tree");
    fs::create_dir_all(tree.join("sub")).unwrap();
    fs::write(tree.join("a"), pattern(3, 5 << 20)).unwrap();
    fs::write(tree.join("sub/b"), pattern(4, 5 << 20)).unwrap();
    let out = c.surge_with(&["cp", "-r", tree.to_str().unwrap(), "/surge/"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).starts_with("surge: copied 2 file(s), 10.0 MiB in "), "{}", stderr(&out));
    assert_eq!(c.surge_with(&["cat", "/tree/sub/b"]).stdout, pattern(4, 5 << 20));
}

#[test]
fn cp_reads_an_absolute_path_by_where_it_exists_and_refuses_an_ambiguous_one() {
    let c = Cluster::start(2, &[]);
    c.ok(&["mkdir", "/ckpt"]);
    let x = c.local("x");
    fs::write(&x, pattern(5, 1000)).unwrap();

    // /ckpt exists only in Surge: it is the Surge directory (as for every other command).
    c.ok(&["cp", x.to_str().unwrap(), "/ckpt/"]);
    assert_eq!(c.surge_with(&["cat", "/ckpt/x"]).stdout, pattern(5, 1000));
    // A new destination is placed by its directory: /ckpt is Surge's, the local one is local.
    c.ok(&["cp", x.to_str().unwrap(), "/ckpt/y"]);
    let back = c.local("back");
    c.ok(&["cp", "/ckpt/y", back.to_str().unwrap()]);
    assert_eq!(fs::read(&back).unwrap(), pattern(5, 1000));

    let nowhere = c.fails(&["cp", "/no/such/place", back.to_str().unwrap()]);
    assert!(
        nowhere.contains("/no/such/place is ambiguous")
            && nowhere.contains("neither on this machine nor in Surge")
            && nowhere.contains("/surge/no/such/place"),
        "{nowhere}"
    );
    // The same absolute path in both places: the mount prefix (or a relative path) says which.
    c.ok(&["mkdir", "-p", x.parent().unwrap().to_str().unwrap()]);
    c.ok(&["cp", x.to_str().unwrap(), &format!("/surge{}", x.display())]);
    let both = c.fails(&["cp", x.to_str().unwrap(), "/ckpt/z"]);
    assert!(both.contains("exists both on this machine and in Surge"), "{both}");

    // Commands that only take Surge paths want them absolute.
    assert!(c.fails(&["ls", "ckpt"]).contains("write it as /surge/ckpt or /ckpt"));
}

#[test]
fn setstripe_and_getstripe_take_lfs_flags_and_several_paths() {
    let c = Cluster::start(3, &[]);
    c.ok(&["mkdir", "/a", "/b"]);
    c.ok(&["setstripe", "--stripe-count", "2", "--stripe-size", "128K", "--stripe-index", "1", "/a", "/surge/b"]);
    assert_eq!(c.ok(&["getstripe", "-c", "/a"]), "2\n");
    assert_eq!(c.ok(&["getstripe", "-S", "/b"]), "131072\n");
    assert_eq!(c.ok(&["getstripe", "-c", "-S", "-i", "/a", "/b"]), "/a: 2 131072 1\n/b: 2 131072 1\n");

    // A new file takes the directory's layout.
    c.ok(&["setstripe", "-c", "-1", "/a/wide"]);
    assert_eq!(c.ok(&["getstripe", "--stripe-count", "/a/wide"]), "3\n");

    // No layout flag: an error naming them, and nothing changed.
    let none = c.fails(&["setstripe", "/a"]);
    for flag in ["-c/--stripe-count", "-S/--stripe-size", "-i/--stripe-index", "-d/--delete"] {
        assert!(none.contains(flag), "{flag} missing from: {none}");
    }
    assert_eq!(c.ok(&["getstripe", "-c", "/a"]), "2\n");

    // -d deletes a directory's default layout; a path that fails is named and the rest are done.
    let out = c.surge_with(&["setstripe", "-d", "/a", "/a/wide", "/b"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/a/wide: a file has no default layout"), "{}", stderr(&out));
    assert_eq!(c.ok(&["getstripe", "-c", "-S", "/a", "/b"]), "/a: 0 0\n/b: 0 0\n");
    assert!(c.fails(&["setstripe", "-d", "-c", "2", "/a"]).contains("cannot be used with"));
}

/// FUSE here, or why not.
fn fuse_ready() -> Result<(), String> {
    match surge_fuse::mountpoint::unavailable() {
        None => Ok(()),
        Some(why) => Err(why),
    }
}

#[test]
fn a_mount_over_a_directory_with_files_is_refused_unless_forced() {
    let test = "a_mount_over_a_directory_with_files_is_refused_unless_forced";
    let Some(()) = skip_unless_ready(test, fuse_ready()) else { return };
    let c = Cluster::start(2, &[]);
    let dir = c.local("results");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("precious"), b"mine").unwrap();
    let dir_arg = dir.to_str().unwrap();

    let refused = c.fails(&["mount", dir_arg]);
    assert!(refused.contains("holds files") && refused.contains("--force"), "{refused}");
    let run = c.fails(&["run", "--mount", dir_arg, "--no-stage-out", "--", "true"]);
    assert!(run.contains("holds files") && run.contains("--force-mount"), "{run}");
    assert_eq!(fs::read(dir.join("precious")).unwrap(), b"mine");

    let out = c.surge_with(&["mount", "--force", dir_arg]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("hidden until `surge umount"), "said, not silent: {}", stderr(&out));
    assert!(!dir.join("precious").exists(), "the mount serves Surge there");
    c.ok(&["umount", dir_arg]);
    assert_eq!(fs::read(dir.join("precious")).unwrap(), b"mine", "back after the unmount");
}
