//! Checksums at rest: a CRC-32C per `BLOCK` of every object, kept in a
//! sidecar file beside it (`<object>.sum`), so bytes damaged on the device
//! are caught when they are read, staged out or scrubbed.
//!
//! The sidecar starts with a header: a magic number and the object's
//! length as the daemon last set it, with their own CRC-32C. An object file
//! whose length disagrees with its record was extended, truncated or
//! replaced outside Surge ([`length_disagrees`]); a sidecar without a valid
//! header (removed, zeroed, from another program) makes the whole object
//! suspect, since nothing then says what the object should hold.
//!
//! Entry `k` after the header (4 bytes, little-endian) describes block `k`,
//! its bytes past the object's end counted as zeros: [`HOLE`] (0) for a
//! block never written, whose bytes must all be zero; [`UNSURE`] (1) for a
//! block whose write was under way when the daemon stopped, served
//! unchecked; any other value is the block's checksum ([`encode`] moves the
//! two CRCs that collide with these markers aside, which costs their check
//! one value in 2^31). A zeroed sidecar therefore says "all holes", and
//! any written byte then fails its check instead of being served
//! unchecked.
//!
//! A write marks its blocks unsure, raises the recorded length when it
//! grows the object, writes the data, then the new checksums. A crash in
//! between (kill -9 of the daemon) leaves unsure blocks, never a checksum
//! that disagrees with good data, and a length that differs from the
//! record only across unsure blocks or holes, which the next open accepts
//! and records ([`length_disagrees`]). All changes of one object run under
//! its lock (`store::Object`); readers do not take it, so a reader that
//! finds a mismatch looks again under the lock before it reports damage
//! (the writer may have been between the two).

use crate::checksum::{BlockSums, ChecksumStage, Running, BLOCK};
use crate::sys::{pread_full, pwrite_all};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
pub use surge_proto::sums::{encode, HOLE, UNSURE};
use surge_proto::sums::{ENTRY, HEADER_LEN};
use surge_proto::Errno;

const BLOCK_LEN: u64 = BLOCK as u64;
/// "SGS2", then the recorded length (u64), then the CRC-32C of both.
const MAGIC: [u8; 4] = *b"SGS2";
/// The CRC of a block of zeros (what a hole holds), as `block_crc` gives it.
fn zero_block_crc(stage: &dyn ChecksumStage) -> u32 {
    stage.block_crc(&[])
}

/// The sidecar of one object.
pub struct SumFile(File);

/// The sidecar's path: the object's, with `.sum` appended.
fn sidecar(object: &Path) -> PathBuf {
    let mut name = object.as_os_str().to_owned();
    name.push(".sum");
    PathBuf::from(name)
}

impl SumFile {
    /// Makes the sidecar of a new object at `object`, empty and with no
    /// checksums, whatever a sidecar left behind says.
    pub fn create(object: &Path) -> io::Result<SumFile> {
        let sums = SumFile::blank(object)?;
        sums.record_length(0).map_err(|errno| io::Error::from_raw_os_error(errno.0))?;
        Ok(sums)
    }

