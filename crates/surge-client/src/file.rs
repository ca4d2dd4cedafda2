//! Open files and their data path: an extent is cut into per-object
//! requests, and each involved daemon gets its requests in order over one
//! connection, pipelined; all daemons at once (the calling thread serves
//! one of them).
//!
//! A buffer file the data manager evicted while a handle was open on it
//! (daemon 0 did not count the handle: it restarted since the open) is
//! fenced: its objects answer ESTALE. The handle then asks daemon 0
//! whether the file was evicted and its path still names the PFS copy it
//! went to (`Evicted`); if so it goes on with that copy, as a handle
//! opened on a PFS file does (reads through daemon 0, the first write
//! copies it back up), and the request is served there. A removed or
//! replaced file is not deleted while daemon 0 counts a handle of it
//! (`open_files`); one deleted all the same (its hold lease ended) keeps
//! its ESTALE.

use crate::append::AppendLock;
use crate::error::{first_error, Error, Result};
use crate::extent::{self, by_stripe, settle_short_read, split_mut};
use crate::fanout::in_parallel;
use crate::local::LocalFiles;
use crate::pool::PooledConn;
use crate::route::{Direction, Route};
use crate::shared::Shared;
use std::io::SeekFrom;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use surge_proto::layout::Piece;
use surge_proto::msg::{open_flags, AllocateMode, WriteReply, CLUSTER_USER};
use surge_proto::shards::ino_shard;
use surge_proto::{Attr, FileKind, Layout, Request, Tier};

/// Requests in flight on one connection: the client sends the next while
/// the daemon stores the previous one.
const PIPELINE_WINDOW: usize = 8;
/// Largest file offset, as for `off_t`.
const MAX_OFFSET: u64 = i64::MAX as u64;

/// An open file or directory. Positional I/O (`read_at`, `write_at`) may run
/// from many threads at once; `read`/`write` share one position, as a file
/// descriptor does.
pub struct File {
    shared: Arc<Shared>,
    path: String,
    access: Access,
    /// The attributes `Open` returned (kept for `attr` after a rename).
    opened: Attr,
    data: RwLock<Data>,
    position: Mutex<u64>,
    /// Which connections its requests take.
    route: Route,
    /// The buffer file whose handle daemon 0 counts for this `File` (its
    /// `Open`, or the copy-up's; 0: none), given back by `Close` on drop.
    held: AtomicU64,
}

impl Drop for File {
    fn drop(&mut self) {
        let held = *self.held.get_mut();
        // Out of the files this client announces as held (`Hold`) before the `Close`.
        let removed = match self.data() {
            Data::Objects { ino, .. } => self.shared.closed(ino, held == ino).then_some(ino),
            _ => None,
        };
        if held != 0 {
            // Daemon 0 may evict the file once no client holds it. A failed
            // `Close` is not reported: a daemon 0 that restarted, or this
            // client's connections to it that broke, hold nothing any more.
            let _ = self.shared.meta::<()>(&Request::Close { ino: held });
        }
        if let Some(ino) = removed {
            // The file was removed while open: daemon 0 may delete its
            // objects now. Unreleased, they stay until the hold lease ends.
            if let Err(e) = self.shared.meta::<()>(&Request::Release { ino }) {
                eprintln!(
                    "surge: the data of {} (removed while open) could not be released for deletion: {e}",
                    self.path
                );
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Access {
    read: bool,
    write: bool,
    append: bool,
}

impl Access {
    fn from_flags(flags: i32) -> Result<Access> {
        let (read, write) = match flags & libc::O_ACCMODE {
            libc::O_RDONLY => (true, false),
            libc::O_WRONLY => (false, true),
            libc::O_RDWR => (true, true),
            _ => return Err(Error::new(libc::EINVAL, "open flags have an invalid access mode")),
        };
        Ok(Access { read, write, append: flags & libc::O_APPEND != 0 })
    }

    /// The `Open` request flags for these open(2) flags.
    fn wire_flags(&self, flags: i32) -> u32 {
        let mut wire = 0;
        if flags & libc::O_CREAT != 0 {
            wire |= open_flags::CREATE;
            if flags & libc::O_EXCL != 0 {
                wire |= open_flags::EXCL;
            }
        }
        if self.write {
            wire |= open_flags::WRITE;
            if flags & libc::O_TRUNC != 0 {
                wire |= open_flags::TRUNC;
            }
        }
        if flags & libc::O_DIRECTORY != 0 {
            wire |= open_flags::DIRECTORY;
        }
        wire
    }
}

/// What became of a buffer file whose objects answered ESTALE (`File::fenced`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fenced {
    /// Evicted to the PFS copy its path still names: the handle uses it now.
    Evicted,
    /// Still the file at its path: an eviction of it was tried and undone
    /// (its objects reinstated), so the request may be sent again.
    Reinstated,
    /// Removed, replaced or renamed, or evicted too long ago for daemon 0
    /// to tell: the ESTALE stands.
    Gone,
}

/// Where the file's bytes are now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Data {
    Directory,
    /// Only on the PFS, read through daemon 0; the first write copies it
    /// up. `ino` is the file's: the one `Open` gave, or that of the PFS
    /// copy its buffer file was evicted to (`fenced`).
    Pfs {
        ino: u64,
    },
    /// Placed on the PFS directly by daemon 0 (a cold checkpoint): written
    /// and read there through daemon 0 (`PfsWrite`, `PfsRead`, `PfsSync`).
    Direct,
    /// Striped over buffer objects.
    Objects {
        ino: u64,
        layout: Layout,
    },
}

impl Data {
    /// Whether the bytes are on the PFS only (a buffer copy made by another writer replaces them).
    fn on_pfs(self) -> bool {
        matches!(self, Data::Pfs { .. } | Data::Direct)
    }
}

/// A buffer file as a handle knows it, enough to open it again without its
/// name (`Client::open_held`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferFile {
    pub ino: u64,
    pub layout: Layout,
    /// Its permission bits, for `attr` once no name leads to it.
    pub mode: u32,
}

impl File {
    /// Opens buffer file `file` again, by its objects, as `path` (which may
    /// name it no more), announcing it held to daemon 0 so that it stays
    /// while this handle is open. A file deleted meanwhile answers ESTALE
    /// to the first read or write.
    pub(crate) fn open_held(shared: Arc<Shared>, path: String, file: BufferFile, flags: i32) -> Result<File> {
        let access = Access::from_flags(flags)?;
        let BufferFile { ino, layout, mode } = file;
        let attr = Attr {
            ino,
            kind: FileKind::File,
            mode,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            uid: CLUSTER_USER,
            gid: CLUSTER_USER,
            nlink: 1,
            rdev: 0,
            layout,
            tier: Tier::Buffer,
            created: false,
            staged_version: 0,
            blocks: 0,
        };
        let layout = shared.file_layout(&attr)?;
        shared.open_files.opened(ino, true);
        let opened = File {
            shared: shared.clone(),
            path,
            access,
            opened: attr,
            data: RwLock::new(Data::Objects { ino, layout }),
            position: Mutex::new(0),
            route: Route::at_open(shared.conn_policy),
            held: AtomicU64::new(ino),
        };
        // Every handle this client holds of inodes of this one's shard, this
        // one included: the shard takes the count as at least so many (`Hold`).
        let shards = shared.routing.shards;
        let mut inos = shared.open_files.held();
        inos.retain(|&held| ino_shard(held, shards) == ino_shard(ino, shards));
        shared.meta::<()>(&Request::Hold { inos })?;
        Ok(opened)
    }

