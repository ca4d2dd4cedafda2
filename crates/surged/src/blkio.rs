//! A daemon's cgroup-v1 blkio group for its demotion copies, the way BBOS
//! enforces the demotion rate [Sung20, §5.2.4]: the kernel throttles the
//! bytes the group's threads read from the buffer's disk
//! (`blkio.throttle.read_bps_device`) and write to the PFS's disk
//! (`blkio.throttle.write_bps_device`). blkio v1 sees only I/O issued by
//! the thread itself: reads, and O_DIRECT writes, not buffered writes
//! (the flusher threads write those back), so the copies in the group use
//! O_DIRECT (`stage_out`). `demotion_control` decides when this is used.
//!
//! The group is `surge-<cluster>-<daemon>-demote` under the blkio
//! hierarchy. A thread joins it for one copy ([`DemoteCgroup::enroll`],
//! by TID in `tasks`) and goes back to the daemon's own group after, so
//! that the copy's verification re-read and every other request run
//! unthrottled. The group is removed when the daemon drops it, and one
//! left by a daemon that died is removed when its successor starts.
//!
//! blkio throttles whole disks, not partitions: [`disk_holding`] finds the
//! disk of a directory's file system through sysfs (`/sys/dev/block`).

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where cgroup v1 mounts the blkio controller.
pub const HIERARCHY: &str = "/sys/fs/cgroup/blkio";
/// sysfs's block devices by `MAJOR:MINOR`.
pub const SYS_BLOCK: &str = "/sys/dev/block";

const READ_BPS: &str = "blkio.throttle.read_bps_device";
const WRITE_BPS: &str = "blkio.throttle.write_bps_device";

/// A block device by number, as blkio names it (`MAJOR:MINOR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceNumber {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for DeviceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl DeviceNumber {
    /// `MAJOR:MINOR`, as sysfs's `dev` files hold it.
    pub fn parse(text: &str) -> Result<DeviceNumber, String> {
        let numbers =
            text.trim().split_once(':').and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
        match numbers {
            Some((major, minor)) => Ok(DeviceNumber { major, minor }),
            None => Err(format!("{text:?} is not a device number MAJOR:MINOR")),
        }
    }
}

/// The disk holding `dir`'s file system, looked up in `sys_block`
/// ([`SYS_BLOCK`]): the device itself, or the disk of a partition.
/// An error says why there is none (tmpfs, overlay, NFS: no block device).
pub fn disk_holding(dir: &Path, sys_block: &Path) -> Result<DeviceNumber, String> {
    let meta = fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let device = DeviceNumber { major: libc::major(meta.dev()), minor: libc::minor(meta.dev()) };
    let node = sys_block.join(device.to_string());
    if !node.exists() {
        return Err(format!(
            "{} is on device {device}, which is no block device (tmpfs, overlay or a network file system?)",
            dir.display()
        ));
    }
    if !node.join("partition").exists() {
        return Ok(device);
    }
    // A partition's sysfs directory sits in its disk's.
    let disk_dev = fs::canonicalize(&node).ok().and_then(|part| Some(part.parent()?.join("dev")));
    let text = disk_dev.as_ref().and_then(|path| fs::read_to_string(path).ok());
    match text {
        Some(text) => DeviceNumber::parse(&text),
        None => Err(format!("{} is on partition {device}, whose disk sysfs does not name", dir.display())),
    }
}

/// The two disks a demotion copy touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyDisks {
    /// Read from: the buffer's.
    pub read: DeviceNumber,
    /// Written to: the PFS's.
    pub write: DeviceNumber,
}

/// The daemon's blkio group for demotion copies (see the module doc).
#[derive(Debug)]
pub struct DemoteCgroup {
    dir: PathBuf,
    /// The group the daemon's threads are in, where an enrolled thread goes back to.
    home: PathBuf,
    disks: CopyDisks,
    /// The daemon's index, for the log.
    index: u32,
}

/// The group's name for daemon `index` of cluster `cluster_id` (characters
/// a directory name should not have become `_`).
pub fn group_name(cluster_id: &str, index: u32) -> String {
    let cluster: String =
        cluster_id.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    format!("surge-{cluster}-{index}-demote")
}

impl DemoteCgroup {
    /// Creates the group of daemon `index` of `cluster_id` under
    /// `hierarchy` (removing one a dead daemon left), with no limit on
    /// `disks` yet: writing their rules checks that blkio takes them.
    pub fn create(hierarchy: &Path, cluster_id: &str, index: u32, disks: CopyDisks) -> Result<DemoteCgroup, String> {
        let dir = hierarchy.join(group_name(cluster_id, index));
        if dir.exists() {
            fs::remove_dir(&dir).map_err(|e| {
                format!(
                    "{} is left from before and cannot be removed ({e}): is another daemon using it?",
                    dir.display()
                )
            })?;
        }
        fs::create_dir(&dir).map_err(|e| format!("cannot create the blkio group {}: {e}", dir.display()))?;
        let group = DemoteCgroup { home: home_group(hierarchy), dir, disks, index };
        group.set_rates(0, 0)?;
        Ok(group)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Limits the group's reads from the buffer's disk and writes to the
    /// PFS's disk to these bytes/s; 0 lifts a limit.
    pub fn set_rates(&self, read_bps: u64, write_bps: u64) -> Result<(), String> {
        self.write_rule(READ_BPS, self.disks.read, read_bps)?;
        self.write_rule(WRITE_BPS, self.disks.write, write_bps)
    }

    fn write_rule(&self, file: &str, disk: DeviceNumber, bps: u64) -> Result<(), String> {
        write_control(&self.dir.join(file), &format!("{disk} {bps}"))
    }

    /// Moves the calling thread into the group until the guard drops.
    pub fn enroll(&self) -> Result<Enrolled<'_>, String> {
        write_control(&self.dir.join("tasks"), &thread_id().to_string())?;
        Ok(Enrolled { group: self })
    }
}

