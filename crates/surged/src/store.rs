//! The object store: a daemon's share of every striped file. Objects are
//! named by inode number only (never by a client string), one file each.
//!
//! Usage is what the objects take on the device (their allocated blocks),
//! not their lengths: a sparse truncate costs nothing. A write first takes
//! the most it can allocate from the capacity (and checks the device keeps
//! its reserve, see [`crate::space`]), then settles on what the file system
//! reports it allocated.
//!
//! The data manager's hooks live here too: a [`UsageObserver`] is told
//! when usage crosses the high and low watermarks
//! ([`DirStore::watch_usage`]), [`SpaceFreed`] wakes the writers that wait
//! for space while demotion frees it, and `list` pages through the objects
//! (the orphan collector's view of a daemon).

use crate::blocksums::{changed_outside, fold_read, length_disagrees, whole_blocks, ChangeError, Checked, SumFile};
use crate::checksum::{BlockSums, ChecksumStage, InlineCrc32c, Running, BLOCK};
use crate::failure::Failure;
use crate::inventory::Inventory;
use crate::locking::lock;
use crate::space::Device;
use crate::sys::{copy_range, fallocate, pread_full, seek_data_or_hole};
use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use surge_proto::msg::{AllocateMode, FileIdentity, ListedObject, ObjListReply, ObjStatReply, ObjVerifyReply};
use surge_proto::Errno;

pub trait ObjectStore: Send + Sync {
    /// Writes `data` at `offset` of object `ino`, creating the object.
    /// Returns the bytes written, short only when the device filled up
    /// part way (as `pwrite` does), and the object's size before.
    fn write_at(&self, ino: u64, offset: u64, data: &[u8]) -> Result<Written, Errno>;
    /// `write_at` with the checksums of the whole blocks `data` covers,
    /// computed already (by the checksum stage, as it checked the request).
    fn write_summed(&self, ino: u64, offset: u64, data: &[u8], whole: &BlockSums) -> Result<Written, Failure>;
    /// Reads into `buf` from `offset`; short at the object's end, 0 for an
    /// absent object. Bytes that disagree with their checksum are `EIO`.
    /// The bytes read are added to `sum`, if given (by the checksums of the
    /// blocks just checked, where the store keeps them).
    fn read_summed(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        sum: Option<&mut dyn Running>,
    ) -> Result<usize, Failure>;
    /// Copies `piece` inside the kernel, adding the checksum of its bytes
    /// to `sum` from the checksums at rest: no byte passes through the
    /// daemon, and none is checked on the way (a stage-out re-reads its copy
    /// and compares). The bytes copied (short at the object's end); `None`
    /// when this store or the kernel cannot copy so (EXDEV across file
    /// systems, EINVAL, ENOSYS, EOPNOTSUPP) and nothing was copied: read
    /// and write instead.
    fn copy_out(&self, piece: &CopyPiece<'_>, sum: &mut dyn Running) -> Result<Option<u64>, Failure> {
        let _ = (piece, sum);
        Ok(None)
    }
    /// `read_summed` with O_DIRECT, for a copy the kernel throttles
    /// (`blkio`): reads `buf` (aligned, whole blocks, from `offset`, a
    /// block boundary) and gives the first `want` bytes, short at the
    /// object's end. `None` when this store or its file system cannot read
    /// so, and nothing was read: read through `read_summed` instead.
    fn read_direct(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        want: usize,
        sum: &mut dyn Running,
    ) -> Result<Option<usize>, Failure> {
        let _ = (ino, offset, buf, want, sum);
        Ok(None)
    }
    /// Where object `ino`'s next data (`hole` false) or hole (`hole`
    /// true) at or after `offset` starts, as SEEK_DATA/SEEK_HOLE say; `None`
    /// when no data follows. Past the object's last block is a hole.
    fn seek(&self, ino: u64, offset: u64, hole: bool) -> Result<Option<u64>, Failure>;
    /// fallocate(2) of `[offset, offset + len)` of object `ino` as `mode`
    /// says, keeping its length.
    fn allocate(&self, ino: u64, offset: u64, len: u64, mode: AllocateMode) -> Result<(), Failure>;
    /// What object `ino` holds from `offset` on, at most `most` bytes, for
    /// a copy that keeps holes: a hole that its checksums agree must read
    /// as zeros (the copy need not write it), or data to read (up to the
    /// next hole). A store that cannot tell says data.
    fn extent(&self, ino: u64, offset: u64, most: u64) -> Result<Extent, Failure> {
        let _ = (ino, offset);
        Ok(Extent::Data(most))
    }
    /// `read_summed` without a checksum.
    fn read_at(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize, Failure> {
        self.read_summed(ino, offset, buf, None)
    }
    /// Checks the blocks from `offset` (a block boundary) on, up to `len`
    /// bytes and a bounded amount per call, against their checksums.
    fn verify(&self, ino: u64, offset: u64, len: u64) -> Result<ObjVerifyReply, Failure>;
    /// The node-local data path ([`WriteGrant`]): all a write of `len`
    /// bytes at `offset` does before its data, the object's lock then held
    /// until `commit_write`; `stamp_ns` is the write stamp the grant carries.
    /// Stores whose objects are not files a client could write refuse with
    /// EOPNOTSUPP (the client then sends `Write`).
    fn grant_write(&self, ino: u64, offset: u64, len: u64, stamp_ns: i64) -> Result<WriteGrant, Failure> {
        let _ = (ino, offset, len, stamp_ns);
        Err(no_local_path())
    }
    /// Ends `grant`: the checksums of its blocks are `crcs` (from the
    /// client), or computed from the file when `None` (the client is gone).
    fn commit_write(&self, grant: WriteGrant, crcs: Option<&[u32]>) -> Result<Written, Failure> {
        let _ = (grant, crcs);
        Err(no_local_path())
    }
    /// The node-local data path's read: the object's file and recorded
    /// length, `None` when the object does not exist here.
    fn local_read(&self, ino: u64) -> Result<Option<(FileIdentity, u64)>, Failure> {
        let _ = ino;
        Err(no_local_path())
    }
    /// Descriptors of object `ino` for a client on the daemon's node: its
    /// file (read-write) and its checksum sidecar (read-only), and which file it is.
    fn handles(&self, ino: u64) -> Result<(File, File, FileIdentity), Failure> {
        let _ = ino;
        Err(no_local_path())
    }
    /// Size and modification time; an absent object has size 0 and mtime 0.
    /// An object lost is EIO saying so.
    fn stat(&self, ino: u64) -> Result<ObjStatReply, Failure>;
    fn truncate(&self, ino: u64, len: u64) -> Result<(), Failure>;
    /// Sets the object's modification time (see `stamp`); an absent object is left absent.
    fn set_mtime(&self, ino: u64, mtime_ns: i64) -> Result<(), Errno>;
    /// Removes the object; an absent object is not an error.
    fn remove(&self, ino: u64) -> Result<(), Errno>;
    /// Makes the object's data durable (and its directory entry, when new).
    fn sync(&self, ino: u64) -> Result<(), Errno>;
    fn usage(&self) -> Usage;
    /// Up to `max` objects after the cursor `after` (see `Request::ObjList`)
    /// with the time since each last changed: what the orphan collector
    /// checks against the namespace. A store that cannot list says ENOSYS.
    fn list(&self, after: u64, max: usize) -> Result<ObjListReply, Errno> {
        let _ = (after, max);
        Err(Errno::ENOSYS)
    }
    /// The objects the store had when it last ran and found missing when it
    /// opened (removed behind its back): reads of them fail with EIO.
    fn lost(&self) -> Vec<u64> {
        Vec::new()
    }
    /// Accepts the loss of `lost()`: they keep reading as lost, but are not
    /// reported again.
    fn accept_lost(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Up to `len` bytes of object `ino` from `offset` (stopping at its end),
/// to be copied into `dest` at `dest_offset` ([`ObjectStore::copy_out`]).
pub struct CopyPiece<'a> {
    pub ino: u64,
    pub offset: u64,
    pub len: u64,
    pub dest: &'a File,
    pub dest_offset: u64,
}

/// A stretch of an object from some offset on ([`ObjectStore::extent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// This many bytes of zeros the file system holds no blocks for.
    Hole(u64),
    /// Up to this many bytes to read (fewer where the object ends).
    Data(u64),
}

/// Most objects one `list` call returns.
pub const LIST_MAX: usize = 4096;

/// Which watermark usage crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watermark {
    /// Usage rose to the high watermark or above: time to free space.
    High,
    /// Usage fell to the low watermark or below, after it had been above
    /// the high one: enough was freed.
    Low,
}

