//! A small device for the tests of full disks: a tmpfs of a given size
//! mounted on a directory (root only; elsewhere the test shows as skipped).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A small tmpfs mounted on a directory, unmounted on drop.
pub struct SmallDevice {
    dir: PathBuf,
}

impl SmallDevice {
    /// None (after saying so) where this process may not mount.
    pub fn mount(test: &str, dir: &Path, size: &str) -> Option<SmallDevice> {
        fs::create_dir_all(dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=700"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())
            .and_then(|out| match out.status.success() {
                true => Ok(SmallDevice { dir: dir.to_path_buf() }),
                false => Err(format!("cannot mount a small tmpfs: {}", String::from_utf8_lossy(&out.stderr).trim())),
            });
        crate::skip_unless_ready(test, mounted)
    }

    /// Takes every free byte with a file of its own, as another user of the device would.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.dir.join("filler");
        let mut file = fs::File::create(&path).unwrap();
        while file.write(&[0xf1; 4096]).is_ok_and(|n| n > 0) {}
        path
    }
}

impl Drop for SmallDevice {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
