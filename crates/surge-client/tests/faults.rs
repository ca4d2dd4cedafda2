//! The crash-and-fault test: a cluster driven through random kill -9 and
//! SIGSTOP of its daemons while writers and stage-outs run on devices that
//! fill up (a capacity the writers exceed), for a bounded time. Afterwards every byte acknowledged to fsync must read back and
//! stage out exactly, and the space the daemons report must match the files.
//! Every third file is removed once written, so daemon 0's deleter and
//! orphan collector work through the faults too: afterwards no object may
//! remain that belongs to no file.

mod common;

use common::TestCluster;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use surge_client::{Client, Layout, Tier};
use surge_testkit::{pattern, Dice};

const DAEMONS: u32 = 3;
const CHAOS: Duration = Duration::from_secs(12);
const TIMEOUT: Duration = Duration::from_secs(2);
/// Per daemon: the writers fill it within a few seconds.
const CAPACITY: &str = "10485760";
/// Files each writer keeps however full the buffer is (at most 3 MiB each).
const KEPT_AT_LEAST: usize = 2;

/// Files whose every byte was acknowledged to fsync, with those bytes.
type Acknowledged = Arc<Mutex<BTreeMap<String, Vec<u8>>>>;

/// What a writer did: files acknowledged, files whose writing failed, and
/// how often the buffer was full.
#[derive(Debug, Default)]
struct Outcome {
    ok: u64,
    failed: u64,
    full: u64,
}

/// Writes new files until `stop`, each whole then fsynced, then, through
/// the same descriptor while the stager may be copying it out, rewrites
/// its head and fsyncs again. A file's bytes join `acked` only when every
/// write and the fsync succeeded; a failed rewrite drops the file (its
/// head is then unknown) and removes it. When the buffer is full, the
/// writer removes its oldest file, as a user would, but keeps its newest.
fn writer(
    client: Client,
    me: u64,
    acked: Acknowledged,
    newest: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
) -> Outcome {
    let mut dice = Dice(0x9e37_79b9 ^ me);
    let mut outcome = Outcome::default();
    let mut kept = VecDeque::new();
    while !stop.load(Ordering::Relaxed) {
        let n = outcome.ok + outcome.failed;
        let path = format!("/w{me}/f{n}");
        let mut data = pattern(me << 32 | n, 1 + dice.next(3 << 20) as usize);
        let written = (|| {
            let f = client.create(&path, 0o644, Layout::INHERIT)?;
            for piece in data.chunks(256 << 10) {
                f.write(piece)?;
            }
            f.fsync()?;
            acked.lock().unwrap().insert(path.clone(), data.clone());
            *newest.lock().unwrap() = Some(path.clone());
            thread::sleep(Duration::from_millis(dice.next(60)));
            let head = pattern(!n, data.len().min(8192));
            acked.lock().unwrap().remove(&path);
            f.write_at(&head, 0)?;
            f.fsync()?;
            data[..head.len()].copy_from_slice(&head);
            acked.lock().unwrap().insert(path.clone(), data.clone());
            if n % 3 == 2 {
                acked.lock().unwrap().remove(&path);
                drop(f);
                client.unlink(&path)?;
            } else {
                kept.push_back(path.clone());
            }
            Ok::<_, surge_client::Error>(())
        })();
        match written {
            Ok(()) => outcome.ok += 1,
            Err(e) => {
                outcome.failed += 1;
                let _ = client.unlink(&path);
                if e.errno() == libc::ENOSPC {
                    outcome.full += 1;
                    // The newest files stay, for the checks at the end.
                    if kept.len() > KEPT_AT_LEAST {
                        let oldest = kept.pop_front().expect("more than the newest");
                        acked.lock().unwrap().remove(&oldest);
                        let _ = client.unlink(&oldest);
                    }
                }
            }
        }
    }
    outcome
}