    /// Makes an empty sidecar for the object at `object`, without a record.
    pub fn blank(object: &Path) -> io::Result<SumFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(sidecar(object))?;
        Ok(SumFile(file))
    }

    /// Opens the sidecar of the existing object at `object`; `None` when it is gone.
    pub fn open(object: &Path) -> io::Result<Option<SumFile>> {
        let opened = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(sidecar(object));
        match opened {
            Ok(file) => Ok(Some(SumFile(file))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
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

    /// This very sidecar opened again read-only (through `/proc/self/fd`,
    /// so no path lookup can find another file), for a client that reads
    /// the checksums itself and must never write them.
    pub fn reopen_read_only(&self) -> io::Result<File> {
        use std::os::fd::AsRawFd;
        OpenOptions::new().read(true).open(format!("/proc/self/fd/{}", self.0.as_raw_fd()))
    }

    /// The object's length as last recorded; `None` when the header is
    /// missing or damaged (the sidecar was removed, zeroed or replaced).
    pub fn recorded_length(&self) -> Result<Option<u64>, Errno> {
        let mut header = [0u8; HEADER_LEN as usize];
        if pread_full(&self.0, &mut header, 0)? < header.len() || header[..4] != MAGIC {
            return Ok(None);
        }
        let crc = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        if crc32c::crc32c(&header[..12]) != crc {
            return Ok(None);
        }
        Ok(Some(u64::from_le_bytes(header[4..12].try_into().expect("8 bytes"))))
    }

    /// Records `len` as the object's length.
    pub fn record_length(&self, len: u64) -> Result<(), Errno> {
        let mut header = [0u8; HEADER_LEN as usize];
        header[..4].copy_from_slice(&MAGIC);
        header[4..12].copy_from_slice(&len.to_le_bytes());
        let crc = crc32c::crc32c(&header[..12]);
        header[12..16].copy_from_slice(&crc.to_le_bytes());
        match pwrite_all(&self.0, &header, 0) {
            (_, Some(errno)) => Err(errno),
            _ => Ok(()),
        }
    }

    /// The entries of blocks `first..first + out.len()` (holes past the sidecar's end).
    pub fn read(&self, first: u64, out: &mut [u32]) -> Result<(), Errno> {
        let mut raw = vec![0u8; out.len() * ENTRY as usize];
        pread_full(&self.0, &mut raw, HEADER_LEN + first * ENTRY)?;
        for (entry, bytes) in out.iter_mut().zip(raw.chunks_exact(ENTRY as usize)) {
            *entry = u32::from_le_bytes(bytes.try_into().expect("4-byte chunks"));
        }
        Ok(())
    }

    /// Stores `entries` (already encoded, or markers) from block `first` on.
    fn write(&self, first: u64, entries: &[u32]) -> Result<(), Errno> {
        let raw: Vec<u8> = entries.iter().flat_map(|entry| entry.to_le_bytes()).collect();
        match pwrite_all(&self.0, &raw, HEADER_LEN + first * ENTRY) {
            (_, Some(errno)) => Err(errno),
            _ => Ok(()),
        }
    }

    /// Stores the checksums `crcs` of blocks from `first` on.
    fn write_crcs(&self, first: u64, crcs: &[u32]) -> Result<(), Errno> {
        let entries: Vec<u32> = crcs.iter().map(|&crc| encode(crc)).collect();
        self.write(first, &entries)
    }

    fn mark_unsure(&self, first: u64, count: u64) -> Result<(), Errno> {
        self.write(first, &vec![UNSURE; count as usize])
    }

    /// How many blocks have an entry (those past read as holes).
    fn entries(&self) -> Result<u64, Errno> {
        let len = self.0.metadata().map_err(|e| Errno::from_io(&e))?.len();
        Ok(len.saturating_sub(HEADER_LEN) / ENTRY)
    }

    /// Drops the entries of blocks from `first` on (they read as holes).
    fn cut(&self, first: u64) -> Result<(), Errno> {
        self.0.set_len(HEADER_LEN + first * ENTRY).map_err(|e| Errno::from_io(&e))
    }
}

/// Why an object file's length `actual` may not be trusted when its
/// sidecar records `recorded`, or `None` when it may: equal, or different
/// only across blocks a crash left unsure (and, below the record, holes,
/// which read as zeros either way). Bytes past the record in any other
/// block were put there outside Surge; written blocks missing below it
/// were cut off outside Surge.
pub fn length_disagrees(sums: &SumFile, recorded: u64, actual: u64) -> Result<Option<String>, Errno> {
    if recorded == actual {
        return Ok(None);
    }
    let (from, to) = if actual > recorded {
        (recorded / BLOCK_LEN, actual.div_ceil(BLOCK_LEN))
    } else {
        (actual.div_ceil(BLOCK_LEN), recorded.div_ceil(BLOCK_LEN))
    };
    let mut entries = vec![0u32; (to - from) as usize];
    sums.read(from, &mut entries)?;
    let explained = entries.iter().all(|&entry| entry == UNSURE || (actual < recorded && entry == HOLE));
    if explained {
        return Ok(None);
    }
    Ok(Some(changed_outside(recorded, actual)))
}

/// What happened to an object file of `actual` bytes whose record says `recorded`.
pub fn changed_outside(recorded: u64, actual: u64) -> String {
    let how = if actual > recorded { "extended" } else { "truncated" };
    format!("{how} outside Surge: the object file holds {actual} bytes, its record says {recorded}")
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
    let mut crcs = vec![0; (data.len() - skip) / BLOCK];
    stage.block_crcs(&data[skip..skip + crcs.len() * BLOCK], &mut crcs);
    BlockSums { first, crcs }
}

impl Checked<'_> {
    /// Writes `data` at `offset` with the checksums of the blocks it
    /// touches: `whole` for the blocks it covers, recomputed from the bytes
    /// around it for the two it covers in part (one read of each), raising
    /// the recorded length from `recorded` when it grows the object.
    /// Returns what `pwrite_all` does and the length now recorded; blocks
    /// of a failed write stay unsure.
    pub fn write(
        &self,
        offset: u64,
        data: &[u8],
        whole: &BlockSums,
        recorded: u64,
    ) -> Result<(usize, Option<Errno>, u64), ChangeError> {
        let end = offset + data.len() as u64;
        let (first, last) = (offset / BLOCK_LEN, (end - 1) / BLOCK_LEN);
        let edges = self.edges(offset, end, |covered, at| {
            covered.copy_from_slice(&data[(at - offset) as usize..][..covered.len()]);
        })?;
        self.open_extent(first, last, end, recorded)?;
        let (written, error) = pwrite_all(self.data, data, offset);
        let mut now = recorded.max(end);
        if written < data.len() && end > recorded {
            now = recorded.max(offset + written as u64);
            // Failing here leaves a record past the data across unsure blocks, which the next open accepts.
            let _ = self.sums.record_length(now);
        }
        if error.is_none() {
            // Failing here leaves the blocks unsure, the data intact.
            let _ = self.sums.write_crcs(whole.first, &whole.crcs);
            for (block, crc) in edges {
                let _ = self.sums.write_crcs(block, &[crc]);
            }
        }
        Ok((written, error, now))
    }

    /// Readies blocks `first..=last` for new bytes ending at `end`: they
    /// become unsure, and the record grows first when the object does, so
    /// a crash before the data lands leaves the object short of it only
    /// across the unsure blocks and holes.
    fn open_extent(&self, first: u64, last: u64, end: u64, recorded: u64) -> Result<(), Errno> {
        self.sums.mark_unsure(first, last - first + 1)?;
        if end > recorded {
            self.sums.record_length(end)?;
        }
        Ok(())
    }

    /// What a write does before its data, for `offset..end` written by
    /// someone else (a client on the daemon's node, into the object's
    /// file): the blocks it covers in part are checked against their
    /// checksums (refused when damaged: the client's new checksum would
    /// bless the damage), then the extent is opened (`open_extent`).
    pub fn grant(&self, offset: u64, end: u64, recorded: u64) -> Result<(), ChangeError> {
        self.edges(offset, end, |_, _| {})?;
        self.open_extent(offset / BLOCK_LEN, (end - 1) / BLOCK_LEN, end, recorded)?;
        Ok(())
    }

    /// Ends a granted extent whose blocks from `first` on now hold bytes
    /// with checksums `crcs` (given by the client, or computed here from
    /// the file), the object being `len` bytes long: its blocks past the
    /// end become holes, the record says `len` when `recorded` does not.
    pub fn close_grant(&self, first: u64, crcs: &[u32], len: u64, recorded: u64) -> Result<(), Errno> {
        if len != recorded {
            self.sums.record_length(len)?;
        }
        let inside = (len.div_ceil(BLOCK_LEN).saturating_sub(first) as usize).min(crcs.len());
        self.sums.write_crcs(first, &crcs[..inside])?;
        if inside < crcs.len() {
            self.sums.write(first + inside as u64, &vec![HOLE; crcs.len() - inside])?;
        }
        Ok(())
    }

    /// The new checksums of the blocks `offset..end` covers in part (its
    /// first and last, when not whole: none, one or two), checksummed in
    /// one batch: each is read and checked (refused when it disagrees with
    /// its checksum: recomputing would bless the damage), then `change`
    /// puts the new bytes in the part covered (given with its object
    /// offset).
    fn edges(&self, offset: u64, end: u64, change: impl Fn(&mut [u8], u64)) -> Result<Vec<(u64, u32)>, ChangeError> {
        let covered_whole = |block: u64| offset <= block * BLOCK_LEN && end >= (block + 1) * BLOCK_LEN;
        let (first, last) = (offset / BLOCK_LEN, (end - 1) / BLOCK_LEN);
        if covered_whole(first) && covered_whole(last) {
            // A block-aligned change: nothing to read back.
            return Ok(Vec::new());
        }
        let mut blocks = Vec::with_capacity(2);
        // Zeros past what the object holds, as a block's checksum counts them.
        let mut bytes = [0u8; 2 * BLOCK];
        for block in [first, last] {
            if covered_whole(block) || blocks.contains(&block) {
                continue;
            }
            let (start, stop) = (block * BLOCK_LEN, (block + 1) * BLOCK_LEN);
            let held = &mut bytes[blocks.len() * BLOCK..][..BLOCK];
            self.checked_block(block, held)?;
            let (lo, hi) = (offset.max(start), end.min(stop));
            change(&mut held[(lo - start) as usize..(hi - start) as usize], lo);
            blocks.push(block);
        }
        let mut crcs = [0u32; 2];
        self.stage.block_crcs(&bytes[..blocks.len() * BLOCK], &mut crcs[..blocks.len()]);
        Ok(blocks.into_iter().zip(crcs).collect())
    }

    /// Sets the object's length from `recorded` to `len`. Growing adds
    /// zeros, which every checksum already counts; shrinking into a block
    /// re-checksums it. Shrinking marks the blocks it cuts unsure (those
    /// with entries: the rest are holes) and cuts the file before the
    /// record, so a crash in between leaves the file short of its record
    /// only across unsure blocks and holes, which the next open accepts.
    pub fn truncate(&self, recorded: u64, len: u64) -> Result<(), ChangeError> {
        if len >= recorded {
            self.sums.record_length(len)?;
            return self.data.set_len(len).map_err(|e| Errno::from_io(&e).into());
        }
        let block = len / BLOCK_LEN;
        let cut = (len % BLOCK_LEN) as usize;
        let kept = if cut > 0 {
            let mut bytes = [0u8; BLOCK];
            self.checked_block(block, &mut bytes)?;
            // A batch of one: the block the new end cuts.
            Some(self.stage.block_crc(&bytes[..cut]))
        } else {
            None
        };
        let with_entries = recorded.div_ceil(BLOCK_LEN).min(self.sums.entries()?);
        if with_entries > block {
            self.sums.mark_unsure(block, with_entries - block)?;
        }
        self.data.set_len(len).map_err(|e| Errno::from_io(&e))?;
        self.sums.record_length(len)?;
        self.sums.cut(len.div_ceil(BLOCK_LEN))?;
        if let Some(crc) = kept {
            self.sums.write_crcs(block, &[crc])?;
        }
        Ok(())
    }

    /// Makes `offset..end` (inside the recorded length) read as zeros by
    /// `punch` (the file system's hole punch, which keeps the length): the
    /// whole blocks it covers become holes, the two it covers in part are
    /// checksummed again with zeros there (refused when they already
    /// disagree with their checksum: recomputing would bless the damage).
    /// As for a write, the blocks are unsure while the file system works;
    /// should it refuse, their entries are put back.
    pub fn zero(&self, offset: u64, end: u64, punch: impl FnOnce() -> Result<(), Errno>) -> Result<(), ChangeError> {
        let (first, last) = (offset / BLOCK_LEN, (end - 1) / BLOCK_LEN);
        let mut before = vec![HOLE; (last - first + 1) as usize];
        self.sums.read(first, &mut before)?;
        let mut after = vec![HOLE; before.len()];
        for (block, crc) in self.edges(offset, end, |covered, _| covered.fill(0))? {
            after[(block - first) as usize] = encode(crc);
        }
        self.sums.mark_unsure(first, last - first + 1)?;
        if let Err(errno) = punch() {
            // Nothing changed: the old entries are still true.
            let _ = self.sums.write(first, &before);
            return Err(errno.into());
        }
        self.sums.write(first, &after)?;
        Ok(())
    }

    /// Whether every block that `offset..offset + len` overlaps is a hole
    /// (or unsure) by its entry: bytes the file system reports as a hole
    /// there are then what the object must hold, and a copy may skip them.
    /// A block with a checksum was written: its bytes are read and checked.
    pub fn holes_only(&self, offset: u64, len: u64) -> Result<bool, Errno> {
        let first = offset / BLOCK_LEN;
        let mut entries = vec![HOLE; ((offset + len).div_ceil(BLOCK_LEN) - first) as usize];
        self.sums.read(first, &mut entries)?;
        Ok(entries.iter().all(|&entry| entry == HOLE || entry == UNSURE))
    }

    /// Reads block `block` into `bytes` and checks it; returns how many
    /// bytes the object has there.
    fn checked_block(&self, block: u64, bytes: &mut [u8]) -> Result<usize, ChangeError> {
        let n = pread_full(self.data, bytes, block * BLOCK_LEN)?;
        let mut stored = [0u32];
        self.sums.read(block, &mut stored)?;
        let intact = match stored[0] {
            HOLE => bytes[..n].iter().all(|&b| b == 0),
            UNSURE => true,
            entry => encode(self.stage.block_crc(&bytes[..n])) == entry,
        };
        if !intact {
            return Err(ChangeError::Damaged(DamagedBlock { offset: block * BLOCK_LEN }));
        }
        Ok(n)
    }

    /// Checks `bytes` (the object's bytes at `offset`; with `at_end`, all
    /// it has from there): the blocks they overlap whose bytes disagree with
    /// their entry (a checksum, or a hole that holds more than zeros), as
    /// object offsets, and the checksums of the whole blocks `bytes` holds
    /// (for [`fold_read`]). Blocks `bytes` holds only in part are read
    /// whole from the object, unless they are holes: then the bytes read
    /// must be zeros.
    pub fn check(&self, offset: u64, bytes: &[u8], at_end: bool) -> Result<(Vec<u64>, BlockSums), Errno> {
        let mut whole = BlockSums { first: offset.div_ceil(BLOCK_LEN), crcs: Vec::new() };
        if bytes.is_empty() {
            return Ok((Vec::new(), whole));
        }
        let end = offset + bytes.len() as u64;
        let first = offset / BLOCK_LEN;
        let mut stored = vec![0u32; (end.div_ceil(BLOCK_LEN) - first) as usize];
        self.sums.read(first, &mut stored)?;
        // The whole blocks `bytes` holds, in one batch.
        let skip = ((whole.first * BLOCK_LEN - offset) as usize).min(bytes.len());
        whole.crcs.resize((bytes.len() - skip) / BLOCK, 0);
        self.stage.block_crcs(&bytes[skip..skip + whole.crcs.len() * BLOCK], &mut whole.crcs);
        let mut zero_crc = None;
        let mut damaged = Vec::new();
        let mut scratch = [0u8; BLOCK];
        for (block, &entry) in (first..).zip(&stored) {
            let start = block * BLOCK_LEN;
            let inside = start >= offset && start + BLOCK_LEN <= end;
            let actual = inside.then(|| whole.crcs[(block - whole.first) as usize]);
            let intact = match (entry, actual) {
                (UNSURE, _) => true,
                (HOLE, Some(actual)) => actual == *zero_crc.get_or_insert_with(|| zero_block_crc(self.stage)),
                (HOLE, None) => {
                    let (lo, hi) = (start.max(offset), (start + BLOCK_LEN).min(end));
                    bytes[(lo - offset) as usize..(hi - offset) as usize].iter().all(|&b| b == 0)
                }
                (entry, Some(actual)) => encode(actual) == entry,
                (entry, None) if start >= offset && at_end => {
                    encode(self.stage.block_crc(&bytes[(start - offset) as usize..])) == entry
                }
                (entry, None) => {
                    let n = pread_full(self.data, &mut scratch, start)?;
                    encode(self.stage.block_crc(&scratch[..n])) == entry
                }
            };
            if !intact {
                damaged.push(start);
            }
        }
        Ok((damaged, whole))
    }
}

impl Checked<'_> {
    /// Adds to `sum` the checksum of the object's bytes `offset..offset +
    /// len` (all inside the object) without reading them where it can: a
    /// whole block whose entry is a checksum that stands for one value only
    /// counts by it, a hole as zeros; the others are read. Nothing is checked: the caller
    /// copied the bytes elsewhere and compares the copy with this.
    pub fn sum_stored(&self, offset: u64, len: u64, sum: &mut dyn Running) -> Result<(), Errno> {
        let end = offset + len;
        let first = offset / BLOCK_LEN;
        let mut stored = vec![0u32; (end.div_ceil(BLOCK_LEN) - first) as usize];
        self.sums.read(first, &mut stored)?;
        let mut scratch = [0u8; BLOCK];
        // Consecutive whole blocks known by their checksums go in together.
        let mut run = 0..0;
        for (i, (block, &entry)) in (first..).zip(&stored).enumerate() {
            let (from, to) = ((block * BLOCK_LEN).max(offset), ((block + 1) * BLOCK_LEN).min(end));
            if to - from == BLOCK_LEN && entry > encode(UNSURE) {
                run = if run.is_empty() { i..i + 1 } else { run.start..i + 1 };
                continue;
            }
            sum.update_blocks(&stored[std::mem::replace(&mut run, 0..0)]);
            if entry == HOLE {
                // What a hole must hold: a copy of anything else fails the comparison.
                sum.update(&[0u8; BLOCK][..(to - from) as usize]);
            } else {
                let n = pread_full(self.data, &mut scratch[..(to - from) as usize], from)?;
                sum.update(&scratch[..n]);
            }
        }
        sum.update_blocks(&stored[run]);
        Ok(())
    }
}

