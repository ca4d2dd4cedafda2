//! Real disks for the tests that need a block device: an ext4 image on a
//! loop device, mounted (root only; [`ready`] says why not, for a skip).
//! The blkio demotion test copies between two; the trim test watches the
//! image's allocated blocks shrink when the file system discards.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why loop disks cannot be made here, if they cannot.
pub fn ready() -> Result<(), String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (loop devices, mount)".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err("no loop devices (/dev/loop-control)".into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).chain(["/sbin".into(), "/usr/sbin".into()]).collect();
    for tool in ["mkfs.ext4", "losetup", "mount", "umount"] {
        if !dirs.iter().any(|dir| dir.join(tool).is_file()) {
            return Err(format!("{tool} is not on the PATH"));
        }
    }
    Ok(())
}

/// `cmd`'s standard output, or what went wrong.
fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        false => Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr).trim())),
    }
}

/// An ext4 image in `dir`, on a loop device, mounted; all undone when dropped.
pub struct LoopDisk {
    device: String,
    /// The image file behind the device.
    pub image: PathBuf,
    /// Where the file system is mounted.
    pub mount: PathBuf,
}

impl LoopDisk {
    /// A `mib` MiB image `<dir>/<name>.img`, mounted on `<dir>/<name>`.
    pub fn make(dir: &Path, name: &str, mib: u64) -> Result<LoopDisk, String> {
        let image = dir.join(format!("{name}.img"));
        std::fs::File::create(&image).and_then(|f| f.set_len(mib << 20)).map_err(|e| e.to_string())?;
        run(Command::new("mkfs.ext4").args(["-F", "-q"]).arg(&image))?;
        let device = run(Command::new("losetup").args(["--find", "--show"]).arg(&image))?;
        let disk = LoopDisk { device, image, mount: dir.join(name) };
        std::fs::create_dir(&disk.mount).map_err(|e| e.to_string())?;
        run(Command::new("mount").arg(&disk.device).arg(&disk.mount))?;
        Ok(disk)
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        if let Err(e) = run(Command::new("umount").arg(&self.mount)) {
            eprintln!("after the test: {e}");
        }
        if let Err(e) = run(Command::new("losetup").arg("-d").arg(&self.device)) {
            eprintln!("after the test: {e}");
        }
    }
}
