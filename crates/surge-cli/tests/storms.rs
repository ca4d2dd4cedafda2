//! Kill -9 storms: a client creates, renames and unlinks files with known
//! contents in several directories while a daemon of the cluster is
//! killed with SIGKILL and started again (`surge start --daemon N`). After
//! the storm the namespace must hold what the client was told, as a local
//! journaling file system would: every file whose creation (or last
//! rename) was acknowledged and fsynced is there under its name, whole; a
//! file whose operation failed or was not fsynced is there whole under one
//! of its names, or absent; no file shows up twice, under a name it never
//! had, torn, or with another file's bytes. Then the orphan collector
//! (`--orphan-grace 1`) leaves no orphan, and `surge fsck` is clean.
//!
//! Also: `surge fsck` finds each class of damage planted on a running
//! cluster, says what `--repair` does, and its exit code tells clean (0),
//! problems left (1) and all repaired (2).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use surge_client::{Client, ClientConfig};
use surge_testkit::cluster::Cluster;
use surge_testkit::{pattern, Dice};

const DIRS: u64 = 4;
/// How long one operation may wait for a daemon that is being restarted.
const OP_TIMEOUT: Duration = Duration::from_secs(3);

/// What the client knows of one file (named by its seed, which gives its bytes).
#[derive(Debug, Clone)]
struct Known {
    len: usize,
    /// The names it may be found under (the last is its current one).
    names: Vec<String>,
    /// Acknowledged and fsynced under its last name, and not removed since.
    durable: bool,
    /// Its creation failed part way: it may be there empty.
    may_be_empty: bool,
}

fn client(c: &Cluster) -> Client {
    let config =
        ClientConfig { io_timeout: OP_TIMEOUT, connect_timeout: OP_TIMEOUT, ..ClientConfig::from_env().unwrap() };
    Client::connect_with(&c.cluster_file(), config).unwrap()
}

/// Writes file `seed` at `path` and fsyncs it: acknowledged only if every step was.
fn create(client: &Client, path: &str, seed: u64, len: usize) -> bool {
    let made = client.open(path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644);
    made.and_then(|file| {
        let written = file.write(&pattern(seed, len))?;
        assert_eq!(written, len, "a short write of {path} without an error");
        file.fsync()
    })
    .is_ok()
}

/// Makes a rename durable as a journaling file system does: fsync of the file under its new name.
fn fsync_at(client: &Client, path: &str) -> bool {
    client.open(path, libc::O_RDONLY, 0).and_then(|file| file.fsync()).is_ok()
}

/// What a storm did: what the client knows, and how many operations failed.
struct Storm {
    known: BTreeMap<u64, Known>,
    failed: usize,
}

/// Runs creates, renames and unlinks until `stop`.
fn storm(client: &Client, seed: u64, stop: &AtomicBool) -> Storm {
    let mut dice = Dice(seed | 1);
    let mut known: BTreeMap<u64, Known> = BTreeMap::new();
    let (mut next, mut failed) = (0u64, 0);
    while !stop.load(Ordering::Relaxed) {
        let durable: Vec<u64> = known.iter().filter(|(_, k)| k.durable).map(|(s, _)| *s).collect();
        let (op, pick) = (dice.next(10), dice.next(durable.len().max(1) as u64) as usize);
        let (dir, len) = (dice.next(DIRS), 1 + dice.next(48 << 10) as usize);
        next += 1;
        let ok = match op {
            6..=7 if !durable.is_empty() => {
                let k = known.get_mut(&durable[pick]).unwrap();
                let from = k.names.last().unwrap().clone();
                let to = format!("/d{dir}/r{}-{next}", durable[pick]);
                let ok = client.rename(&from, &to).is_ok() && fsync_at(client, &to);
                k.names = if ok { vec![to] } else { vec![from, to] };
                k.durable = ok;
                ok
            }
            8..=9 if !durable.is_empty() => {
                let k = known.get_mut(&durable[pick]).unwrap();
                // Acknowledged or not, an unlink not made durable may be undone by a crash.
                k.durable = false;
                client.unlink(k.names.last().unwrap()).is_ok()
            }
            _ => {
                let path = format!("/d{dir}/f{next}");
                let ok = create(client, &path, next, len);
                known.insert(next, Known { len, names: vec![path], durable: ok, may_be_empty: !ok });
                ok
            }
        };
        if !ok {
            failed += 1;
            // A daemon is down: no point in spinning.
            thread::sleep(Duration::from_millis(50));
        }
    }
    Storm { known, failed }
}

/// The seed a storm's name carries (`f<seed>` or `r<seed>-<n>`).
fn seed_of(name: &str) -> Option<u64> {
    let rest = name.strip_prefix('f').or_else(|| name.strip_prefix('r'))?;
    rest.split('-').next()?.parse().ok()
}