/// Told when the store's usage crosses a watermark. It runs on the thread
/// of the request that changed the usage, so it must only take note (wake
/// a background task), never do the work itself.
pub trait UsageObserver: Send + Sync {
    fn crossed(&self, mark: Watermark, usage: Usage);
}

/// The watermarks, in bytes of usage, and who is told of crossings.
struct UsageWatch {
    high: u64,
    low: u64,
    observer: Arc<dyn UsageObserver>,
    /// Above the high watermark, and not yet back below the low one.
    above: AtomicBool,
}

/// Where a daemon's object store lives, for [`OpenStore`].
pub struct StoreSite {
    /// The object directory (`<buffer>/objects`).
    pub dir: PathBuf,
    /// Most bytes the objects may take (`--capacity`).
    pub capacity: Option<u64>,
    /// The daemon's checksum stage, for the checksums at rest.
    pub checksum: Arc<dyn ChecksumStage>,
    /// Told whenever the store frees space.
    pub freed: Arc<SpaceFreed>,
    /// A store made before (the daemon directory's identity says so): its
    /// inventory must be there, or objects may have gone unnoticed.
    pub existing: bool,
    /// After the whole store was lost: every inode below this one had its
    /// objects here lost, so an absent one reads as lost (`identity`).
    pub lost_below: u64,
}

/// Counts the times a store freed space (an object removed or shrunk, a
/// write that took less than it reserved), and wakes the writers waiting
/// for it. A writer that found the store full starts a [`SpaceWatch`], then
/// tries again before it waits, so no free between the two is missed.
#[derive(Default)]
pub struct SpaceFreed {
    frees: Mutex<u64>,
    /// Watches open: with none, a free costs one atomic load (every write settles).
    watching: AtomicU64,
    freed: Condvar,
    /// Bytes of the objects removed since the start: what the trimmer
    /// (`drain::trimmer`) waits for before it tells the device.
    released: AtomicU64,
}

impl SpaceFreed {
    /// Space was freed.
    pub fn notify(&self) {
        if self.watching.load(Ordering::Acquire) > 0 {
            *lock(&self.frees) += 1;
            self.freed.notify_all();
        }
    }

    /// An object taking `bytes` on the device was removed: blocks the file system freed.
    pub fn released(&self, bytes: u64) {
        self.released.fetch_add(bytes, Ordering::Relaxed);
        self.notify();
    }

    /// Bytes [`SpaceFreed::released`] since the start.
    pub fn released_bytes(&self) -> u64 {
        self.released.load(Ordering::Relaxed)
    }

    /// Watches for frees from now on.
    pub fn watch(&self) -> SpaceWatch<'_> {
        self.watching.fetch_add(1, Ordering::AcqRel);
        SpaceWatch { space: self, seen: *lock(&self.frees) }
    }
}

/// A writer's watch for freed space ([`SpaceFreed::watch`]).
pub struct SpaceWatch<'a> {
    space: &'a SpaceFreed,
    seen: u64,
}

impl SpaceWatch<'_> {
    /// Waits until space was freed since the watch began or last waited,
    /// or `timeout` passed.
    pub fn wait(&mut self, timeout: Duration) {
        let frees = lock(&self.space.frees);
        let (frees, _) = self
            .space
            .freed
            .wait_timeout_while(frees, timeout, |frees| *frees == self.seen)
            .unwrap_or_else(PoisonError::into_inner);
        self.seen = *frees;
    }
}

impl Drop for SpaceWatch<'_> {
    fn drop(&mut self) {
        self.space.watching.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Opens a daemon's object store (the store seam of `crate::Stages`).
pub type OpenStore = Box<dyn FnOnce(&StoreSite) -> io::Result<Box<dyn ObjectStore>> + Send>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub bytes: usize,
    pub size_before: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub objects: u64,
    /// Bytes the objects take on the device (allocated blocks, holes excluded).
    pub bytes: u64,
}

/// Objects whose descriptors stay open between requests, so that a write is
/// one `pwrite` rather than open + pwrite + close.
const OPEN_OBJECTS: usize = 256;
/// Offsets are `off_t` for the kernel.
const MAX_OBJECT_SIZE: u64 = i64::MAX as u64;
/// The allocation unit assumed when bounding what a write allocates (the
/// page size, and the block size of the usual local file systems); what
/// the file system really allocated is read back after the write.
const ALLOCATION_UNIT: u64 = 4096;
/// fallocate(2)'s mode that frees a range's blocks, keeping the length.
const PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
/// What copy_file_range(2) answers when it cannot copy between two files
/// (another file system, a file system without it): read and write instead.
const KERNEL_COPY_REFUSED: [i32; 4] = [libc::EXDEV, libc::EINVAL, libc::ENOSYS, libc::EOPNOTSUPP];
/// Most bytes one `verify` call checks (a request answers within seconds).
const VERIFY_MAX: u64 = 64 << 20;
/// Largest piece `verify` reads at once.
const VERIFY_CHUNK: u64 = 1 << 20;

/// One file per object under `<dir>/<2 hex digits>/<16 hex digits>`, the
/// two-digit directory being the inode number's low byte (inode numbers are
/// sequential, so their low bytes spread best).
pub struct DirStore {
    dir: PathBuf,
    capacity: Option<u64>,
    device: Device,
    /// Bytes allocated to objects, plus what writes in progress took ahead.
    bytes: AtomicU64,
    objects: AtomicU64,
    open: Mutex<OpenObjects>,
    checksum: Arc<dyn ChecksumStage>,
    watch: Option<UsageWatch>,
    freed: Arc<SpaceFreed>,
    /// The objects this store holds, kept apart from their files.
    inventory: Inventory,
    /// Listed by the inventory but missing when the store opened.
    lost: Vec<u64>,
    /// Absent objects below this inode were lost with a wiped store.
    lost_below: u64,
}

struct Object {
    file: File,
    /// The block checksums of `file`.
    sums: SumFile,
    /// The object's length as its sidecar records it; changed under `state`,
    /// read without it (a reader that finds the file disagreeing looks
    /// again under the lock).
    len: AtomicU64,
    /// Why the object cannot be trusted (its sidecar's record is missing,
    /// or its file was extended or cut outside the daemon): every use but
    /// a truncation to 0 or a removal fails with EIO saying so.
    suspect: Mutex<Option<String>>,
    /// Held across a write or truncate of this object. The kernel
    /// serialises writes to one file anyway, so this costs no parallelism.
    /// A write grant holds it across requests (`ObjectState::granted`):
    /// take it with [`quiet`].
    state: Mutex<ObjectState>,
    /// Signalled when a write grant of this object ends.
    grant_ended: Condvar,
    /// Its file's device and inode, which a client's descriptors must name.
    identity: FileIdentity,
}

/// The object's lock, once no write grant holds it: whoever changes the
/// object, or reads it again to be sure of a mismatch, waits for the
/// client writing under a grant to commit.
fn quiet(object: &Object) -> MutexGuard<'_, ObjectState> {
    let mut state = lock(&object.state);
    while state.granted {
        state = object.grant_ended.wait(state).unwrap_or_else(PoisonError::into_inner);
    }
    state
}

/// A write extent granted to a client on the daemon's node (the
/// node-local data path): the store did all a write does before its data
/// (space, unsure marks, the length record, the edge blocks checked) and
/// holds the object's lock; the client writes the bytes into the object's
/// file itself, and `ObjectStore::commit_write` stores their checksums.
pub struct WriteGrant {
    pub ino: u64,
    pub offset: u64,
    pub len: u64,
    pub size_before: u64,
    pub file: FileIdentity,
    /// The object's write stamp (`crate::stamp`), taken when the extent is
    /// granted: the write returns to its program before its commit lands,
    /// so a time set on the file in between (utimens) must stay later.
    pub stamp_ns: i64,
    /// Bytes taken ahead from the capacity, settled at the commit.
    reserved: u64,
    /// `None` once committed.
    object: Option<Arc<Object>>,
}

impl Drop for WriteGrant {
    /// A grant dropped uncommitted (only a failing daemon does) lets go of
    /// the lock; its blocks stay unsure.
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            lock(&object.state).granted = false;
            object.grant_ended.notify_all();
        }
    }
}

struct ObjectState {
    /// Bytes its blocks take, as this store accounts them.
    allocated: u64,
    /// Unlinked by `remove`: a writer holding this object must reopen.
    removed: bool,
    /// Created by this process and its directory entry not yet synced.
    unsynced_entry: bool,
    /// A client on the daemon's node writes it under a grant.
    granted: bool,
}