    pub(crate) fn open(shared: Arc<Shared>, path: String, flags: i32, mode: u32, layout: Layout) -> Result<File> {
        let access = Access::from_flags(flags)?;
        let wire = access.wire_flags(flags);
        let truncate = wire & open_flags::TRUNC != 0;
        let mut copy_up_on_write = false;
        let mut attr = match shared.open_attr(&path, wire, mode, layout) {
            // Daemon 0 refuses to open a PFS-only file for writing (it cannot
            // change it in place). Open it for reading instead: this client
            // copies it into the buffer on the first write.
            Err(e) if e.errno() == libc::EROFS && wire & open_flags::WRITE != 0 => {
                let attr = shared.open_attr(&path, wire & open_flags::DIRECTORY, mode, layout)?;
                if attr.tier != Tier::Pfs {
                    return Err(e);
                }
                copy_up_on_write = true;
                attr
            }
            other => other?,
        };
        // Opened for writing as a PFS file: daemon 0 placed it there directly.
        let direct = access.write && !copy_up_on_write && attr.kind == FileKind::File && attr.tier == Tier::Pfs;
        let data = match attr.kind {
            FileKind::Dir if access.write => {
                return Err(Error::new(libc::EISDIR, format!("{path} is a directory and cannot be opened for writing")))
            }
            FileKind::Dir => Data::Directory,
            // Daemon 0 answers an open of a link with the link (LINK_MET), never the link's attributes.
            FileKind::Symlink => return Err(Error::new(libc::ELOOP, format!("{path} is a symbolic link"))),
            // The kernel serves these on the mount once they exist; the library has no data of theirs.
            FileKind::Fifo | FileKind::CharDevice | FileKind::BlockDevice | FileKind::Socket => {
                return Err(Error::new(
                    libc::ENXIO,
                    format!("{path} is a {:?} node: open it through the Surge mount", attr.kind),
                ))
            }
            FileKind::File if flags & libc::O_DIRECTORY != 0 => {
                return Err(Error::new(libc::ENOTDIR, format!("{path} is not a directory")))
            }
            FileKind::File if direct => Data::Direct,
            FileKind::File => {
                if truncate && attr.tier == Tier::Pfs {
                    // Truncating a PFS-only file: an empty buffer file replaces it.
                    attr = shared.open_shadow(&path, mode)?;
                }
                if attr.tier == Tier::Pfs {
                    Data::Pfs { ino: attr.ino }
                } else {
                    let layout = shared.file_layout(&attr)?;
                    if truncate && !attr.created {
                        shared.truncate_objects(attr.ino, &layout, 0)?;
                    }
                    shared.open_files.opened(attr.ino, true);
                    Data::Objects { ino: attr.ino, layout }
                }
            }
        };
        let route = Route::at_open(shared.conn_policy);
        let held = AtomicU64::new(match data {
            Data::Objects { ino, .. } => ino,
            _ => 0,
        });
        Ok(File { shared, path, access, opened: attr, data: RwLock::new(data), position: Mutex::new(0), route, held })
    }

