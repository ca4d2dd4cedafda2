//! An installed Surge works on its own: scripts/install.sh (what `make
//! install` runs) puts the parts under a prefix, and the installed `surge`
//! finds `surged` and the interposer there, away from the build tree; the
//! client library links through pkg-config.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use surge_testkit::cluster::surge_bin;
use surge_testkit::skip_unless_ready;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Installs the parts cargo built for this test (libsurge_mpiio needs MPI: left out) under `prefix`.
fn install(prefix: &Path) {
    let built = surge_bin().parent().unwrap().to_path_buf();
    let out = Command::new(repo().join("scripts/install.sh"))
        .arg("--from")
        .arg(&built)
        .arg("--no-mpiio")
        .arg(prefix)
        .env_remove("DESTDIR")
        .output()
        .unwrap();
    assert!(out.status.success(), "install.sh failed: {}", text(&out));
}

/// The installed `surge`, run from `cwd` with nothing pointing back at the build tree.
fn installed_surge(prefix: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new(prefix.join("bin/surge"))
        .args(args)
        .current_dir(cwd)
        .env("PATH", "/usr/bin:/bin")
        .env("SURGE_CLUSTER", cwd.join("no-cluster.toml"))
        .env("SURGE_TIMEOUT", "5")
        .env_remove("SURGE_PRELOAD")
        .env_remove("SURGE_PREFIX")
        .env_remove("SURGE_MOUNT")
        .output()
        .unwrap()
}

#[test]
fn an_installed_surge_runs_a_job_with_its_own_daemon_and_interposer_away_from_the_build_tree() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    install(&prefix);
    for part in ["bin/surge", "bin/surged", "lib/libsurge_preload.so", "lib/libsurge_preload_handler.so"] {
        assert!(prefix.join(part).is_file(), "{part} not installed");
    }
    for part in ["lib/libsurge_client.so", "lib/libsurge_client.a", "include/surge.h", "lib/pkgconfig/surge.pc"] {
        assert!(prefix.join(part).is_file(), "{part} not installed");
    }
    let work = dir.path().join("work");
    fs::create_dir_all(&work).unwrap();
    let (pfs, buffer) = (dir.path().join("pfs"), dir.path().join("buffer"));
    let out = installed_surge(
        &prefix,
        &work,
        &[
            "run",
            "--no-fuse",
            "--pfs",
            pfs.to_str().unwrap(),
            "--buffer",
            buffer.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo hi > /surge/x",
        ],
    );
    assert!(out.status.success(), "surge run failed: {}", text(&out));
    assert_eq!(fs::read(pfs.join("x")).unwrap(), b"hi\n", "the job's file staged out: {}", text(&out));
}

#[test]
fn a_part_missing_from_an_install_is_named_with_every_place_looked_in_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    install(&prefix);
    fs::remove_file(prefix.join("bin/surged")).unwrap();
    fs::remove_file(prefix.join("lib/libsurge_preload.so")).unwrap();
    let buffer = dir.path().join("buffer");
    let start = installed_surge(&prefix, dir.path(), &["start", "--buffer", buffer.to_str().unwrap()]);
    let err = text(&start);
    assert!(!start.status.success());
    assert!(err.contains(&prefix.join("bin/surged").display().to_string()), "{err}");
    assert!(err.contains("make install") && err.contains("SURGE_PREFIX"), "{err}");

    let run = installed_surge(&prefix, dir.path(), &["run", "--no-fuse", "--", "true"]);
    let err = text(&run);
    assert!(!run.status.success());
    for place in ["bin/libsurge_preload.so", "lib/libsurge_preload.so"] {
        assert!(err.contains(&prefix.join(place).display().to_string()), "{place} not named: {err}");
    }

    // SURGE_PREFIX names another install to take the missing parts from.
    let other = dir.path().join("other");
    install(&other);
    let found = Command::new(prefix.join("bin/surge"))
        .args(["--cluster", dir.path().join("c.toml").to_str().unwrap(), "start", "--daemons", "1"])
        .args(["--buffer", buffer.to_str().unwrap(), "--pfs", dir.path().join("pfs").to_str().unwrap()])
        .env("SURGE_PREFIX", &other)
        .output()
        .unwrap();
    assert!(found.status.success(), "{}", text(&found));
    let stop = Command::new(prefix.join("bin/surge"))
        .args(["--cluster", dir.path().join("c.toml").to_str().unwrap(), "stop"])
        .output()
        .unwrap();
    assert!(stop.status.success(), "{}", text(&stop));
}

/// A C compiler and pkg-config, or why not.
fn c_toolchain() -> Result<(), String> {
    for tool in ["cc", "pkg-config"] {
        let found =
            Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().map_err(|e| e.to_string())?;
        if !found.status.success() {
            return Err(format!("{tool} is not installed (scripts/setup.sh installs it)"));
        }
    }
    Ok(())
}

#[test]
fn a_c_program_builds_against_the_installed_client_library_through_pkg_config() {
    let test = "a_c_program_builds_against_the_installed_client_library_through_pkg_config";
    let Some(()) = skip_unless_ready(test, c_toolchain()) else { return };
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    install(&prefix);
    let pkg_config_path = prefix.join("lib/pkgconfig");
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "surge"])
        .env("PKG_CONFIG_PATH", &pkg_config_path)
        .output()
        .unwrap();
    assert!(flags.status.success(), "{}", text(&flags));
    let flags = String::from_utf8(flags.stdout).unwrap();

    let source = dir.path().join("hello.c");
    fs::write(
        &source,
        "#include <surge.h>\n#include <stdio.h>\n\
         int main(void) {\n\
             if (surge_open(\"/x\", 0, 0) >= 0) return 1;\n\
             printf(\"refused: %s\\n\", surge_last_error());\n\
             return 0;\n\
         }\n",
    )
    .unwrap();
    let program = dir.path().join("hello");
    let cc = Command::new("sh")
        .arg("-c")
        .arg(format!("cc {} -o {} {flags}", source.display(), program.display()))
        .output()
        .unwrap();
    assert!(cc.status.success(), "cc with `pkg-config --cflags --libs surge` ({flags}) failed: {}", text(&cc));

    // It runs against the installed library: with no cluster, the library's own error.
    let run = Command::new(&program)
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .env("SURGE_CLUSTER", dir.path().join("no-cluster.toml"))
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run));
    assert!(String::from_utf8_lossy(&run.stdout).contains("no-cluster.toml"), "{}", text(&run));
}