/// Adds `bytes`, read at object offset `offset`, to `sum`, taking the
/// whole blocks by the checksums `check` gave for them.
pub fn fold_read(sum: &mut dyn Running, offset: u64, bytes: &[u8], whole: &BlockSums) {
    let head = ((whole.first * BLOCK_LEN).saturating_sub(offset) as usize).min(bytes.len());
    sum.update(&bytes[..head]);
    sum.update_blocks(&whole.crcs);
    sum.update(&bytes[head + whole.crcs.len() * BLOCK..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{DirStore, ObjectStore};
    use std::sync::Arc;
    use surge_proto::msg::AllocateMode;
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
    fn a_damaged_block_inside_a_batch_spread_over_threads_is_named_by_its_offset() {
        let t = tempfile::tempdir().unwrap();
        let threaded = Arc::new(crate::checksum::ThreadedCrc32c::new(4).unwrap());
        let store = DirStore::open(t.path(), None).unwrap().with_checksum(threaded);
        let data = pattern(2, 256 * BLOCK + 10);
        store.write_at(3, 0, &data).unwrap();
        for block in [0u64, 1, 63, 64, 200, 255] {
            flip_byte(&object_file(t.path(), 3), block * BLOCK as u64 + 7);
            let mut buf = vec![0u8; data.len()];
            let failure = store.read_at(3, 0, &mut buf).unwrap_err();
            let offset = block * BLOCK as u64;
            assert!(failure.message.contains(&format!("object offset {offset} of inode 3")), "{}", failure.message);
            assert_eq!(store.verify(3, 0, u64::MAX).unwrap().damaged, vec![offset]);
            flip_byte(&object_file(t.path(), 3), block * BLOCK as u64 + 7);
        }
        assert_eq!(served(&store, 3), Ok(()));
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

    /// What every read path of the store says of object `ino`: the errno
    /// of a read, a stat, a verify and a copy (`Ok` when all serve it).
    fn served(store: &DirStore, ino: u64) -> Result<(), String> {
        let mut buf = vec![0u8; 1 << 20];
        let dest = tempfile::tempfile().unwrap();
        let mut sum = crate::checksum::InlineCrc32c.begin();
        let piece = crate::store::CopyPiece { ino, offset: 0, len: 1 << 20, dest: &dest, dest_offset: 0 };
        let results = [
            store.read_at(ino, 0, &mut buf).map(drop),
            store.stat(ino).map(drop),
            store.verify(ino, 0, u64::MAX).map(|r| assert!(r.damaged.is_empty(), "damaged {:?}", r.damaged)),
            store.copy_out(&piece, &mut *sum).map(drop),
        ];
        match results.into_iter().find_map(Result::err) {
            Some(failure) => {
                assert_eq!(failure.errno, Errno::EIO, "{}", failure.message);
                Err(failure.message)
            }
            None => Ok(()),
        }
    }

    fn reopened(dir: &Path) -> DirStore {
        DirStore::open(dir, None).unwrap()
    }

    #[test]
    fn an_object_file_extended_or_cut_outside_the_daemon_is_eio_on_every_path_even_with_zeros() {
        use std::io::Write;
        let t = tempfile::tempdir().unwrap();
        let file = object_file(t.path(), 5);
        for (what, change) in [
            (
                "extended",
                Box::new(|f: &Path| {
                    fs::OpenOptions::new().append(true).open(f).unwrap().write_all(&[7u8; 72_000]).unwrap()
                }) as Box<dyn Fn(&Path)>,
            ),
            (
                "extended",
                Box::new(|f: &Path| {
                    let len = fs::metadata(f).unwrap().len();
                    fs::OpenOptions::new().write(true).open(f).unwrap().set_len(len + 100).unwrap()
                }),
            ),
            ("truncated", Box::new(|f: &Path| fs::OpenOptions::new().write(true).open(f).unwrap().set_len(0).unwrap())),
            (
                "truncated",
                Box::new(|f: &Path| {
                    fs::OpenOptions::new().write(true).open(f).unwrap().set_len(3 * BLOCK as u64).unwrap()
                }),
            ),
        ] {
            let store = reopened(t.path());
            store.truncate(5, 0).unwrap();
            store.write_at(5, 0, &pattern(5, 5 * BLOCK + 300)).unwrap();
            assert_eq!(served(&store, 5), Ok(()));
            // Changed while the daemon has the object open, then after a restart.
            change(&file);
            let message = served(&store, 5).unwrap_err();
            assert!(message.contains(what) && message.contains("inode 5"), "{message}");
            drop(store);
            let message = served(&reopened(t.path()), 5).unwrap_err();
            assert!(message.contains(what), "{message}");
        }
        // Cutting the file to 0 (O_TRUNC) starts it afresh.
        let store = reopened(t.path());
        store.truncate(5, 0).unwrap();
        store.write_at(5, 10, b"new").unwrap();
        assert_eq!(served(&store, 5), Ok(()));
    }

    #[test]
    fn a_removed_object_or_sidecar_and_a_zeroed_sidecar_are_eio_not_zeros_and_holes_still_read_as_zeros() {
        let t = tempfile::tempdir().unwrap();
        let data = pattern(8, 3 * BLOCK);
        let store = reopened(t.path());
        for ino in 1..=4 {
            store.write_at(ino, 0, &data).unwrap();
        }
        store.truncate(9, 10 * BLOCK as u64).unwrap(); // all hole
        store.write_at(10, 5 * BLOCK as u64, b"after a hole").unwrap();
        drop(store);
        let sidecar = |ino| super::sidecar(&object_file(t.path(), ino));
        fs::remove_file(object_file(t.path(), 1)).unwrap();
        fs::remove_file(object_file(t.path(), 2)).unwrap();
        fs::remove_file(sidecar(2)).unwrap();
        fs::remove_file(sidecar(3)).unwrap();
        flip_byte(&object_file(t.path(), 3), 10);
        let zeroed = vec![0u8; fs::metadata(sidecar(4)).unwrap().len() as usize];
        fs::write(sidecar(4), zeroed).unwrap();
        flip_byte(&object_file(t.path(), 4), 10);
        let store = reopened(t.path());
        assert_eq!(store.lost(), vec![1, 2]);
        for (ino, says) in [(1, "lost"), (2, "lost"), (3, "missing"), (4, "damaged")] {
            let message = served(&store, ino).unwrap_err();
            assert!(message.contains(says), "inode {ino}: {message}");
        }
        // A hole never written reads as zeros, on every path.
        assert_eq!(served(&store, 9), Ok(()));
        assert_eq!(served(&store, 10), Ok(()));
        let mut buf = vec![1u8; 6 * BLOCK];
        assert_eq!(store.read_at(10, 0, &mut buf).unwrap(), 5 * BLOCK + 12);
        assert!(buf[..5 * BLOCK].iter().all(|&b| b == 0));
        // Garbage where a hole was is damage, not data.
        flip_byte(&object_file(t.path(), 10), 100);
        assert_eq!(store.verify(10, 0, u64::MAX).unwrap().damaged, vec![0]);
        assert_eq!(store.read_at(10, 0, &mut buf).unwrap_err().errno, Errno::EIO);
        // Removing the file (the deleter) or replacing its contents (O_TRUNC) clears a loss.
        store.remove(1).unwrap();
        store.truncate(2, 0).unwrap();
        assert_eq!(store.stat(1).unwrap().size, 0);
        store.write_at(2, 0, b"again").unwrap();
        assert_eq!(served(&store, 2), Ok(()));
        drop(store);
        assert!(reopened(t.path()).lost().is_empty());
    }

    #[test]
    fn a_punched_hole_reads_zeros_frees_its_blocks_and_keeps_every_check() {
        use std::os::unix::fs::MetadataExt;
        let t = tempfile::tempdir().unwrap();
        let store = reopened(t.path());
        let mut model = pattern(6, 64 * BLOCK + 10);
        store.write_at(4, 0, &model).unwrap();
        let allocated_before = store.stat(4).unwrap().allocated;
        // Ragged at both ends: two blocks re-checksummed, 40 whole ones become holes.
        let (from, to) = (3 * BLOCK + 100, 44 * BLOCK + 7);
        store.allocate(4, from as u64, (to - from) as u64, AllocateMode::PunchHole).unwrap();
        model[from..to].fill(0);
        let stat = store.stat(4).unwrap();
        assert_eq!(stat.size, model.len() as u64, "a punch keeps the length");
        assert!(stat.allocated + 40 * BLOCK as u64 <= allocated_before, "{stat:?} after {allocated_before}");
        assert_eq!(fs::metadata(object_file(t.path(), 4)).unwrap().blocks() * 512, stat.allocated);
        let mut buf = vec![0u8; model.len()];
        assert_eq!(store.read_at(4, 0, &mut buf).unwrap(), model.len());
        assert_eq!(buf, model);
        assert_eq!(served(&store, 4), Ok(()));
        let sums = SumFile::open(&object_file(t.path(), 4)).unwrap().unwrap();
        let mut entries = [0u32; 3];
        sums.read(3, &mut entries).unwrap();
        assert!(entries[0] > UNSURE && entries[1] == HOLE && entries[2] == HOLE, "{entries:?}");
        // The file system reports the hole; data resumes after it.
        assert_eq!(store.seek(4, 0, true).unwrap(), Some(4 * BLOCK as u64));
        assert_eq!(store.seek(4, 4 * BLOCK as u64, false).unwrap(), Some(44 * BLOCK as u64));
        // The object ends 10 bytes into a block, which counts whole: its hole starts after it.
        assert_eq!(store.seek(4, 60 * BLOCK as u64, true).unwrap(), Some(65 * BLOCK as u64));
        assert_eq!(store.seek(4, model.len() as u64, false).unwrap(), Some(model.len() as u64));
        assert_eq!(store.seek(4, 65 * BLOCK as u64, false).unwrap(), None);
        // Bytes that appear in a hole are damage, not data.
        flip_byte(&object_file(t.path(), 4), 20 * BLOCK as u64 + 1);
        assert_eq!(store.read_at(4, 20 * BLOCK as u64, &mut buf[..10]).unwrap_err().errno, Errno::EIO);
        assert_eq!(store.verify(4, 0, u64::MAX).unwrap().damaged, vec![20 * BLOCK as u64]);
        // A punch that would re-checksum a damaged block is refused, its entries left as they were.
        flip_byte(&object_file(t.path(), 4), 50 * BLOCK as u64 + 9);
        let refused = store.allocate(4, 50 * BLOCK as u64 + 1, 10, AllocateMode::PunchHole).unwrap_err();
        assert_eq!(refused.errno, Errno::EIO);
        assert_eq!(store.verify(4, 0, u64::MAX).unwrap().damaged, vec![20 * BLOCK as u64, 50 * BLOCK as u64]);
        // Punching past the end, or an absent object, changes nothing.
        store.allocate(4, 1 << 30, 4096, AllocateMode::PunchHole).unwrap();
        store.allocate(99, 0, 4096, AllocateMode::PunchHole).unwrap();
        assert_eq!((store.stat(4).unwrap().size, store.stat(99).unwrap().size), (model.len() as u64, 0));
    }

    #[test]
    fn preallocation_and_zeroing_take_blocks_but_never_change_the_length() {
        let t = tempfile::tempdir().unwrap();
        let store = DirStore::open(t.path(), Some(1 << 20)).unwrap();
        store.truncate(2, 100 * BLOCK as u64).unwrap();
        assert_eq!(store.stat(2).unwrap().allocated, 0);
        assert_eq!(store.seek(2, 0, false).unwrap(), None, "all hole");
        store.allocate(2, 0, 10 * BLOCK as u64, AllocateMode::Preallocate).unwrap();
        let stat = store.stat(2).unwrap();
        assert_eq!((stat.size, stat.allocated), (100 * BLOCK as u64, 10 * BLOCK as u64));
        assert_eq!(store.usage().bytes, 10 * BLOCK as u64);
        // Past the quota: ENOSPC, as a write would be.
        assert_eq!(store.allocate(2, 0, 2 << 20, AllocateMode::Preallocate).unwrap_err().errno, Errno::ENOSPC);
        let data = pattern(9, 5 * BLOCK);
        store.write_at(2, 20 * BLOCK as u64, &data).unwrap();
        store.allocate(2, 21 * BLOCK as u64 + 5, BLOCK as u64, AllocateMode::ZeroRange).unwrap();
        let mut want = data.clone();
        want[BLOCK + 5..2 * BLOCK + 5].fill(0);
        let mut buf = vec![0u8; 5 * BLOCK];
        store.read_at(2, 20 * BLOCK as u64, &mut buf).unwrap();
        assert_eq!(buf, want);
        assert_eq!(served(&store, 2), Ok(()));
        assert_eq!(store.stat(2).unwrap().size, 100 * BLOCK as u64);
    }

    #[test]
    fn a_crash_between_the_length_record_and_the_data_is_accepted_at_the_next_open() {
        let t = tempfile::tempdir().unwrap();
        let store = reopened(t.path());
        let data = pattern(4, 2 * BLOCK + 10);
        store.write_at(6, 0, &data).unwrap();
        drop(store);
        // What a kill -9 leaves between the record and the data of a write
        // that would have grown the object to 5 blocks: its blocks unsure.
        let sums = SumFile::open(&object_file(t.path(), 6)).unwrap().unwrap();
        sums.mark_unsure(2, 3).unwrap();
        sums.record_length(5 * BLOCK as u64).unwrap();
        drop(sums);
        let store = reopened(t.path());
        assert_eq!(served(&store, 6), Ok(()));
        assert_eq!(store.stat(6).unwrap().size, data.len() as u64);
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
