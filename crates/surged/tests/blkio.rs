//! Demotion under cgroup-v1 blkio (`--drain-rate-control blkio`) on real
//! disks: two loop devices with ext4 made here, one the buffer's and one
//! the PFS's, a daemon (in this process) copying a file from one to the
//! other at the rate a `DrainTick` gives. It needs root, the blkio
//! hierarchy, loop devices, mkfs.ext4 and losetup; otherwise it shows
//! "SKIPPED: <test>: <reason>" (and fails under CI=true as root).

mod common;

use common::{write_object, Client, Fixture};
use std::path::Path;
use std::time::{Duration, Instant};
use surge_proto::msg::open_flags::{CREATE, WRITE};
use surge_proto::msg::DrainTickReply;
use surge_proto::{Attr, Layout, Request};
use surge_testkit::loop_disk::{self, LoopDisk};
use surge_testkit::pattern;
use surged::{DaemonConfig, DrainConfig, RateControlKind};

const MB: u64 = 1_000_000;

/// Why blkio demotion cannot be tried here, if it cannot.
fn host_ready() -> Result<(), String> {
    loop_disk::ready()?;
    if !Path::new("/sys/fs/cgroup/blkio/tasks").exists() {
        return Err("no cgroup-v1 blkio hierarchy at /sys/fs/cgroup/blkio".into());
    }
    Ok(())
}

#[test]
fn a_demotion_under_blkio_between_two_loop_disks_goes_at_the_set_rate_and_copies_every_byte() {
    let test = "a_demotion_under_blkio_between_two_loop_disks_goes_at_the_set_rate_and_copies_every_byte";
    let Some(()) = surge_testkit::skip_unless_ready(test, host_ready()) else { return };
    let f = Fixture::new();
    let (buffer_disk, pfs_disk) =
        (LoopDisk::make(f.dir.path(), "bufdisk", 256).unwrap(), LoopDisk::make(f.dir.path(), "pfsdisk", 256).unwrap());
    let pfs = pfs_disk.mount.join("pfs");
    std::fs::create_dir(&pfs).unwrap();
    let cluster_id = format!("blkio-test-{}", std::process::id());
    let cfg = DaemonConfig {
        register_dir: Some(f.registrations()),
        drain: DrainConfig { rate_control: RateControlKind::Blkio, ..DrainConfig::default() },
        ..DaemonConfig::new(0, 1, buffer_disk.mount.join("buffer"), &pfs, f.path("secret"), &cluster_id)
    };
    let group = Path::new("/sys/fs/cgroup/blkio").join(format!("surge-{cluster_id}-0-demote"));
    let daemon = surged::start(cfg).unwrap();
    assert!(group.is_dir(), "the daemon made its blkio group {}", group.display());
    // The ticks are daemon 0's throttler's: a peer connection.
    let mut c = Client::peer(daemon.addr(), &f.registrations());

    // A ragged size: the last block goes through the page cache.
    let data = pattern(42, (24 * MB + 777) as usize);
    let layout = Layout { stripe_count: 1, stripe_size: 64 << 20, first: 0 };
    let attr: Attr = c.ok(&Request::Open { path: "/ckpt", flags: CREATE | WRITE, mode: 0o644, layout, local: vec![] });
    write_object(&mut c, attr.ino, &data);
    // SAFETY: sync has no arguments: the buffer's dirty pages are on its disk before the copy.
    unsafe { libc::sync() };

    let rate = 8 * MB;
    let tick = |c: &mut Client, demote_bps| -> DrainTickReply {
        c.ok(&Request::DrainTick { checkpoint_bps: 0, demote_bps, direct_bps: 0, wait_for_space_ms: 0 })
    };
    assert_eq!(tick(&mut c, rate).rate_control, "blkio");
    let started = Instant::now();
    let staged = daemon.demotion().unwrap().stage("/ckpt").unwrap();
    let took = started.elapsed();
    assert_eq!(staged.bytes, data.len() as u64);
    let achieved = data.len() as f64 / took.as_secs_f64();
    eprintln!("24 MB demoted under blkio at {} MB/s: {took:.2?}, {:.2} MB/s", rate / MB, achieved / 1e6);
    // The kernel's throttle is a ceiling with a burst of one slice (100 ms), so the copy may be at
    // most that much early; a loaded machine may make it slower, but not by half.
    let at_rate = Duration::from_secs_f64(data.len() as f64 / rate as f64);
    assert!(took >= at_rate.mul_f64(0.9), "faster than blkio allows: {took:?} for {at_rate:?}");
    assert!(took <= at_rate * 2, "far slower than the set rate: {took:?} for {at_rate:?}");
    assert_eq!(std::fs::read(pfs.join("ckpt")).unwrap(), data, "the PFS copy is byte-exact");
    assert_eq!(tick(&mut c, 0).demoted_bytes, data.len() as u64);

    drop(c);
    daemon.shutdown();
    daemon.wait();
    assert!(!group.exists(), "the daemon removed its blkio group on exit");
}