/// Stages out the newest acknowledged file, over and over, until `stop`;
/// failures are expected while daemons are down.
fn stager(client: Client, newest: Arc<Mutex<Option<String>>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let path = newest.lock().unwrap().clone();
        if let Some(path) = path {
            let _ = client.stage_out(&path, &mut |_| {});
        }
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn acknowledged_bytes_survive_kills_stops_and_concurrent_stage_outs() {
    let mut cluster = TestCluster::start_with(
        DAEMONS,
        &std::env::temp_dir(),
        &["--collect-every", "1", "--orphan-grace", "1", "--capacity", CAPACITY],
    );
    let setup = cluster.client();
    let acked: Acknowledged = Arc::default();
    let newest = Arc::new(Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|me| {
            setup.mkdir(&format!("/w{me}"), 0o755).unwrap();
            let client = cluster.client_with_timeout(TIMEOUT);
            let (acked, newest, stop) = (acked.clone(), newest.clone(), stop.clone());
            thread::spawn(move || writer(client, me, acked, newest, stop))
        })
        .collect();
    let stagers = {
        let (client, newest, stop) = (cluster.client_with_timeout(TIMEOUT), newest.clone(), stop.clone());
        thread::spawn(move || stager(client, newest, stop))
    };

    let mut dice = Dice(0xc4a05);
    let started = Instant::now();
    let mut faults = Vec::new();
    while started.elapsed() < CHAOS {
        thread::sleep(Duration::from_millis(300 + dice.next(700)));
        let victim = dice.next(DAEMONS as u64) as u32;
        if dice.next(2) == 0 {
            cluster.kill(victim);
            thread::sleep(Duration::from_millis(dice.next(500)));
            cluster.restart(victim);
            faults.push(format!("kill -9 daemon {victim}"));
        } else {
            cluster.signal(victim, libc::SIGSTOP);
            thread::sleep(Duration::from_millis(dice.next(3000)));
            cluster.signal(victim, libc::SIGCONT);
            faults.push(format!("SIGSTOP daemon {victim}"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<Outcome> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    stagers.join().unwrap();
    eprintln!("faults: {faults:?}; writers: {outcomes:?}");
    assert!(outcomes.iter().any(|o| o.full > 0), "the buffer never filled up: {outcomes:?}");

    let acked = acked.lock().unwrap();
    assert!(acked.len() >= 3, "too few files were acknowledged to test anything: {outcomes:?}");
    let client = cluster.client();
    for (path, data) in acked.iter() {
        let f = client.open(path, libc::O_RDONLY, 0).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut back = vec![0; data.len() + 1];
        let mut got = 0;
        while got < back.len() {
            match f.read_at(&mut back[got..], got as u64).unwrap_or_else(|e| panic!("{path}: {e}")) {
                0 => break,
                n => got += n,
            }
        }
        assert!(
            got == data.len() && back[..got] == data[..],
            "{path}: {got} bytes read back, {} acknowledged",
            data.len()
        );
        let pfs_path = cluster.pfs().join(&path[1..]);
        if client.stat(path).unwrap().tier == Tier::Staged {
            // `surge run` deletes the buffer copies of staged files: the claim must hold.
            let pfs_copy = std::fs::read(&pfs_path).unwrap();
            assert!(pfs_copy == *data, "{path} is marked staged but its PFS copy is not current");
        }
        client.stage_out(path, &mut |_| {}).unwrap_or_else(|e| panic!("stage-out of {path}: {e}"));
        assert_eq!(client.stat(path).unwrap().tier, Tier::Staged, "{path}");
        assert!(std::fs::read(&pfs_path).unwrap() == *data, "{path}: the PFS copy differs");
    }

    // Removed files' objects are deleted and orphans collected: in the
    // end every object belongs to a file.
    let mut live = HashSet::new();
    let mut sizes = 0;
    let mut objects = 0;
    for me in 0..3 {
        for entry in client.readdir(&format!("/w{me}")).unwrap() {
            live.insert(entry.ino);
            sizes += client.stat(&format!("/w{me}/{}", entry.name)).unwrap().size;
            objects += u64::from(DAEMONS);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stray: Vec<u64> =
            (0..DAEMONS).flat_map(|d| cluster.object_inos(d)).filter(|ino| !live.contains(ino)).collect();
        if stray.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "{} objects of no file remain, e.g. {:?}", stray.len(), &stray[..1]);
        thread::sleep(Duration::from_millis(200));
    }

    // Used space is what the files take: at least their bytes, at most
    // those rounded up to a block per object.
    let used: u64 = client.status().into_iter().map(|(_, s)| s.unwrap().bytes_used).sum();
    let acked_bytes: u64 = acked.values().map(|d| d.len() as u64).sum();
    assert!(used >= acked_bytes, "daemons report {used} bytes used for {acked_bytes} acknowledged bytes");
    assert!(used <= sizes + objects * 4096, "daemons report {used} bytes used for files of {sizes} bytes");
}
