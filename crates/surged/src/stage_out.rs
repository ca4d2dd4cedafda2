//! Stage-out on a data daemon (`ObjStage`): copies this daemon's object of
//! a file into the PFS temp file at the file offsets the layout gives, then
//! proves the copy by reading it back from the device. A demotion's copy
//! goes at the demotion rate (`demotion_control`): paced by the token
//! bucket, or throttled by blkio, which needs O_DIRECT: then the copy reads
//! and writes whole 4 KiB blocks with O_DIRECT, and only a piece's ragged
//! tail (the end of the object, or a piece not on a block boundary) goes
//! through the page cache, unthrottled. Only the object's data is copied:
//! a hole its checksums agree on is left a hole in the copy (which is made
//! at the file's full length), its zeros counted in the copy's CRC, so a
//! sparse file stays sparse on the PFS and the verification still covers
//! every byte.

use crate::checksum::{ChecksumStage, Running, BLOCK};
use crate::demotion_control::{BlkioControl, Pacing};
use crate::failure::Failure;
use crate::pfs::Pfs;
use crate::rates::Bucket;
use crate::store::{CopyPiece, Extent, ObjectStore};
use crate::sys;
use crate::sys::{pwrite_all, AlignedBuf, DIRECT_ALIGN};
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use surge_proto::msg::StagedObject;
use surge_proto::{path, Errno, Layout};

/// Largest piece copied at once (a stripe unit may be up to 4 GiB).
const COPY_CHUNK: u64 = 4 << 20;
/// Largest piece of a copy under blkio: a demotion's `ObjStage` copies
/// 4 MiB, and its reads and writes overlap but for one piece at each end
/// (measured: 2 MiB pieces made 8 MB/s into 5.2).
const DIRECT_PIECE: usize = 256 << 10;

/// One `ObjStage` request.
#[derive(Debug, Clone, Copy)]
pub struct StageOrder<'a> {
    pub ino: u64,
    pub layout: Layout,
    /// Which of the file's objects this daemon holds.
    pub stripe: u32,
    /// The stage temp (namespace path) the copy goes into.
    pub temp: &'a str,
    pub object_offset: u64,
    pub len: u64,
}

/// The stage-out copies this daemon made since it started (for `Status`
/// and the metrics): object bytes copied and verified, and copies.
#[derive(Debug, Default)]
pub struct StagedCounts {
    pub bytes: AtomicU64,
    pub objects: AtomicU64,
}

impl StagedCounts {
    pub fn add(&self, staged: &StagedObject) {
        self.bytes.fetch_add(staged.bytes, Ordering::Relaxed);
        self.objects.fetch_add(1, Ordering::Relaxed);
    }
}

/// Copies `[object_offset, object_offset + len)` of the object (stopping at
/// its end), flushes the copy, drops it from the page cache and re-reads it:
/// the CRC-32C of the object's bytes must equal that of what the PFS gives
/// back, both through the daemon's checksum stage. The copy is made in the
/// kernel where the store and the file systems allow (`copy_out`), its CRC
/// then built from the checksums at rest; should the re-read disagree, it
/// is made again by reading the object through the store, which checks
/// every block (so damage at rest is named) and builds the CRC from the
/// bytes it read. A demotion's copy goes as its `pacing` says (the
/// daemon's demotion control): never in the kernel under blkio.
pub fn stage_object(
    store: &dyn ObjectStore,
    pfs: &Pfs,
    checksum: &dyn ChecksumStage,
    order: &StageOrder<'_>,
    pacing: Option<&Pacing<'_>>,
) -> Result<StagedObject, Failure> {
    let layout = order.layout;
    if !layout.is_concrete() || order.stripe >= layout.stripe_count {
        return Err(Failure::new(Errno::EINVAL, "ObjStage needs a file's concrete layout and one of its stripes"));
    }
    let temp =
        path::canonical(order.temp).map_err(|errno| Failure::new(errno, format!("invalid path {:?}", order.temp)))?;
    let file = pfs.open_stage_temp(&temp, order.ino)?;
    let pacer = match pacing {
        Some(Pacing::Tokens(bucket)) => Some(*bucket),
        _ => None,
    };
    let direct = match pacing {
        Some(Pacing::Blkio(blkio)) => {
            let dest = sys::reopen_direct(&file, true)
                .map_err(|e| blkio.give_up(format!("the PFS file {temp} cannot be written with O_DIRECT: {e}")))?;
            Some(DirectCopy { blkio, dest })
        }
        _ => None,
    };
    let copy = Copy { store, checksum, order, file, temp: &temp, pacer, direct };
    // Under blkio, two pieces: one read while the other is written.
    let size = match copy.direct {
        Some(_) => 2 * DIRECT_PIECE,
        None => COPY_CHUNK.min(layout.stripe_size).min(order.len) as usize,
    };
    let mut buf = AlignedBuf::new(size);
    let first = copy.copy(&mut buf, copy.direct.is_none())?;
    match copy.verify(&first, &mut buf) {
        Err(_) if first.by_kernel => {
            let again = copy.copy(&mut buf, false)?;
            copy.verify(&again, &mut buf)
        }
        verified => verified,
    }
}

