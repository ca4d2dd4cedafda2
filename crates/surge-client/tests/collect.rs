//! The stress case, bounded: clients that create, write, unlink and
//! rename files over each other (some writing to files another client
//! removes under them) leave no object behind once daemon 0's deleter and
//! orphan collector have run.

mod common;

use common::TestCluster;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_client::{Client, Layout};
use surge_testkit::pattern;

const WORKERS: usize = 4;
const RUN: Duration = Duration::from_secs(5);

/// One worker's round: a file written, renamed over a neighbour's, and
/// unlinked while a second handle (its own, or another worker's) may still
/// write to it.
fn churn(client: &Client, me: usize, round: usize) {
    let layout = Layout { stripe_count: 3, stripe_size: 64 << 10, first: u32::MAX };
    let mine = format!("/w{me}/f{round}");
    let Ok(f) = client.create(&mine, 0o644, layout) else { return };
    let _ = f.write_at(&pattern(round as u64, 200 << 10), 0);
    // Over another worker's file, which that worker may be writing.
    let neighbour = format!("/w{}/f{}", (me + 1) % WORKERS, round.saturating_sub(1));
    let _ = client.rename(&mine, &neighbour);
    if round.is_multiple_of(2) {
        // Removed under an open handle of this client, which writes on.
        let _ = client.unlink(&neighbour);
        let _ = f.write_at(b"written after the unlink", 300 << 10);
    } else {
        let _ = f.write_at(b"still mine?", 0);
    }
}

/// The inodes of every file left in the namespace.
fn live_files(client: &Client) -> HashSet<u64> {
    let mut live = HashSet::new();
    for dir in client.readdir("/").unwrap() {
        for entry in client.readdir(&format!("/{}", dir.name)).unwrap() {
            live.insert(entry.ino);
        }
    }
    live
}

#[test]
fn concurrent_creates_writes_unlinks_and_renames_leave_no_orphans_after_collection() {
    let cluster = TestCluster::start_with(3, &std::env::temp_dir(), &["--collect-every", "1", "--orphan-grace", "1"]);
    let setup = cluster.client();
    for me in 0..WORKERS {
        setup.mkdir(&format!("/w{me}"), 0o755).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|me| {
            // A client each, as separate processes would have.
            let client = cluster.client();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    churn(&client, me, round);
                    round += 1;
                }
                round
            })
        })
        .collect();
    std::thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    let rounds: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(rounds > 20, "only {rounds} rounds ran");

    let live = live_files(&setup);
    assert!(!live.is_empty());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left: Vec<(u32, u64)> =
            (0..3).flat_map(|d| cluster.object_inos(d).into_iter().map(move |ino| (d, ino))).collect();
        let orphans: Vec<_> = left.iter().filter(|(_, ino)| !live.contains(ino)).collect();
        if orphans.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} orphan objects stay, e.g. {:?}",
            orphans.len(),
            &orphans[..orphans.len().min(5)]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = setup.status().remove(0).1.unwrap();
    assert_eq!(status.doomed, 0, "removed files whose objects were never deleted");
}