/// Checks the namespace against what the client knows (see the header).
fn check_survivors(client: &Client, known: &BTreeMap<u64, Known>) {
    let mut found: HashMap<u64, Vec<String>> = HashMap::new();
    let mut inodes: HashMap<u64, String> = HashMap::new();
    for d in 0..DIRS {
        let dir = format!("/d{d}");
        let entries = client.readdir(&dir).unwrap();
        let mut names: Vec<&str> =
            entries.iter().map(|e| e.name.as_str()).filter(|n| *n != "." && *n != "..").collect();
        names.sort_unstable();
        let listed = names.len();
        names.dedup();
        assert_eq!(names.len(), listed, "{dir} lists a name twice: {names:?}");
        for name in names {
            let path = format!("{dir}/{name}");
            let s = seed_of(name).unwrap_or_else(|| panic!("{path}: a name the storm never made"));
            let k = known.get(&s).unwrap_or_else(|| panic!("{path}: a file the storm never made"));
            assert!(k.names.contains(&path), "{path}: file {s} shows up under a name it was not given ({:?})", k.names);
            let file = client.open(&path, libc::O_RDONLY, 0).unwrap();
            let mut bytes = vec![0u8; k.len + 1];
            let n = file.read_at(&mut bytes, 0).unwrap();
            let whole = n == k.len && bytes[..n] == pattern(s, k.len)[..];
            assert!(whole || (k.may_be_empty && n == 0), "{path}: torn or foreign contents ({n} of {} bytes)", k.len);
            if let Some(other) = inodes.insert(file.ino(), path.clone()) {
                panic!("{path} and {other} are one inode");
            }
            found.entry(s).or_default().push(path);
        }
    }
    for (s, k) in known {
        let at = found.get(s).map_or(&[][..], Vec::as_slice);
        assert!(at.len() <= 1, "file {s} is duplicated: {at:?}");
        if k.durable {
            assert_eq!(at, [k.names.last().unwrap().clone()], "durable file {s} lost");
        }
    }
}