/// One `ObjStage` being served.
struct Copy<'a> {
    store: &'a dyn ObjectStore,
    checksum: &'a dyn ChecksumStage,
    order: &'a StageOrder<'a>,
    file: File,
    temp: &'a str,
    pacer: Option<&'a Bucket>,
    direct: Option<DirectCopy<'a>>,
}

/// A copy blkio throttles: the group it runs in, and the temp opened with O_DIRECT.
struct DirectCopy<'a> {
    blkio: &'a BlkioControl,
    dest: File,
}

/// What a copy wrote.
struct Copied {
    /// File ranges written, in object order, contiguous ones merged.
    ranges: Vec<(u64, u64)>,
    bytes: u64,
    /// The CRC-32C of the object's bytes copied.
    crc: u32,
    /// Some of them were copied in the kernel.
    by_kernel: bool,
}

impl Copied {
    /// `got` bytes written at `file_offset`.
    fn add(&mut self, file_offset: u64, got: usize) {
        match self.ranges.last_mut() {
            Some((start, len)) if *start + *len == file_offset => *len += got as u64,
            _ => self.ranges.push((file_offset, got as u64)),
        }
    }
}

/// A piece read under blkio, in one of the two buffers: where it goes in
/// the file, its length, and whether it is a hole (nothing to write).
type ReadPiece<'b> = (&'b mut [u8], u64, usize, bool);

