//! The staged mark follows the PFS copy, end to end with the `surge`
//! command and real daemons: a copy removed, truncated, touched or
//! rewritten outside Surge is shown as `buffer`, staged again from the
//! buffer by `surge stage-out --all`, and never read in place of the
//! buffer copy while a daemon is down.

use std::fs;
use std::time::{Duration, SystemTime};
use surge_testkit::cluster::Cluster;
use surge_testkit::pattern;

const SIZE: usize = (3 << 20) + 17;

/// `surge cp`s `pattern(seed, SIZE)` to `path`.
fn put(c: &Cluster, seed: u64, path: &str) {
    let local = c.local(&format!("local-{seed}"));
    fs::write(&local, pattern(seed, SIZE)).unwrap();
    c.ok(&["cp", local.to_str().unwrap(), &format!("/surge{path}")]);
}

/// The tier `surge ls -l` shows for `path`.
fn tier(c: &Cluster, path: &str) -> String {
    let listing = c.ok(&["ls", "-l", path]);
    ["buffer", "staged", "pfs"].into_iter().find(|t| listing.contains(t)).unwrap_or("?").to_string()
}

fn daemon_0_log(c: &Cluster) -> String {
    fs::read_to_string(c.buffer().join("daemon-0/surged.log")).unwrap()
}

#[test]
fn pfs_copies_removed_truncated_or_touched_outside_surge_show_as_buffer_and_are_staged_again_from_the_buffer() {
    let c = Cluster::start(2, &[]);
    c.ok(&["mkdir", "/d"]);
    let names = ["gone", "short", "touched", "same"];
    for (seed, name) in names.iter().enumerate() {
        put(&c, seed as u64, &format!("/d/{name}"));
    }
    assert!(c.ok(&["stage-out", "--all", "--quiet"]).contains("staged out 4 file(s)"));
    let on_pfs = |name: &str| c.pfs().join("d").join(name);
    fs::remove_file(on_pfs("gone")).unwrap();
    fs::OpenOptions::new().write(true).open(on_pfs("short")).unwrap().set_len(100).unwrap();
    let touched = fs::OpenOptions::new().write(true).open(on_pfs("touched")).unwrap();
    touched.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();

    for name in ["gone", "short", "touched"] {
        assert_eq!(tier(&c, &format!("/d/{name}")), "buffer", "{name}");
    }
    assert_eq!(tier(&c, "/d/same"), "staged");
    let log = daemon_0_log(&c);
    assert!(log.contains("/d/gone: its PFS copy is not the one staged (it was removed)"), "{log}");
    assert!(log.contains("/d/short: its PFS copy is not the one staged (its size changed"), "{log}");
    // Staged again, from the buffer: the PFS copies are whole once more.
    assert!(c.ok(&["stage-out", "--all", "--quiet"]).contains("staged out 3 file(s)"));
    for (seed, name) in names.iter().enumerate() {
        assert!(fs::read(on_pfs(name)).unwrap() == pattern(seed as u64, SIZE), "{name}");
        assert_eq!(tier(&c, &format!("/d/{name}")), "staged", "{name}");
    }
    assert!(c.ok(&["stage-out", "--all", "--quiet"]).contains("staged out 0 file(s)"));
}

#[test]
fn with_a_daemon_down_a_staged_file_reads_from_its_pfs_copy_only_while_that_copy_is_the_one_staged() {
    let c = Cluster::start(2, &[]);
    // Two stripes: daemon 1 holds half of the file.
    c.ok(&["mkdir", "/w"]);
    c.ok(&["setstripe", "-c", "2", "-S", "64K", "/w"]);
    put(&c, 7, "/w/ckpt");
    c.ok(&["stage-out", "--quiet", "/w/ckpt"]);
    let pid = c.pids()[1];
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    surge_testkit::eventually("daemon 1 is gone", Duration::from_secs(10), || {
        fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z"))
    });
    let read = c.surge_with(&["cat", "/w/ckpt"]);
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    assert!(read.stdout == pattern(7, SIZE), "the PFS copy is read while daemon 1 is down");

    // Rewritten in place outside Surge, same size: not the copy staged.
    fs::write(c.pfs().join("w/ckpt"), pattern(8, SIZE)).unwrap();
    let read = c.surge_with(&["cat", "/w/ckpt"]);
    let err = String::from_utf8_lossy(&read.stderr);
    assert!(!read.status.success() && read.stdout.is_empty(), "served {} bytes: {err}", read.stdout.len());
    assert!(err.contains("EIO") && err.contains("/w/ckpt"), "{err}");
    assert!(err.contains("no current PFS copy"), "{err}");
}

