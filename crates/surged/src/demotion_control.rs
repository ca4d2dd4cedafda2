//! How a daemon holds its demotion copies (`ObjStage` of the background
//! job) to the demotion rate the throttler sends with each `DrainTick`
//! (`surged --drain-rate-control`; docs/bbos.md, "Enforcement").
//!
//! - `token` (the default): the daemon's token
//!   bucket ([`TokenBucket`], `rates::Bucket`) paces the copy in pieces;
//! - `blkio`: the kernel throttles it [Sung20, §5.2.4]. The daemon's blkio
//!   group (`blkio::DemoteCgroup`) limits reads from the buffer's disk and
//!   writes to the PFS's disk, and each copy runs in the group with O_DIRECT
//!   (`stage_out`). Both limits are the demotion rate, and a copy reads its
//!   next piece while it writes the last (two threads in the group), so
//!   that both directions stay busy at the rate. A copy that read and then
//!   wrote would lose half of it; one that did so with limits at twice the
//!   rate would depend on how blkio banks the idle time of one direction
//!   while the other works (small pieces: all of it; measured here, 1 MiB
//!   pieces came out at twice the rate). Concurrent copies share the group's
//!   limits, as they share the token bucket's;
//! - `auto`: blkio when the blkio hierarchy is writable and the buffer and
//!   PFS directories are on block devices, else the token bucket.
//!
//! Whatever fails on the way to blkio (no hierarchy, no permission, a
//! device blkio refuses, a thread that cannot join the group) makes the
//! daemon fall back to its token bucket, with a warning in the log; the
//! tick's reply, and so `surge drain status`, says which control is in
//! force. Checkpoint writes keep the token bucket (`rates`): they come
//! buffered through the request path, and blkio cannot throttle buffered
//! writes.
//!
//! To add a control, implement [`DemotionControl`] and list it in
//! [`RateControlKind`].

use crate::blkio::{self, CopyDisks, DemoteCgroup, Enrolled};
use crate::failure::Failure;
use crate::rates::Bucket;
use clap::ValueEnum;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use surge_proto::Errno;

/// Idle time of the demotion bucket that still counts as busy: a
/// demotion's flush and re-read of a 4 MiB chunk, between its paced reads
/// (tens of milliseconds here).
const DEMOTION_BURST: Duration = Duration::from_millis(100);

/// Holds a daemon's demotion copies to a rate.
pub trait DemotionControl: Send + Sync {
    /// `token` or `blkio`: the control in force (a blkio one that failed says `token`).
    fn in_force(&self) -> &'static str;
    /// The demotion rate in bytes/s; 0: unlimited.
    fn set_rate(&self, bytes_per_s: u64);
    /// How the next copy is to run.
    fn pacing(&self) -> Pacing<'_>;
}

/// How one demotion copy runs.
pub enum Pacing<'a> {
    /// Buffered, through this bucket, piece by piece.
    Tokens(&'a Bucket),
    /// With O_DIRECT, in a blkio group while it copies.
    Blkio(&'a BlkioControl),
}

/// The values `--drain-rate-control` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum RateControlKind {
    /// The daemon's token bucket
    #[default]
    Token,
    /// blkio where it can be had, else the token bucket
    Auto,
    /// The kernel's cgroup-v1 blkio throttling, with O_DIRECT copies (falls back to the token bucket)
    Blkio,
}

impl RateControlKind {
    pub fn name(self) -> &'static str {
        match self {
            RateControlKind::Auto => "auto",
            RateControlKind::Token => "token",
            RateControlKind::Blkio => "blkio",
        }
    }
}

/// The token bucket: the default control.
pub struct TokenBucket(Bucket);

impl Default for TokenBucket {
    fn default() -> TokenBucket {
        TokenBucket(Bucket::new(DEMOTION_BURST))
    }
}

impl DemotionControl for TokenBucket {
    fn in_force(&self) -> &'static str {
        "token"
    }

    fn set_rate(&self, bytes_per_s: u64) {
        self.0.set_rate(bytes_per_s);
    }

    fn pacing(&self) -> Pacing<'_> {
        Pacing::Tokens(&self.0)
    }
}

/// blkio, with the token bucket to fall back to.
pub struct BlkioControl {
    group: DemoteCgroup,
    /// Kept at the rate too, so that falling back changes nothing else.
    fallback: TokenBucket,
    failed: AtomicBool,
    index: u32,
}

