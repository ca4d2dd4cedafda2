//! The replicator's side of daemon 0's data manager (`replicator`): the
//! replica directory, the replicator's own bucket (`--drain-replica-rate`,
//! as the daemons' rates, `rates::Bucket`), the file under way and the
//! figures of the report, and one verified copy: the PFS copy copied into
//! a hidden temp beside its replica with `copy_file_range` (read and write
//! where the kernel cannot copy between the two file systems), made
//! durable, dropped from the page cache and read back, its CRC-32C checked
//! against the PFS copy's. The caller renames the temp into place.

use crate::background::Wake;
use crate::failure::Failure;
use crate::locking::lock;
use crate::rates::Bucket;
use crate::sys::{self, pread_full};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use surge_proto::drain::DrainReplicas;
use surge_proto::Errno;

/// Bytes one copy step moves at most (and reads back when verifying).
const CHUNK: usize = 4 << 20;
/// Idle time of the replicator's bucket that still counts as busy.
const BURST: Duration = Duration::from_millis(100);

/// The replicator's settings and what it did.
pub(crate) struct Replicas {
    pub dir: PathBuf,
    pacer: Bucket,
    pub wake: Wake,
    pub progress: Mutex<Progress>,
}

#[derive(Default)]
pub(crate) struct Progress {
    /// The file being copied, and whether a removal, a rename or a newer
    /// demotion overtook it since (its copy is then stale).
    pub in_flight: Option<String>,
    pub overtaken: bool,
    pub files: u64,
    pub bytes: u64,
    pub failures: u64,
    /// Time spent copying and verifying the replicas made.
    pub busy: Duration,
}

impl Progress {
    /// Marks the copy under way stale when `path` is its file or a directory above it.
    pub fn overtake(&mut self, path: &str) {
        if self.in_flight.as_deref().is_some_and(|f| under(f, path)) {
            self.overtaken = true;
        }
    }
}

/// Whether `path` is `top` or lies under it.
pub(crate) fn under(path: &str, top: &str) -> bool {
    path.strip_prefix(top).is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || top == "/")
}

impl Replicas {
    /// Replicas in `dir`, copied at `rate` bytes/s (0: unlimited).
    pub fn new(dir: PathBuf, rate: u64) -> Replicas {
        let pacer = Bucket::new(BURST);
        pacer.set_rate(rate);
        Replicas { dir, pacer, wake: Wake::default(), progress: Mutex::default() }
    }

    /// Where the replica of namespace path `path` goes.
    pub fn replica_of(&self, path: &str) -> PathBuf {
        self.dir.join(path.trim_start_matches('/'))
    }

    /// The figures of the report; `pending` from R-order.
    pub fn report(&self, pending: u64) -> DrainReplicas {
        let progress = lock(&self.progress);
        let seconds = progress.busy.as_secs_f64();
        DrainReplicas {
            dir: self.dir.display().to_string(),
            rate_limit_bps: self.pacer.rate(),
            files: progress.files,
            bytes: progress.bytes,
            pending,
            failures: progress.failures,
            rate_bps: if seconds > 0.0 { (progress.bytes as f64 / seconds) as u64 } else { 0 },
        }
    }

    /// Copies `source` (`len` bytes) to `temp`, durably, and checks what
    /// `temp` reads back from its device against `source`.
    pub fn copy_verified(&self, source: &File, len: u64, mode: u32, temp: &Path) -> Result<(), Failure> {
        let failed =
            |what: &str, e: Errno| Failure::new(e, format!("replica {}: {what} ({})", temp.display(), e.name()));
        let out = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(temp)
            .map_err(|e| failed("cannot create it", Errno::from_io(&e)))?;
        let (mut at, mut kernel, mut buf) = (0u64, true, Vec::new());
        while at < len {
            let want = self.pacer.piece(CHUNK).min((len - at) as usize);
            let copied = self.pacer.carry(want as u64, || match kernel {
                true => sys::copy_range(source, at, &out, at, want as u64),
                false => copy_by_reading(source, &out, at, want, &mut buf),
            });
            match copied {
                // Another file system: the kernel does not copy across, read and write instead.
                Err(Errno::EXDEV | Errno::EINVAL | Errno::ENOSYS | Errno(libc::EOPNOTSUPP)) if kernel => kernel = false,
                Err(e) => return Err(failed(&format!("copying byte {at} on"), e)),
                Ok(0) => return Err(failed("the PFS copy ended early", Errno::EIO)),
                Ok(n) => at += n,
            }
        }
        out.set_permissions(fs::Permissions::from_mode(mode & 0o7777))
            .and_then(|()| out.sync_all())
            .map_err(|e| failed("cannot make it durable", Errno::from_io(&e)))?;
        sys::drop_cached(&out, 0, len);
        let (written, original) = (crc_of(&out, len)?, crc_of(source, len)?);
        if written != original {
            return Err(failed(
                &format!("reads back wrong (CRC-32C {written:08x}, the PFS copy's {original:08x})"),
                Errno::EIO,
            ));
        }
        Ok(())
    }
}

/// `len` bytes at `at` from `source` to `out` through `buf`.
fn copy_by_reading(source: &File, out: &File, at: u64, len: usize, buf: &mut Vec<u8>) -> Result<u64, Errno> {
    buf.resize(len, 0);
    let n = pread_full(source, buf, at)?;
    match sys::pwrite_all(out, &buf[..n], at) {
        (_, Some(errno)) => Err(errno),
        (written, None) => Ok(written as u64),
    }
}

/// The CRC-32C of the first `len` bytes of `file` (EIO if it is shorter).
fn crc_of(file: &File, len: u64) -> Result<u32, Failure> {
    let (mut crc, mut at, mut buf) = (0u32, 0u64, vec![0u8; CHUNK]);
    while at < len {
        let want = ((len - at) as usize).min(CHUNK);
        match pread_full(file, &mut buf[..want], at)? {
            0 => return Err(Failure::new(Errno::EIO, format!("{at} bytes read back of {len}"))),
            n => (crc, at) = (crc32c::crc32c_append(crc, &buf[..n]), at + n as u64),
        }
    }
    Ok(crc)
}

/// The hidden temp a replica is made in, beside it.
pub(crate) fn temp_of(replica: &Path) -> PathBuf {
    let name = replica.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    replica.with_file_name(format!(".{name}.surge-replica"))
}

pub(crate) fn io_failure(e: &io::Error, what: String) -> Failure {
    Failure::new(Errno::from_io(e), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_under_itself_its_directories_and_the_root_only() {
        assert!(under("/a/b", "/a/b") && under("/a/b", "/a") && under("/a/b", "/"));
        assert!(!under("/a/bc", "/a/b") && !under("/a", "/a/b"));
    }

    #[test]
    fn a_replica_is_made_in_a_hidden_temp_beside_it() {
        assert_eq!(temp_of(Path::new("/r/a/ckpt_3")), Path::new("/r/a/.ckpt_3.surge-replica"));
    }
}
