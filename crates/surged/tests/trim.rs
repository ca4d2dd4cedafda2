//! The trimmer (`--drain-trim`, docs/bbos.md, "TRIM") on real file
//! systems, with a daemon in this process: on an ext4 loop disk, files
//! written, demoted and evicted give their blocks back to the image file
//! (the loop device turns the discards into holes), the report counts the
//! trim, and a pass at a low `--drain-trim-rate` takes at least the time
//! the rate implies for the file system's size; that needs root and loop
//! devices, else it shows "SKIPPED: <test>: <reason>". On tmpfs, which has
//! no FITRIM, the report says `unsupported` and the buffer works as ever.

mod common;

use common::{write_object, Client, Fixture};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};
use surge_bbos::thresholds::Bandwidths;
use surge_proto::drain::DrainReport;
use surge_proto::msg::open_flags::{CREATE, WRITE};
use surge_proto::{Attr, Layout, Request, Tier};
use surge_testkit::loop_disk::{self, LoopDisk};
use surge_testkit::{eventually, pattern};
use surged::{DaemonConfig, DrainConfig, DrainPolicyKind, RunningDaemon};

const MIB: u64 = 1 << 20;

/// A daemon draining with BBOS every second, at given rates (no calibration), on `buffer`,
/// trimming at `trim_rate` bytes/s.
fn start(f: &Fixture, buffer: &Path, test: &str, trim_rate: u64) -> RunningDaemon {
    let drain = DrainConfig {
        policy: DrainPolicyKind::Bbos,
        period: Duration::from_secs(1),
        rates: Some(Bandwidths::parse_mbps("400,300,160,10").unwrap()),
        trim_rate,
        ..DrainConfig::default()
    };
    let cluster_id = format!("{test}-{}", std::process::id());
    let cfg = DaemonConfig {
        register_dir: Some(f.registrations()),
        drain,
        ..DaemonConfig::new(0, 1, buffer.to_path_buf(), f.pfs(), f.path("secret"), &cluster_id)
    };
    surged::start(cfg).unwrap()
}

/// Creates `path` with `data` in one stripe.
fn write_file(c: &mut Client, path: &str, data: &[u8]) -> Attr {
    let layout = Layout { stripe_count: 1, stripe_size: 64 << 20, first: 0 };
    let attr: Attr = c.ok(&Request::Open { path, flags: CREATE | WRITE, mode: 0o644, layout, local: vec![] });
    write_object(c, attr.ino, data);
    let _: () = c.ok(&Request::Close { ino: attr.ino });
    attr
}

/// The report once its trim figures satisfy `done`.
fn trim_report(c: &mut Client, what: &str, done: impl Fn(&DrainReport) -> bool) -> DrainReport {
    eventually(what, Duration::from_secs(60), || done(&c.ok(&Request::DrainStatus)));
    c.ok(&Request::DrainStatus)
}

/// The size of the file system `dir` is on, as the trimmer sees it (statvfs).
fn file_system_size(dir: &Path) -> u64 {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs is plain data; statvfs(3) fills it or fails.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `stat` writable for the call.
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut stat) }, 0, "statvfs {}", dir.display());
    stat.f_blocks * stat.f_frsize
}