impl DirStore {
    /// Opens (creating if needed) the store in `dir`, counting what is
    /// already there so that usage and the quota are right after a restart.
    /// A store without an inventory gets an empty one (a new store).
    pub fn open(dir: &Path, capacity: Option<u64>) -> io::Result<DirStore> {
        DirStore::open_inventoried(dir, capacity, true)
    }

    /// `open`; with `new_inventory` false, a store whose inventory is
    /// missing is refused (its objects could have gone unnoticed).
    fn open_inventoried(dir: &Path, capacity: Option<u64>, new_inventory: bool) -> io::Result<DirStore> {
        let mut usage = Usage::default();
        let mut present = HashSet::new();
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        for shard in 0..=0xffu8 {
            let shard_dir = dir.join(format!("{shard:02x}"));
            fs::DirBuilder::new().recursive(true).mode(0o700).create(&shard_dir)?;
            for entry in fs::read_dir(&shard_dir)? {
                let entry = entry?;
                if let Some(ino) = object_ino(&entry.file_name().to_string_lossy()) {
                    present.insert(ino);
                    usage.objects += 1;
                    usage.bytes += allocated(&entry.metadata()?);
                }
            }
        }
        let (inventory, lost) = Inventory::open(dir, new_inventory, &present)?;
        Ok(DirStore {
            inventory,
            lost,
            lost_below: 0,
            dir: dir.to_path_buf(),
            capacity,
            device: Device::holding(dir),
            bytes: AtomicU64::new(usage.bytes),
            objects: AtomicU64::new(usage.objects),
            open: Mutex::new(OpenObjects::new(OPEN_OBJECTS)),
            checksum: Arc::new(InlineCrc32c),
            watch: None,
            freed: Arc::default(),
        })
    }

    /// Tells `observer` when usage rises to `high` bytes or above, and when
    /// it falls back to `low` (below `high`) or below.
    pub fn watch_usage(self, high: u64, low: u64, observer: Arc<dyn UsageObserver>) -> DirStore {
        assert!(low < high, "the low watermark is below the high one");
        DirStore { watch: Some(UsageWatch { high, low, observer, above: AtomicBool::new(false) }), ..self }
    }

