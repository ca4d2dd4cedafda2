//! Room on the buffer device for the namespace and the log.
//!
//! Data may fill a burst buffer to the brim, but the namespace database
//! (daemon 0) and the daemon's log live on the same device as the objects:
//! had data taken the last block, the next commit would fail and nothing,
//! not even `rm`, could run again. So object writes stop short of a reserve
//! of free space, new names stop at half of it, and the rest stays for what
//! frees space (unlink, rmdir, rename) and for log lines.

use crate::failure::Failure;
use std::path::{Path, PathBuf};
use surge_proto::Errno;

/// The reserve is this fraction of the device, within the bounds below:
/// a few hundred namespace commits and log lines, whatever the device.
const RESERVE_DIVISOR: u64 = 16;
const MIN_RESERVE: u64 = 256 << 10;
const MAX_RESERVE: u64 = 64 << 20;

/// The file system holding a daemon's buffer directory.
pub struct Device {
    dir: PathBuf,
    reserve: u64,
}

impl Device {
    /// The device holding `dir`; its reserve follows from its size.
    pub fn holding(dir: &Path) -> Device {
        let size = surge_cluster::fs_space(dir).map_or(0, |(size, _)| size);
        Device { dir: dir.to_path_buf(), reserve: reserve_for(size) }
    }

    /// Ok if `bytes` more data still leave the reserve free. A device whose
    /// free space cannot be read is not refused: the kernel still is the judge.
    pub fn check_data(&self, bytes: u64) -> Result<(), Errno> {
        match self.free() {
            Some(free) if free < bytes.saturating_add(self.reserve) => Err(Errno::ENOSPC),
            _ => Ok(()),
        }
    }

    /// Ok unless less than half the reserve is free: a new name would eat
    /// into the room that deleting needs.
    pub fn check_new_name(&self) -> Result<(), Failure> {
        match self.free() {
            Some(free) if free < self.reserve / 2 => Err(Failure::new(
                Errno::ENOSPC,
                format!(
                    "the buffer device of {} is full ({free} bytes free): remove files (surge rm) to make room",
                    self.dir.display()
                ),
            )),
            _ => Ok(()),
        }
    }

    fn free(&self) -> Option<u64> {
        surge_cluster::fs_space(&self.dir).ok().map(|(_, free)| free)
    }
}

fn reserve_for(device_size: u64) -> u64 {
    (device_size / RESERVE_DIVISOR).clamp(MIN_RESERVE, MAX_RESERVE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_a_sixteenth_of_the_device_within_bounds() {
        assert_eq!(reserve_for(0), MIN_RESERVE);
        assert_eq!(reserve_for(32 << 20), 2 << 20);
        assert_eq!(reserve_for(1 << 40), MAX_RESERVE);
    }
}