    /// Reads up to `buf.len()` bytes at `offset`; short only at end of file.
    /// Holes read as zeros.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let _op = self.shared.pool.operation();
        let data = self.data();
        if data == Data::Directory {
            return Err(self.is_a_directory());
        }
        if !self.access.read {
            return Err(Error::new(libc::EBADF, format!("{} is not open for reading", self.path)));
        }
        if buf.is_empty() || offset >= MAX_OFFSET {
            return Ok(0);
        }
        match data {
            Data::Objects { ino, layout } => match self.read_objects(ino, &layout, buf, offset) {
                Err(e) if e.errno() == libc::EIO => self.read_staged_copy(ino, &layout, buf, offset, e),
                Err(e) if e.errno() == libc::ESTALE => match self.fenced(ino) {
                    Fenced::Evicted => self.shared.pfs_read(&self.path, offset, buf),
                    Fenced::Reinstated => self.read_objects(ino, &layout, buf, offset),
                    Fenced::Gone => Err(e),
                },
                done => done,
            },
            _ => self.shared.pfs_read(&self.path, offset, buf),
        }
    }

    /// A stripe's daemon could not serve a read (it is down or failing):
    /// a staged file is read from its PFS copy instead, when that copy is
    /// current as far as can be told; otherwise `failure` stands.
    fn read_staged_copy(
        &self,
        ino: u64,
        layout: &Layout,
        buf: &mut [u8],
        offset: u64,
        failure: Error,
    ) -> Result<usize> {
        let staged = match self.shared.meta::<Attr>(&Request::Stat { path: &self.path }) {
            Ok(attr) if attr.ino == ino && attr.tier == Tier::Staged => attr,
            // Daemon 0 checks the PFS copy against what was staged: one
            // changed or removed outside Surge is never read instead.
            Ok(attr) if attr.ino == ino => {
                return Err(Error::new(
                    failure.errno(),
                    format!("{}: {}; and it has no current PFS copy to read instead", self.path, failure.message()),
                ))
            }
            _ => return Err(failure),
        };
        // With every daemon answering, the version tells whether the file
        // changed since its stage-out. With one down, the staged mark
        // stands: a change since then is not visible from here.
        if let Ok(now) = self.shared.glimpse(ino, layout) {
            if now.version != staged.staged_version {
                return Err(failure);
            }
        }
        self.shared.pfs_read(&self.path, offset, buf).map_err(|e| {
            Error::new(failure.errno(), format!("{}; its staged PFS copy is unreadable too: {e}", failure.message()))
        })
    }