    /// Tells the observer, if any, about a watermark the usage just crossed.
    fn usage_changed(&self) {
        let Some(watch) = &self.watch else { return };
        let usage = self.usage();
        if usage.bytes >= watch.high && !watch.above.swap(true, Ordering::AcqRel) {
            watch.observer.crossed(Watermark::High, usage);
        } else if usage.bytes <= watch.low
            && watch.above.compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            watch.observer.crossed(Watermark::Low, usage);
        }
    }

    /// Block checksums computed by `stage` (the daemon's checksum stage).
    pub fn with_checksum(self, stage: Arc<dyn ChecksumStage>) -> DirStore {
        DirStore { checksum: stage, ..self }
    }

    /// `open` at `site`, with its checksum stage, telling its `freed` (the default store).
    pub fn open_at(site: &StoreSite) -> io::Result<DirStore> {
        let store = DirStore::open_inventoried(&site.dir, site.capacity, !site.existing)?
            .with_checksum(Arc::clone(&site.checksum));
        Ok(DirStore { freed: Arc::clone(&site.freed), lost_below: site.lost_below, ..store })
    }

    fn checked<'a>(&'a self, object: &'a Object) -> Checked<'a> {
        Checked { data: &object.file, sums: &object.sums, stage: &*self.checksum }
    }

    /// Reads as `read_at` does, lists the damaged blocks among those read
    /// and gives the checksums of the whole blocks read (`Checked::check`).
    fn read_checking(
        &self,
        ino: u64,
        object: &Object,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(usize, Vec<u64>, BlockSums), Failure> {
        let want = buf.len();
        self.read_checking_from(ino, object, &object.file, offset, buf, want)
    }

    /// `read_checking` through `data` (the object's file, or it opened with
    /// O_DIRECT), which reads all of `buf`, of which the first `want` bytes
    /// count. The bytes read must end where the recorded length says; a
    /// mismatch, or a block that disagrees with its checksum, is believed
    /// only when it is still there under the object's lock (a writer may
    /// have been between data, length and checksums).
    fn read_checking_from(
        &self,
        ino: u64,
        object: &Object,
        data: &File,
        offset: u64,
        buf: &mut [u8],
        want: usize,
    ) -> Result<(usize, Vec<u64>, BlockSums), Failure> {
        self.usable(ino, object)?;
        let checked = self.checked(object);
        let expected = |object: &Object| object.len.load(Ordering::Acquire).saturating_sub(offset).min(want as u64);
        let n = pread_full(data, buf, offset)?.min(want);
        let (damaged, whole) = checked.check(offset, &buf[..n], n < want)?;
        if damaged.is_empty() && n as u64 == expected(object) {
            return Ok((n, damaged, whole));
        }
        let _no_writer = quiet(object);
        let n = pread_full(data, buf, offset)?.min(want);
        if n as u64 != expected(object) {
            return Err(self.distrust(ino, object));
        }
        let (damaged, whole) = checked.check(offset, &buf[..n], n < want)?;
        Ok((n, damaged, whole))
    }

    /// `read_checking_from` of object `ino`, EIO naming the first damaged
    /// block: the bytes read and the checksums of the whole blocks among them.
    fn read_undamaged(
        &self,
        ino: u64,
        object: &Object,
        data: &File,
        offset: u64,
        buf: &mut [u8],
        want: usize,
    ) -> Result<(usize, BlockSums), Failure> {
        match self.read_checking_from(ino, object, data, offset, buf, want)? {
            (n, damaged, whole) if damaged.is_empty() => Ok((n, whole)),
            (_, damaged, _) => Err(damage_failure(ino, damaged[0])),
        }
    }

    /// EIO if object `ino` is suspect.
    fn usable(&self, ino: u64, object: &Object) -> Result<(), Failure> {
        match lock(&object.suspect).as_deref() {
            Some(why) => Err(untrusted_failure(ino, why)),
            None => Ok(()),
        }
    }

    /// Object `ino`'s file disagrees with its recorded length (checked under
    /// its lock): it becomes suspect, and the failure says how.
    fn distrust(&self, ino: u64, object: &Object) -> Failure {
        let why = match object.file.metadata() {
            Ok(meta) => changed_outside(object.len.load(Ordering::Acquire), meta.len()),
            Err(e) => format!("its file cannot be examined: {e}"),
        };
        let failure = untrusted_failure(ino, &why);
        *lock(&object.suspect) = Some(why);
        failure
    }

    /// Checks open object `ino` as its next open would (under its lock, so
    /// no write is between record and data): its file is still in the
    /// store, as long as the daemon keeps it, and its sidecar's header
    /// records that length. So a scrub or `surge fsck` finds a file
    /// removed, changed or a header damaged since the object was opened.
    fn check_record(&self, ino: u64, object: &Object) -> Result<(), Failure> {
        let state = lock(&object.state);
        let meta = object.file.metadata()?;
        if meta.nlink() == 0 && !state.removed {
            return Err(unlinked_while_open(ino));
        }
        self.usable(ino, object)?;
        let len = object.len.load(Ordering::Acquire);
        if meta.len() != len {
            return Err(self.distrust(ino, object));
        }
        let why = match object.sums.recorded_length()? {
            Some(recorded) if recorded == len => return Ok(()),
            Some(recorded) => format!("its checksum record says {recorded} bytes, the object holds {len}"),
            None => "its checksum record is damaged (reset or overwritten)".to_string(),
        };
        let failure = untrusted_failure(ino, &why);
        *lock(&object.suspect) = Some(why);
        Err(failure)
    }

    /// The metadata of object `ino`'s file, whose length must be the
    /// recorded one (looked at again under the lock before saying it is
    /// not: a writer may be between record and data); else the object is
    /// distrusted.
    fn matching_record(&self, ino: u64, object: &Object) -> Result<fs::Metadata, Failure> {
        let meta = object.file.metadata()?;
        if meta.len() == object.len.load(Ordering::Acquire) {
            return Ok(meta);
        }
        let _no_writer = quiet(object);
        let meta = object.file.metadata()?;
        if meta.len() == object.len.load(Ordering::Acquire) {
            Ok(meta)
        } else {
            Err(self.distrust(ino, object))
        }
    }

    fn shard_dir(&self, ino: u64) -> PathBuf {
        self.dir.join(format!("{:02x}", ino & 0xff))
    }

    fn path_of(&self, ino: u64) -> PathBuf {
        self.shard_dir(ino).join(format!("{ino:016x}"))
    }

    /// The object, opened (and with `create`, created) if needed; `None` if
    /// it does not exist and `create` is false. An object the inventory
    /// lists but whose file is gone is EIO: it was lost, not never written.
    fn object(&self, ino: u64, create: bool) -> Result<Option<Arc<Object>>, Failure> {
        loop {
            if let Some(object) = lock(&self.open).get(ino) {
                return Ok(Some(object));
            }
            // Open outside the lock: other objects stay reachable meanwhile.
            let path = self.path_of(ino);
            let (file, created) = match open_object_file(&path, false) {
                Ok(file) => (file, None),
                // Never written here (the common case of holes and empty files: no lock taken).
                Err(e) if e.kind() == io::ErrorKind::NotFound && !create && !self.had(ino) => {
                    return Ok(None);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // Creations and removals change file and inventory under this lock.
                    let _settled = lock(&self.open);
                    match open_object_file(&path, false) {
                        Ok(_) => continue,
                        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(Errno::from_io(&e).into()),
                        Err(_) if self.had(ino) => return Err(lost_failure(ino)),
                        Err(_) if !create => return Ok(None),
                        Err(_) => {
                            let (file, sums) = self.create_object(ino, &path)?;
                            (file, Some(sums))
                        }
                    }
                }
                Err(e) => return Err(Errno::from_io(&e).into()),
            };
            let meta = file.metadata()?;
            let fresh = created.is_some();
            let (sums, missing) = match created {
                Some(sums) => (sums, false),
                None => match SumFile::open(&path)? {
                    Some(sums) => (sums, false),
                    // Gone with the file (removed meanwhile: the link count tells), or removed alone:
                    // a blank one, without a record, keeps the object suspect until it is cut to 0.
                    None if meta.nlink() == 0 => continue,
                    None => (SumFile::blank(&path)?, true),
                },
            };
            let (len, suspect) = match sums.recorded_length()? {
                None if missing => {
                    (meta.len(), Some("its checksum record (the .sum file beside it) is missing".into()))
                }
                None => (meta.len(), Some("its checksum record is damaged (reset or overwritten)".to_string())),
                Some(recorded) => match length_disagrees(&sums, recorded, meta.len())? {
                    Some(why) => (recorded, Some(why)),
                    None => {
                        // A crash between record and data: the file is what was written.
                        if recorded != meta.len() {
                            sums.record_length(meta.len())?;
                        }
                        (meta.len(), None)
                    }
                },
            };
            let object = Arc::new(Object {
                sums,
                file,
                len: AtomicU64::new(len),
                suspect: Mutex::new(suspect),
                state: Mutex::new(ObjectState {
                    allocated: allocated(&meta),
                    removed: false,
                    unsynced_entry: fresh,
                    granted: false,
                }),
                grant_ended: Condvar::new(),
                identity: FileIdentity { dev: meta.dev(), ino: meta.ino() },
            });
            let mut open = lock(&self.open);
            if let Some(winner) = open.get(ino) {
                return Ok(Some(winner));
            }
            // `remove` unlinks under this lock: a file it unlinked between our
            // open and now must not be cached, or later writes would be lost.
            if object.file.metadata()?.nlink() == 0 {
                continue;
            }
            open.insert(ino, Arc::clone(&object));
            return Ok(Some(object));
        }
    }

    /// Did this store have an object of `ino` (the inventory lists it, or
    /// it predates the loss of the whole store)? One absent now was lost.
    fn had(&self, ino: u64) -> bool {
        ino < self.lost_below || self.inventory.lists(ino)
    }

    /// Creates object `ino` at `path` and lists it, under the open-objects
    /// lock (as `remove` unlinks). Its sidecar comes first, so that whoever
    /// opens the new file finds its record.
    fn create_object(&self, ino: u64, path: &Path) -> Result<(File, SumFile), Failure> {
        let sums = SumFile::create(path)?;
        let file = open_object_file(path, true)?;
        if let Err(e) = self.inventory.add(ino) {
            let _ = fs::remove_file(path);
            return Err(Failure::new(
                Errno::from_io(&e),
                format!("cannot record object {ino} in {}: {e}", self.inventory.path().display()),
            ));
        }
        self.objects.fetch_add(1, Ordering::Relaxed);
        Ok((file, sums))
    }

    /// A new, empty object in place of the lost object `ino`.
    fn renew(&self, ino: u64) -> Result<Arc<Object>, Failure> {
        let path = self.path_of(ino);
        {
            let _settled = lock(&self.open);
            if !path.exists() {
                self.create_object(ino, &path)?;
            }
        }
        self.object(ino, false)?.ok_or_else(|| Errno::ENOENT.into())
    }

    fn object_for_write(&self, ino: u64) -> Result<Arc<Object>, Failure> {
        self.object(ino, true)?.ok_or_else(|| Errno::ENOENT.into())
    }

    /// Accounts `bytes` more, unless that would exceed the capacity or eat
    /// into the device's reserve.
    fn reserve(&self, bytes: u64) -> Result<(), Errno> {
        if bytes == 0 {
            return Ok(());
        }
        self.device.check_data(bytes)?;
        let Some(capacity) = self.capacity else {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
            self.usage_changed();
            return Ok(());
        };
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= capacity)
            })
            .map_err(|_| Errno::ENOSPC)?;
        self.usage_changed();
        Ok(())
    }

    fn release(&self, bytes: u64) {
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.usage_changed();
        self.freed.released(bytes);
    }

    /// Replaces `reserved` bytes taken ahead, and the object's allocation
    /// accounted so far, by what the file system now reports for it.
    fn settle(&self, object: &Object, state: &mut ObjectState, reserved: u64) {
        // Should fstat fail, what was taken ahead stays charged.
        let now = object.file.metadata().map_or(state.allocated + reserved, |meta| allocated(&meta));
        let _ = self.bytes.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            Some((used + now).saturating_sub(state.allocated + reserved))
        });
        let freed = now < state.allocated + reserved;
        state.allocated = now;
        self.usage_changed();
        if freed {
            self.freed.notify();
        }
    }

    /// Runs `change` of `offset..end` of object `ino` (created if new)
    /// under its lock, the object usable, with its recorded length before
    /// and the bytes taken ahead for what the change may allocate (which
    /// `change` settles).
    fn changing<T>(
        &self,
        ino: u64,
        offset: u64,
        end: u64,
        change: impl FnOnce(&Arc<Object>, &mut ObjectState, u64, u64) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        loop {
            let object = self.object_for_write(ino)?;
            let mut state = quiet(&object);
            if state.removed {
                continue;
            }
            self.usable(ino, &object)?;
            let size_before = object.len.load(Ordering::Acquire);
            let bound = allocation_bound(&state, size_before, offset, end);
            self.reserve(bound)?;
            return change(&object, &mut state, size_before, bound);
        }
    }

    /// The objects of shard `shard` (an inode's low byte) above `after`, in
    /// inode order.
    fn shard_objects(&self, shard: u64, after: u64) -> Result<Vec<(u64, fs::DirEntry)>, Errno> {
        let mut found = Vec::new();
        for entry in fs::read_dir(self.dir.join(format!("{shard:02x}")))? {
            let entry = entry?;
            match object_ino(&entry.file_name().to_string_lossy()) {
                Some(ino) if ino > after => found.push((ino, entry)),
                _ => {}
            }
        }
        found.sort_unstable_by_key(|(ino, _)| *ino);
        Ok(found)
    }
}

/// Bytes a file's blocks take on the device.
fn allocated(meta: &fs::Metadata) -> u64 {
    meta.blocks() * 512
}

/// The most a write of `offset..end` can allocate: the blocks it touches
/// past the object's end, or all of them when the object has holes.
fn allocation_bound(state: &ObjectState, len: u64, offset: u64, end: u64) -> u64 {
    let first_touched = offset / ALLOCATION_UNIT;
    let first_new_block =
        if state.allocated >= len { len.div_ceil(ALLOCATION_UNIT).max(first_touched) } else { first_touched };
    end.div_ceil(ALLOCATION_UNIT).saturating_sub(first_new_block) * ALLOCATION_UNIT
}

impl ObjectStore for DirStore {
    fn write_at(&self, ino: u64, offset: u64, data: &[u8]) -> Result<Written, Errno> {
        let whole = whole_blocks(&*self.checksum, offset, data);
        self.write_summed(ino, offset, data, &whole).map_err(|failure| failure.errno)
    }

