//! The data manager's enforcement on real daemons (in this process):
//! `DrainTick` caps checkpoint writes and demotion copies at the rates it
//! gives, its reply counts what each job wrote and what was demoted, and a
//! write that finds the buffer full waits for space while the tick says so.

mod common;

use common::{Client, Fixture};
use std::thread;
use std::time::{Duration, Instant};
use surge_proto::msg::open_flags::{CREATE, WRITE};
use surge_proto::msg::{DrainTickReply, WriteReply};
use surge_proto::{Attr, Errno, Layout, Request};
use surge_testkit::pattern;
use surge_testkit::wire::JOB;
use surged::{DaemonConfig, RunningDaemon};

const MB: u64 = 1_000_000;

/// `daemons` daemons, each with `capacity` bytes for objects if given.
fn start(f: &Fixture, daemons: u32, capacity: Option<u64>) -> Vec<RunningDaemon> {
    (0..daemons)
        .map(|index| {
            let cfg = DaemonConfig {
                register_dir: Some(f.registrations()),
                capacity,
                ..DaemonConfig::new(index, daemons, f.buffer(index), f.pfs(), f.path("secret"), &f.cluster_id)
            };
            surged::start(cfg).unwrap()
        })
        .collect()
}

/// A tick as daemon 0's throttler sends it (`c` a peer connection).
fn tick(c: &mut Client, checkpoint_bps: u64, demote_bps: u64, wait_for_space_ms: u32) -> DrainTickReply {
    c.ok(&Request::DrainTick { checkpoint_bps, demote_bps, direct_bps: 0, wait_for_space_ms })
}

/// Writes `len` bytes to object `ino` from offset 0 in 256 KiB requests, as a client does.
fn write_object(c: &mut Client, ino: u64, len: usize) {
    let data = pattern(ino, 256 << 10);
    let mut offset = 0;
    while offset < len {
        let piece = &data[..data.len().min(len - offset)];
        let _: WriteReply = c.ok(&Request::Write { ino, offset: offset as u64, data: piece });
        offset += piece.len();
    }
}

/// A cap is a ceiling: the capped transfer takes at least 85% of `expected`
/// (it cannot be faster than the cap whatever the load); how much longer a
/// loaded machine makes it is for the benchmarks (the precision of the
/// pacing over 100 ms windows is tested on a simulated clock in `rates.rs`).
fn assert_capped(what: &str, took: Duration, expected: Duration) {
    eprintln!("{what}: {took:.2?} for {expected:?} expected");
    assert!(took >= expected.mul_f64(0.85), "{what}: {took:?}, faster than the cap allows ({expected:?})");
    assert!(took < expected * 10, "{what}: {took:?}, far slower than the cap ({expected:?})");
}

#[test]
fn a_20_mb_s_checkpoint_cap_writes_40_mb_in_2_s_and_the_tick_counts_each_jobs_bytes() {
    let f = Fixture::new();
    let d = start(&f, 1, None);
    let mut c = Client::peer(d[0].addr(), &f.registrations());
    let unlimited = Instant::now();
    write_object(&mut c, 1, (40 * MB) as usize);
    let unlimited = unlimited.elapsed();
    eprintln!("40 MB of writes uncapped: {unlimited:.2?}");
    eprintln!("uncapped: {unlimited:?}");

    let reply = tick(&mut c, 20 * MB, 0, 0);
    assert_eq!(reply.written, [(JOB, 40 * MB)]);
    let capped = Instant::now();
    write_object(&mut c, 2, (40 * MB) as usize);
    assert_capped("40 MB of checkpoint writes at 20 MB/s", capped.elapsed(), Duration::from_secs(2));

    let mut other = Client::peer(d[0].addr(), &f.registrations());
    other.job = 77;
    let reply = tick(&mut other, 0, 0, 0);
    write_object(&mut other, 3, 1000);
    assert!(reply.used >= 80 * MB && reply.capacity > reply.used, "{reply:?}");
    assert_eq!(tick(&mut c, 0, 0, 0).written, [(77, 1000), (JOB, 80 * MB)]);
}

#[test]
fn a_20_mb_s_demotion_cap_copies_40_mb_in_2_s_on_another_daemon() {
    let f = Fixture::new();
    let d = start(&f, 2, None);
    let (mut meta, mut data) =
        (Client::peer(d[0].addr(), &f.registrations()), Client::peer(d[1].addr(), &f.registrations()));
    // One stripe, on daemon 1: daemon 0's demotion copies it there over TCP.
    let layout = Layout { stripe_count: 1, stripe_size: 64 << 20, first: 1 };
    let make = |meta: &mut Client, data: &mut Client, path: &str| {
        let attr: Attr = meta.ok(&Request::Open { path, flags: CREATE | WRITE, mode: 0o644, layout, local: vec![] });
        write_object(data, attr.ino, (40 * MB) as usize);
    };
    make(&mut meta, &mut data, "/uncapped");
    let demotion = d[0].demotion().unwrap();
    let unlimited = Instant::now();
    demotion.stage("/uncapped").unwrap();
    let unlimited = unlimited.elapsed();
    eprintln!("a 40 MB demotion uncapped: {unlimited:.2?}");
    eprintln!("uncapped: {unlimited:?}");

    make(&mut meta, &mut data, "/capped");
    // A checkpoint cap, even of 1 byte/s, does not slow the daemons' own copies.
    assert_eq!(tick(&mut data, 1, 20 * MB, 0).demoted_bytes, 40 * MB);
    let capped = Instant::now();
    let staged = demotion.stage("/capped").unwrap();
    assert_capped("a 40 MB demotion at 20 MB/s", capped.elapsed(), Duration::from_secs(2));
    assert_eq!(staged.bytes, 40 * MB);
    assert_eq!(tick(&mut data, 0, 0, 0).demoted_bytes, 80 * MB);
}

#[test]
fn a_write_to_a_full_buffer_waits_for_space_as_long_as_the_tick_says() {
    let f = Fixture::new();
    let d = start(&f, 1, Some(4 << 20));
    let mut c = Client::peer(d[0].addr(), &f.registrations());
    write_object(&mut c, 1, 4 << 20);
    let one_more = Request::Write { ino: 2, offset: 0, data: &[7; 4096] };

    // No wait: ENOSPC at once, as without the data manager.
    let started = Instant::now();
    assert_eq!(c.fails(&one_more).0, Errno::ENOSPC);
    assert!(started.elapsed() < Duration::from_millis(450), "no wait: {:?}", started.elapsed());

    // Nothing freed: ENOSPC once the wait is over.
    tick(&mut c, 0, 0, 500);
    let started = Instant::now();
    assert_eq!(c.fails(&one_more).0, Errno::ENOSPC);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(5), "{took:?}");

    // Space freed by another client while the write waits: it goes through then.
    tick(&mut c, 0, 0, 10_000);
    let addr = d[0].addr();
    let registrations = f.registrations();
    let remover = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        let mut other = Client::peer(addr, &registrations);
        other.ok::<()>(&Request::ObjRemove { ino: 1 });
        Instant::now()
    });
    let started = Instant::now();
    let written: WriteReply = c.ok(&one_more);
    let (done, freed) = (Instant::now(), remover.join().unwrap());
    assert_eq!(written.written, 4096);
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited");
    // Woken by the removal: the store's signal, not the wait's 1 s poll.
    assert!(done.duration_since(freed) < Duration::from_millis(950), "{:?}", done.duration_since(freed));
}
