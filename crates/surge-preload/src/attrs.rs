//! Surge attributes in the shapes of statx(2) and statfs(2).

use std::sync::atomic::{AtomicU64, Ordering};
use surge_client::posix::stat_of;
use surge_client::{Attr, DaemonStatus};

/// st_dev of every Surge file: one file system, distinct from the host's
/// (major 0 is the kernel's range for anonymous file systems).
pub const DEVICE: (u32, u32) = (0, 0x5347);
/// f_type of statfs: "SRGE".
pub const SURGE_MAGIC: i64 = 0x5352_4745;

/// The device number of the mount's files (0: not in FUSE mode).
static MOUNT_DEV: AtomicU64 = AtomicU64::new(0);

pub fn set_mount_dev(dev: u64) {
    MOUNT_DEV.store(dev, Ordering::Relaxed);
}

/// The device number of the mount's files; 0 when not in FUSE mode.
pub fn mount_dev() -> u64 {
    MOUNT_DEV.load(Ordering::Relaxed)
}

/// The device Surge files report: the FUSE mount's beside a mount (the
/// kernel reports the same for the files it serves), else [`DEVICE`].
fn device() -> u64 {
    match mount_dev() {
        0 => libc::makedev(DEVICE.0, DEVICE.1),
        mounted => mounted,
    }
}

pub fn stat(attr: &Attr) -> libc::stat {
    let mut s = stat_of(attr);
    s.st_dev = device();
    s
}

pub fn statx(attr: &Attr) -> libc::statx {
    let s = stat(attr);
    // SAFETY: `struct statx` is plain integers, for which zero is valid.
    let mut x: libc::statx = unsafe { std::mem::zeroed() };
    x.stx_mask = libc::STATX_BASIC_STATS;
    x.stx_blksize = s.st_blksize as u32;
    x.stx_nlink = s.st_nlink as u32;
    x.stx_uid = s.st_uid;
    x.stx_gid = s.st_gid;
    x.stx_mode = s.st_mode as u16;
    x.stx_ino = s.st_ino;
    x.stx_size = s.st_size as u64;
    x.stx_blocks = s.st_blocks as u64;
    for (field, sec, nsec) in [
        (&mut x.stx_atime, s.st_atime, s.st_atime_nsec),
        (&mut x.stx_mtime, s.st_mtime, s.st_mtime_nsec),
        (&mut x.stx_ctime, s.st_ctime, s.st_ctime_nsec),
    ] {
        field.tv_sec = sec;
        field.tv_nsec = nsec as u32;
    }
    (x.stx_dev_major, x.stx_dev_minor) = (libc::major(s.st_dev), libc::minor(s.st_dev));
    (x.stx_rdev_major, x.stx_rdev_minor) = (libc::major(s.st_rdev), libc::minor(s.st_rdev));
    x
}

/// The buffer's capacity and free space over the daemons that answered.
pub fn statfs(daemons: &[DaemonStatus]) -> libc::statfs {
    const BLOCK: u64 = 4096;
    // SAFETY: `struct statfs` is plain integers, for which zero is valid.
    let mut f: libc::statfs = unsafe { std::mem::zeroed() };
    let capacity: u64 = daemons.iter().map(|d| d.capacity).sum();
    let free: u64 = daemons.iter().map(|d| d.capacity.saturating_sub(d.bytes_used).min(d.device_free)).sum();
    f.f_type = SURGE_MAGIC;
    f.f_bsize = BLOCK as _;
    f.f_frsize = BLOCK as _;
    f.f_blocks = capacity / BLOCK;
    f.f_bfree = free / BLOCK;
    f.f_bavail = free / BLOCK;
    f.f_files = daemons.iter().map(|d| d.files + d.dirs).sum();
    f.f_ffree = u64::MAX >> 1;
    f.f_namelen = 255;
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_client::{FileKind, Layout, Tier};

    #[test]
    fn statx_matches_stat() {
        let attr = Attr {
            ino: 3,
            kind: FileKind::Dir,
            mode: 0o755,
            size: 0,
            atime_ns: 1,
            mtime_ns: 2_000_000_001,
            ctime_ns: 3,
            uid: 0,
            gid: 0,
            nlink: 1,
            rdev: libc::makedev(8, 1),
            layout: Layout::INHERIT,
            tier: Tier::Buffer,
            created: false,
            staged_version: 0,
            blocks: 0,
        };
        let (s, x) = (stat(&attr), statx(&attr));
        assert_eq!(x.stx_mode as u32, s.st_mode);
        assert_eq!(s.st_mode & libc::S_IFMT, libc::S_IFDIR);
        assert_eq!((x.stx_mtime.tv_sec, x.stx_mtime.tv_nsec), (2, 1));
        assert_eq!((x.stx_atime.tv_sec, x.stx_atime.tv_nsec), (0, 1));
        assert_eq!((x.stx_rdev_major, x.stx_rdev_minor), (8, 1));
        assert_eq!((libc::major(s.st_dev), libc::minor(s.st_dev)), DEVICE);
    }

    #[test]
    fn statfs_sums_the_daemons() {
        let d =
            |capacity, used, free| DaemonStatus { capacity, bytes_used: used, device_free: free, ..Default::default() };
        let f = statfs(&[d(8192 * 4, 4096, 1 << 40), d(8192 * 4, 0, 8192)]);
        assert_eq!(f.f_type, SURGE_MAGIC);
        assert_eq!((f.f_blocks, f.f_bfree), (16, 7 + 2));
    }
}