/// The stage temps in PFS directory `dir`.
fn temps_in(c: &Cluster, dir: &str) -> Vec<String> {
    fs::read_dir(c.pfs().join(dir))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.contains(".surge-stage."))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_stage_out_killed_mid_copy_leaves_no_temp_and_its_directory_can_be_removed() {
    let c = Cluster::start(2, &[]);
    c.ok(&["mkdir", "/big"]);
    let local = c.local("big");
    let size = 128 << 20;
    fs::write(&local, pattern(9, size)).unwrap();
    c.ok(&["cp", local.to_str().unwrap(), "/surge/big/ckpt"]);
    // Killed once its temp is there, before the copy is committed (a
    // stage-out that ended first is done again, with --force).
    let killed_mid_copy = (0..5).any(|_| {
        let mut stage = c.command(&["stage-out", "--force", "--quiet", "/big/ckpt"]).spawn().unwrap();
        while temps_in(&c, "big").is_empty() && stage.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mid_copy = stage.try_wait().unwrap().is_none();
        let _ = stage.kill();
        stage.wait().unwrap();
        mid_copy && !temps_in(&c, "big").is_empty()
    });
    assert!(killed_mid_copy, "no stage-out of 128 MiB was caught mid-copy");
    // The log line follows the removal.
    surge_testkit::eventually("daemon 0 removes the temp, and says so", Duration::from_secs(10), || {
        temps_in(&c, "big").is_empty() && daemon_0_log(&c).contains("abandoned by its client: the temp is removed")
    });
    c.ok(&["rm", "-r", "/big"]);
    assert!(!c.pfs().join("big").exists());
}

/// The mode and mtime of `path` (not followed).
fn mode_and_mtime(path: &std::path::Path) -> (u32, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.mode() & 0o7777, m.mtime() * 1_000_000_000 + m.mtime_nsec())
}

/// `surge cp -r` keeps modes and times both ways (as `cp -p`), and `surge
/// stage-out DIR` gives the PFS copies of the files and of the directories
/// (after their contents) the modes and times they have in Surge: a
/// private directory stays private.
#[test]
fn surge_cp_and_stage_out_keep_the_modes_and_times_of_files_and_directories() {
    use std::os::unix::fs::PermissionsExt;
    let c = Cluster::start(2, &[]);
    let tree = c.local("tree");
    fs::create_dir_all(tree.join("private")).unwrap();
    fs::write(tree.join("private/data"), pattern(1, 5000)).unwrap();
    let set = |rel: &str, mode: u32, secs: u64| {
        let p = tree.join(rel);
        let time = SystemTime::UNIX_EPOCH + Duration::new(secs, 123_456_789);
        fs::File::open(&p).unwrap().set_times(fs::FileTimes::new().set_accessed(time).set_modified(time)).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    };
    set("private/data", 0o640, 1_000_000_000);
    set("private", 0o700, 900_000_000);
    set("", 0o751, 800_000_000);
    c.ok(&["cp", "-r", tree.to_str().unwrap(), "/surge/tree"]);
    c.ok(&["stage-out", "--quiet", "/surge/tree"]);
    let back = c.local("back");
    c.ok(&["cp", "-r", "/surge/tree", back.to_str().unwrap()]);
    for rel in ["", "private", "private/data"] {
        let want = mode_and_mtime(&tree.join(rel));
        assert_eq!(mode_and_mtime(&c.pfs().join("tree").join(rel)), want, "the PFS copy of tree/{rel}");
        assert_eq!(mode_and_mtime(&back.join(rel)), want, "surge cp out of Surge: {rel}");
    }
}