impl Copy<'_> {
    /// Where the piece at object offset `pos` goes in the file, and its
    /// length: to the end of its stripe unit or of the order, at most `most`.
    fn next_piece(&self, pos: u64, end: u64, most: usize) -> Result<(u64, usize), Failure> {
        let (order, unit) = (self.order, self.order.layout.stripe_size);
        let file_offset = order
            .layout
            .file_offset(order.stripe, pos)
            .ok_or_else(|| Failure::new(Errno::EFBIG, "object offset beyond the largest file"))?;
        Ok((file_offset, (unit - pos % unit).min(end - pos).min(most as u64) as usize))
    }

    /// Copies the order's range into the temp: under blkio by
    /// [`Copy::copy_direct`], else in the kernel if `kernel` and the store
    /// can, else through `buf`.
    fn copy(&self, buf: &mut [u8], kernel: bool) -> Result<Copied, Failure> {
        if let Some(direct) = &self.direct {
            return self.copy_direct(direct, buf);
        }
        let order = self.order;
        let end = order.object_offset.saturating_add(order.len);
        let mut copied = Copied { ranges: Vec::new(), bytes: 0, crc: 0, by_kernel: false };
        let mut sum = self.checksum.begin();
        let mut pos = order.object_offset;
        while pos < end {
            let (file_offset, mut want) = self.next_piece(pos, end, buf.len())?;
            match self.store.extent(order.ino, pos, want as u64)? {
                Extent::Hole(n) => {
                    add_zeros(&mut *sum, self.checksum, n);
                    copied.add(file_offset, n as usize);
                    pos += n;
                    continue;
                }
                Extent::Data(len) => want = len as usize,
            }
            if let Some(pacer) = self.pacer {
                want = pacer.piece(want);
            }
            let piece =
                CopyPiece { ino: order.ino, offset: pos, len: want as u64, dest: &self.file, dest_offset: file_offset };
            let mut copy_piece = || -> Result<(usize, bool), Failure> {
                if let Some(got) = if kernel { self.store.copy_out(&piece, &mut *sum)? } else { None } {
                    return Ok((got as usize, true));
                }
                let got = self.store.read_summed(order.ino, pos, &mut buf[..want], Some(&mut *sum))?;
                self.write_piece(None, file_offset, &buf[..got])?;
                Ok((got, false))
            };
            let (got, in_kernel) = match self.pacer {
                Some(pacer) => pacer.carry(want as u64, copy_piece)?,
                None => copy_piece()?,
            };
            copied.by_kernel |= in_kernel;
            if got == 0 {
                break;
            }
            copied.add(file_offset, got);
            pos += got as u64;
            if got < want {
                break; // the object ends here
            }
        }
        copied.bytes = pos - order.object_offset;
        copied.crc = sum.finish();
        Ok(copied)
    }

    /// The copy under blkio: a reader thread reads piece after piece with
    /// O_DIRECT into one half of `buf` (whole blocks) while this thread writes the piece
    /// before from the other, both in the daemon's blkio group for the copy
    /// only (the verification's re-read is not demotion). Reads from the
    /// buffer and writes to the PFS so go on at once, each held to the
    /// group's limit, the demotion rate.
    fn copy_direct(&self, direct: &DirectCopy<'_>, buf: &mut [u8]) -> Result<Copied, Failure> {
        let order = self.order;
        let end = order.object_offset.saturating_add(order.len);
        let (first, second) = buf.split_at_mut(buf.len() / 2);
        let (to_reader, empty) = mpsc::channel::<&mut [u8]>();
        let (to_writer, full) = mpsc::sync_channel::<Result<ReadPiece<'_>, Failure>>(1);
        to_reader.send(first).and_then(|()| to_reader.send(second)).expect("the reader's end is here");
        thread::scope(|s| {
            let reader = s.spawn(move || -> Result<(u64, u32), Failure> {
                let _in_group = direct.blkio.enroll()?;
                let mut sum = self.checksum.begin();
                let mut pos = order.object_offset;
                while pos < end {
                    // No buffer back: the writer failed.
                    let Ok(buf) = empty.recv() else { break };
                    let read = self.next_piece(pos, end, buf.len()).and_then(|(file_offset, want)| {
                        match self.store.extent(order.ino, pos, want as u64)? {
                            Extent::Hole(n) => {
                                add_zeros(&mut *sum, self.checksum, n);
                                Ok((file_offset, n as usize, n as usize, true))
                            }
                            Extent::Data(len) => {
                                let want = len as usize;
                                Ok((file_offset, want, self.read_piece(pos, buf, want, &mut *sum)?, false))
                            }
                        }
                    });
                    let (file_offset, want, got, hole) = match read {
                        Ok(read) => read,
                        Err(failure) => {
                            let _ = to_writer.send(Err(failure));
                            break;
                        }
                    };
                    pos += got as u64;
                    if got == 0 || to_writer.send(Ok((buf, file_offset, got, hole))).is_err() || got < want {
                        break;
                    }
                }
                Ok((pos, sum.finish()))
            });
            let written = (|| -> Result<Copied, Failure> {
                let _in_group = direct.blkio.enroll()?;
                let mut copied = Copied { ranges: Vec::new(), bytes: 0, crc: 0, by_kernel: false };
                for piece in &full {
                    let (buf, file_offset, got, hole) = piece?;
                    if !hole {
                        self.write_piece(Some(&direct.dest), file_offset, &buf[..got])?;
                    }
                    copied.add(file_offset, got);
                    let _ = to_reader.send(buf);
                }
                Ok(copied)
            })();
            // The reader stops at its next piece once the writer's ends are gone.
            drop((full, to_reader));
            let read = reader.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            let (mut copied, (pos, crc)) = (written?, read?);
            (copied.bytes, copied.crc) = (pos - order.object_offset, crc);
            Ok(copied)
        })
    }

    /// Reads the piece at object offset `pos` into `buf`, `want` bytes (or
    /// up to the object's end): with O_DIRECT when it starts on a block and
    /// the store can, else through the page cache.
    fn read_piece(&self, pos: u64, buf: &mut [u8], want: usize, sum: &mut dyn Running) -> Result<usize, Failure> {
        if pos.is_multiple_of(DIRECT_ALIGN as u64) {
            let span = want.next_multiple_of(DIRECT_ALIGN);
            if let Some(got) = self.store.read_direct(self.order.ino, pos, &mut buf[..span], want, &mut *sum)? {
                return Ok(got);
            }
        }
        self.store.read_summed(self.order.ino, pos, &mut buf[..want], Some(sum))
    }

    /// Writes `bytes` at `file_offset` of the temp: the whole blocks through
    /// `direct` (the temp opened with O_DIRECT) when given and the piece
    /// starts on a block, the rest through the page cache.
    fn write_piece(&self, direct: Option<&File>, file_offset: u64, bytes: &[u8]) -> Result<(), Failure> {
        let aligned = match direct {
            Some(_) if file_offset.is_multiple_of(DIRECT_ALIGN as u64) => bytes.len() / DIRECT_ALIGN * DIRECT_ALIGN,
            _ => 0,
        };
        let tail_at = file_offset + aligned as u64;
        let pieces =
            [(direct.unwrap_or(&self.file), &bytes[..aligned], file_offset), (&self.file, &bytes[aligned..], tail_at)];
        for (file, bytes, at) in pieces {
            if let (_, Some(errno)) = pwrite_all(file, bytes, at) {
                return Err(Failure::new(errno, format!("writing the stage-out copy {}", self.temp)));
            }
        }
        Ok(())
    }

    /// Flushes the copy, drops it from the page cache and re-reads it: its
    /// CRC must be the one the copy took.
    fn verify(&self, copied: &Copied, buf: &mut [u8]) -> Result<StagedObject, Failure> {
        self.file.sync_data()?;
        let shorter =
            || Failure::new(Errno::EIO, format!("stage-out copy {} is shorter than what was written", self.temp));
        let on_pfs = self.file.metadata()?.len();
        let mut reread = self.checksum.begin();
        for &(start, len) in &copied.ranges {
            let end = start + len;
            if end > on_pfs {
                return Err(shorter());
            }
            sys::drop_cached(&self.file, start, len);
            let mut pos = start;
            while pos < end {
                // A hole in the copy (inside its length) reads as zeros: only its data is read back.
                let (hole, stop) = pfs_extent(&self.file, pos, end);
                if hole {
                    add_zeros(&mut *reread, self.checksum, stop - pos);
                    pos = stop;
                    continue;
                }
                let n = (stop - pos).min(buf.len() as u64) as usize;
                if crate::sys::pread_full(&self.file, &mut buf[..n], pos)? < n {
                    return Err(shorter());
                }
                reread.update(&buf[..n]);
                pos += n as u64;
            }
        }
        let (crc, reread) = (copied.crc, reread.finish());
        if reread != crc {
            return Err(Failure::new(
                Errno::EIO,
                format!(
                    "stage-out copy of object {} stripe {} reads back wrong from {} (crc {reread:08x}, expected {crc:08x})",
                    self.order.ino, self.order.stripe, self.temp
                ),
            ));
        }
        Ok(StagedObject { bytes: copied.bytes, crc })
    }
}