    fn write_summed(&self, ino: u64, offset: u64, data: &[u8], whole: &BlockSums) -> Result<Written, Failure> {
        if data.is_empty() {
            return Ok(Written { bytes: 0, size_before: self.stat(ino)?.size });
        }
        let end = offset.checked_add(data.len() as u64).filter(|&end| end <= MAX_OBJECT_SIZE).ok_or(Errno::EFBIG)?;
        self.changing(ino, offset, end, |object, state, size_before, bound| {
            let result = self.checked(object).write(offset, data, whole, size_before);
            let (written, error, len) = match result {
                Ok(done) => done,
                Err(e) => {
                    self.settle(object, state, bound);
                    return Err(change_failure(ino, "write to", e));
                }
            };
            object.len.store(len, Ordering::Release);
            self.settle(object, state, bound);
            match error {
                Some(errno) if written == 0 => Err(errno.into()),
                _ => Ok(Written { bytes: written, size_before }),
            }
        })
    }

    fn read_summed(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        sum: Option<&mut dyn Running>,
    ) -> Result<usize, Failure> {
        let Some(object) = self.object(ino, false)? else { return Ok(0) };
        let want = buf.len();
        let (n, whole) = self.read_undamaged(ino, &object, &object.file, offset, buf, want)?;
        if let Some(sum) = sum {
            fold_read(sum, offset, &buf[..n], &whole);
        }
        Ok(n)
    }

    fn read_direct(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        want: usize,
        sum: &mut dyn Running,
    ) -> Result<Option<usize>, Failure> {
        let Some(object) = self.object(ino, false)? else { return Ok(Some(0)) };
        let Ok(direct) = crate::sys::reopen_direct(&object.file, false) else { return Ok(None) };
        let (n, whole) = self.read_undamaged(ino, &object, &direct, offset, buf, want)?;
        fold_read(sum, offset, &buf[..n], &whole);
        Ok(Some(n))
    }

    fn copy_out(&self, piece: &CopyPiece<'_>, sum: &mut dyn Running) -> Result<Option<u64>, Failure> {
        let &CopyPiece { ino, offset, len, dest, dest_offset } = piece;
        let Some(object) = self.object(ino, false)? else { return Ok(Some(0)) };
        self.usable(ino, &object)?;
        self.matching_record(ino, &object)?;
        let len = len.min(object.len.load(Ordering::Acquire).saturating_sub(offset));
        let mut copied = 0;
        while copied < len {
            match copy_range(&object.file, offset + copied, dest, dest_offset + copied, len - copied) {
                Ok(0) => break, // shrunk meanwhile: the caller's re-read tells
                Ok(n) => copied += n,
                Err(errno) if copied == 0 && KERNEL_COPY_REFUSED.contains(&errno.0) => return Ok(None),
                Err(errno) => {
                    return Err(Failure::new(
                        errno,
                        format!("copying object {ino} at {} in the kernel", offset + copied),
                    ))
                }
            }
        }
        self.checked(&object).sum_stored(offset, copied, sum)?;
        Ok(Some(copied))
    }

    fn verify(&self, ino: u64, offset: u64, len: u64) -> Result<ObjVerifyReply, Failure> {
        let mut reply = ObjVerifyReply { checked: 0, damaged: Vec::new() };
        let Some(object) = self.object(ino, false)? else { return Ok(reply) };
        self.check_record(ino, &object)?;
        let start = offset - offset % BLOCK as u64;
        let stop = offset.saturating_add(len.min(VERIFY_MAX));
        let mut buf = vec![0u8; (stop - start).min(VERIFY_CHUNK) as usize];
        let mut pos = start;
        while pos < stop {
            let want = (stop - pos).min(buf.len() as u64) as usize;
            let (n, damaged, _) = self.read_checking(ino, &object, pos, &mut buf[..want])?;
            reply.damaged.extend(damaged);
            pos += n as u64;
            if n < want {
                break;
            }
        }
        reply.checked = pos - start;
        Ok(reply)
    }

    /// The size is the recorded length: an object changed outside the
    /// daemon keeps the size it was written to (its reads fail), so that
    /// the file can still be listed, removed or replaced.
    fn grant_write(&self, ino: u64, offset: u64, len: u64, stamp_ns: i64) -> Result<WriteGrant, Failure> {
        if len == 0 {
            return Err(Failure::new(Errno::EINVAL, "a write grant of no bytes"));
        }
        let end = offset.checked_add(len).filter(|&end| end <= MAX_OBJECT_SIZE).ok_or(Errno::EFBIG)?;
        self.changing(ino, offset, end, |object, state, size_before, reserved| {
            if let Err(e) = self.checked(object).grant(offset, end, size_before) {
                self.settle(object, state, reserved);
                return Err(change_failure(ino, "write to", e));
            }
            state.granted = true;
            let file = object.identity;
            Ok(WriteGrant { ino, offset, len, size_before, file, stamp_ns, reserved, object: Some(Arc::clone(object)) })
        })
    }

    fn commit_write(&self, mut grant: WriteGrant, crcs: Option<&[u32]>) -> Result<Written, Failure> {
        let object = grant.object.take().expect("a grant is committed once");
        let mut state = lock(&object.state);
        let end = grant.offset + grant.len;
        let recorded = grant.size_before.max(end);
        let first = grant.offset / BLOCK as u64;
        let blocks = ((end - 1) / BLOCK as u64 + 1 - first) as usize;
        let committed = (|| -> Result<Written, Failure> {
            let actual = object.file.metadata()?.len();
            if actual > recorded {
                return Err(self.distrust(grant.ino, &object));
            }
            let len = actual.max(grant.size_before);
            let client_crcs = crcs.filter(|crcs| crcs.len() == blocks && actual == recorded);
            let computed;
            let crcs = match client_crcs {
                Some(crcs) => crcs,
                None => {
                    let mut bytes = vec![0u8; blocks * BLOCK];
                    let n = pread_full(&object.file, &mut bytes, first * BLOCK as u64)?;
                    let mut sums = vec![0u32; blocks];
                    self.checksum.block_crcs(&bytes[..n], &mut sums);
                    computed = sums;
                    &computed
                }
            };
            self.checked(&object).close_grant(first, crcs, len, recorded)?;
            object.len.store(len, Ordering::Release);
            Ok(Written {
                bytes: len.saturating_sub(grant.offset).min(grant.len) as usize,
                size_before: grant.size_before,
            })
        })();
        self.settle(&object, &mut state, grant.reserved);
        state.granted = false;
        drop(state);
        object.grant_ended.notify_all();
        let written = committed?;
        match crcs {
            Some(given) if given.len() != blocks || written.bytes as u64 != grant.len => Err(Failure::new(
                Errno::EIO,
                format!(
                    "object {}: the client's write of {} bytes at {} did not land whole ({} bytes, {} of {blocks} checksums); \
                     the daemon checksummed what is there",
                    grant.ino, grant.len, grant.offset, written.bytes, given.len()
                ),
            )),
            _ => Ok(written),
        }
    }

    fn local_read(&self, ino: u64) -> Result<Option<(FileIdentity, u64)>, Failure> {
        let Some(object) = self.object(ino, false)? else { return Ok(None) };
        self.usable(ino, &object)?;
        // A write whose commit is still on its way has returned to its program: its bytes count.
        drop(quiet(&object));
        Ok(Some((object.identity, object.len.load(Ordering::Acquire))))
    }

    fn handles(&self, ino: u64) -> Result<(File, File, FileIdentity), Failure> {
        let object = self.object(ino, false)?.ok_or(Errno::ENOENT)?;
        self.usable(ino, &object)?;
        Ok((object.file.try_clone()?, object.sums.reopen_read_only()?, object.identity))
    }

    fn stat(&self, ino: u64) -> Result<ObjStatReply, Failure> {
        let Some(object) = self.object(ino, false)? else {
            return Ok(ObjStatReply { size: 0, mtime_ns: 0, allocated: 0 });
        };
        // A write whose commit is still on its way has returned to its program: its length counts.
        drop(quiet(&object));
        let meta = if lock(&object.suspect).is_none() {
            // A file that disagrees with its record is distrusted: its reads fail, its size stays the record's.
            self.matching_record(ino, &object).or_else(|_| object.file.metadata().map_err(Failure::from))?
        } else {
            object.file.metadata()?
        };
        let size = object.len.load(Ordering::Acquire);
        Ok(ObjStatReply {
            size,
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            allocated: allocated(&meta),
        })
    }