impl BlkioControl {
    /// Moves the calling thread into the group for (its part of) one copy.
    /// Failing, the daemon falls back to its token bucket: the copy fails,
    /// and its retry goes at the bucket's pace.
    pub fn enroll(&self) -> Result<Enrolled<'_>, Failure> {
        self.group.enroll().map_err(|why| self.give_up(format!("a demotion copy cannot join its blkio group: {why}")))
    }

    /// A copy that cannot go under blkio (`why`): the daemon falls back to
    /// its token bucket, and the copy fails, to be retried at its pace.
    pub fn give_up(&self, why: String) -> Failure {
        self.fall_back(&why);
        Failure::new(Errno(libc::EAGAIN), why)
    }

    fn fall_back(&self, why: &str) {
        if !self.failed.swap(true, Ordering::AcqRel) {
            crate::logging::log!(
                Warn,
                self.index,
                "demotion rate control: blkio failed, the token bucket takes over: {why}"
            );
        }
    }
}

impl DemotionControl for BlkioControl {
    fn in_force(&self) -> &'static str {
        match self.failed.load(Ordering::Acquire) {
            false => "blkio",
            true => "token",
        }
    }

    fn set_rate(&self, bytes_per_s: u64) {
        let changed = self.fallback.0.rate() != bytes_per_s;
        self.fallback.set_rate(bytes_per_s);
        if !changed || self.failed.load(Ordering::Acquire) {
            return;
        }
        if let Err(why) = self.group.set_rates(bytes_per_s, bytes_per_s) {
            self.fall_back(&why);
        }
    }

    fn pacing(&self) -> Pacing<'_> {
        match self.failed.load(Ordering::Acquire) {
            false => Pacing::Blkio(self),
            true => self.fallback.pacing(),
        }
    }
}

/// Where the daemon looks for blkio (the real paths but in tests).
pub struct Probe<'a> {
    pub hierarchy: &'a Path,
    pub sys_block: &'a Path,
}

impl Default for Probe<'_> {
    fn default() -> Self {
        Probe { hierarchy: Path::new(blkio::HIERARCHY), sys_block: Path::new(blkio::SYS_BLOCK) }
    }
}

/// What a daemon is, for its blkio group.
pub struct Daemon<'a> {
    pub cluster_id: &'a str,
    pub index: u32,
    pub buffer: &'a Path,
    pub pfs: &'a Path,
}

/// The control `kind` asks for on `daemon`, falling back to the token
/// bucket when blkio cannot be had: with a warning, unless `auto` found no
/// blkio to try.
pub fn choose(kind: RateControlKind, daemon: &Daemon<'_>, probe: &Probe<'_>) -> Box<dyn DemotionControl> {
    if kind == RateControlKind::Token {
        return Box::new(TokenBucket::default());
    }
    let made = match blkio_usable(daemon, probe) {
        Ok(disks) => DemoteCgroup::create(probe.hierarchy, daemon.cluster_id, daemon.index, disks),
        Err(why) if kind == RateControlKind::Auto => {
            crate::logging::log!(Info, daemon.index, "demotion rate control: token bucket (no blkio: {why})");
            return Box::new(TokenBucket::default());
        }
        Err(why) => Err(why),
    };
    match made {
        Ok(group) => {
            crate::logging::log!(Info, daemon.index, "demotion rate control: blkio, group {}", group.dir().display());
            let (fallback, failed) = (TokenBucket::default(), AtomicBool::new(false));
            Box::new(BlkioControl { group, fallback, failed, index: daemon.index })
        }
        Err(why) => {
            crate::logging::log!(
                Warn,
                daemon.index,
                "demotion rate control: blkio failed, the token bucket takes over: {why}"
            );
            Box::new(TokenBucket::default())
        }
    }
}

