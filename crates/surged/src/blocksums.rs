//! Checksums at rest: a CRC-32C per `BLOCK` of every object, kept in a
//! sidecar file beside it (`<object>.sum`), so bytes damaged on the device
//! are caught when they are read, staged out or scrubbed.
//!
//! Entry `k` of the sidecar (4 bytes, little-endian) is the checksum of
//! block `k`, its bytes past the object's end counted as zeros. An entry of
//! 0 means "no checksum": a hole never written, a block whose write was in
//! progress, or an object written before checksums existed. Such a block is
//! served unchecked rather than refused (a CRC that really is 0 loses its
//! check, one block in 2^32).
//!
//! A write first zeroes the entries of its blocks, then writes the data,
//! then the new checksums. A crash in between (kill -9 of the daemon) leaves
//! blocks without checksum, never a checksum that disagrees with good data.
//! All changes of one object run under its lock (`store::Object`); readers
//! do not take it, so a reader that finds a mismatch looks again under the
//! lock before it reports damage (the writer may have been between the two).

use crate::checksum::{BlockSums, ChecksumStage, Running, BLOCK};
use crate::sys::{pread_full, pwrite_all};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use surge_proto::Errno;

const ENTRY: u64 = 4;
const BLOCK_LEN: u64 = BLOCK as u64;

/// The sidecar of one object.
pub struct SumFile(File);

/// The sidecar's path: the object's, with `.sum` appended.
fn sidecar(object: &Path) -> PathBuf {
    let mut name = object.as_os_str().to_owned();
    name.push(".sum");
    PathBuf::from(name)
}

impl SumFile {
    /// Opens (creating) the sidecar of the object at `object`; a `fresh`
    /// object starts with no checksums, whatever a sidecar left behind says.
    pub fn open(object: &Path, fresh: bool) -> io::Result<SumFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(fresh)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(sidecar(object))?;
        Ok(SumFile(file))
    }

    /// Removes the sidecar of the object at `object`; absent is fine.
    pub fn remove(object: &Path) -> io::Result<()> {
        match fs::remove_file(sidecar(object)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    pub fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    /// The entries of blocks `first..first + out.len()` (0 past the sidecar's end).
    fn read(&self, first: u64, out: &mut [u32]) -> Result<(), Errno> {
        let mut raw = vec![0u8; out.len() * ENTRY as usize];
        pread_full(&self.0, &mut raw, first * ENTRY)?;
        for (entry, bytes) in out.iter_mut().zip(raw.chunks_exact(ENTRY as usize)) {
            *entry = u32::from_le_bytes(bytes.try_into().expect("4-byte chunks"));
        }
        Ok(())
    }

    fn write(&self, first: u64, crcs: &[u32]) -> Result<(), Errno> {
        let raw: Vec<u8> = crcs.iter().flat_map(|crc| crc.to_le_bytes()).collect();
        match pwrite_all(&self.0, &raw, first * ENTRY) {
            (_, Some(errno)) => Err(errno),
            _ => Ok(()),
        }
    }

    fn clear(&self, first: u64, count: u64) -> Result<(), Errno> {
        self.write(first, &vec![0; count as usize])
    }
}

/// An object's data file and sidecar, with the stage that computes checksums.
pub struct Checked<'a> {
    pub data: &'a File,
    pub sums: &'a SumFile,
    pub stage: &'a dyn ChecksumStage,
}

/// Why a change was refused: the block it would have to re-checksum
/// already disagrees with its checksum (recomputing would bless the damage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DamagedBlock {
    pub offset: u64,
}

pub enum ChangeError {
    Damaged(DamagedBlock),
    Io(Errno),
}

impl From<Errno> for ChangeError {
    fn from(errno: Errno) -> ChangeError {
        ChangeError::Io(errno)
    }
}

/// The checksums of the whole blocks `data` covers when written at `offset`
/// (what the checksum stage gives for a write that came over the wire).
pub fn whole_blocks(stage: &dyn ChecksumStage, offset: u64, data: &[u8]) -> BlockSums {
    let first = offset.div_ceil(BLOCK_LEN);
    let skip = ((BLOCK_LEN - offset % BLOCK_LEN) % BLOCK_LEN).min(data.len() as u64) as usize;
    BlockSums { first, crcs: data[skip..].chunks_exact(BLOCK).map(|block| stage.block_crc(block)).collect() }
}