    /// The object's last block, which its end may cut, counts whole (data
    /// or hole), as a file system's last block does: the file may go on in
    /// other objects, and its holes then match a plain file's.
    fn seek(&self, ino: u64, offset: u64, hole: bool) -> Result<Option<u64>, Failure> {
        let Some(object) = self.object(ino, false)? else { return Ok(hole.then_some(offset)) };
        self.usable(ino, &object)?;
        let len = object.len.load(Ordering::Acquire);
        let end = len.next_multiple_of(BLOCK as u64);
        if offset >= end {
            return Ok(hole.then_some(offset));
        }
        if offset >= len {
            let last_is_data = seek_data_or_hole(&object.file, end - BLOCK as u64, false)?.is_some_and(|at| at < len);
            return Ok(match (hole, last_is_data) {
                (false, data) => data.then_some(offset),
                (true, data) => Some(if data { end } else { offset }),
            });
        }
        Ok(match seek_data_or_hole(&object.file, offset, hole)? {
            Some(found) if found < len => Some(found),
            // Found at the end, or after it: the last block is data.
            _ => hole.then_some(end),
        })
    }

    fn extent(&self, ino: u64, offset: u64, most: u64) -> Result<Extent, Failure> {
        let Some(object) = self.object(ino, false)? else { return Ok(Extent::Data(most)) };
        let len = object.len.load(Ordering::Acquire);
        if offset >= len {
            return Ok(Extent::Data(most));
        }
        let bound = len.min(offset.saturating_add(most));
        let data = seek_data_or_hole(&object.file, offset, false)?.unwrap_or(len).min(bound);
        if data == offset {
            let hole = seek_data_or_hole(&object.file, offset, true)?.unwrap_or(len);
            return Ok(Extent::Data(hole.clamp(offset + 1, offset.saturating_add(most)) - offset));
        }
        // A block with a checksum where the file system has a hole lost its
        // bytes: read, its check names the damage.
        match self.checked(&object).holes_only(offset, data - offset)? {
            true => Ok(Extent::Hole(data - offset)),
            false => Ok(Extent::Data(data - offset)),
        }
    }

    /// Preallocation reserves what it may allocate first, as a write does;
    /// a punch or zeroing goes through the checksums ([`Checked::zero`]).
    fn allocate(&self, ino: u64, offset: u64, len: u64, mode: AllocateMode) -> Result<(), Failure> {
        let end = offset.checked_add(len).filter(|&end| end <= MAX_OBJECT_SIZE).ok_or(Errno::EFBIG)?;
        if len == 0 {
            return Ok(());
        }
        loop {
            let object = match mode {
                AllocateMode::PunchHole => match self.object(ino, false)? {
                    Some(object) => object,
                    None => return Ok(()), // absent: zeros already
                },
                AllocateMode::Preallocate | AllocateMode::ZeroRange => self.object_for_write(ino)?,
            };
            let mut state = quiet(&object);
            if state.removed {
                continue;
            }
            self.usable(ino, &object)?;
            let recorded = object.len.load(Ordering::Acquire);
            if mode != AllocateMode::Preallocate && offset < recorded {
                let stop = end.min(recorded);
                let punch = || fallocate(&object.file, PUNCH_HOLE, offset, stop - offset);
                let zeroed = self.checked(&object).zero(offset, stop, punch);
                if let Err(e) = zeroed {
                    self.settle(&object, &mut state, 0);
                    return Err(change_failure(ino, "punch a hole in", e));
                }
            }
            let mut result = Ok(());
            let mut bound = 0;
            if mode != AllocateMode::PunchHole {
                bound = allocation_bound(&state, recorded, offset, end);
                result = self.reserve(bound).map_err(Failure::from);
                if result.is_err() {
                    bound = 0;
                } else {
                    result = fallocate(&object.file, libc::FALLOC_FL_KEEP_SIZE, offset, len).map_err(Failure::from);
                }
            }
            self.settle(&object, &mut state, bound);
            return result;
        }
    }

    /// A truncation to 0 starts the object afresh: it is how a program
    /// replaces a file (`O_TRUNC`), so it also clears a lost or suspect
    /// object's state.
    fn truncate(&self, ino: u64, len: u64) -> Result<(), Failure> {
        if len > MAX_OBJECT_SIZE {
            return Err(Errno::EFBIG.into());
        }
        loop {
            let object = if len == 0 {
                match self.object(ino, false) {
                    Ok(Some(object)) => object,
                    Ok(None) => return Ok(()),
                    // Lost: the file starts afresh, with an empty object.
                    Err(_) if self.had(ino) && !self.path_of(ino).exists() => self.renew(ino)?,
                    Err(failure) => return Err(failure),
                }
            } else {
                self.object_for_write(ino)?
            };
            let mut state = quiet(&object);
            if state.removed {
                continue;
            }
            if len > 0 {
                self.usable(ino, &object)?;
            }
            let suspect = lock(&object.suspect).is_some();
            // A suspect object's record cannot be believed: whichever of it and the file is longer is cut.
            let mut recorded = object.len.load(Ordering::Acquire);
            if suspect {
                recorded = recorded.max(object.file.metadata()?.len());
            }
            // Extending leaves a hole: only shrinking changes the allocation.
            let result = self.checked(&object).truncate(recorded, len);
            if result.is_ok() {
                object.len.store(len, Ordering::Release);
                *lock(&object.suspect) = None;
            }
            self.settle(&object, &mut state, 0);
            return result.map_err(|e| change_failure(ino, "truncate", e));
        }
    }

    fn set_mtime(&self, ino: u64, mtime_ns: i64) -> Result<(), Errno> {
        let Some(object) = self.object(ino, false).map_err(|f| f.errno)? else { return Ok(()) };
        let time = UNIX_EPOCH + Duration::from_nanos(mtime_ns.max(0) as u64);
        object.file.set_modified(time)?;
        Ok(())
    }

    fn remove(&self, ino: u64) -> Result<(), Errno> {
        let path = self.path_of(ino);
        // Unlink under the open-objects lock, so that no opener can cache the
        // file between our unlink and its insert (see `object`).
        let mut open = lock(&self.open);
        // The inventory lets go first: a crash before the unlink leaves an
        // object it does not list, which the next open takes in again.
        self.inventory.remove(ino).map_err(|e| Errno::from_io(&e))?;
        let size = match open.take(ino) {
            Some(object) => {
                let mut state = quiet(&object);
                state.removed = true;
                state.allocated
            }
            None => match fs::metadata(&path) {
                Ok(meta) => allocated(&meta),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    SumFile::remove(&path)?;
                    return Ok(());
                }
                Err(e) => return Err(Errno::from_io(&e)),
            },
        };
        // The checksums go first: a crash in between leaves an unchecked
        // object, never checksums a later object of this number inherits.
        SumFile::remove(&path)?;
        match fs::remove_file(&path) {
            Ok(()) => {
                self.objects.fetch_sub(1, Ordering::Relaxed);
                self.release(size);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Errno::from_io(&e)),
        }
    }

    fn sync(&self, ino: u64) -> Result<(), Errno> {
        let Some(object) = self.object(ino, false).map_err(|f| f.errno)? else { return Ok(()) };
        object.file.sync_data()?;
        object.sums.sync()?;
        let mut state = quiet(&object);
        if state.unsynced_entry {
            self.inventory.sync()?;
            crate::sys::sync_dir(&self.shard_dir(ino))?;
            state.unsynced_entry = false;
        }
        Ok(())
    }

    fn usage(&self) -> Usage {
        Usage { objects: self.objects.load(Ordering::Relaxed), bytes: self.bytes.load(Ordering::Relaxed) }
    }

    /// Lists shard by shard (an inode's low byte, as the directories are),
    /// each in inode order, so the cursor `after` names where to go on: in
    /// its own shard past it, then the next shards.
    fn list(&self, after: u64, max: usize) -> Result<ObjListReply, Errno> {
        let max = if max == 0 { LIST_MAX } else { max.min(LIST_MAX) };
        let now = SystemTime::now();
        let mut objects = Vec::new();
        for shard in (after & 0xff)..=0xff {
            let above = if shard == after & 0xff { after } else { 0 };
            for (ino, entry) in self.shard_objects(shard, above)? {
                if objects.len() == max {
                    return Ok(ObjListReply { objects, end: false });
                }
                // An object removed meanwhile is not listed.
                let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else { continue };
                let idle = now.duration_since(modified).unwrap_or_default();
                objects.push(ListedObject { ino, idle_ms: idle.as_millis() as u64 });
            }
        }
        Ok(ObjListReply { objects, end: true })
    }

    fn lost(&self) -> Vec<u64> {
        self.lost.clone()
    }

    fn accept_lost(&self) -> io::Result<()> {
        self.inventory.accept_lost(&self.lost)
    }
}

/// How the errors for an object the daemon had and lost begin (`surge fsck` tells them so).
pub const DATA_LOST: &str = "data lost";

