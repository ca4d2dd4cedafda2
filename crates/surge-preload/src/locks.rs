//! Advisory locks (fcntl record locks, open-file-description locks, flock)
//! on Surge files when the interposer alone serves the mount. A Surge
//! descriptor is a placeholder memfd of this process, so a lock taken on it
//! excludes nobody else: two processes "holding" one file's lock would both
//! update it, and one's update would be lost without an error. Instead each
//! Surge descriptor locks a lock file of its Surge file, one per cluster and
//! inode in a node-local directory (`surge_cluster::lock_dir`), which every
//! process of the node opens for that file. The kernel then decides as for
//! any local file: record locks belong to the process (closing any
//! descriptor of the file releases them), flock and OFD locks to the open
//! description, which dups and forked children share.
//!
//! Like the FUSE mount's (the kernel's locks of the node), these locks hold
//! between the processes of one node, not across nodes.

use crate::descriptor::Descriptor;
use std::os::fd::OwnedFd;
use surge_client::{Error, File, Result};
use surge_cluster::raw::OFlags;

/// The lock file of inode `ino` of cluster `cluster_id`, opened (created
/// when new) for reading and writing, as both lock types need.
pub fn open_lock_file(cluster_id: &str, ino: u64) -> Result<OwnedFd> {
    let dir = surge_cluster::lock_dir(cluster_id);
    // In a world-writable directory: another user's directory there could
    // swap the lock files and let two processes both "hold" a lock.
    for private in [dir.parent().unwrap_or(&dir), &dir] {
        surge_cluster::private_dir(private, "lock directory")
            .map_err(|e| Error::new(libc::ENOLCK, format!("cannot lock a Surge file: {e}")))?;
    }
    // Raw calls: no profiler preloaded with the application counts Surge's lock files as its own.
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW;
    surge_cluster::raw::open(&dir.join(ino.to_string()), flags, 0o600).map_err(|e| {
        let errno = e.raw_os_error().unwrap_or(libc::ENOLCK);
        Error::new(errno, format!("cannot lock a Surge file: its lock file in {}: {e}", dir.display()))
    })
}

/// Rewrites a lock range relative to the position (SEEK_CUR) or the end
/// (SEEK_END) as one from the start: the lock file has neither the Surge
/// file's position nor its size.
pub fn from_start(lk: &mut libc::flock, position: u64, size: u64) -> Result<()> {
    let base = match i32::from(lk.l_whence) {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => position,
        libc::SEEK_END => size,
        _ => return Err(Error::new(libc::EINVAL, format!("lock range from an unknown origin {}", lk.l_whence))),
    };
    let start = i64::try_from(base).ok().and_then(|b| b.checked_add(lk.l_start)).filter(|s| *s >= 0);
    lk.l_start = start.ok_or_else(|| Error::new(libc::EINVAL, "lock range starts before the file"))?;
    lk.l_whence = libc::SEEK_SET as i16;
    Ok(())
}

/// The descriptor's lock file descriptor, opened on its first lock.
pub fn target(d: &Descriptor, file: &File, cluster_id: &str) -> Result<i32> {
    d.lock_file(|| open_lock_file(cluster_id, file.attr()?.ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(whence: i32, start: i64) -> libc::flock {
        // SAFETY: flock is plain data; all zeros is a valid value.
        let mut lk: libc::flock = unsafe { std::mem::zeroed() };
        lk.l_whence = whence as i16;
        lk.l_start = start;
        lk
    }

    #[test]
    fn ranges_from_the_position_or_the_end_become_ranges_from_the_start() {
        let mut lk = range(libc::SEEK_CUR, -10);
        from_start(&mut lk, 100, 500).unwrap();
        assert_eq!((i32::from(lk.l_whence), lk.l_start), (libc::SEEK_SET, 90));
        let mut lk = range(libc::SEEK_END, 0);
        from_start(&mut lk, 100, 500).unwrap();
        assert_eq!(lk.l_start, 500);
        assert_eq!(from_start(&mut range(libc::SEEK_CUR, -101), 100, 500).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(from_start(&mut range(7, 0), 0, 0).unwrap_err().errno(), libc::EINVAL);
    }

    #[test]
    fn two_opens_of_one_lock_file_exclude_each_other() {
        let id = format!("test-{}", std::process::id());
        let (a, b) = (open_lock_file(&id, 42).unwrap(), open_lock_file(&id, 42).unwrap());
        use std::os::fd::AsRawFd;
        // SAFETY: valid descriptors.
        unsafe {
            assert_eq!(libc::flock(a.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB), 0);
            assert_eq!(libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB), -1);
        }
        std::fs::remove_dir_all(surge_cluster::lock_dir(&id)).unwrap();
    }

    #[test]
    fn a_lock_directory_others_may_write_to_is_refused() {
        let id = format!("test-open-{}", std::process::id());
        let dir = surge_cluster::lock_dir(&id);
        std::fs::create_dir_all(&dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = open_lock_file(&id, 1).unwrap_err();
        assert_eq!(e.errno(), libc::ENOLCK);
        assert!(e.to_string().contains("group or others may write to it"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