/// `surge fsck`'s exit code and output.
fn fsck(c: &Cluster, args: &[&str]) -> (i32, String) {
    let mut all = vec!["fsck"];
    all.extend_from_slice(args);
    let out = c.surge_with(&all);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// Waits until `surge fsck` finds no problem (the collector and deleter
/// catch up after a restart), at most `within`.
fn fsck_becomes_clean(c: &Cluster, within: Duration) {
    let start = Instant::now();
    loop {
        let (code, text) = fsck(c, &[]);
        if code == 0 {
            return;
        }
        assert!(start.elapsed() < within, "fsck still finds problems after {within:?} (exit {code}):\n{text}");
        thread::sleep(Duration::from_millis(500));
    }
}

/// Storms while daemon `victim` is killed and started again twice.
fn storm_through_kills_of(victim: u32) {
    let c = Arc::new(Cluster::start(2, &["--orphan-grace", "1", "--collect-every", "1"]));
    let client = Arc::new(client(&c));
    for d in 0..DIRS {
        client.mkdir(&format!("/d{d}"), 0o755).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let storming = {
        let (client, stop) = (Arc::clone(&client), Arc::clone(&stop));
        thread::spawn(move || storm(&client, 0x5eed + u64::from(victim), &stop))
    };
    for _ in 0..2 {
        thread::sleep(Duration::from_millis(1500));
        c.kill_daemon(victim);
        thread::sleep(Duration::from_millis(200));
        c.ok(&["start", "--daemon", &victim.to_string()]);
    }
    thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let Storm { known, failed } = storming.join().unwrap();
    let durable = known.values().filter(|k| k.durable).count();
    eprintln!(
        "daemon {victim} killed twice: the storm made {} files, {durable} durable at its end, {failed} operations failed",
        known.len()
    );
    assert!(durable > 20 && failed > 0, "the storm did too little to tell: {durable} durable files, {failed} failures");
    check_survivors(&client, &known);
    fsck_becomes_clean(&c, Duration::from_secs(12));
    let (code, text) = fsck(&c, &[]);
    assert_eq!(code, 0, "{text}");
    // The files' objects are all accounted for: no orphan is left (a young one only while the grace runs).
    assert!(!text.contains("orphan"), "{text}");
}

#[test]
fn a_storm_through_kill_9_of_the_metadata_daemon_keeps_every_durable_name_and_leaves_fsck_clean() {
    storm_through_kills_of(0);
}

#[test]
fn a_storm_through_kill_9_of_a_data_daemon_keeps_every_durable_name_and_leaves_fsck_clean() {
    storm_through_kills_of(1);
}

/// The object files (not their sidecars) of daemon `index`, by inode.
fn objects(c: &Cluster, index: u32) -> BTreeMap<u64, PathBuf> {
    let root = c.buffer().join(format!("daemon-{index}")).join("objects");
    let shards = fs::read_dir(root).unwrap().flatten().filter(|e| e.path().is_dir());
    let files = shards.flat_map(|shard| fs::read_dir(shard.path()).unwrap().flatten());
    files.filter_map(|f| Some((u64::from_str_radix(f.file_name().to_str()?, 16).ok()?, f.path()))).collect()
}

#[test]
fn fsck_finds_planted_damage_says_what_repair_does_and_repairs_only_the_safe_part() {
    let c = Cluster::start(2, &["--orphan-grace", "1", "--collect-every", "3600"]);
    let (code, text) = fsck(&c, &[]);
    assert_eq!((code, text.contains("clean")), (0, true), "an empty cluster: {text}");
    let local = c.local("src");
    fs::write(&local, pattern(7, 3 << 20)).unwrap();
    for name in ["lost", "cut", "header", "kept"] {
        c.ok(&["cp", local.to_str().unwrap(), &format!("/surge/{name}")]);
    }
    let (code, text) = fsck(&c, &[]);
    assert_eq!(code, 0, "four whole files: {text}");
    // Inode order is creation order: lost, cut, header, kept. Their second stripes are on daemon 1.
    let on_1: Vec<PathBuf> = objects(&c, 1).into_values().collect();
    assert_eq!(on_1.len(), 4, "{on_1:?}");
    let sidecar = |object: &PathBuf| PathBuf::from(format!("{}.sum", object.display()));
    fs::remove_file(&on_1[0]).unwrap();
    fs::remove_file(sidecar(&on_1[0])).unwrap();
    fs::OpenOptions::new().write(true).open(&on_1[1]).unwrap().set_len(4096).unwrap();
    fs::write(sidecar(&on_1[2]), b"not a checksum record").unwrap();
    // An orphan: a copy of an object under an inode no file has (in the directory of its low byte).
    let orphan = c.buffer().join("daemon-1/objects/ab/00000000000000ab");
    fs::copy(&on_1[3], &orphan).unwrap();
    fs::copy(sidecar(&on_1[3]), sidecar(&orphan)).unwrap();
    thread::sleep(Duration::from_millis(1200));

    let (code, text) = fsck(&c, &[]);
    assert_eq!(code, 1, "{text}");
    for (class, path) in [("data-lost", "/lost"), ("untrusted", "/cut"), ("untrusted", "/header"), ("orphan", "")] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{class}:")) && l.contains(path) && l.contains("--repair: ")),
            "no {class} {path} in:\n{text}"
        );
    }
    assert!(!text.contains("/kept"), "{text}");
    let (_, toml_text) = fsck(&c, &["--toml"]);
    let report: toml::Value = toml::from_str(&toml_text).unwrap();
    assert_eq!(report["problems"].as_integer(), Some(4), "{toml_text}");

    // The repair removes the orphan only; lost and untrusted data stay reported.
    let (code, text) = fsck(&c, &["--repair"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.lines().any(|l| l.starts_with("orphan:") && l.contains("repaired: ")), "{text}");
    assert!(!orphan.exists(), "the orphan is still there");
    let (_, text) = fsck(&c, &[]);
    assert!(!text.contains("orphan") && text.contains("3 problem(s)"), "{text}");

    // With only safe repairs to do, a repair ends with exit 2, and the cluster is clean after.
    c.ok(&["rm", "/lost", "/cut", "/header"]);
    fs::copy(&on_1[3], &orphan).unwrap();
    fs::copy(sidecar(&on_1[3]), sidecar(&orphan)).unwrap();
    thread::sleep(Duration::from_millis(1200));
    let (code, text) = fsck(&c, &["--repair"]);
    assert_eq!(code, 2, "{text}");
    fsck_becomes_clean(&c, Duration::from_secs(5));
    let kept = c.surge_with(&["cat", "/kept"]);
    assert!(kept.status.success() && kept.stdout == pattern(7, 3 << 20), "/kept changed");
}

#[test]
fn fsck_with_verify_data_names_a_damaged_block_as_scrub_does_and_with_a_daemon_down_cannot_check() {
    let c = Cluster::start(2, &[]);
    let local = c.local("src");
    fs::write(&local, pattern(9, 2 << 20)).unwrap();
    c.ok(&["cp", local.to_str().unwrap(), "/surge/f"]);
    let object = objects(&c, 0).into_values().next().unwrap();
    let mut bytes = fs::read(&object).unwrap();
    bytes[5000] ^= 0xff;
    fs::write(&object, &bytes).unwrap();
    let (code, text) = fsck(&c, &[]);
    assert_eq!(code, 0, "without --verify-data the blocks are not read: {text}");
    let (code, text) = fsck(&c, &["--verify-data", "--repair"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("damaged-block:") && l.contains("/f") && l.contains("offset")),
        "{text}"
    );
}