impl Checked<'_> {
    /// Writes `data` at `offset` with the checksums of the blocks it
    /// touches: `whole` for the blocks it covers, recomputed from the bytes
    /// around it for the two it covers in part (one read of each). Returns
    /// what `pwrite_all` does; blocks of a failed write keep no checksum.
    pub fn write(&self, offset: u64, data: &[u8], whole: &BlockSums) -> Result<(usize, Option<Errno>), ChangeError> {
        let end = offset + data.len() as u64;
        let (first, last) = (offset / BLOCK_LEN, (end - 1) / BLOCK_LEN);
        let mut edges: Vec<(u64, u32)> = Vec::with_capacity(2);
        for block in [first, last] {
            let (start, stop) = (block * BLOCK_LEN, (block + 1) * BLOCK_LEN);
            if (offset <= start && end >= stop) || edges.iter().any(|&(done, _)| done == block) {
                continue;
            }
            let mut bytes = [0u8; BLOCK];
            let old = self.checked_block(block, &mut bytes)?;
            let (lo, hi) = (offset.max(start), end.min(stop));
            bytes[(lo - start) as usize..(hi - start) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            edges.push((block, self.stage.block_crc(&bytes[..old.max((hi - start) as usize)])));
        }
        self.sums.clear(first, last - first + 1)?;
        let (written, error) = pwrite_all(self.data, data, offset);
        if error.is_none() {
            // Failing here leaves the blocks unchecked, the data intact.
            let _ = self.sums.write(whole.first, &whole.crcs);
            for (block, crc) in edges {
                let _ = self.sums.write(block, &[crc]);
            }
        }
        Ok((written, error))
    }

    /// Sets the object's length to `len`. Growing adds zeros, which every
    /// checksum already counts; shrinking into a block re-checksums it.
    pub fn truncate(&self, len: u64) -> Result<(), ChangeError> {
        let old = self.data.metadata().map_err(|e| Errno::from_io(&e))?.len();
        if len >= old {
            return self.data.set_len(len).map_err(|e| Errno::from_io(&e).into());
        }
        let block = len / BLOCK_LEN;
        let cut = (len % BLOCK_LEN) as usize;
        let kept = if cut > 0 {
            let mut bytes = [0u8; BLOCK];
            self.checked_block(block, &mut bytes)?;
            self.sums.clear(block, 1)?;
            Some(self.stage.block_crc(&bytes[..cut]))
        } else {
            None
        };
        self.data.set_len(len).map_err(|e| Errno::from_io(&e))?;
        self.sums.0.set_len(len.div_ceil(BLOCK_LEN) * ENTRY).map_err(|e| Errno::from_io(&e))?;
        if let Some(crc) = kept {
            self.sums.write(block, &[crc])?;
        }
        Ok(())
    }

    /// Reads block `block` into `bytes` and checks it; returns how many
    /// bytes the object has there.
    fn checked_block(&self, block: u64, bytes: &mut [u8; BLOCK]) -> Result<usize, ChangeError> {
        let n = pread_full(self.data, bytes, block * BLOCK_LEN)?;
        let mut stored = [0u32];
        self.sums.read(block, &mut stored)?;
        if stored[0] != 0 && self.stage.block_crc(&bytes[..n]) != stored[0] {
            return Err(ChangeError::Damaged(DamagedBlock { offset: block * BLOCK_LEN }));
        }
        Ok(n)
    }

    /// Checks `bytes` (the object's bytes at `offset`; with `at_end`, all
    /// it has from there): the blocks they overlap whose bytes disagree with
    /// their checksum, as object offsets, and the checksums of the whole
    /// blocks `bytes` holds (for [`fold_read`]). Blocks `bytes` holds only
    /// in part are read whole from the object.
    pub fn check(&self, offset: u64, bytes: &[u8], at_end: bool) -> Result<(Vec<u64>, BlockSums), Errno> {
        let mut whole = BlockSums { first: offset.div_ceil(BLOCK_LEN), crcs: Vec::new() };
        if bytes.is_empty() {
            return Ok((Vec::new(), whole));
        }
        let end = offset + bytes.len() as u64;
        let first = offset / BLOCK_LEN;
        let mut stored = vec![0u32; (end.div_ceil(BLOCK_LEN) - first) as usize];
        self.sums.read(first, &mut stored)?;
        let mut damaged = Vec::new();
        let mut scratch = [0u8; BLOCK];
        for (block, &crc) in (first..).zip(&stored) {
            let start = block * BLOCK_LEN;
            let inside = start >= offset && start + BLOCK_LEN <= end;
            let actual = if inside {
                let at = (start - offset) as usize;
                let actual = self.stage.block_crc(&bytes[at..at + BLOCK]);
                whole.crcs.push(actual);
                actual
            } else if crc == 0 {
                continue;
            } else if start >= offset && at_end {
                self.stage.block_crc(&bytes[(start - offset) as usize..])
            } else {
                let n = pread_full(self.data, &mut scratch, start)?;
                self.stage.block_crc(&scratch[..n])
            };
            if crc != 0 && actual != crc {
                damaged.push(start);
            }
        }
        Ok((damaged, whole))
    }
}

