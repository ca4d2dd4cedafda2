//! `surge bench fio --peer glusterfs` end to end: a GlusterFS volume on the
//! same device is measured beside Surge, gets its column and its targets,
//! and is gone afterwards. Skips visibly without root, FUSE or
//! glusterfs-server.

use std::process::Command;
use surge_testkit::cluster::surge_bin;
use surge_testkit::skip::skip_unless_ready;

fn ready() -> Result<(), String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (glusterd, mount)".into());
    }
    if let Some(why) = surge_fuse::mountpoint::unavailable() {
        return Err(why);
    }
    match Command::new("glusterd").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("glusterd is missing (scripts/setup.sh installs glusterfs-server)".into()),
    }
}

#[test]
fn glusterfs_is_measured_as_a_peer_with_its_targets_and_removed_after() {
    let test = "glusterfs_is_measured_as_a_peer_with_its_targets_and_removed_after";
    let Some(()) = skip_unless_ready(test, ready()) else { return };
    let out = Command::new(surge_bin())
        .args(["bench", "fio", "--peer", "glusterfs", "--modes", "direct,fuse+preload", "--jobs", "1"])
        .args(["--xfer", "1M", "--size", "4M", "--runs", "1", "--md-files", "50"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("| direct | fuse | fuse+preload | preload | glusterfs |"), "{text}");
    for work in ["write", "read", "create", "stat"] {
        let row = text.lines().find(|l| l.starts_with(&format!("| {work} |"))).unwrap_or_else(|| panic!("{text}"));
        let glusterfs =
            row.split('|').nth(9).and_then(|c| c.split_whitespace().next()).and_then(|x| x.parse::<f64>().ok());
        assert!(glusterfs.is_some_and(|x| x > 0.0), "{work}: {row}");
        assert!(text.contains(&format!("| fuse+preload ≥ 10 × glusterfs | {work} |")), "{text}");
    }
    // glusterd keeps a directory per volume (and may be stopped now, if the bench started it).
    let left: Vec<String> = std::fs::read_dir("/var/lib/glusterd/vols")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(!left.iter().any(|v| v.starts_with("surge-bench-")), "a bench volume is left: {left:?}");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.lines().any(|l| l.contains("fuse.glusterfs") && l.contains("surge-bench-")), "{mounts}");
}