/// Bytes the file takes on its device.
fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn files_evicted_from_an_ext4_loop_buffer_give_their_blocks_back_to_the_image_after_the_trim() {
    let test = "files_evicted_from_an_ext4_loop_buffer_give_their_blocks_back_to_the_image_after_the_trim";
    let Some(()) = surge_testkit::skip_unless_ready(test, loop_disk::ready()) else { return };
    let f = Fixture::new();
    // 256 MiB: the trimmer waits for 1/16 of it, 16 MiB, to be removed.
    let disk = LoopDisk::make(f.dir.path(), "bufdisk", 256).unwrap();
    // 64 MB/s of the ranges asked: a pass over the file system takes about 4 s.
    let trim_rate = 64_000_000;
    let daemon = start(&f, &disk.mount.join("buffer"), "trim-ext4", trim_rate);
    let mut c = Client::authenticated(daemon.addr(), &f.secret);
    let on = trim_report(&mut c, "the trimmer's first tick", |r| !r.trim.state.starts_with("not known"));
    assert_eq!(on.trim.state, "on", "ext4 on a loop device trims as root");
    assert_eq!(on.trim_rate_bps, trim_rate);
    let pass_takes = Duration::from_secs_f64(file_system_size(&disk.mount) as f64 / trim_rate as f64);

    let files: Vec<(String, Vec<u8>)> =
        (0..3).map(|k| (format!("/ckpt{k}"), pattern(k, (16 * MIB) as usize))).collect();
    for (path, data) in &files {
        write_file(&mut c, path, data);
    }
    // SAFETY: sync has no arguments: the objects' blocks are in the image before it is measured.
    unsafe { libc::sync() };
    let written = allocated(&disk.image);
    let demotion = daemon.demotion().unwrap();
    // No pass before the first eviction: nothing was removed.
    let evicting = Instant::now();
    for (path, data) in &files {
        // The data manager demotes and evicts these checkpoints too: whichever
        // gets there first (the other then fails with ESTALE, or finds the file
        // changed under its copy), the file ends on the PFS.
        eventually(&format!("{path} demoted and evicted"), Duration::from_secs(30), || {
            let on_pfs = |c: &mut Client| c.ok::<Attr>(&Request::Stat { path }).tier == Tier::Pfs;
            if !on_pfs(&mut c) {
                if let Ok(staged) = demotion.stage(path) {
                    assert_eq!(staged.bytes, data.len() as u64);
                    let _ = demotion.evict(path, &staged);
                }
            }
            on_pfs(&mut c)
        });
        assert_eq!(std::fs::read(f.pfs().join(&path[1..])).unwrap(), *data, "{path} is on the PFS");
    }
    // The first eviction may already start a pass (16 MiB is the threshold); the
    // rest make the next, a period later.
    eventually("the image giving back the evicted blocks", Duration::from_secs(60), || {
        allocated(&disk.image) + 40 * MIB <= written
    });
    eprintln!("image allocated: {} MiB written, {} MiB after the trim", written / MIB, allocated(&disk.image) / MIB);
    // The report has it from the daemon's next tick.
    let report = trim_report(&mut c, "the report counting the discarded 48 MiB", |r| r.trim.bytes >= 40 * MIB);
    assert!(report.trim.trims >= 1 && report.trim.last_unix_s > 0, "{:?}", report.trim);
    let first_pass = trim_report(&mut c, "a first pass", |r| r.trim.trims >= 1);
    let passes_took = evicting.elapsed();
    eprintln!(
        "{} pass(es) of {pass_takes:?} at the rate ended {passes_took:?} after the first eviction",
        first_pass.trim.trims
    );
    assert!(
        passes_took >= pass_takes * first_pass.trim.trims as u32,
        "{} pass(es) at {trim_rate} bytes/s took {passes_took:?}, less than {pass_takes:?} each",
        first_pass.trim.trims
    );

    drop(c);
    daemon.shutdown();
    daemon.wait();
}

#[test]
fn a_buffer_on_tmpfs_reports_trim_unsupported_and_keeps_working() {
    let test = "a_buffer_on_tmpfs_reports_trim_unsupported_and_keeps_working";
    let shm = Path::new("/dev/shm");
    let tmpfs = on_tmpfs(shm).then_some(()).ok_or("/dev/shm is not a tmpfs");
    let Some(()) = surge_testkit::skip_unless_ready(test, tmpfs) else { return };
    let f = Fixture::new();
    let buffer = tempfile::tempdir_in(shm).unwrap();
    let daemon = start(&f, buffer.path(), "trim-tmpfs", 0);
    let mut c = Client::authenticated(daemon.addr(), &f.secret);
    let report = trim_report(&mut c, "the trimmer's first tick", |r| !r.trim.state.starts_with("not known"));
    assert!(report.trim.state.starts_with("unsupported (ENOTTY"), "tmpfs has no FITRIM: {:?}", report.trim);

    let data = pattern(7, (3 * MIB) as usize);
    let attr = write_file(&mut c, "/ckpt", &data);
    let read = c.read(&Request::Read { ino: attr.ino, offset: 0, len: data.len() as u32 });
    assert_eq!(read, data, "the buffer serves its files");
    let demotion = daemon.demotion().unwrap();
    let staged = demotion.stage("/ckpt").unwrap();
    demotion.evict("/ckpt", &staged).unwrap();
    assert_eq!(std::fs::read(f.pfs().join("ckpt")).unwrap(), data);
    let last: DrainReport = c.ok(&Request::DrainStatus);
    assert!(last.trim.state.starts_with("unsupported (ENOTTY"), "{:?}", last.trim);
    assert_eq!((last.trim.trims, last.trim.bytes), (0, 0), "nothing trimmed: {:?}", last.trim);

    drop(c);
    daemon.shutdown();
    daemon.wait();
}

/// Whether `dir` is on a tmpfs (statfs's f_type).
fn on_tmpfs(dir: &Path) -> bool {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statfs is plain data; statfs(2) fills it or fails.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `stat` writable for the call.
    unsafe { libc::statfs(path.as_ptr(), &mut stat) == 0 && stat.f_type == libc::TMPFS_MAGIC }
}
