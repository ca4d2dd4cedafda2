//! `surge mount` / `surge umount` as a user meets them, with the real
//! binaries (`cargo build --workspace` first; `make test` does): a killed
//! server leaves an error, not a hang, and the next mount repairs it; bad
//! mount points are refused with the reason. Skipped, with the reason,
//! where FUSE mounts cannot be made.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let p = dir.join(name);
    assert!(p.exists(), "{} is missing: run `cargo build --workspace` (make test does)", p.display());
    p
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `Some` where FUSE can be used; otherwise the skip shows (see surge_testkit::skip).
fn fuse_ready(test: &str) -> Option<()> {
    let ready = surge_fuse::mountpoint::unavailable().map_or(Ok(()), |why| Err(format!("FUSE is unavailable ({why})")));
    surge_testkit::skip_unless_ready(test, ready)
}

struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    /// `None` (the skip shown) where FUSE cannot be used.
    fn start(test: &str) -> Option<Cluster> {
        fuse_ready(test)?;
        let c = Cluster { dir: tempfile::tempdir().unwrap() };
        let out = c.surge(&["start", "--daemons", "2", "--buffer"], &[c.path("bb"), "--pfs".into(), c.path("pfs")]);
        assert!(out.status.success(), "{}", text(&out));
        Some(c)
    }

    fn path(&self, rel: &str) -> String {
        self.dir.path().join(rel).display().to_string()
    }

    fn surge(&self, args: &[&str], more: &[String]) -> Output {
        Command::new(bin("surge"))
            .args(args)
            .args(more)
            .env("SURGE_CLUSTER", self.path("cluster.toml"))
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in ["mnt", "full"] {
            let _ = surge_fuse::mountpoint::unmount(&self.dir.path().join(m));
        }
        let _ = self.surge(&["stop"], &[]);
    }
}

fn server_pid(mountpoint: &str) -> u32 {
    match surge_fuse::mountpoint::state(Path::new(mountpoint)).unwrap() {
        surge_fuse::mountpoint::State::Live { pid, .. } => pid,
        other => panic!("{mountpoint} is not a live Surge mount: {other:?}"),
    }
}

#[test]
fn a_killed_server_gives_an_error_and_the_next_mount_repairs_it() {
    let Some(c) = Cluster::start("a_killed_server_gives_an_error_and_the_next_mount_repairs_it") else { return };
    let mnt = c.path("mnt");
    let out = c.surge(&["mount"], std::slice::from_ref(&mnt));
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(format!("{mnt}/kept"), b"bytes before the crash").unwrap();
    let pid = server_pid(&mnt);
    // SAFETY: killing the mount server this test started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while surge_fuse::mountpoint::state(Path::new(&mnt)).unwrap() != surge_fuse::mountpoint::State::Stale {
        assert!(Instant::now() < deadline, "the mount never became stale");
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = std::fs::read(format!("{mnt}/kept")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "a dead server is an error the program sees: {err}");

    let again = c.surge(&["mount"], std::slice::from_ref(&mnt));
    assert!(again.status.success(), "{}", text(&again));
    assert!(text(&again).contains("removed the stale"), "{}", text(&again));
    assert_eq!(std::fs::read(format!("{mnt}/kept")).unwrap(), b"bytes before the crash");

    let off = c.surge(&["umount"], std::slice::from_ref(&mnt));
    assert!(off.status.success(), "{}", text(&off));
    assert_eq!(surge_fuse::mountpoint::state(Path::new(&mnt)).unwrap(), surge_fuse::mountpoint::State::Unmounted);
    let nothing = c.surge(&["umount"], std::slice::from_ref(&mnt));
    assert!(!nothing.status.success() && text(&nothing).contains("nothing is mounted"), "{}", text(&nothing));
}