    /// Writes `buf` at `offset`. Short only when a daemon ran out of space:
    /// the count is then the bytes that landed contiguous from the start,
    /// and nothing beyond them grew the file.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        let _op = self.shared.pool.operation();
        self.check_writable()?;
        if buf.is_empty() {
            return Ok(0);
        }
        match offset.checked_add(buf.len() as u64) {
            Some(end) if end <= MAX_OFFSET => {}
            _ => {
                return Err(Error::new(
                    libc::EFBIG,
                    format!("a write at offset {offset} exceeds the largest file size"),
                ))
            }
        }
        if self.data() == Data::Direct {
            return self.shared.pfs_write(&self.path, offset, buf);
        }
        self.on_objects(u64::MAX, |ino, layout| self.write_objects(ino, layout, buf, offset))
    }

    /// Reads at the shared position and advances it.
    pub fn read(&self, buf: &mut [u8]) -> Result<usize> {
        let _op = self.shared.pool.operation();
        let mut position = self.position();
        let n = self.read_at(buf, *position)?;
        *position += n as u64;
        Ok(n)
    }

    /// Writes at the shared position (at the end of file with `O_APPEND`,
    /// atomically across clients) and advances it.
    pub fn write(&self, buf: &[u8]) -> Result<usize> {
        let _op = self.shared.pool.operation();
        self.check_writable()?;
        let mut position = self.position();
        let n = if self.access.append {
            let (end, n) = self.append(buf)?;
            *position = end;
            n
        } else {
            self.write_at(buf, *position)?
        };
        *position += n as u64;
        Ok(n)
    }

    /// Writes `buf` at the end of the file, atomically across clients
    /// (whatever the flags it was opened with: the interposer keeps
    /// O_APPEND, which F_SETFL may change, itself); the offset it landed at
    /// and the bytes written.
    pub fn append(&self, buf: &[u8]) -> Result<(u64, usize)> {
        let _op = self.shared.pool.operation();
        self.check_writable()?;
        // A PFS-only file is copied up first: the lock is on its buffer inode.
        let (ino, _) = self.objects(u64::MAX)?;
        let (lock, end) = AppendLock::take_at_end(&self.shared, ino, &self.path, || self.size())?;
        let n = lock.hold_while(|| self.write_at(buf, end))?;
        lock.release()?;
        Ok((end, n))
    }

    pub fn seek(&self, pos: SeekFrom) -> Result<u64> {
        let _op = self.shared.pool.operation();
        let mut position = self.position();
        let target = match pos {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::Current(delta) => position.checked_add_signed(delta),
            SeekFrom::End(delta) => self.size()?.checked_add_signed(delta),
        };
        *position = target.filter(|t| *t <= MAX_OFFSET).ok_or_else(|| {
            Error::new(libc::EINVAL, format!("cannot seek {} to {pos:?}: outside the file's range", self.path))
        })?;
        Ok(*position)
    }

    /// lseek(2)'s SEEK_DATA (SEEK_HOLE with `hole`): the first offset at or
    /// after `offset` where data (a hole) starts, from the objects' own
    /// extents; the end of the file is a hole. ENXIO at or past the end,
    /// and for SEEK_DATA when only holes follow. The position stays.
    pub fn seek_data_or_hole(&self, offset: u64, hole: bool) -> Result<u64> {
        let _op = self.shared.pool.operation();
        let size = self.size()?;
        let found = match self.data() {
            _ if offset >= size => None,
            Data::Objects { ino, layout } => self.shared.seek_objects(ino, &layout, offset, hole)?,
            // A file on the PFS alone is read whole: all data.
            Data::Pfs { .. } | Data::Direct => Some(if hole { size } else { offset }),
            Data::Directory => None,
        };
        match found {
            Some(at) if at < size => Ok(at),
            _ if hole && offset < size => Ok(size),
            _ => Err(Error::new(
                libc::ENXIO,
                format!("no {} at or after offset {offset} of {}", if hole { "hole" } else { "data" }, self.path),
            )),
        }
    }

    /// fallocate(2) with Linux's `mode` bits: 0 and FALLOC_FL_KEEP_SIZE
    /// preallocate, FALLOC_FL_PUNCH_HOLE (with KEEP_SIZE) frees a range,
    /// FALLOC_FL_ZERO_RANGE zeroes it; without KEEP_SIZE the file grows to
    /// cover the range. Shifting ranges (COLLAPSE_RANGE, INSERT_RANGE) and
    /// any other mode fail with EOPNOTSUPP, as on a file system without them.
    pub fn fallocate(&self, mode: i32, offset: u64, len: u64) -> Result<()> {
        let _op = self.shared.pool.operation();
        let (allocate, keep_size) = allocate_mode(mode)?;
        self.check_writable()?;
        if len == 0 {
            return Err(Error::new(libc::EINVAL, format!("fallocate of 0 bytes of {}", self.path)));
        }
        let end = offset.checked_add(len).filter(|&end| end <= MAX_OFFSET).ok_or_else(|| {
            Error::new(libc::EFBIG, format!("fallocate range {offset}+{len} exceeds the largest file size"))
        })?;
        self.on_objects(u64::MAX, |ino, layout| {
            self.shared.allocate_objects(ino, layout, offset, len, allocate)?;
            if !keep_size && end > self.shared.glimpse(ino, layout)?.size {
                self.shared.truncate_objects(ino, layout, end)?;
            }
            Ok(())
        })
    }

    /// Makes written data durable on every stripe's daemon, and the
    /// namespace (the file's name, or a directory's entries) on daemon 0.
    pub fn fsync(&self) -> Result<()> {
        let _op = self.shared.pool.operation();
        match self.data() {
            Data::Objects { ino, layout } => {
                self.settle_commits(ino, &layout)?;
                self.shared.sync_objects(ino, &layout)?
            }
            Data::Direct => self.shared.pfs_sync(&self.path)?,
            Data::Pfs { .. } | Data::Directory => {}
        }
        self.shared.sync_namespace()
    }

    /// Has every node-local commit of this file's writes answered (their
    /// replies are read after the writes returned: `crate::local`), so that
    /// the daemons recorded their checksums before a sync and a failure
    /// among them is this call's.
    fn settle_commits(&self, ino: u64, layout: &Layout) -> Result<()> {
        for stripe in (0..layout.stripe_count).filter(|&stripe| self.shared.is_local(layout, stripe)) {
            self.shared.pool.settle(layout.daemon_of(stripe, self.shared.daemon_count()))?;
        }
        self.shared.pool.late_failures().take(ino).map_err(|e| e.context(format!("{}: an earlier write", self.path)))
    }

    /// Shrinks or extends the file to `len` bytes (extension reads as zeros).
    pub fn set_len(&self, len: u64) -> Result<()> {
        let _op = self.shared.pool.operation();
        if self.data() == Data::Directory || !self.access.write {
            return Err(Error::new(libc::EINVAL, format!("{} is not a file open for writing", self.path)));
        }
        if len > MAX_OFFSET {
            return Err(Error::new(libc::EFBIG, format!("{len} bytes exceeds the largest file size")));
        }
        // A file placed on the PFS directly stays there when its length stays
        // (HDF5 sets it at close); any other length copies it into the buffer.
        if self.data() == Data::Direct && self.size()? == len {
            return Ok(());
        }
        self.on_objects(len, |ino, layout| self.shared.truncate_objects(ino, layout, len))
    }

    /// Fresh attributes, size included. Still answers after the file was
    /// renamed or unlinked (from what `Open` returned and the objects).
    pub fn attr(&self) -> Result<Attr> {
        let _op = self.shared.pool.operation();
        match (self.attr_now(), self.data()) {
            // Evicted between the `Stat` and the objects' (retired) sizes:
            // the PFS copy this handle goes on with answers.
            (Err(e), Data::Objects { ino, .. }) if e.errno() == libc::ESTALE && self.fenced(ino) == Fenced::Evicted => {
                self.attr_now()
            }
            (attr, _) => attr,
        }
    }

    fn attr_now(&self) -> Result<Attr> {
        let mut data = self.data();
        let named = match self.shared.named_attr(&self.path) {
            Ok(attr) if attr.ino == self.ino() => Some(attr),
            // Another writer copied this PFS-only file into the buffer (or
            // replaced it by truncating it): its buffer copy is this file now.
            Ok(attr) if data.on_pfs() && attr.kind == FileKind::File && attr.tier != Tier::Pfs => {
                data = self.follow_copy_up(&attr)?;
                Some(attr)
            }
            // The buffer copy this handle used was evicted: its PFS copy is this file now.
            Ok(attr)
                if attr.tier == Tier::Pfs
                    && matches!(data, Data::Objects { ino, .. } if self.fenced(ino) == Fenced::Evicted) =>
            {
                data = self.data();
                Some(attr)
            }
            Ok(_) => None,
            Err(e) if e.errno() == libc::ENOENT => None,
            Err(e) => return Err(e),
        };
        // Its name went (unlinked or replaced): no name leads to it, as
        // fstat(2) of an unlinked open file says.
        let mut attr = named.unwrap_or_else(|| Attr { nlink: 0, ..self.opened.clone() });
        attr.created = false;
        if let Data::Objects { ino, layout } = data {
            attr.ino = ino;
            attr.layout = layout;
            self.shared.glimpse(ino, &layout)?.apply_to(&mut attr);
            if attr.tier == Tier::Pfs {
                attr.tier = Tier::Buffer;
            }
        }
        Ok(attr)
    }

    /// Whether this open created the file.
    pub fn opened_created(&self) -> bool {
        self.opened.created
    }

    /// The attributes of the file this open created, as `Open` answered
    /// them: a new file is empty, so no glimpse of its stripes is needed
    /// (`attr` asks them). `None` when the file existed before.
    pub fn created_attr(&self) -> Option<Attr> {
        self.opened.created.then(|| Attr { size: 0, blocks: 0, ..self.opened.clone() })
    }

    pub fn layout(&self) -> Layout {
        match self.data() {
            Data::Objects { layout, .. } => layout,
            Data::Pfs { .. } | Data::Direct | Data::Directory => self.opened.layout,
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn ino(&self) -> u64 {
        match self.data() {
            Data::Objects { ino, .. } => ino,
            Data::Pfs { ino } => ino,
            Data::Direct | Data::Directory => self.opened.ino,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.opened.kind == FileKind::Dir
    }

    /// The buffer file this handle reads and writes, if it is one (not a
    /// directory, nor a file on the PFS alone).
    pub fn buffer_file(&self) -> Option<BufferFile> {
        match self.data() {
            Data::Objects { ino, layout } => Some(BufferFile { ino, layout, mode: self.opened.mode }),
            Data::Pfs { .. } | Data::Direct | Data::Directory => None,
        }
    }

    /// Whether this handle can serve the access open(2) `flags` ask for
    /// (a FUSE mount reopening a removed file shares its open handle).
    pub fn serves(&self, flags: i32) -> bool {
        Access::from_flags(flags).is_ok_and(|a| (!a.read || self.access.read) && (!a.write || self.access.write))
    }

    fn data(&self) -> Data {
        *self.data.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn position(&self) -> std::sync::MutexGuard<'_, u64> {
        self.position.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_a_directory(&self) -> Error {
        Error::new(libc::EISDIR, format!("{} is a directory", self.path))
    }

    fn check_writable(&self) -> Result<()> {
        if self.data() == Data::Directory {
            return Err(self.is_a_directory());
        }
        if !self.access.write {
            return Err(Error::new(libc::EBADF, format!("{} is not open for writing", self.path)));
        }
        Ok(())
    }

    /// The current size: from the objects, or from daemon 0 for a PFS-only file.
    fn size(&self) -> Result<u64> {
        match self.data() {
            Data::Objects { ino, layout } => Ok(self.shared.glimpse(ino, &layout)?.size),
            Data::Pfs { .. } | Data::Direct => Ok(self.shared.meta::<Attr>(&Request::Stat { path: &self.path })?.size),
            Data::Directory => Ok(0),
        }
    }

    /// The buffer objects to write to, copying a PFS-only (or directly placed) file up first
    /// (its first `keep` bytes: the rest is about to be cut off).
    fn objects(&self, keep: u64) -> Result<(u64, Layout)> {
        if let Data::Objects { ino, layout } = self.data() {
            return Ok((ino, layout));
        }
        // Writers wait here while one of them copies the file up.
        let mut data = self.data.write().unwrap_or_else(PoisonError::into_inner);
        match *data {
            Data::Objects { ino, layout } => return Ok((ino, layout)),
            Data::Directory => return Err(self.is_a_directory()),
            Data::Pfs { .. } | Data::Direct => {}
        }
        let (ino, layout) = self.copy_up(keep)?;
        self.held.store(ino, Ordering::Relaxed);
        self.shared.open_files.opened(ino, true);
        *data = Data::Objects { ino, layout };
        Ok((ino, layout))
    }

    /// Runs `op` on the buffer objects (a PFS file's first `keep` bytes
    /// copied up first); once more on a fresh copy-up when the objects
    /// failed with ESTALE because the file was evicted under this handle,
    /// or on the same objects when an eviction was tried and undone.
    ///
    /// The retry is safe: an eviction retires every object only while it
    /// is unchanged since the demotion (`ObjRetire` checked), so no piece
    /// of a request that failed on an evicted file landed (one that landed
    /// first would have kept the file in the buffer) and the PFS copy holds
    /// every byte written before; the request is then applied whole to the
    /// new buffer copy. On an eviction undone, the pieces that landed are
    /// written again at the same offsets, with the same bytes.
    fn on_objects<T>(&self, keep: u64, op: impl Fn(u64, &Layout) -> Result<T>) -> Result<T> {
        let (ino, layout) = self.objects(keep)?;
        match op(ino, &layout) {
            Err(e) if e.errno() == libc::ESTALE => match self.fenced(ino) {
                Fenced::Evicted => {
                    let (ino, layout) = self.objects(keep)?;
                    op(ino, &layout)
                }
                Fenced::Reinstated => op(ino, &layout),
                Fenced::Gone => Err(e),
            },
            done => done,
        }
    }

    /// A request on buffer file `ino`'s objects failed with ESTALE: what
    /// became of the file. If daemon 0 evicted this very file and its path
    /// still names the PFS copy it went to (`Evicted`, which waits for an
    /// eviction of the path under way), this handle goes on with that copy
    /// (`Data::Pfs`, with the copy's inode).
    fn fenced(&self, ino: u64) -> Fenced {
        let copy = match self.shared.meta::<Attr>(&Request::Evicted { path: &self.path, ino }) {
            Ok(copy) => copy,
            Err(_) => {
                // Not evicted: still this buffer file if an eviction of it was undone.
                return match self.shared.meta::<Attr>(&Request::Stat { path: &self.path }) {
                    Ok(attr) if attr.ino == ino && attr.tier != Tier::Pfs => Fenced::Reinstated,
                    _ => Fenced::Gone,
                };
            }
        };
        let mut data = self.data.write().unwrap_or_else(PoisonError::into_inner);
        if matches!(*data, Data::Objects { ino: now, .. } if now == ino) {
            *data = Data::Pfs { ino: copy.ino };
            drop(data);
            let held = self.held.swap(0, Ordering::Relaxed);
            // Evicted, so not removed: nothing to release.
            self.shared.closed(ino, held == ino);
            if held != 0 {
                // Daemon 0 counted it again (`Hold`) if this client talked to it since the eviction.
                let _ = self.shared.meta::<()>(&Request::Close { ino: held });
            }
        }
        Fenced::Evicted
    }

    /// Reads and writes through this handle go to the buffer copy another
    /// writer made of the PFS-only file it was opened on.
    fn follow_copy_up(&self, copy: &Attr) -> Result<Data> {
        let mut data = self.data.write().unwrap_or_else(PoisonError::into_inner);
        if data.on_pfs() {
            *data = Data::Objects { ino: copy.ino, layout: self.shared.file_layout(copy)? };
            self.shared.open_files.opened(copy.ino, false);
        }
        Ok(*data)
    }

    /// Makes a buffer copy of a PFS-only file: an empty shadow file, then
    /// the first `keep` PFS bytes written into its objects.
    fn copy_up(&self, keep: u64) -> Result<(u64, Layout)> {
        let now = self.shared.meta::<Attr>(&Request::Stat { path: &self.path })?;
        if now.tier != Tier::Pfs {
            // Another writer copied it up already: write into its copy.
            let attr = self.shared.open_attr(&self.path, open_flags::WRITE, 0, Layout::INHERIT)?;
            return Ok((attr.ino, self.shared.file_layout(&attr)?));
        }
        let size = now.size.min(keep);
        let shadow = self.shared.open_shadow(&self.path, self.opened.mode)?;
        if shadow.kind != FileKind::File || shadow.tier == Tier::Pfs {
            return Err(Error::new(libc::EIO, format!("daemon 0 did not make a buffer copy of {}", self.path)));
        }
        let layout = self.shared.file_layout(&shadow)?;
        let copy = || -> Result<()> {
            let mut chunk = vec![0u8; size.min(extent::MAX_TRANSFER as u64) as usize];
            let mut offset = 0;
            while offset < size {
                let n = self.shared.pfs_read(&self.path, offset, &mut chunk)?;
                if n == 0 {
                    break;
                }
                let written = self.write_objects(shadow.ino, &layout, &chunk[..n], offset)?;
                if written < n {
                    return Err(Error::new(
                        libc::ENOSPC,
                        format!("the buffer filled up after {} bytes", offset + written as u64),
                    ));
                }
                offset += n as u64;
            }
            Ok(())
        };
        copy().map_err(|e| e.context(format!("copying {} from the PFS into the buffer", self.path)))?;
        Ok((shadow.ino, layout))
    }

    /// Per-stripe groups of items cut into runs by the route: (stripe, lane, items).
    fn lane_groups<T>(
        &self,
        direction: Direction,
        groups: Vec<(u32, Vec<T>)>,
        len: impl Fn(&T) -> usize,
    ) -> Vec<(u32, u64, Vec<T>)> {
        let mut out = Vec::with_capacity(groups.len());
        for (stripe, items) in groups {
            out.extend(self.route.runs(direction, items, &len).into_iter().map(|(lane, run)| (stripe, lane, run)));
        }
        out
    }

    /// Writes `buf` at `offset` over the objects. Where some pieces run out
    /// of space while others land (daemons write in parallel), the count is
    /// the prefix that landed, objects that pieces beyond it grew are cut
    /// back, and ENOSPC is returned only if not even the first byte landed.
    fn write_objects(&self, ino: u64, layout: &Layout, buf: &[u8], offset: u64) -> Result<usize> {
        let pieces = extent::pieces(layout, offset, buf.len(), |stripe| self.shared.is_local(layout, stripe));
        let items = pieces.iter().enumerate().map(|(i, p)| (p.stripe, (i, p)));
        let groups = self.lane_groups(Direction::Write, by_stripe(items), |(_, p)| p.len);
        let results = in_parallel(groups, |(stripe, lane, items)| {
            let daemon = layout.daemon_of(stripe, self.shared.daemon_count());
            // Writes at given offsets are idempotent: a broken connection is retried.
            self.shared.pool.with_retry(daemon, lane, |conn| {
                if conn.is_local() {
                    return self.write_local(conn, ino, buf, &items);
                }
                let mut landed = Vec::with_capacity(items.len());
                let requests = items.iter().map(|&(i, p)| {
                    let data = &buf[p.buf_offset..p.buf_offset + p.len];
                    (Request::Write { ino, offset: p.object_offset, data }, (i, p.len))
                });
                let done = conn.pipeline(PIPELINE_WINDOW, requests, |conn, pending, (i, len)| {
                    let reply: WriteReply = conn.receive(pending)?;
                    landed.push((i, reply));
                    if reply.written != len as u64 {
                        // A daemon writes short only when its device filled up part way.
                        let daemon = conn.endpoint();
                        return Err(Error::new(
                            libc::ENOSPC,
                            format!("{daemon} ran out of space after {} of {len} bytes", reply.written),
                        ));
                    }
                    Ok(())
                });
                conn.moved(landed.iter().map(|(_, r)| r.written).sum());
                match done {
                    Err(e) if conn.is_broken() => Err(e),
                    done => Ok((landed, done.err())),
                }
            })
        });
        let mut landed = vec![None; pieces.len()];
        let mut errors = Vec::new();
        for result in results {
            match result {
                Ok((replies, error)) => {
                    for (i, reply) in replies {
                        landed[i] = Some(reply);
                    }
                    errors.extend(error.map(Err));
                }
                Err(e) => errors.push(Err(e)),
            }
        }
        let Err(error) = first_error::<()>(errors) else { return Ok(buf.len()) };
        // Other failures (a daemon lost) are reported as they are: the
        // application must learn of them, not retry a short count.
        if error.errno() != libc::ENOSPC {
            let end = offset + buf.len() as u64;
            return Err(error.context(format!("{}: writing bytes {offset}..{end}", self.path)));
        }
        let prefix = extent::written_prefix(&pieces, &landed);
        let cuts = extent::growth_beyond(layout, &pieces, &landed, offset, prefix);
        let undone = in_parallel(cuts, |(stripe, len)| {
            let daemon = layout.daemon_of(stripe, self.shared.daemon_count());
            self.shared.pool.with_retry(daemon, 0, |conn| conn.call::<()>(&Request::ObjTruncate { ino, len }))
        });
        if let Err(e) = first_error(undone) {
            return Err(Error::new(
                error.errno(),
                format!(
                    "{}; bytes written past the failure could not be taken back, so {} may be longer than written ({e})",
                    error.message(),
                    self.path
                ),
            ));
        }
        if prefix > 0 {
            Ok(prefix)
        } else {
            Err(error)
        }
    }

    /// `write_objects`' pieces of one object, over the node-local data path
    /// (`crate::local`): the replies of those that landed, and the error
    /// that stopped the others, if the connection is still usable.
    #[allow(clippy::type_complexity)]
    fn write_local(
        &self,
        conn: &mut PooledConn<'_>,
        ino: u64,
        buf: &[u8],
        items: &[(usize, &Piece)],
    ) -> Result<(Vec<(usize, WriteReply)>, Option<Error>)> {
        let mut landed = Vec::with_capacity(items.len());
        let mut stopped = None;
        for &(i, p) in items {
            let data = &buf[p.buf_offset..p.buf_offset + p.len];
            match self.shared.local.write(conn, ino, p.object_offset, data) {
                Ok(reply) => {
                    landed.push((i, reply));
                    if reply.written != p.len as u64 {
                        let daemon = conn.endpoint();
                        let why = format!("{daemon} ran out of space after {} of {} bytes", reply.written, p.len);
                        stopped = Some(Error::new(libc::ENOSPC, why));
                        break;
                    }
                }
                Err(e) if conn.is_broken() => return Err(e),
                Err(e) => {
                    stopped = Some(e);
                    break;
                }
            }
        }
        conn.moved(landed.iter().map(|(_, r)| r.written).sum());
        Ok((landed, stopped))
    }

    fn read_objects(&self, ino: u64, layout: &Layout, buf: &mut [u8], offset: u64) -> Result<usize> {
        let pieces = extent::pieces(layout, offset, buf.len(), |stripe| self.shared.is_local(layout, stripe));
        let mut got = vec![0usize; pieces.len()];
        {
            let slices = split_mut(buf, &pieces);
            let items = pieces.iter().zip(slices).enumerate().map(|(i, (p, slice))| (p.stripe, (i, p, slice)));
            let groups = self.lane_groups(Direction::Read, by_stripe(items), |(_, p, _)| p.len);
            let results = in_parallel(groups, |(stripe, lane, mut items)| {
                let daemon = layout.daemon_of(stripe, self.shared.daemon_count());
                self.shared.pool.with_retry(daemon, lane, |conn| {
                    read_stripe(conn, &self.shared.local, ino, &mut items, &self.path, offset)
                })
            });
            for (i, n) in first_error(results)?.into_iter().flatten() {
                got[i] = n;
            }
        }
        if pieces.iter().zip(&got).all(|(p, &n)| n == p.len) {
            return Ok(buf.len());
        }
        // Something ended early: a hole, or the end of the file.
        let size = self.shared.glimpse(ino, layout)?.size;
        Ok(settle_short_read(&pieces, &got, offset, size, buf))
    }
}

/// Reads pieces of one object, pipelined; returns (piece index, bytes)
/// pairs. An error the daemon reports is given the file's bytes and the
/// daemon (the file read from `read_offset` is `path`).
fn read_stripe(
    conn: &mut PooledConn<'_>,
    local: &LocalFiles,
    ino: u64,
    items: &mut [(usize, &Piece, &mut [u8])],
    path: &str,
    read_offset: u64,
) -> Result<Vec<(usize, usize)>> {
    let mut got = Vec::with_capacity(items.len());
    if conn.is_local() {
        for (i, p, slice) in items.iter_mut() {
            let at = read_offset + p.buf_offset as u64;
            let n = local.read(conn, ino, p.object_offset, slice).map_err(|e| match conn.is_broken() {
                true => e,
                false => {
                    e.context(format!("{path}: reading bytes {at}..{} from {}", at + p.len as u64, conn.endpoint()))
                }
            })?;
            got.push((*i, n));
        }
        conn.moved(got.iter().map(|(_, n)| *n as u64).sum());
        return Ok(got);
    }
    let mut unfinished = Vec::new();
    let requests = items.iter_mut().map(|(i, p, slice)| {
        let at = read_offset + p.buf_offset as u64;
        (Request::Read { ino, offset: p.object_offset, len: p.len as u32 }, (*i, p.object_offset, at, &mut **slice))
    });
    conn.pipeline(PIPELINE_WINDOW, requests, |conn, pending, (i, offset, at, slice)| {
        let n = conn.receive_into(pending, slice).map_err(|e| match conn.is_broken() {
            true => e, // the message names the daemon already
            false => {
                e.context(format!("{path}: reading bytes {at}..{} from {}", at + slice.len() as u64, conn.endpoint()))
            }
        })?;
        if n > 0 && n < slice.len() {
            unfinished.push((got.len(), offset + n as u64, slice.split_at_mut(n).1));
        }
        got.push((i, n));
        Ok(())
    })?;
    for (k, offset, rest) in unfinished {
        got[k].1 += conn.read_piece(ino, offset, rest)?;
    }
    conn.moved(got.iter().map(|(_, n)| *n as u64).sum());
    Ok(got)
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("path", &self.path)
            .field("data", &self.data())
            .field("access", &self.access)
            .finish()
    }
}

/// `std::io` adapters, so a `File` works with `io::copy`, `BufReader` and friends.
impl std::io::Read for &File {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Ok(File::read(self, buf)?)
    }
}

impl std::io::Write for &File {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(File::write(self, buf)?)
    }
    /// Nothing is buffered client-side; durability is `fsync`.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::io::Seek for &File {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        Ok(File::seek(self, pos)?)
    }
}

