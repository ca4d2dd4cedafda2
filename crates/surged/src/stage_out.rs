//! Stage-out on a data daemon (`ObjStage`): copies this daemon's object of
//! a file into the PFS temp file at the file offsets the layout gives, then
//! proves the copy by reading it back from the device.

use crate::checksum::ChecksumStage;
use crate::failure::Failure;
use crate::pfs::Pfs;
use crate::rates::Bucket;
use crate::store::ObjectStore;
use crate::sys;
use crate::sys::pwrite_all;
use std::sync::atomic::{AtomicU64, Ordering};
use surge_proto::msg::StagedObject;
use surge_proto::{path, Errno, Layout};

/// Largest piece copied at once (a stripe unit may be up to 4 GiB).
const COPY_CHUNK: u64 = 4 << 20;

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
/// the CRC-32C of what was read from the store (built from the checksums
/// of the blocks the read checked) must equal that of what the PFS gives
/// back, both through the daemon's checksum stage. A demotion's copy reads
/// at the rate of `pacer`, the daemon's demotion bucket.
pub fn stage_object(
    store: &dyn ObjectStore,
    pfs: &Pfs,
    checksum: &dyn ChecksumStage,
    order: &StageOrder<'_>,
    pacer: Option<&Bucket>,
) -> Result<StagedObject, Failure> {
    let layout = order.layout;
    if !layout.is_concrete() || order.stripe >= layout.stripe_count {
        return Err(Failure::new(Errno::EINVAL, "ObjStage needs a file's concrete layout and one of its stripes"));
    }
    let temp =
        path::canonical(order.temp).map_err(|errno| Failure::new(errno, format!("invalid path {:?}", order.temp)))?;
    let file = pfs.open_stage_temp(&temp, order.ino)?;
    let unit = layout.stripe_size;
    let end = order.object_offset.saturating_add(order.len);
    let mut buf = vec![0u8; COPY_CHUNK.min(unit).min(order.len) as usize];
    // File ranges written, in object order, contiguous ones merged.
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut copied = checksum.begin();
    let mut pos = order.object_offset;
    while pos < end {
        let file_offset = file_offset(&layout, order.stripe, pos)
            .ok_or_else(|| Failure::new(Errno::EFBIG, "object offset beyond the largest file"))?;
        let mut want = (unit - pos % unit).min(end - pos).min(buf.len() as u64) as usize;
        if let Some(pacer) = pacer {
            want = pacer.piece(want);
        }
        let got = store.read_summed(order.ino, pos, &mut buf[..want], Some(&mut *copied))?;
        if got == 0 {
            break;
        }
        if let Some(pacer) = pacer {
            pacer.pass(got as u64);
        }
        if let (_, Some(errno)) = pwrite_all(&file, &buf[..got], file_offset) {
            return Err(Failure::new(errno, format!("writing the stage-out copy {temp}")));
        }
        match ranges.last_mut() {
            Some((start, len)) if *start + *len == file_offset => *len += got as u64,
            _ => ranges.push((file_offset, got as u64)),
        }
        pos += got as u64;
        if got < want {
            break; // the object ends here
        }
    }
    file.sync_data()?;
    let mut reread = checksum.begin();
    for &(start, len) in &ranges {
        sys::drop_cached(&file, start, len);
        let mut done = 0;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            let got = crate::sys::pread_full(&file, &mut buf[..n], start + done)?;
            if got < n {
                return Err(Failure::new(
                    Errno::EIO,
                    format!("stage-out copy {temp} is shorter than what was written"),
                ));
            }
            reread.update(&buf[..n]);
            done += n as u64;
        }
    }
    let (crc, reread) = (copied.finish(), reread.finish());
    if reread != crc {
        return Err(Failure::new(
            Errno::EIO,
            format!(
                "stage-out copy of object {} stripe {} reads back wrong from {temp} (crc {reread:08x}, expected {crc:08x})",
                order.ino, order.stripe
            ),
        ));
    }
    Ok(StagedObject { bytes: pos - order.object_offset, crc })
}

/// The file offset of object offset `pos` of object `stripe` (the inverse of `Layout::locate`).
fn file_offset(layout: &Layout, stripe: u32, pos: u64) -> Option<u64> {
    let unit = layout.stripe_size;
    let file_unit = (pos / unit).checked_mul(layout.stripe_count as u64)?.checked_add(stripe as u64)?;
    file_unit.checked_mul(unit)?.checked_add(pos % unit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::InlineCrc32c;
    use crate::store::DirStore;
    use std::fs;

    #[test]
    fn file_offset_inverts_locate() {
        let layout = Layout { stripe_count: 3, stripe_size: 64 << 10, first: 1 };
        for offset in [0u64, 1, 65535, 65536, 200_000, 3 << 20, (7 << 20) + 12345] {
            let (stripe, pos) = layout.locate(offset);
            assert_eq!(file_offset(&layout, stripe, pos), Some(offset));
        }
        assert_eq!(file_offset(&layout, 2, u64::MAX - 1), None);
    }

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
        pfs.commit_stage_temp(&temp, 9, "/out/file", data.len() as u64, 0o644).unwrap();
        assert_eq!(fs::read(t.path().join("pfs/out/file")).unwrap(), data);
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