#[test]
fn mount_points_that_would_hide_files_or_are_taken_are_refused() {
    let Some(c) = Cluster::start("mount_points_that_would_hide_files_or_are_taken_are_refused") else { return };
    let full = c.path("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(format!("{full}/precious"), b"x").unwrap();
    let out = c.surge(&["mount"], std::slice::from_ref(&full));
    assert!(!out.status.success());
    assert!(text(&out).contains("holds files"), "{}", text(&out));
    assert_eq!(std::fs::read(format!("{full}/precious")).unwrap(), b"x");

    let mnt = c.path("mnt");
    assert!(c.surge(&["mount"], std::slice::from_ref(&mnt)).status.success());
    let twice = c.surge(&["mount"], std::slice::from_ref(&mnt));
    assert!(!twice.status.success());
    assert!(text(&twice).contains("already a Surge mount"), "{}", text(&twice));
    let not_surge = c.surge(&["umount"], &["/proc".into()]);
    assert!(!not_surge.status.success() && text(&not_surge).contains("not Surge's"), "{}", text(&not_surge));
}

#[test]
fn a_mount_log_name_planted_as_a_symlink_is_refused_and_its_target_never_made() {
    let test = "a_mount_log_name_planted_as_a_symlink_is_refused_and_its_target_never_made";
    let Some(c) = Cluster::start(test) else { return };
    // Another user's link where root's mount writes its log.
    let victim = c.path("etc-cron-entry");
    std::os::unix::fs::symlink(&victim, c.path("mount.log")).unwrap();
    let mnt = c.path("mnt");
    let out = c.surge(&["mount"], std::slice::from_ref(&mnt));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    assert!(!Path::new(&victim).exists(), "the mount created the file the link points to");
    std::fs::remove_file(c.path("mount.log")).unwrap();
    assert!(c.surge(&["mount"], std::slice::from_ref(&mnt)).status.success());
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(c.path("mount.log")).unwrap().mode() & 0o777, 0o600);
}

#[test]
fn with_a_data_daemon_down_the_writes_and_stats_that_need_it_fail_with_eio() {
    let test = "with_a_data_daemon_down_the_writes_and_stats_that_need_it_fail_with_eio";
    let Some(c) = Cluster::start(test) else { return };
    let mnt = c.path("mnt");
    assert!(c.surge(&["mount"], std::slice::from_ref(&mnt)).status.success());
    let cluster = surge_client::ClusterFile::load(Path::new(&c.path("cluster.toml"))).unwrap();
    let data_daemon = cluster.daemons.iter().find(|d| d.index == 1).unwrap().pid;
    // SAFETY: killing a daemon this test started.
    unsafe { libc::kill(data_daemon as i32, libc::SIGKILL) };
    for k in 0..4 {
        let path = format!("{mnt}/made-{k}");
        // A new file is empty: its create asks daemon 0 alone. The open's
        // own getattr, when too late for the create's attributes, asks
        // the stripes and fails.
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut file) => {
                // New files stripe over both daemons (1 MiB units): the
                // bytes bound for the one down fail the write, never silently.
                let written = file.write_all(&[7u8; 4 << 20]).and_then(|()| file.sync_all());
                let err = written.expect_err("a write with a stripe's daemon down");
                assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
            }
            Err(err) => assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}"),
        }
        let err = std::fs::metadata(&path).expect_err("a stat with a stripe's daemon down");
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    }
}

#[test]
fn writes_through_the_mount_are_booked_to_each_writers_own_job() {
    let test = "writes_through_the_mount_are_booked_to_each_writers_own_job";
    let Some(c) = Cluster::start(test) else { return };
    let mnt = c.path("mnt");
    assert!(c.surge(&["mount"], std::slice::from_ref(&mnt)).status.success());
    for job in ["31337", "42424"] {
        let out = Command::new("sh")
            .args(["-c", &format!("head -c 3000000 /dev/zero > {mnt}/by-{job}")])
            .env("SURGE_JOB_ID", job)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
    }
    let status = text(&c.surge(&["status"], &[]));
    for job in ["31337", "42424"] {
        assert!(status.contains(&format!("job {job} ")), "job {job} is not booked:\n{status}");
    }
}

#[test]
fn a_mount_without_a_running_cluster_fails_with_the_reason() {
    if fuse_ready("a_mount_without_a_running_cluster_fails_with_the_reason").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("surge"))
        .args(["mount"])
        .arg(dir.path().join("mnt"))
        .env("SURGE_CLUSTER", dir.path().join("none.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("surge start"), "{}", text(&out));
    assert_eq!(
        surge_fuse::mountpoint::state(&dir.path().join("mnt")).unwrap(),
        surge_fuse::mountpoint::State::Unmounted
    );
}