/// The disks of a demotion copy, when blkio can be tried on them.
fn blkio_usable(daemon: &Daemon<'_>, probe: &Probe<'_>) -> Result<CopyDisks, String> {
    crate::sys::check_writable(probe.hierarchy)
        .map_err(|e| format!("the blkio hierarchy {} is not writable: {e}", probe.hierarchy.display()))?;
    let read = blkio::disk_holding(daemon.buffer, probe.sys_block)?;
    let write = blkio::disk_holding(daemon.pfs, probe.sys_block)?;
    Ok(CopyDisks { read, write })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blkio::DeviceNumber;
    use std::fs;
    use std::os::unix::fs::{symlink, MetadataExt};

    fn daemon(dir: &Path) -> Daemon<'_> {
        Daemon { cluster_id: "unit", index: 0, buffer: dir, pfs: dir }
    }

    /// Whether tests may make groups in the real blkio hierarchy.
    fn blkio_ready() -> Result<(), String> {
        crate::sys::check_writable(Path::new(blkio::HIERARCHY))
            .map_err(|e| format!("needs root and cgroup-v1 blkio at {}: {e}", blkio::HIERARCHY))
    }

    #[test]
    fn token_is_the_token_bucket_and_a_hierarchy_without_blkio_falls_back_to_it() {
        let t = tempfile::tempdir().unwrap();
        let here = daemon(t.path());
        assert_eq!(choose(RateControlKind::Token, &here, &Probe::default()).in_force(), "token");
        // A plain directory as the hierarchy: mkdir works, the control files are missing.
        let probe = Probe { hierarchy: t.path(), ..Probe::default() };
        for kind in [RateControlKind::Blkio, RateControlKind::Auto] {
            let control = choose(kind, &here, &probe);
            assert_eq!(control.in_force(), "token", "{kind:?}");
            control.set_rate(1_000_000);
            assert!(matches!(control.pacing(), Pacing::Tokens(bucket) if bucket.rate() == 1_000_000));
        }
        assert!(!t.path().join("surge-unit-0-demote").exists());
    }

    #[test]
    fn a_device_blkio_refuses_falls_back_to_the_token_bucket() {
        let test = "a_device_blkio_refuses_falls_back_to_the_token_bucket";
        let Some(()) = surge_testkit::skip_unless_ready(test, blkio_ready()) else { return };
        let t = tempfile::tempdir().unwrap();
        // sysfs says the temp directory is on a partition of disk 7:250, which does not exist:
        // blkio says ENODEV.
        let dev = fs::metadata(t.path()).unwrap().dev();
        let here = DeviceNumber { major: libc::major(dev), minor: libc::minor(dev) };
        let block = t.path().join("block");
        fs::create_dir_all(t.path().join("ghost/ghost1")).unwrap();
        fs::write(t.path().join("ghost/dev"), "7:250\n").unwrap();
        fs::write(t.path().join("ghost/ghost1/partition"), "1\n").unwrap();
        fs::create_dir(&block).unwrap();
        symlink(t.path().join("ghost/ghost1"), block.join(here.to_string())).unwrap();
        let probe = Probe { sys_block: &block, ..Probe::default() };
        let daemon = Daemon { cluster_id: "unit-ghost", ..daemon(t.path()) };
        assert_eq!(choose(RateControlKind::Blkio, &daemon, &probe).in_force(), "token");
        assert!(!Path::new(blkio::HIERARCHY).join("surge-unit-ghost-0-demote").exists());
    }

    #[test]
    fn a_blkio_control_replaces_a_stale_group_limits_both_disks_at_the_rate_enrolls_threads_and_removes_it() {
        let test =
            "a_blkio_control_replaces_a_stale_group_limits_both_disks_at_the_rate_enrolls_threads_and_removes_it";
        let t = tempfile::tempdir().unwrap();
        let daemon = Daemon { cluster_id: "unit-live", ..daemon(t.path()) };
        let ready = blkio_ready().and_then(|()| blkio_usable(&daemon, &Probe::default()));
        let Some(disks) = surge_testkit::skip_unless_ready(test, ready) else { return };
        let group = Path::new(blkio::HIERARCHY).join("surge-unit-live-0-demote");
        // One left by a daemon that died (no task in it): removed and made again.
        fs::create_dir(&group).unwrap();
        let control = choose(RateControlKind::Auto, &daemon, &Probe::default());
        assert_eq!(control.in_force(), "blkio");
        control.set_rate(5_000_000);
        let rules = fs::read_to_string(group.join("blkio.throttle.read_bps_device")).unwrap();
        assert_eq!(rules.trim(), format!("{} 5000000", disks.read));
        let rules = fs::read_to_string(group.join("blkio.throttle.write_bps_device")).unwrap();
        assert_eq!(rules.trim(), format!("{} 5000000", disks.write));
        let Pacing::Blkio(blkio) = control.pacing() else { panic!("blkio paces") };
        let tid = unsafe { libc::gettid() }.to_string();
        let tasks = || fs::read_to_string(group.join("tasks")).unwrap();
        {
            let _in = blkio.enroll().unwrap();
            assert!(tasks().lines().any(|line| line == tid));
        }
        assert!(!tasks().lines().any(|line| line == tid), "the thread went back");
        control.set_rate(0);
        assert_eq!(fs::read_to_string(group.join("blkio.throttle.read_bps_device")).unwrap().trim(), "");
        drop(control);
        assert!(!group.exists());
    }
}
