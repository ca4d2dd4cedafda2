//! Finding, checking and removing Surge mounts. A Surge mount's source in
//! /proc/self/mountinfo is `surge:<cluster id>:<server pid>`, so whether
//! its server still runs is known without touching the mount (a `stat` of a
//! mount whose server is stopped would hang).

use std::io;
use std::path::{Path, PathBuf};

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
    /// The device number `st_dev` reports for files on the mount.
    pub dev: u64,
}

impl MountEntry {
    /// (cluster id, server pid) of a Surge mount.
    pub fn surge_server(&self) -> Option<(&str, u32)> {
        // Mounted by root, the type is plain "fuse"; through fusermount3, "fuse.surge".
        if self.fstype != "fuse" && self.fstype != format!("fuse.{}", crate::SUBTYPE) {
            return None;
        }
        let rest = self.source.strip_prefix("surge:")?;
        let (cluster, pid) = rest.rsplit_once(':')?;
        Some((cluster, pid.parse().ok()?))
    }
}

/// What is mounted at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Unmounted,
    /// A Surge mount whose server runs.
    Live {
        cluster_id: String,
        pid: u32,
        dev: u64,
    },
    /// A Surge mount whose server is gone: every access fails with ENOTCONN.
    Stale,
    /// Some other file system.
    Other {
        fstype: String,
    },
}

/// The mounts of this process's namespace (the last one at a path is on top).
pub fn mounts() -> io::Result<Vec<MountEntry>> {
    Ok(std::fs::read_to_string("/proc/self/mountinfo")?.lines().filter_map(parse_line).collect())
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let fields: Vec<&str> = left.split(' ').collect();
    let (major, minor) = fields.get(2)?.split_once(':')?;
    let mut right = right.split(' ');
    Some(MountEntry {
        mount_point: PathBuf::from(unescape(fields.get(4)?)),
        fstype: right.next()?.to_string(),
        source: unescape(right.next()?),
        dev: libc::makedev(major.parse().ok()?, minor.parse().ok()?),
    })
}

/// mountinfo writes space, tab, newline and backslash as octal escapes.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What is mounted at `path` (which need not exist).
pub fn state(path: &Path) -> io::Result<State> {
    let path = std::path::absolute(path)?;
    let Some(top) = mounts()?.into_iter().rev().find(|m| m.mount_point == path) else {
        return Ok(State::Unmounted);
    };
    match top.surge_server() {
        Some((cluster, pid)) if process_alive(pid) => {
            Ok(State::Live { cluster_id: cluster.to_string(), pid, dev: top.dev })
        }
        Some(_) => Ok(State::Stale),
        None => Ok(State::Other { fstype: top.fstype }),
    }
}

fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Unmounts `path`; a busy mount is detached (it goes once its last file
/// closes). Root unmounts directly; other users through `fusermount3 -u`.
pub fn unmount(path: &Path) -> io::Result<()> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mount point holds a NUL byte"))?;
    // SAFETY: c_path is a valid C string.
    if unsafe { libc::umount2(c_path.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        // SAFETY: as above.
        Some(libc::EBUSY) if unsafe { libc::umount2(c_path.as_ptr(), libc::MNT_DETACH) } == 0 => Ok(()),
        Some(libc::EPERM) => fusermount_unmount(path),
        _ => Err(err),
    }
}

fn fusermount_unmount(path: &Path) -> io::Result<()> {
    for tool in ["fusermount3", "fusermount"] {
        match std::process::Command::new(tool).arg("-u").arg("-z").arg(path).output() {
            Ok(out) if out.status.success() => return Ok(()),
            Ok(out) => {
                let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
                return Err(io::Error::other(format!("{tool} -u -z {}: {why}", path.display())));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::PermissionDenied, "unmounting needs root or fusermount3 (Debian package fuse3)"))
}

/// Why FUSE cannot be used here, or None when it can: `/dev/fuse` must be
/// openable, and a non-root user needs `fusermount3`.
pub fn unavailable() -> Option<String> {
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        return Some(format!("/dev/fuse: {e}"));
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let on_path = |tool: &str| {
        std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
    };
    if !root && !on_path("fusermount3") && !on_path("fusermount") {
        return Some("not root and no fusermount3 (install the Debian package fuse3)".into());
    }
    None
}

/// Gets `path` ready for a new Surge mount: creates it when missing,
/// removes a stale Surge mount, refuses a live one and any other mount.
/// Whether a directory that holds files may be hidden is the caller's call
/// (`surge mount --force`).
pub fn prepare(path: &Path) -> Result<(), String> {
    let shown = path.display();
    match state(path).map_err(|e| format!("reading the mount table: {e}"))? {
        State::Unmounted => {}
        State::Stale => {
            unmount(path).map_err(|e| format!("{shown} holds a stale Surge mount (its server died) that could not be removed: {e}"))?;
            eprintln!("surge: removed the stale Surge mount at {shown} (its server had died)");
        }
        State::Live { cluster_id, pid, .. } => {
            return Err(format!(
                "{shown} is already a Surge mount (cluster {cluster_id}, server pid {pid}); `surge umount {shown}` first, or pick another --mount"
            ))
        }
        State::Other { fstype } => {
            return Err(format!("{shown} is a mounted {fstype} file system; a Surge mount would hide it: pick another --mount"))
        }
    }
    match std::fs::read_dir(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(path).map_err(|e| format!("cannot create the mount point {shown}: {e}"))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Err(format!("{shown} is not a directory")),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_parsed_with_their_escapes() {
        let line = "612 30 0:87 / /tmp/my\\040mnt rw,nosuid,nodev,relatime shared:330 - fuse.surge surge:ab12:4242 rw,user_id=0,group_id=0";
        let m = parse_line(line).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/tmp/my mnt"));
        assert_eq!(m.fstype, "fuse.surge");
        assert_eq!(m.surge_server(), Some(("ab12", 4242)));
        assert_eq!(m.dev, libc::makedev(0, 87));
        let ext4 = parse_line("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw").unwrap();
        assert_eq!(ext4.surge_server(), None);
        assert_eq!(parse_line("garbage"), None);
    }

    #[test]
    fn this_process_root_is_mounted_and_not_surge() {
        assert!(matches!(state(Path::new("/")).unwrap(), State::Other { .. }));
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(state(&dir.path().join("nothing")).unwrap(), State::Unmounted);
    }

    #[test]
    fn a_dead_server_makes_the_mount_stale() {
        assert!(process_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid));
    }

    #[test]
    fn prepare_creates_a_missing_directory_and_refuses_a_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("precious"), b"x").unwrap();
        let fresh = dir.path().join("a/b");
        prepare(&fresh).unwrap();
        assert!(fresh.is_dir());
        let file = dir.path().join("precious");
        assert!(prepare(&file).unwrap_err().contains("not a directory"));
    }
}