/// What fallocate(2)'s `mode` asks of the objects, and whether it keeps the size.
fn allocate_mode(mode: i32) -> Result<(AllocateMode, bool)> {
    let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
    let allocate = match mode & !libc::FALLOC_FL_KEEP_SIZE {
        0 => AllocateMode::Preallocate,
        libc::FALLOC_FL_PUNCH_HOLE if keep_size => AllocateMode::PunchHole,
        libc::FALLOC_FL_ZERO_RANGE => AllocateMode::ZeroRange,
        other => {
            let why = match other {
                libc::FALLOC_FL_PUNCH_HOLE => "punching a hole needs FALLOC_FL_KEEP_SIZE",
                libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE => {
                    "Surge does not shift file ranges (COLLAPSE_RANGE, INSERT_RANGE)"
                }
                _ => "Surge supports preallocation, KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE",
            };
            return Err(Error::new(libc::EOPNOTSUPP, format!("fallocate mode {mode:#x}: {why}")));
        }
    };
    Ok((allocate, keep_size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallocate_modes_map_to_object_allocations_and_the_rest_is_eopnotsupp() {
        use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO};
        for (mode, want) in [
            (0, (AllocateMode::Preallocate, false)),
            (KEEP, (AllocateMode::Preallocate, true)),
            (PUNCH | KEEP, (AllocateMode::PunchHole, true)),
            (ZERO, (AllocateMode::ZeroRange, false)),
            (ZERO | KEEP, (AllocateMode::ZeroRange, true)),
        ] {
            assert_eq!(allocate_mode(mode).unwrap(), want, "mode {mode:#x}");
        }
        for mode in [
            PUNCH,
            libc::FALLOC_FL_COLLAPSE_RANGE,
            libc::FALLOC_FL_INSERT_RANGE,
            libc::FALLOC_FL_UNSHARE_RANGE,
            PUNCH | ZERO | KEEP,
        ] {
            assert_eq!(allocate_mode(mode).unwrap_err().errno(), libc::EOPNOTSUPP, "mode {mode:#x}");
        }
    }

    #[test]
    fn access_modes_and_wire_flags() {
        let ro = Access::from_flags(libc::O_RDONLY | libc::O_TRUNC).unwrap();
        assert_eq!(ro, Access { read: true, write: false, append: false });
        // O_TRUNC needs write access; O_EXCL means nothing without O_CREAT.
        assert_eq!(ro.wire_flags(libc::O_RDONLY | libc::O_TRUNC | libc::O_EXCL), 0);
        let rw = Access::from_flags(libc::O_RDWR | libc::O_APPEND).unwrap();
        assert_eq!(rw, Access { read: true, write: true, append: true });
        let all = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC;
        assert_eq!(rw.wire_flags(all), open_flags::CREATE | open_flags::EXCL | open_flags::WRITE | open_flags::TRUNC);
        let wo = Access::from_flags(libc::O_WRONLY).unwrap();
        assert_eq!((wo.read, wo.write), (false, true));
        assert_eq!(ro.wire_flags(libc::O_DIRECTORY), open_flags::DIRECTORY);
        assert_eq!(Access::from_flags(libc::O_ACCMODE).unwrap_err().errno(), libc::EINVAL);
    }
}