/// Adds `len` zeros to `sum`: a hole the copy skipped, which the PFS copy
/// (made at its full length) reads back as zeros. Whole blocks go by the
/// checksum of a block of zeros, without hashing them.
fn add_zeros(sum: &mut dyn Running, checksum: &dyn ChecksumStage, len: u64) {
    let zero_blocks = [checksum.block_crc(&[]); 64];
    let mut blocks = len / BLOCK as u64;
    while blocks > 0 {
        let now = blocks.min(zero_blocks.len() as u64);
        sum.update_blocks(&zero_blocks[..now as usize]);
        blocks -= now;
    }
    sum.update(&[0u8; BLOCK][..(len % BLOCK as u64) as usize]);
}

/// Whether the PFS copy has a hole at `pos`, and where that hole or data
/// stretch ends (at most `end`); a file system that cannot tell says data.
fn pfs_extent(file: &File, pos: u64, end: u64) -> (bool, u64) {
    match sys::seek_data_or_hole(file, pos, false) {
        Ok(Some(data)) if data > pos => (true, data.min(end)),
        Ok(None) => (true, end),
        _ => {
            let hole = sys::seek_data_or_hole(file, pos, true).ok().flatten().unwrap_or(end);
            (false, hole.clamp(pos + 1, end))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::InlineCrc32c;
    use crate::store::DirStore;
    use std::fs;
    use surge_testkit::pattern;

    /// Three daemons' stores in one process: each copies its stripe; the
    /// assembled PFS file equals the original and the CRCs add up.
    #[test]
    fn three_stripes_assemble_a_byte_identical_copy() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir(t.path().join("pfs")).unwrap();
        let pfs = Pfs::open(&t.path().join("pfs")).unwrap();
        let layout = Layout { stripe_count: 3, stripe_size: 64 << 10, first: 2 };
        let data: Vec<u8> = (0..(5 * 64 * 1024 + 777)).map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let stores: Vec<DirStore> =
            (0..3).map(|k| DirStore::open(&t.path().join(format!("b{k}")), None).unwrap()).collect();
        for piece in layout.pieces(0, data.len()) {
            let bytes = &data[piece.buf_offset..piece.buf_offset + piece.len];
            stores[piece.stripe as usize].write_at(9, piece.object_offset, bytes).unwrap();
        }
        let temp = pfs.create_stage_temp("/out/file", 9, data.len() as u64).unwrap();
        let mut total = 0;
        for (stripe, store) in stores.iter().enumerate() {
            let order =
                StageOrder { ino: 9, layout, stripe: stripe as u32, temp: &temp, object_offset: 0, len: u64::MAX };
            let staged = stage_object(store, &pfs, &InlineCrc32c, &order, None).unwrap();
            let object_len = layout.object_len(stripe as u32, data.len() as u64);
            assert_eq!(staged.bytes, object_len);
            let mut object = vec![0; object_len as usize];
            store.read_at(9, 0, &mut object).unwrap();
            assert_eq!(staged.crc, crc32c::crc32c(&object));
            total += staged.bytes;
        }
        assert_eq!(total, data.len() as u64);
        pfs.commit_stage_temp(&temp, 9, "/out/file", data.len() as u64, &crate::pfs::tests::meta(0o644)).unwrap();
        assert_eq!(fs::read(t.path().join("pfs/out/file")).unwrap(), data);
    }

    /// A store, a PFS and a stage temp in one temporary directory.
    struct Bench {
        dir: tempfile::TempDir,
        store: DirStore,
        pfs: Pfs,
        temp: String,
    }

    fn bench(size: u64) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("pfs")).unwrap();
        let pfs = Pfs::open(&dir.path().join("pfs")).unwrap();
        let store = DirStore::open(&dir.path().join("store"), None).unwrap();
        let temp = pfs.create_stage_temp("/f", 5, size).unwrap();
        Bench { dir, store, pfs, temp }
    }

    /// The unpaced copy of `order` of `bench`'s object 5.
    fn copier<'a>(bench: &'a Bench, order: &'a StageOrder<'a>) -> Copy<'a> {
        let file = bench.pfs.open_stage_temp(&bench.temp, 5).unwrap();
        Copy { store: &bench.store, checksum: &InlineCrc32c, order, file, temp: &bench.temp, pacer: None, direct: None }
    }

    /// Copies `order` of `bench`'s object 5 in the kernel or by reading; what it wrote and the time it took.
    fn copy_once(bench: &Bench, order: &StageOrder<'_>, kernel: bool) -> (Copied, std::time::Duration) {
        let copy = copier(bench, order);
        let mut buf = vec![0u8; COPY_CHUNK as usize];
        let started = std::time::Instant::now();
        let copied = copy.copy(&mut buf, kernel).unwrap();
        copy.verify(&copied, &mut buf).unwrap();
        (copied, started.elapsed())
    }

    #[test]
    fn kernel_copies_of_ragged_ranges_with_holes_take_the_crc_of_their_bytes() {
        let bench = bench(1 << 20);
        let layout = Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0 };
        // Written blocks, a hole of never-written blocks, a block cut by the object's end.
        bench.store.write_at(5, 0, &pattern(7, 20_000)).unwrap();
        bench.store.write_at(5, 40_000, &pattern(8, 9_000)).unwrap();
        let object = {
            let mut bytes = vec![0u8; 49_000];
            bench.store.read_at(5, 0, &mut bytes).unwrap();
            bytes
        };
        for (offset, len) in [(0u64, 49_000u64), (1, 4095), (4096, 8192), (4097, 30_000), (10_000, u64::MAX / 2)] {
            let order = StageOrder { ino: 5, layout, stripe: 0, temp: &bench.temp, object_offset: offset, len };
            let (copied, _) = copy_once(&bench, &order, true);
            assert!(copied.by_kernel, "copy_file_range works within one file system");
            let end = (offset.saturating_add(len)).min(49_000) as usize;
            assert_eq!(copied.bytes as usize, end - offset as usize);
            assert_eq!(copied.crc, crc32c::crc32c(&object[offset as usize..end]), "range {offset}+{len}");
            let on_pfs = fs::read(bench.dir.path().join("pfs").join(bench.temp.trim_start_matches('/'))).unwrap();
            assert_eq!(&on_pfs[offset as usize..end], &object[offset as usize..end]);
        }
    }

    #[test]
    fn a_sparse_object_stages_to_a_sparse_copy_with_its_bytes_and_a_lost_hole_is_eio() {
        use std::os::unix::fs::MetadataExt;
        let size = 64u64 << 20;
        let bench = bench(size);
        let layout = Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0 };
        // Data at the start and in the middle, a hole everywhere else (to the end).
        bench.store.write_at(5, 0, &pattern(3, 10_000)).unwrap();
        bench.store.write_at(5, 30 << 20, &pattern(4, 5000)).unwrap();
        bench.store.truncate(5, size).unwrap();
        let order = StageOrder { ino: 5, layout, stripe: 0, temp: &bench.temp, object_offset: 0, len: u64::MAX };
        let staged = stage_object(&bench.store, &bench.pfs, &InlineCrc32c, &order, None).unwrap();
        let mut object = vec![0u8; size as usize];
        assert_eq!(bench.store.read_at(5, 0, &mut object).unwrap(), size as usize);
        assert_eq!((staged.bytes, staged.crc), (size, crc32c::crc32c(&object)));
        let on_pfs = bench.dir.path().join("pfs").join(bench.temp.trim_start_matches('/'));
        assert_eq!(fs::read(&on_pfs).unwrap(), object);
        let blocks = fs::metadata(&on_pfs).unwrap().blocks();
        assert!(blocks * 512 < 1 << 20, "the PFS copy takes {blocks} blocks: its holes were written");
        // Bytes lost from a written block (its blocks freed outside Surge) are not taken for a hole.
        let file = fs::OpenOptions::new().write(true).open(bench.dir.path().join("store/05/0000000000000005")).unwrap();
        sys::fallocate(&file, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 4096, 4096).unwrap();
        let failure = stage_object(&bench.store, &bench.pfs, &InlineCrc32c, &order, None).unwrap_err();
        assert_eq!(failure.errno, Errno::EIO);
        assert!(failure.message.contains("object offset 4096"), "{}", failure.message);
    }

    #[test]
    fn a_copy_whose_data_the_pfs_lost_to_a_hole_fails_its_verification() {
        let bench = bench(1 << 20);
        let layout = Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0 };
        bench.store.write_at(5, 200_000, &pattern(2, 100_000)).unwrap();
        bench.store.truncate(5, 1 << 20).unwrap();
        let order = StageOrder { ino: 5, layout, stripe: 0, temp: &bench.temp, object_offset: 0, len: 1 << 20 };
        let copy = copier(&bench, &order);
        let mut buf = vec![0u8; 1 << 20];
        let copied = copy.copy(&mut buf, false).unwrap();
        copy.verify(&copied, &mut buf).unwrap();
        sys::fallocate(&copy.file, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 204_800, 4096).unwrap();
        let failure = copy.verify(&copied, &mut buf).unwrap_err();
        assert!(failure.message.contains("reads back wrong"), "{}", failure.message);
    }

    /// The O_DIRECT pieces of a blkio copy (the group itself is tested in
    /// `demotion_control`): whole blocks direct, a ragged tail buffered; a
    /// piece off a block boundary read through the page cache.
    #[test]
    fn direct_pieces_copy_whole_blocks_and_a_ragged_tail_with_the_bytes_crc() {
        let bench = bench(1 << 20);
        let layout = Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0 };
        let object = pattern(11, 3 * DIRECT_ALIGN + 1000);
        bench.store.write_at(5, 0, &object).unwrap();
        let order = StageOrder { ino: 5, layout, stripe: 0, temp: &bench.temp, object_offset: 0, len: 1 << 20 };
        let file = bench.pfs.open_stage_temp(&bench.temp, 5).unwrap();
        let test = "direct_pieces_copy_whole_blocks_and_a_ragged_tail_with_the_bytes_crc";
        let direct =
            sys::reopen_direct(&file, true).map_err(|e| format!("no O_DIRECT in the temporary directory: {e}"));
        let Some(dest) = surge_testkit::skip_unless_ready(test, direct) else { return };
        let copy = Copy {
            store: &bench.store,
            checksum: &InlineCrc32c,
            order: &order,
            file,
            temp: &bench.temp,
            pacer: None,
            direct: None,
        };
        let mut buf = AlignedBuf::new(1 << 20);
        for (pos, len) in [(0, object.len()), (100, object.len() - 100)] {
            let mut sum = InlineCrc32c.begin();
            let got = copy.read_piece(pos as u64, &mut buf, 1 << 19, &mut *sum).unwrap();
            assert_eq!(got, len);
            assert_eq!(sum.finish(), crc32c::crc32c(&object[pos..]));
            copy.write_piece(Some(&dest), pos as u64, &buf[..got]).unwrap();
            let on_pfs = fs::read(bench.dir.path().join("pfs").join(bench.temp.trim_start_matches('/'))).unwrap();
            assert_eq!(&on_pfs[pos..object.len()], &object[pos..]);
        }
    }

    /// Under blkio, a read that fails ends the copy with its error: the
    /// reader and the writer both stop, and no thread stays in the group.
    #[test]
    fn a_failing_read_under_blkio_fails_the_copy_and_leaves_no_thread_in_the_group() {
        use crate::demotion_control::{choose, Daemon, Probe, RateControlKind};
        use crate::testing::{FailingStore, StoreOp, StoreProbe};
        let test = "a_failing_read_under_blkio_fails_the_copy_and_leaves_no_thread_in_the_group";
        let hierarchy = std::path::Path::new(crate::blkio::HIERARCHY);
        let ready = sys::check_writable(hierarchy).map_err(|e| format!("needs root and cgroup-v1 blkio: {e}"));
        let Some(()) = surge_testkit::skip_unless_ready(test, ready) else { return };
        let bench = bench(1 << 20);
        let daemon = Daemon { cluster_id: "unit-failing", index: 0, buffer: bench.dir.path(), pfs: bench.dir.path() };
        let control = choose(RateControlKind::Blkio, &daemon, &Probe::default());
        let pacing = control.pacing();
        let blkio_here = match pacing {
            Pacing::Blkio(_) => Ok(()),
            Pacing::Tokens(_) => Err("the temporary directory is on no disk blkio takes"),
        };
        let Some(()) = surge_testkit::skip_unless_ready(test, blkio_here) else { return };
        let probe = std::sync::Arc::new(StoreProbe::default());
        let inner = DirStore::open(&bench.dir.path().join("failing"), None).unwrap();
        let store = FailingStore::new(Box::new(inner), std::sync::Arc::clone(&probe));
        store.write_at(5, 0, &pattern(3, 1 << 20)).unwrap();
        probe.fail(StoreOp::Read, Errno::EIO);
        let layout = Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0 };
        let order = StageOrder { ino: 5, layout, stripe: 0, temp: &bench.temp, object_offset: 0, len: 1 << 20 };
        let failed = stage_object(&store, &bench.pfs, &InlineCrc32c, &order, Some(&pacing)).unwrap_err();
        assert_eq!(failed.errno, Errno::EIO, "{failed}");
        assert!(probe.calls(StoreOp::Read) >= 1);
        let tasks = fs::read_to_string(hierarchy.join("surge-unit-failing-0-demote/tasks")).unwrap();
        assert_eq!(tasks.trim(), "", "every copying thread left the group");
        assert_eq!(control.in_force(), "blkio");
    }

    #[test]
    fn a_block_damaged_at_rest_fails_a_kernel_copy_by_name() {
        let bench = bench(64 << 10);
        let layout = Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0 };
        bench.store.write_at(5, 0, &pattern(9, 64 << 10)).unwrap();
        let object_file = bench.dir.path().join("store/05").join(format!("{:016x}", 5));
        surge_testkit::flip_byte(&object_file, 10_000);
        let order = StageOrder { ino: 5, layout, stripe: 0, temp: &bench.temp, object_offset: 0, len: 64 << 10 };
        let failed = stage_object(&bench.store, &bench.pfs, &InlineCrc32c, &order, None).unwrap_err();
        assert_eq!(failed.errno, Errno::EIO);
        assert!(failed.message.contains("data damaged at rest") && failed.message.contains("offset 8192"), "{failed}");
    }

    /// The figure behind copying in the kernel: 64 MiB each way (see the
    /// test log; docs/bbos.md, "Enforcement").
    #[test]
    fn kernel_and_read_copies_give_the_same_bytes_and_crc() {
        let size = 64u64 << 20;
        let bench = bench(size);
        let layout = Layout { stripe_count: 1, stripe_size: size, first: 0 };
        let data = pattern(3, 1 << 20);
        for mb in 0..64 {
            bench.store.write_at(5, mb << 20, &data).unwrap();
        }
        let order = StageOrder { ino: 5, layout, stripe: 0, temp: &bench.temp, object_offset: 0, len: size };
        let (mut kernel, mut read) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let (by_kernel, took) = copy_once(&bench, &order, true);
            kernel.push(took);
            let (by_reading, took) = copy_once(&bench, &order, false);
            read.push(took);
            assert!(by_kernel.by_kernel && !by_reading.by_kernel);
            assert_eq!((by_kernel.bytes, by_kernel.crc), (by_reading.bytes, by_reading.crc));
        }
        let best = |times: &[std::time::Duration]| times.iter().min().copied().unwrap_or_default();
        eprintln!(
            "stage-out copy of 64 MiB, flush and re-read included (best of 3): in the kernel {:?}, by reading {:?}",
            best(&kernel),
            best(&read)
        );
    }

    #[test]
    fn refuses_bad_layouts_and_files_that_are_no_stage_temps() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("victim"), b"keep").unwrap();
        let pfs = Pfs::open(t.path()).unwrap();
        let store = DirStore::open(&t.path().join("store"), None).unwrap();
        store.write_at(1, 0, b"overwrite?").unwrap();
        let layout = Layout { stripe_count: 1, stripe_size: 64 << 10, first: 0 };
        let order = StageOrder { ino: 1, layout, stripe: 0, temp: "/victim", object_offset: 0, len: 10 };
        assert_eq!(stage_object(&store, &pfs, &InlineCrc32c, &order, None).unwrap_err().errno, Errno::EINVAL);
        let order = StageOrder { stripe: 1, ..order };
        assert_eq!(stage_object(&store, &pfs, &InlineCrc32c, &order, None).unwrap_err().errno, Errno::EINVAL);
        let order = StageOrder { layout: Layout::ROOT_DEFAULT, stripe: 0, ..order };
        assert_eq!(stage_object(&store, &pfs, &InlineCrc32c, &order, None).unwrap_err().errno, Errno::EINVAL);
        let order = StageOrder { layout, stripe: 0, temp: "/../victim", ..order };
        assert_eq!(stage_object(&store, &pfs, &InlineCrc32c, &order, None).unwrap_err().errno, Errno::EINVAL);
        assert_eq!(fs::read(t.path().join("victim")).unwrap(), b"keep");
    }
}