impl Drop for DemoteCgroup {
    fn drop(&mut self) {
        // Fails only while a thread is still enrolled: the next start removes it.
        let _ = fs::remove_dir(&self.dir);
    }
}

/// A thread in the demotion group; back in the daemon's group when dropped.
pub struct Enrolled<'a> {
    group: &'a DemoteCgroup,
}

impl Drop for Enrolled<'_> {
    fn drop(&mut self) {
        if let Err(why) = write_control(&self.group.home.join("tasks"), &thread_id().to_string()) {
            crate::logging::log!(
                Warn,
                self.group.index,
                "a demotion thread cannot leave its blkio group, its I/O stays throttled: {why}"
            );
        }
    }
}

/// The blkio group this process is in, from `/proc/self/cgroup`: the
/// hierarchy's root if that does not say.
fn home_group(hierarchy: &Path) -> PathBuf {
    let listed = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let own = listed.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers.split(',').any(|c| c == "blkio").then(|| path.trim_start_matches('/').to_string())
    });
    hierarchy.join(own.unwrap_or_default())
}

/// Writes one line to a cgroup control file (never creating it).
fn write_control(path: &Path, line: &str) -> Result<(), String> {
    let written = OpenOptions::new().write(true).open(path).and_then(|mut f| f.write_all(line.as_bytes()));
    written.map_err(|e: io::Error| format!("writing {line:?} to {}: {e}", path.display()))
}

fn thread_id() -> i32 {
    // SAFETY: gettid cannot fail.
    unsafe { libc::gettid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn device_numbers_parse_as_sysfs_writes_them_and_nothing_else() {
        assert_eq!(DeviceNumber::parse("8:16\n"), Ok(DeviceNumber { major: 8, minor: 16 }));
        assert_eq!(DeviceNumber { major: 254, minor: 0 }.to_string(), "254:0");
        for bad in ["", "8", "8:", ":1", "a:b", "8:1:2", "-1:0"] {
            assert!(DeviceNumber::parse(bad).unwrap_err().contains("MAJOR:MINOR"), "{bad:?}");
        }
    }

    #[test]
    fn group_names_keep_to_safe_characters() {
        assert_eq!(group_name("lab.run-1", 3), "surge-lab.run-1-3-demote");
        assert_eq!(group_name("a/../b c", 0), "surge-a_.._b_c-0-demote");
    }

    /// A sysfs of one disk with one partition, in `root`: `dev/block/M:m`
    /// links into `devices/`, as the kernel's does.
    fn fake_sysfs(root: &Path, disk: DeviceNumber, part: DeviceNumber) -> PathBuf {
        let disk_dir = root.join("devices/vdz");
        fs::create_dir_all(disk_dir.join("vdz1")).unwrap();
        fs::write(disk_dir.join("dev"), format!("{disk}\n")).unwrap();
        fs::write(disk_dir.join("vdz1/dev"), format!("{part}\n")).unwrap();
        fs::write(disk_dir.join("vdz1/partition"), "1\n").unwrap();
        let block = root.join("dev/block");
        fs::create_dir_all(&block).unwrap();
        symlink(&disk_dir, block.join(disk.to_string())).unwrap();
        symlink(disk_dir.join("vdz1"), block.join(part.to_string())).unwrap();
        block
    }

    #[test]
    fn a_directory_on_a_partition_is_throttled_on_its_disk_and_one_on_no_block_device_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let dev = fs::metadata(t.path()).unwrap().dev();
        let here = DeviceNumber { major: libc::major(dev), minor: libc::minor(dev) };
        let disk = DeviceNumber { major: 4000, minor: 0 };

        // The temp directory's device as a partition of disk 4000:0.
        let block = fake_sysfs(&t.path().join("sys-part"), disk, here);
        assert_eq!(disk_holding(t.path(), &block), Ok(disk));

        // As a disk itself.
        let block = fake_sysfs(&t.path().join("sys-disk"), here, DeviceNumber { major: 4000, minor: 1 });
        assert_eq!(disk_holding(t.path(), &block), Ok(here));

        // Not listed: no block device.
        let empty = t.path().join("sys-empty");
        fs::create_dir(&empty).unwrap();
        let refused = disk_holding(t.path(), &empty).unwrap_err();
        assert!(refused.contains("no block device") && refused.contains(&here.to_string()), "{refused}");
        assert!(disk_holding(&t.path().join("missing"), &empty).unwrap_err().contains("missing"));
    }

    #[test]
    fn a_hierarchy_without_blkio_files_is_refused_and_leaves_no_group() {
        let t = tempfile::tempdir().unwrap();
        let disk = DeviceNumber { major: 7, minor: 0 };
        let disks = CopyDisks { read: disk, write: disk };
        let why = DemoteCgroup::create(t.path(), "x", 0, disks).unwrap_err();
        assert!(why.contains(READ_BPS) && why.contains("7:0 0"), "{why}");
        assert!(!t.path().join("surge-x-0-demote").exists());
        // A stale group (here an empty directory) is removed first.
        fs::create_dir(t.path().join("surge-x-0-demote")).unwrap();
        assert!(DemoteCgroup::create(t.path(), "x", 0, disks).unwrap_err().contains(READ_BPS));
        assert!(!t.path().join("surge-x-0-demote").exists());
    }
}