impl Checked<'_> {
    /// Adds to `sum` the checksum of the object's bytes `offset..offset +
    /// len` (all inside the object) without reading them where it can: a
    /// whole block with a checksum at rest counts by it; the others (no
    /// checksum, or cut by the range) are read. Nothing is checked: the
    /// caller copied the bytes elsewhere and compares the copy with this.
    pub fn sum_stored(&self, offset: u64, len: u64, sum: &mut dyn Running) -> Result<(), Errno> {
        let end = offset + len;
        let first = offset / BLOCK_LEN;
        let mut stored = vec![0u32; (end.div_ceil(BLOCK_LEN) - first) as usize];
        self.sums.read(first, &mut stored)?;
        let mut scratch = [0u8; BLOCK];
        for (block, &crc) in (first..).zip(&stored) {
            let (from, to) = ((block * BLOCK_LEN).max(offset), ((block + 1) * BLOCK_LEN).min(end));
            if to - from == BLOCK_LEN && crc != 0 {
                sum.update_block(crc);
            } else {
                let n = pread_full(self.data, &mut scratch[..(to - from) as usize], from)?;
                sum.update(&scratch[..n]);
            }
        }
        Ok(())
    }
}

/// Adds `bytes`, read at object offset `offset`, to `sum`, taking the
/// whole blocks by the checksums `check` gave for them.
pub fn fold_read(sum: &mut dyn Running, offset: u64, bytes: &[u8], whole: &BlockSums) {
    let head = ((whole.first * BLOCK_LEN).saturating_sub(offset) as usize).min(bytes.len());
    sum.update(&bytes[..head]);
    for &crc in &whole.crcs {
        sum.update_block(crc);
    }
    sum.update(&bytes[head + whole.crcs.len() * BLOCK..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{DirStore, ObjectStore};
    use std::sync::Arc;
    use surge_testkit::{flip_byte, pattern};

    fn object_file(dir: &Path, ino: u64) -> PathBuf {
        dir.join(format!("{:02x}", ino & 0xff)).join(format!("{ino:016x}"))
    }

    #[test]
    fn a_flipped_byte_is_eio_on_read_and_listed_by_verify_and_a_whole_block_rewrite_heals_it() {
        let t = tempfile::tempdir().unwrap();
        let store = DirStore::open(t.path(), None).unwrap();
        let data = pattern(1, 5 * BLOCK + 100);
        store.write_at(7, 0, &data).unwrap();
        flip_byte(&object_file(t.path(), 7), 2 * BLOCK as u64 + 10);
        let mut buf = vec![0u8; data.len()];
        let failure = store.read_at(7, 0, &mut buf).unwrap_err();
        assert_eq!(failure.errno, Errno::EIO);
        assert!(failure.message.contains("object offset 8192 of inode 7"), "{}", failure.message);
        // A read of one byte of the block checks the whole block; other blocks read fine.
        assert_eq!(store.read_at(7, 3 * BLOCK as u64 - 1, &mut buf[..1]).unwrap_err().errno, Errno::EIO);
        assert_eq!(store.read_at(7, 3 * BLOCK as u64, &mut buf).unwrap(), 2 * BLOCK + 100);
        assert_eq!(store.verify(7, 0, u64::MAX).unwrap().damaged, vec![2 * BLOCK as u64]);
        // Writing into part of the damaged block would bless the damage.
        assert_eq!(store.write_at(7, 2 * BLOCK as u64 + 5, b"x"), Err(Errno::EIO));
        assert_eq!(store.truncate(7, 2 * BLOCK as u64 + 5).unwrap_err().errno, Errno::EIO);
        store.write_at(7, 2 * BLOCK as u64, &data[2 * BLOCK..3 * BLOCK]).unwrap();
        let reply = store.verify(7, 0, u64::MAX).unwrap();
        assert_eq!((reply.checked, reply.damaged), (data.len() as u64, vec![]));
        assert_eq!(store.read_at(7, 0, &mut buf).unwrap(), data.len());
        assert_eq!(buf, data);
    }

    #[test]
    fn holes_truncates_and_partial_writes_never_raise_false_alarms() {
        let t = tempfile::tempdir().unwrap();
        let store = DirStore::open(t.path(), None).unwrap();
        let mut model = vec![0u8; 0];
        let mut put = |store: &DirStore, offset: usize, data: &[u8]| {
            store.write_at(3, offset as u64, data).unwrap();
            model.resize(model.len().max(offset + data.len()), 0);
            model[offset..offset + data.len()].copy_from_slice(data);
            model.clone()
        };
        put(&store, 10 << 20, b"far");
        put(&store, 5, &pattern(2, 3 * BLOCK));
        put(&store, BLOCK + 7, b"inside one block");
        let model = put(&store, 2 * BLOCK - 3, &pattern(3, 10));
        let check = |want: &[u8]| {
            let mut buf = vec![0xAAu8; want.len() + 10];
            assert_eq!(store.read_at(3, 0, &mut buf).unwrap(), want.len());
            assert_eq!(&buf[..want.len()], want);
            for offset in [0usize, 1, BLOCK - 1, 3 * BLOCK + 1, want.len().saturating_sub(2)] {
                let n = store.read_at(3, offset as u64, &mut buf[..7]).unwrap();
                assert_eq!(&buf[..n], &want[offset.min(want.len())..(offset + 7).min(want.len())]);
            }
            assert_eq!(store.verify(3, 0, u64::MAX).unwrap().damaged, Vec::<u64>::new());
        };
        check(&model);
        // (length, bytes of the model kept): the last one grows the object back.
        for (len, kept) in [(2 * BLOCK + 100, 2 * BLOCK + 100), (2 * BLOCK, 2 * BLOCK), (10, 10), (3 * BLOCK + 1, 10)] {
            store.truncate(3, len as u64).unwrap();
            let mut want = model[..kept].to_vec();
            want.resize(len, 0);
            check(&want);
        }
    }

    #[test]
    fn readers_racing_writers_of_one_object_never_see_damage() {
        let t = tempfile::tempdir().unwrap();
        let store = Arc::new(DirStore::open(t.path(), None).unwrap());
        store.write_at(1, 0, &pattern(0, 8 * BLOCK)).unwrap();
        let writers: Vec<_> = (0..2u8)
            .map(|k| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..300usize {
                        let offset = (i * 997 + k as usize * 5000) % (7 * BLOCK);
                        store
                            .write_at(1, offset as u64, &pattern(u64::from(k.wrapping_add(i as u8)), BLOCK + i % 50))
                            .unwrap();
                    }
                })
            })
            .collect();
        let mut buf = vec![0u8; 8 * BLOCK];
        while !writers.iter().all(|w| w.is_finished()) {
            store.read_at(1, 3, &mut buf).unwrap();
        }
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(store.verify(1, 0, u64::MAX).unwrap().damaged, Vec::<u64>::new());
    }
}
