//! Writes to checkpoints the data manager placed on the PFS directly
//! (`PfsWrite`, `PfsSync` on daemon 0; docs/bbos.md, "Direct-to-PFS
//! placement"). A write goes into the file at its PFS path, in place, at
//! the pace of the daemon's direct bucket (`rates::Rates::direct`), and is
//! remembered as an unverified extent with the CRC-32C of the bytes
//! received (the frame's checksum vouched for them on the wire). A sync
//! makes the file and its directory entry durable, drops the file from the
//! page cache and re-reads every unverified extent from the device: its
//! CRC must be the one received, as a demotion's copy is checked
//! (`stage_out`), else the sync fails with EIO.
//!
//! Contiguous writes merge into one extent (their CRCs chain); a write
//! over an extent makes that extent's CRC stale, so the older extent is
//! dropped and only the newer bytes are checked.

use crate::failure::Failure;
use crate::pfs::Pfs;
use crate::rates::Bucket;
use crate::sys::{self, pread_full, pwrite_all};
use surge_proto::Errno;

/// Bytes re-read at once when a sync verifies.
const VERIFY_CHUNK: usize = 4 << 20;

/// A range written since the last sync, and the CRC-32C of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Extent {
    offset: u64,
    len: u64,
    crc: u32,
}

impl Extent {
    fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// The writes to one direct file not yet verified by a sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unverified {
    extents: Vec<Extent>,
}

impl Unverified {
    /// Records `data`, just written at `offset`.
    pub fn wrote(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        if let Some(last) = self.extents.last_mut().filter(|last| last.end() == offset) {
            last.crc = crc32c::crc32c_append(last.crc, data);
            last.len += data.len() as u64;
            return;
        }
        self.extents.retain(|e| e.end() <= offset || e.offset >= end);
        self.extents.push(Extent { offset, len: data.len() as u64, crc: crc32c::crc32c(data) });
    }
}

/// Writes `data` at `offset` into the PFS file `path` at `pacer`'s rate;
/// the bytes written (short only when the PFS filled up part way: the
/// error then follows at the next write).
pub fn write(pfs: &Pfs, path: &str, offset: u64, data: &[u8], pacer: &Bucket) -> Result<usize, Failure> {
    let file = pfs.open_for_writing(path, false)?;
    let (written, error) = pacer.carry(data.len() as u64, || pwrite_all(&file, data, offset));
    match (written, error) {
        (0, Some(errno)) => {
            Err(Failure::new(errno, format!("{path}: writing {} bytes at {offset} on the PFS failed", data.len())))
        }
        (n, _) => Ok(n),
    }
}

/// Makes `path` durable on the PFS and verifies what `unverified` records
/// against what the device gives back (see the module doc).
pub fn sync(pfs: &Pfs, path: &str, unverified: &Unverified) -> Result<(), Failure> {
    let file = pfs.open_for_writing(path, false)?;
    file.sync_all()?;
    pfs.sync_dir_of(path)?;
    let mut buf = vec![0u8; VERIFY_CHUNK];
    for extent in &unverified.extents {
        sys::drop_cached(&file, extent.offset, extent.len);
        let (mut crc, mut at) = (0u32, extent.offset);
        while at < extent.end() {
            let want = ((extent.end() - at) as usize).min(VERIFY_CHUNK);
            let n = pread_full(&file, &mut buf[..want], at)?;
            if n == 0 {
                break;
            }
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            at += n as u64;
        }
        if at != extent.end() || crc != extent.crc {
            return Err(Failure::new(
                Errno::EIO,
                format!(
                    "{path}: bytes {}..{} read back from the PFS differ from those written \
                     ({} bytes, CRC-32C {crc:08x}, written {:08x})",
                    extent.offset,
                    extent.end(),
                    at - extent.offset,
                    extent.crc
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;
    use std::time::Duration;

    #[test]
    fn contiguous_writes_merge_and_an_overwrite_drops_the_stale_extent() {
        let mut u = Unverified::default();
        u.wrote(0, b"abcd");
        u.wrote(4, b"efgh");
        assert_eq!(u.extents, [Extent { offset: 0, len: 8, crc: crc32c::crc32c(b"abcdefgh") }]);
        u.wrote(100, b"zz");
        u.wrote(2, b"XY");
        assert_eq!(u.extents.len(), 2, "{:?}", u.extents);
        assert_eq!(u.extents[1], Extent { offset: 2, len: 2, crc: crc32c::crc32c(b"XY") });
    }

    #[test]
    fn a_sync_verifies_what_was_written_and_names_bytes_changed_behind_its_back() {
        let dir = tempfile::tempdir().unwrap();
        let pfs = Pfs::open(dir.path()).unwrap();
        pfs.create_file("/ckpt/7", 0o644).unwrap();
        let pacer = Bucket::new(Duration::from_millis(20));
        let mut u = Unverified::default();
        for (offset, data) in [(0u64, &b"first "[..]), (6, b"second")] {
            assert_eq!(write(&pfs, "/ckpt/7", offset, data, &pacer).unwrap(), data.len());
            u.wrote(offset, data);
        }
        sync(&pfs, "/ckpt/7", &u).unwrap();
        assert_eq!(std::fs::read(dir.path().join("ckpt/7")).unwrap(), b"first second");
        // Damage on the PFS is found, not passed off as verified.
        let host = std::fs::OpenOptions::new().write(true).open(dir.path().join("ckpt/7")).unwrap();
        host.write_at(b"X", 3).unwrap();
        let failure = sync(&pfs, "/ckpt/7", &u).unwrap_err();
        assert_eq!(failure.errno, Errno::EIO);
        assert!(failure.text().contains("bytes 0..12"), "{}", failure.text());
        // A file that disappeared from the PFS is an error for the writer, never a silent loss.
        std::fs::remove_file(dir.path().join("ckpt/7")).unwrap();
        assert_eq!(write(&pfs, "/ckpt/7", 12, b"more", &pacer).unwrap_err().errno, Errno::ENOENT);
        assert_eq!(pfs.create_file("/ckpt", 0o644).unwrap_err(), Errno::EEXIST);
    }
}
