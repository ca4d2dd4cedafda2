//! Fault injection against a running cluster, from outside, as damage,
//! a careless administrator or a node reboot would do it: an object file
//! extended, cut, removed or its checksum record reset or removed; a
//! daemon's whole directory wiped. Whatever the fault, nothing that was not
//! written is served (`surge cat`, and the daemons' `Read` every mode goes
//! through), scrubbed clean, or staged out as verified.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use surge_testkit::cluster::Cluster;
use surge_testkit::{flip_byte, pattern};

const MIB: usize = 1 << 20;

/// The object files (not their `.sum` sidecars) in daemon `index`'s store.
fn objects_of_daemon(c: &Cluster, index: u32) -> Vec<PathBuf> {
    let root = c.buffer().join(format!("daemon-{index}")).join("objects");
    let shards = fs::read_dir(root).unwrap().flatten().filter(|e| e.path().is_dir());
    let files = shards.flat_map(|shard| fs::read_dir(shard.path()).unwrap().flatten());
    files.map(|f| f.path()).filter(|p| p.extension().is_none()).collect()
}

fn sidecar(object: &Path) -> PathBuf {
    PathBuf::from(format!("{}.sum", object.display()))
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z"))
}

fn kill_and_reap(pid: u32) {
    // SAFETY: kill(2) of a daemon this test's cluster started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    while alive(pid) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A 3-stripe file of `len` bytes at `path` (1 MiB stripes over the 3 daemons).
fn put(c: &Cluster, path: &str, seed: u64, len: usize) -> Vec<u8> {
    let local = c.local(&format!("src-{seed}"));
    let data = pattern(seed, len);
    fs::write(&local, &data).unwrap();
    c.ok(&["cp", local.to_str().unwrap(), &format!("/surge{path}")]);
    data
}

/// `surge cat`, `scrub` and `stage-out` of `path` all fail, naming it and
/// saying `why`; no copy reaches the PFS.
fn refused_everywhere(c: &Cluster, path: &str, why: &str) {
    let err = c.fails(&["cat", path]);
    assert!(err.contains(path) && err.contains(why), "cat {path}: {err}");
    let out = c.surge_with(&["scrub", path]);
    assert_eq!(out.status.code(), Some(1), "scrub {path}: {}", String::from_utf8_lossy(&out.stdout));
    let err = c.fails(&["stage-out", "--quiet", path]);
    assert!(err.contains(path), "stage-out {path}: {err}");
    assert!(!c.pfs().join(&path[1..]).exists(), "{path} was staged out");
}

#[test]
fn an_object_changed_behind_its_daemon_is_never_served_scrubbed_clean_or_staged() {
    let c = Cluster::start(3, &[]);
    type Fault = fn(&Path);
    let faults: [(&str, Fault, &str); 6] = [
        (
            "extended",
            |o| fs::OpenOptions::new().append(true).open(o).unwrap().write_all(&[0x5a; 72_000]).unwrap(),
            "extended outside Surge",
        ),
        (
            "extended-zeros",
            |o| {
                let f = fs::OpenOptions::new().write(true).open(o).unwrap();
                f.set_len(f.metadata().unwrap().len() + 4096).unwrap();
            },
            "extended outside Surge",
        ),
        (
            "truncated",
            |o| fs::OpenOptions::new().write(true).open(o).unwrap().set_len(0).unwrap(),
            "truncated outside Surge",
        ),
        (
            "cut",
            |o| fs::OpenOptions::new().write(true).open(o).unwrap().set_len(123_457).unwrap(),
            "truncated outside Surge",
        ),
        (
            "no-sidecar",
            |o| {
                fs::remove_file(sidecar(o)).unwrap();
                flip_byte(o, 10);
            },
            "checksum record",
        ),
        (
            "zeroed-sidecar",
            |o| {
                let len = fs::metadata(sidecar(o)).unwrap().len() as usize;
                fs::write(sidecar(o), vec![0u8; len]).unwrap();
                flip_byte(o, 10);
            },
            "checksum record",
        ),
    ];
    for (name, fault, why) in faults {
        let path = format!("/{name}");
        let before = objects_of_daemon(&c, 1);
        let data = put(&c, &path, 7, 3 * MIB + 5000);
        let object = objects_of_daemon(&c, 1).into_iter().find(|o| !before.contains(o)).expect("daemon 1's object");
        assert_eq!(c.surge_with(&["cat", &path]).stdout, data);
        fault(&object);
        // While daemon 1 has the object open (a sidecar removed then is still open: the flipped byte fails its check)...
        refused_everywhere(&c, &path, "(EIO)");
        // ... and after a restart, which examines the object afresh.
        kill_and_reap(c.pids()[1]);
        c.ok(&["start", "--daemon", "1"]);
        refused_everywhere(&c, &path, why);
        // Replacing the file's contents (cp over it opens it with O_TRUNC) heals it.
        let fresh = put(&c, &path, 8, 2 * MIB);
        assert_eq!(c.surge_with(&["cat", &path]).stdout, fresh, "{name}: rewritten");
    }
    // Daemons restarted on the damaged stores keep refusing; untouched files stay readable.
    let good = put(&c, "/good", 9, 3 * MIB);
    let damaged = objects_of_daemon(&c, 1);
    let data = put(&c, "/later", 10, 3 * MIB);
    let object = objects_of_daemon(&c, 1).into_iter().find(|o| !damaged.contains(o)).unwrap();
    fs::OpenOptions::new().append(true).open(&object).unwrap().write_all(b"stray").unwrap();
    let pids = c.pids();
    kill_and_reap(pids[1]);
    c.ok(&["start", "--daemon", "1"]);
    refused_everywhere(&c, "/later", "extended outside Surge");
    assert_eq!(c.surge_with(&["cat", "/good"]).stdout, good);
    assert_ne!(c.surge_with(&["cat", "/later"]).stdout, data);
}

#[test]
fn an_object_removed_while_its_daemon_was_down_is_refused_at_restart_then_accepted_as_lost() {
    let c = Cluster::start(3, &[]);
    let before = objects_of_daemon(&c, 1);
    put(&c, "/victim", 1, 3 * MIB);
    let object = objects_of_daemon(&c, 1).into_iter().find(|o| !before.contains(o)).unwrap();
    let other = put(&c, "/other", 2, 3 * MIB);
    kill_and_reap(c.pids()[1]);
    fs::remove_file(&object).unwrap();

    let err = c.fails(&["start", "--daemon", "1"]);
    assert!(err.contains("daemon 1 lost 1 object(s)") && err.contains("--accept-loss"), "{err}");
    let out = c.ok(&["start", "--daemon", "1", "--accept-loss"]);
    assert!(out.contains("marked lost"), "{out}");
    let listing = c.ok(&["ls", "-l", "/"]);
    assert!(listing.lines().any(|l| l.contains("victim") && l.contains("lost")), "{listing}");
    assert!(c.ok(&["status"]).contains("files lost with a daemon's store: 1"));
    let err = c.fails(&["cat", "/victim"]);
    assert!(err.contains("/victim") && err.contains("lost on daemon 1"), "{err}");
    let err = c.fails(&["stage-out", "--all", "--quiet"]);
    assert!(err.contains("/victim"), "{err}");
    assert!(!c.pfs().join("victim").exists());
    assert_eq!(c.surge_with(&["cat", "/other"]).stdout, other);
    // The loss stays accepted: a plain restart comes back.
    kill_and_reap(c.pids()[1]);
    c.ok(&["start", "--daemon", "1"]);
    assert!(c.fails(&["cat", "/victim"]).contains("lost on daemon 1"));
    // Rewriting it, or removing it, ends the loss.
    let fresh = put(&c, "/victim", 3, MIB + 17);
    assert_eq!(c.surge_with(&["cat", "/victim"]).stdout, fresh);
    c.ok(&["rm", "/victim"]);
    // The count is taken at most once a second.
    std::thread::sleep(Duration::from_millis(1100));
    assert!(!c.ok(&["status"]).contains("files lost"));
}

#[test]
fn a_wiped_daemon_directory_is_refused_then_comes_back_empty_with_its_files_marked_lost() {
    let c = Cluster::start(3, &[]);
    c.ok(&["mkdir", "/far"]);
    c.ok(&["setstripe", "-c", "1", "-i", "2", "/far"]);
    put(&c, "/wide", 1, 3 * MIB + 123_457);
    let far = put(&c, "/far/f", 2, 2 * MIB);
    kill_and_reap(c.pids()[1]);
    // What a node reboot does to a tmpfs buffer.
    fs::remove_dir_all(c.buffer().join("daemon-1")).unwrap();

    let err = c.fails(&["start", "--daemon", "1"]);
    assert!(err.contains("daemon 1 lost its store") && err.contains("--accept-loss"), "{err}");
    c.ok(&["start", "--daemon", "1", "--accept-loss"]);
    assert!(c.fails(&["cat", "/wide"]).contains("lost on daemon 1"));
    assert!(c.ok(&["ls", "-l", "/wide"]).contains("lost"));
    assert_eq!(c.surge_with(&["cat", "/far/f"]).stdout, far, "a file with no stripe there is whole");
    let err = c.fails(&["stage-out", "--all", "--quiet"]);
    assert!(err.contains("/wide"), "{err}");
    assert!(!c.pfs().join("wide").exists() && c.pfs().join("far/f").exists());
    // New files use daemon 1 again.
    let new = put(&c, "/new", 3, 3 * MIB);
    assert_eq!(c.surge_with(&["cat", "/new"]).stdout, new);
    assert!(c.ok(&["status"]).contains("3/3 daemons up"));
}
