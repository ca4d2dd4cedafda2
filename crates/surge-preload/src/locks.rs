//! Advisory locks (fcntl record locks, open-file-description locks, flock)
//! on Surge files when the interposer alone serves the mount. A Surge
//! descriptor is a placeholder memfd of this process, so a lock taken on it
//! excludes nobody else: two processes "holding" one file's lock would both
//! update it, and one's update would be lost without an error. Instead each
//! Surge descriptor locks a lock file of its Surge file, one per cluster and
//! inode in a node-local directory (`surge_cluster::lock_dir`), which every
//! process of the node opens for that file. The kernel then decides as for
//! any local file: record locks belong to the process, flock and OFD locks
//! to the open description of the lock file.
//!
//! So that flock and OFD locks belong to the placeholder's open file
//! description, as the kernel's do, each description of a placeholder has
//! one open description of the lock file, kept beside it by every process
//! that shares the placeholder: opened at the first lock, or before a fork
//! or spawn shares the placeholder (the child that locks it, such as
//! `flock(1)` exec'd on a shell's `9>lock`, may exit long before the shell
//! closes it); inherited across exec when a descriptor of the placeholder
//! is (close-on-exec follows the placeholder's at each exec); closed with
//! the placeholder's last descriptor in the process. The lock file's own
//! file position, which nothing else uses, holds the placeholder's memfd
//! inode number, so a program started by exec finds which placeholder an
//! inherited lock file belongs to.
//!
//! Like the FUSE mount's (the kernel's locks of the node), these locks hold
//! between the processes of one node, not across nodes.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Once;
use surge_client::{Error, Result};
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

/// This process's lock files, by the placeholder (memfd inode number) whose
/// open file description each belongs to.
static LOCK_FILES: Mutex<BTreeMap<u64, OwnedFd>> = Mutex::new(BTreeMap::new());
/// Lock files inherited across exec are taken up once per program image.
static INHERITED: Once = Once::new();

/// The identity of placeholder `fd`'s open file description: its memfd's
/// inode number, shared by dups, forked children and exec'd programs.
fn placeholder_id(fd: i32) -> Result<u64> {
    // SAFETY: stat is plain data and fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::new(e.raw_os_error().unwrap_or(libc::EBADF), format!("descriptor {fd}: {e}")));
    }
    Ok(st.st_ino)
}

/// The lock file descriptor of placeholder `fd` (of Surge inode `ino`),
/// opened when the placeholder has none yet.
pub fn lock_file(fd: i32, ino: u64, cluster_id: &str) -> Result<i32> {
    let id = placeholder_id(fd)?;
    take_up_inherited(cluster_id);
    let mut files = LOCK_FILES.lock();
    if let Some(file) = files.get(&id) {
        return Ok(file.as_raw_fd());
    }
    let file = open_lock_file(cluster_id, ino)?;
    let position = i64::try_from(id).map_err(|_| Error::new(libc::EOVERFLOW, "placeholder inode beyond off_t"))?;
    // SAFETY: lseek has no memory arguments.
    if unsafe { libc::lseek(file.as_raw_fd(), position, libc::SEEK_SET) } < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::new(libc::ENOLCK, format!("cannot mark a lock file with its placeholder: {e}")));
    }
    Ok(files.entry(id).or_insert(file).as_raw_fd())
}

/// Before a fork or spawn shares placeholders with a child: each of
/// `placeholders` (descriptor and Surge inode) gets its lock file now, so a
/// lock the child takes stays while this process keeps the placeholder.
/// A lock file that cannot be opened (too many descriptors) is left to the
/// first lock, as a placeholder that never forked has it.
pub fn share(placeholders: impl IntoIterator<Item = (i32, u64)>, cluster_id: &str) {
    for (fd, ino) in placeholders {
        let _ = lock_file(fd, ino, cluster_id);
    }
}

/// Before an exec: each lock file is inherited exactly when a descriptor
/// of its placeholder is (close-on-exec is a descriptor's, so any of them
/// without it carries the lock along). Only reads the table when no other
/// thread holds it (a vfork child shares its parent's memory).
pub fn before_exec() {
    let Some(files) = LOCK_FILES.try_lock() else { return };
    if files.is_empty() {
        return;
    }
    let inherited: HashSet<u64> =
        placeholders().into_iter().filter(|&(fd, _)| !close_on_exec(fd)).map(|(_, id)| id).collect();
    for (id, file) in files.iter() {
        set_close_on_exec(file.as_raw_fd(), !inherited.contains(id));
    }
}

/// After a spawn (which `before_exec` prepared): the lock files are
/// close-on-exec again, for the execs the interposer does not see.
pub fn after_spawn() {
    for file in LOCK_FILES.lock().values() {
        set_close_on_exec(file.as_raw_fd(), true);
    }
}

/// Placeholder `fd` is being closed: with its last descriptor in this
/// process, its lock file goes too, releasing flock and OFD locks held
/// through it when no other process shares them.
pub fn closing(fd: i32) {
    let mut files = LOCK_FILES.lock();
    if files.is_empty() {
        return;
    }
    let Ok(id) = placeholder_id(fd) else { return };
    if files.contains_key(&id) && !placeholders().iter().any(|&(other, other_id)| other != fd && other_id == id) {
        files.remove(&id);
    }
}

/// Held across fork so that a child never inherits it mid-update.
pub fn lock_for_fork() {
    std::mem::forget(LOCK_FILES.lock());
}

/// # Safety
/// Only after [`lock_for_fork`], once, in the parent or the child.
pub unsafe fn unlock_after_fork() {
    LOCK_FILES.force_unlock();
}

/// Takes up the lock files an earlier program image passed on (by their
/// position, the placeholder each belongs to), close-on-exec until the
/// next exec decides.
fn take_up_inherited(cluster_id: &str) {
    INHERITED.call_once(|| {
        let root = surge_cluster::lock_dir(cluster_id);
        let mut files = LOCK_FILES.lock();
        for (fd, target) in open_descriptors() {
            if !target.starts_with(&root) {
                continue;
            }
            // SAFETY: lseek has no memory arguments.
            let position = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
            if let Ok(id) = u64::try_from(position) {
                set_close_on_exec(fd, true);
                // SAFETY: a descriptor this image inherited and nothing else here owns.
                files.entry(id).or_insert_with(|| unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    });
}

/// This process's descriptors and what each leads to.
fn open_descriptors() -> Vec<(i32, std::path::PathBuf)> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
    entries
        .filter_map(|e| {
            let fd: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            Some((fd, std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?))
        })
        .collect()
}

/// This process's placeholder descriptors and the identity of each one's open description.
fn placeholders() -> Vec<(i32, u64)> {
    let memfd = format!("/memfd:{}", crate::placeholder::NAME);
    open_descriptors()
        .into_iter()
        .filter(|(_, target)| target.to_str().is_some_and(|t| t.starts_with(&memfd)))
        .filter_map(|(fd, _)| Some((fd, placeholder_id(fd).ok()?)))
        .collect()
}

fn close_on_exec(fd: i32) -> bool {
    // SAFETY: F_GETFD has no memory arguments.
    unsafe { libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
}

fn set_close_on_exec(fd: i32, on: bool) {
    // SAFETY: F_GETFD and F_SETFD have no memory arguments.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            let flags = if on { flags | libc::FD_CLOEXEC } else { flags & !libc::FD_CLOEXEC };
            libc::fcntl(fd, libc::F_SETFD, flags);
        }
    }
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