/// The error for an object whose file was removed behind the daemon's
/// back while the daemon had it open: its bytes are still readable, until
/// the daemon stops.
fn unlinked_while_open(ino: u64) -> Failure {
    Failure::new(
        Errno::EIO,
        format!(
            "{DATA_LOST}: the object file of inode {ino} was removed from this daemon's store outside Surge; the \
             daemon still has it open, so copy the file out now (it is gone once the daemon stops), or restore \
             it from its PFS copy or its source"
        ),
    )
}

/// The error for an object the inventory lists whose file is gone.
fn no_local_path() -> Failure {
    Failure::new(
        Errno(libc::EOPNOTSUPP),
        "this daemon's object store serves no node-local data path; use Write and Read",
    )
}

fn lost_failure(ino: u64) -> Failure {
    Failure::new(
        Errno::EIO,
        format!(
            "{DATA_LOST}: the object of inode {ino} is missing from this daemon's store (removed outside Surge, \
             or the store was wiped) although data was written to it; restore the file from its PFS copy or \
             its source"
        ),
    )
}

/// The error for an object whose file or record was changed outside the daemon.
fn untrusted_failure(ino: u64, why: &str) -> Failure {
    Failure::new(
        Errno::EIO,
        format!(
            "data not trusted: the object of inode {ino} on this daemon's device: {why}; restore the file \
             from its PFS copy or its source (`surge scrub` lists every such file)"
        ),
    )
}

/// The error for bytes that disagree with their checksum.
fn damage_failure(ino: u64, offset: u64) -> Failure {
    Failure::new(
        Errno::EIO,
        format!(
            "data damaged at rest: the {BLOCK}-byte block at object offset {offset} of inode {ino} does not match \
             its checksum on this daemon's device; restore the file from its PFS copy or its source \
             (`surge scrub` lists every damaged file)"
        ),
    )
}

fn change_failure(ino: u64, what: &str, error: ChangeError) -> Failure {
    match error {
        ChangeError::Io(errno) => errno.into(),
        ChangeError::Damaged(block) => {
            let why = damage_failure(ino, block.offset);
            Failure::new(Errno::EIO, format!("refused to {what} a damaged block: {}", why.message))
        }
    }
}

/// The inode number an object file name stands for.
fn object_ino(name: &str) -> Option<u64> {
    if name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
        u64::from_str_radix(name, 16).ok()
    } else {
        None
    }
}

fn open_object_file(path: &Path, create: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).custom_flags(libc::O_NOFOLLOW);
    if create {
        opts.create_new(true).mode(0o600);
    }
    opts.open(path)
}

/// The bounded set of open objects, least recently used evicted first.
struct OpenObjects {
    slots: HashMap<u64, Slot>,
    clock: u64,
    limit: usize,
}

struct Slot {
    object: Arc<Object>,
    last_used: u64,
}

impl OpenObjects {
    fn new(limit: usize) -> OpenObjects {
        OpenObjects { slots: HashMap::with_capacity(limit + 1), clock: 0, limit }
    }

    fn get(&mut self, ino: u64) -> Option<Arc<Object>> {
        self.clock += 1;
        let slot = self.slots.get_mut(&ino)?;
        slot.last_used = self.clock;
        Some(Arc::clone(&slot.object))
    }

    fn insert(&mut self, ino: u64, object: Arc<Object>) {
        if self.slots.len() >= self.limit {
            self.evict_one();
        }
        self.clock += 1;
        self.slots.insert(ino, Slot { object, last_used: self.clock });
    }

    /// Closes the least recently used object no request is using. Objects in
    /// use stay (the set may then exceed its limit for a while): two open
    /// instances of one object would account its size twice.
    fn evict_one(&mut self) {
        let idle = self
            .slots
            .iter()
            .filter(|(_, slot)| Arc::strong_count(&slot.object) == 1)
            .min_by_key(|(_, slot)| slot.last_used)
            .map(|(&ino, _)| ino);
        if let Some(ino) = idle {
            self.slots.remove(&ino);
        }
    }

    fn take(&mut self, ino: u64) -> Option<Arc<Object>> {
        self.slots.remove(&ino).map(|slot| slot.object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_testkit::pattern;

    /// What the object files take on the device.
    /// Blocks the object files take (their checksum sidecars are not usage).
    fn on_disk(dir: &Path) -> u64 {
        let shards = fs::read_dir(dir).unwrap().flatten().filter(|e| e.path().is_dir());
        let files = shards.flat_map(|shard| fs::read_dir(shard.path()).unwrap().flatten());
        files
            .filter(|f| f.path().extension().is_none_or(|e| e != "sum"))
            .map(|f| allocated(&f.metadata().unwrap()))
            .sum()
    }

    #[test]
    fn writes_and_reads_many_sizes_and_offsets_like_a_byte_model() {
        let t = tempfile::tempdir().unwrap();
        let store = DirStore::open(t.path(), None).unwrap();
        let mut model: Vec<u8> = Vec::new();
        let cases = [(0u64, 1usize), (5, 100), (4096, 4096), (100, 70_000), (1 << 20, 1 << 20), (3, 0), (200_000, 17)];
        for (i, &(off, len)) in cases.iter().enumerate() {
            let data = pattern(u64::from(i as u8), len);
            assert_eq!(store.write_at(9, off, &data).unwrap(), Written { bytes: len, size_before: model.len() as u64 });
            if len > 0 {
                let end = off as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
            }
        }
        assert_eq!(store.stat(9).unwrap().size, model.len() as u64);
        assert_eq!(store.usage(), Usage { objects: 1, bytes: on_disk(t.path()) });
        for &(off, len) in &[(0u64, 10usize), (4000, 300), (1 << 20, 1 << 20), (model.len() as u64 - 5, 100)] {
            let mut buf = vec![0xAA; len];
            let n = store.read_at(9, off, &mut buf).unwrap();
            let want = &model[off as usize..(off as usize + len).min(model.len())];
            assert_eq!(&buf[..n], want, "read at {off} len {len}");
        }
        let mut buf = [0u8; 8];
        assert_eq!(store.read_at(9, model.len() as u64 + 10, &mut buf).unwrap(), 0);
        assert_eq!(store.read_at(12345, 0, &mut buf).unwrap(), 0);
        assert_eq!(store.stat(12345).unwrap(), ObjStatReply { size: 0, mtime_ns: 0, allocated: 0 });
    }

    #[test]
    fn a_verify_finds_an_open_objects_file_removed_or_changed_and_its_header_damaged_since_it_was_opened() {
        let t = tempfile::tempdir().unwrap();
        let store = DirStore::open(t.path(), None).unwrap();
        for ino in 1..=3 {
            store.write_at(ino, 0, &pattern(ino, 3 * BLOCK)).unwrap();
            assert_eq!(store.verify(ino, 0, u64::MAX).unwrap().damaged, [0u64; 0], "object {ino} is whole");
        }
        let (removed, cut) = (store.path_of(1), store.path_of(2));
        let header = PathBuf::from(format!("{}.sum", store.path_of(3).display()));
        fs::remove_file(&removed).unwrap();
        File::options().write(true).open(&cut).unwrap().set_len(BLOCK as u64).unwrap();
        fs::write(&header, b"zeroed").unwrap();
        let why = |ino| store.verify(ino, 0, 1).unwrap_err().text();
        assert!(why(1).starts_with(DATA_LOST) && why(1).contains("copy the file out now"), "{}", why(1));
        assert!(why(2).contains("data not trusted") && why(2).contains("truncated outside Surge"), "{}", why(2));
        assert!(why(3).contains("data not trusted") && why(3).contains("checksum record is damaged"), "{}", why(3));
        // A removal by the store itself is no loss.
        store.write_at(4, 0, b"x").unwrap();
        store.remove(4).unwrap();
        assert_eq!(store.verify(4, 0, 1).unwrap().checked, 0);
    }

    #[test]
    fn a_reads_checksum_built_from_its_checked_blocks_is_the_crc_of_its_bytes() {
        let t = tempfile::tempdir().unwrap();
        let store = DirStore::open(t.path(), None).unwrap();
        let len = 6 * BLOCK + 123;
        store.write_at(4, 0, &pattern(9, len)).unwrap();
        store.truncate(4, len as u64 + 2 * BLOCK as u64).unwrap(); // a hole at the end: blocks without checksums
        for offset in [0u64, 1, 100, BLOCK as u64, BLOCK as u64 + 7, 5 * BLOCK as u64 + 1, len as u64 - 3] {
            for want in [0usize, 1, 500, BLOCK, BLOCK + 1, 3 * BLOCK - 2, 10 * BLOCK] {
                let mut buf = vec![0u8; want];
                let mut sum = InlineCrc32c.begin();
                let n = store.read_summed(4, offset, &mut buf, Some(&mut *sum)).unwrap();
                assert_eq!(sum.finish(), crc32c::crc32c(&buf[..n]), "offset {offset} len {want}");
            }
        }
    }

    #[test]
    fn truncate_remove_and_usage_survive_a_reopen() {
        let t = tempfile::tempdir().unwrap();
        let store = DirStore::open(t.path(), None).unwrap();
        store.write_at(1, 0, &[1; 10_000]).unwrap();
        store.write_at(2, 500, &[2; 500]).unwrap();
        store.write_at(1, 200, &[3; 100]).unwrap(); // overwrite: no growth
        assert_eq!(store.usage(), Usage { objects: 2, bytes: 3 * 4096 + 4096 });
        store.truncate(1, 300).unwrap();
        store.truncate(3, 4096).unwrap(); // creates a sparse object: no blocks
        store.truncate(4, 0).unwrap(); // absent and empty: nothing to do
        assert_eq!(store.usage(), Usage { objects: 3, bytes: 4096 + 4096 });
        let mut buf = vec![0; 400];
        assert_eq!(store.read_at(1, 0, &mut buf).unwrap(), 300);
        assert_eq!(&buf[200..300], &[3; 100]);
        store.remove(2).unwrap();
        store.remove(2).unwrap();
        store.remove(77).unwrap();
        assert_eq!(store.usage(), Usage { objects: 2, bytes: 4096 });
        store.sync(1).unwrap();
        drop(store);
        let store = DirStore::open(t.path(), None).unwrap();
        assert_eq!(store.usage(), Usage { objects: 2, bytes: 4096 });
        assert!(t.path().join("01").join(format!("{:016x}", 1)).exists());
    }

    #[test]
    fn quota_refuses_growth_with_enospc_and_keeps_earlier_bytes() {
        let t = tempfile::tempdir().unwrap();
        let store = DirStore::open(t.path(), Some(12_288)).unwrap();
        store.write_at(1, 0, &pattern(1, 8000)).unwrap();
        assert_eq!(store.write_at(2, 0, &[9; 4097]), Err(Errno::ENOSPC));
        assert_eq!(store.write_at(1, 7000, &[9; 5289]), Err(Errno::ENOSPC));
        // Overwrites, growth up to the quota, and sparse extension still work.
        assert_eq!(store.write_at(1, 0, &pattern(1, 8000)).unwrap().bytes, 8000);
        assert_eq!(store.write_at(2, 0, &[5; 2000]).unwrap().bytes, 2000);
        store.truncate(2, 1 << 40).unwrap();
        assert_eq!(store.usage().bytes, 12_288);
        let mut buf = vec![0; 8000];
        assert_eq!(store.read_at(1, 0, &mut buf).unwrap(), 8000);
        assert_eq!(buf, pattern(1, 8000));
        store.remove(2).unwrap();
        assert_eq!(store.write_at(3, 0, &[1; 2000]).unwrap().bytes, 2000);
    }

    #[test]
    fn open_objects_stay_bounded_and_offsets_past_the_limit_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let store = DirStore::open(t.path(), None).unwrap();
        for ino in 0..(OPEN_OBJECTS as u64 + 50) {
            store.write_at(ino, 0, &ino.to_le_bytes()).unwrap();
        }
        assert!(lock(&store.open).slots.len() <= OPEN_OBJECTS);
        let mut buf = [0u8; 8];
        store.read_at(3, 0, &mut buf).unwrap();
        assert_eq!(u64::from_le_bytes(buf), 3);
        assert_eq!(store.write_at(1, u64::MAX - 2, b"abc"), Err(Errno::EFBIG));
        assert_eq!(store.truncate(1, u64::MAX).map_err(|f| f.errno), Err(Errno::EFBIG));
    }

    #[test]
    fn concurrent_writers_account_each_object_once() {
        let t = tempfile::tempdir().unwrap();
        let store = Arc::new(DirStore::open(t.path(), None).unwrap());
        let threads: Vec<_> = (0..4u64)
            .map(|k| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        let ino = i % 7;
                        store.write_at(ino, (i * 4 + k) * 1000, &[k as u8; 1000]).unwrap();
                        if i % 50 == 49 {
                            store.remove(ino).unwrap();
                        }
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert_eq!(store.usage().bytes, on_disk(t.path()));
    }

    #[test]
    fn list_pages_through_every_object_once_with_its_idle_time() {
        let t = tempfile::tempdir().unwrap();
        let store = DirStore::open(t.path(), None).unwrap();
        // Inodes in several shards, some sharing one.
        let mut inos: Vec<u64> = vec![0x100, 0x200, 0x1_0001, 0x2ff, 7, 0x1ff, 0x0107];
        for &ino in &inos {
            store.write_at(ino, 0, b"x").unwrap();
        }
        let (mut listed, mut after, mut pages) = (Vec::new(), 0, 0);
        loop {
            let page = store.list(after, 3).unwrap();
            pages += 1;
            assert!(page.objects.len() <= 3);
            assert!(page.objects.iter().all(|o| o.idle_ms < 60_000), "written just now");
            listed.extend(page.objects.iter().map(|o| o.ino));
            if page.end {
                break;
            }
            after = page.objects.last().expect("an unfinished page is never empty").ino;
        }
        assert!(pages >= 3);
        inos.sort_unstable();
        listed.sort_unstable();
        assert_eq!(listed, inos);
        store.remove(7).unwrap();
        assert_eq!(store.list(0, 0).unwrap().objects.len(), inos.len() - 1);
    }

    #[test]
    fn a_writer_watching_for_space_is_woken_by_a_removal_and_misses_no_free_before_its_wait() {
        let t = tempfile::tempdir().unwrap();
        let freed = Arc::new(SpaceFreed::default());
        let store = Arc::new(DirStore { freed: Arc::clone(&freed), ..DirStore::open(t.path(), Some(8192)).unwrap() });
        store.write_at(1, 0, &[1; 8192]).unwrap();
        assert_eq!(store.write_at(2, 0, &[2; 10]), Err(Errno::ENOSPC));
        let mut watch = freed.watch();
        // Freed after the watch began, before it waits: the wait returns at once.
        store.truncate(1, 4096).unwrap();
        let started = std::time::Instant::now();
        watch.wait(Duration::from_secs(5));
        assert!(started.elapsed() < Duration::from_secs(1));
        // Freed by another thread while it waits.
        let remover = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                store.remove(1).unwrap();
            })
        };
        let started = std::time::Instant::now();
        watch.wait(Duration::from_secs(5));
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(90) && took < Duration::from_secs(1), "{took:?}");
        remover.join().unwrap();
        // Nothing freed: the wait lasts its timeout.
        let started = std::time::Instant::now();
        watch.wait(Duration::from_millis(100));
        assert!(started.elapsed() >= Duration::from_millis(100));
    }

    #[derive(Default)]
    struct Crossings(Mutex<Vec<(Watermark, u64)>>);

    impl UsageObserver for Crossings {
        fn crossed(&self, mark: Watermark, usage: Usage) {
            lock(&self.0).push((mark, usage.bytes));
        }
    }

    #[test]
    fn the_usage_observer_hears_each_watermark_crossing_once() {
        let t = tempfile::tempdir().unwrap();
        let crossings = Arc::new(Crossings::default());
        let store = DirStore::open(t.path(), None).unwrap().watch_usage(3 * 4096, 4096, crossings.clone());
        store.write_at(1, 0, &[1; 4096]).unwrap();
        store.write_at(2, 0, &[2; 4096]).unwrap();
        assert!(lock(&crossings.0).is_empty(), "below the high watermark");
        store.write_at(3, 0, &[3; 4096]).unwrap();
        store.write_at(4, 0, &[4; 4096]).unwrap();
        assert_eq!(*lock(&crossings.0), [(Watermark::High, 3 * 4096)], "told once, on the way up");
        store.remove(4).unwrap();
        store.remove(3).unwrap();
        assert_eq!(lock(&crossings.0).len(), 1, "between the watermarks: nothing to tell");
        store.remove(2).unwrap();
        store.remove(1).unwrap();
        assert_eq!(lock(&crossings.0)[1..], [(Watermark::Low, 4096)]);
        store.write_at(5, 0, &[5; 3 * 4096]).unwrap();
        assert_eq!(lock(&crossings.0).last(), Some(&(Watermark::High, 3 * 4096)));
    }
}
