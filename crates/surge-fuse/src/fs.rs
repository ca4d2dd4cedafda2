//! The FUSE operations, each a call of the Surge client library on the
//! path the node table derives. Every error the library returns keeps its
//! errno, so a program sees ENOENT, ENOSPC or EIO as on a local file system;
//! errors that mean data is at risk (EIO and the like) are also logged.

use crate::jobs::Jobs;
use crate::nodes::{Nodes, ROOT};
use crate::MountConfig;
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use surge_client::{Attr, AttrUpdate, Client, DirEntry, File, FileKind, CLUSTER_USER};
use surge_proto::msg::XATTR_KEPT_PREFIX;

/// Largest request the kernel sends: 1 MiB writes and reads, the client's
/// transfer unit, so a 1 MiB application call is one Surge request.
const MAX_REQUEST: u32 = 1 << 20;

/// How long the attributes a lookup or create answered one thread may
/// answer that thread's next request, when it is a getattr of the same
/// node (`Fresh`). The kernel asks within the same call (a file's
/// attributes are never cached, so its permission check or stat asks
/// after every lookup and create); the bound only matters where it does
/// not ask (`open(O_PATH)`), and covers a busy machine's scheduling delay.
const FRESH_FOR: Duration = Duration::from_millis(10);
/// Past this many threads with `Fresh` attributes kept, the stale are dropped.
const FRESH_THREADS: usize = 256;

thread_local! {
    /// Each server thread's buffer for the bytes of a read, kept: a fresh
    /// 1 MiB allocation per read is a fresh mapping the read faults in page by page.
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

type Result<T> = std::result::Result<T, Errno>;

/// What an open file handle holds.
struct OpenFile {
    /// Shared by the handles of a file reopened after its name went.
    file: Arc<File>,
    append: bool,
    /// The kernel's node this handle was opened on: the file's inode,
    /// unless the open raced a rename (`open_renamed_over`).
    node: u64,
    /// The set-user-ID and set-group-ID bits the file had when opened,
    /// which the first write by an unprivileged caller clears (write(2);
    /// the kernel leaves that to a FUSE server); 0 once cleared.
    setid: AtomicU32,
}

/// A directory listing taken at opendir, with its parent for "..".
struct Listing {
    entries: Vec<DirEntry>,
    parent: u64,
}

/// The attributes a lookup or create just answered one thread of a
/// program. Its kernel asks for them again at once (a file's attributes
/// are never cached): the thread's next request, if it is a getattr of
/// `ino` within `FRESH_FOR` and nothing changed through this mount or
/// arrived on the change feed since, is answered from them, without the
/// glimpse of the file's stripes. Any other request of the thread drops them.
struct Fresh {
    ino: u64,
    attr: Attr,
    at: Instant,
    /// `SurgeFs::changes` when they were answered.
    changes: u64,
}

#[derive(Clone)]
enum Handle {
    File(Arc<OpenFile>),
    Dir(Arc<Listing>),
}

pub struct SurgeFs {
    client: Client,
    config: MountConfig,
    /// Shared with the listener that passes other clients' changes to the kernel.
    nodes: Arc<Nodes>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_handle: AtomicU64,
    owner: (u32, u32),
    writers: Option<Mutex<WritersJournal>>,
    /// Bytes the kernel's writes and reads moved through this server (not
    /// those of files the interposer took over, which its profile counts).
    bytes_written: AtomicU64,
    bytes_read: AtomicU64,
    /// Whose job each request is charged to.
    jobs: Jobs,
    /// Per thread of the programs (the pid the kernel gives), the attributes just answered it.
    fresh: Mutex<HashMap<u32, Fresh>>,
    /// Counts the changes that may make `fresh` attributes stale: writes,
    /// attribute and namespace changes through this mount, and every
    /// batch the change feed brings (shared with its listener).
    changes: Arc<AtomicU64>,
}

/// The files opened for writing through this mount, one line each (their
/// Surge paths, which start with "/"), and at unmount the line
/// `bytes WRITTEN READ` with what the kernel moved through the mount.
struct WritersJournal {
    file: std::fs::File,
    noted: HashSet<String>,
}

impl SurgeFs {
    pub fn new(client: Client, config: MountConfig) -> std::io::Result<SurgeFs> {
        // SAFETY: getuid and getgid cannot fail.
        let owner = unsafe { (libc::getuid(), libc::getgid()) };
        let writers = match &config.writers_journal {
            Some(path) => {
                let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
                Some(Mutex::new(WritersJournal { file, noted: HashSet::new() }))
            }
            None => None,
        };
        Ok(SurgeFs {
            client,
            config,
            nodes: Arc::default(),
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            owner,
            writers,
            bytes_written: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            jobs: Jobs::default(),
            fresh: Mutex::new(HashMap::new()),
            changes: Arc::default(),
        })
    }

    /// `charged_to_caller`, for a request the calling thread made in its
    /// turn: its `Fresh` attributes go, as `req` is not the getattr they
    /// were kept for.
    fn as_caller<T>(&self, req: &Request, work: impl FnOnce() -> T) -> T {
        self.take_fresh(req);
        self.charged_to_caller(req, work)
    }

    /// Runs `work` with the requests it sends charged to the job of the
    /// process that made `req` (see `jobs`).
    fn charged_to_caller<T>(&self, req: &Request, work: impl FnOnce() -> T) -> T {
        surge_client::charged_to(self.jobs.of(req.pid()), work)
    }

    fn fresh(&self) -> MutexGuard<'_, HashMap<u32, Fresh>> {
        self.fresh.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `attr`, just answered to the thread that made `req`, for its
    /// next request (`Fresh`). Not a directory's: the kernel caches those.
    fn keep_fresh(&self, req: &Request, attr: &Attr) {
        if attr.kind == FileKind::Dir {
            return;
        }
        let now = Instant::now();
        let kept = Fresh { ino: attr.ino, attr: attr.clone(), at: now, changes: self.changes.load(Ordering::Acquire) };
        let mut fresh = self.fresh();
        // Threads that ended after a lookup leave theirs: the stale go when many have.
        if fresh.len() >= FRESH_THREADS {
            fresh.retain(|_, f| now.duration_since(f.at) < FRESH_FOR);
        }
        fresh.insert(req.pid(), kept);
    }

    /// The thread's `Fresh` attributes, taken (a request of its own uses them up).
    fn take_fresh(&self, req: &Request) -> Option<Fresh> {
        let mut fresh = self.fresh();
        if fresh.is_empty() {
            return None;
        }
        fresh.remove(&req.pid())
    }

    /// The attributes of `ino` kept for this getattr of the thread that made `req`, if still good.
    fn fresh_attr(&self, req: &Request, ino: INodeNo) -> Option<Attr> {
        let kept = self.take_fresh(req)?;
        let current =
            kept.ino == ino.0 && kept.at.elapsed() < FRESH_FOR && kept.changes == self.changes.load(Ordering::Acquire);
        current.then_some(kept.attr)
    }

    /// Something changed through this mount: attributes kept `Fresh` may be stale.
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
    }

    fn note_writer(&self, path: &str, flags: i32) -> Result<()> {
        let Some(journal) = &self.writers else { return Ok(()) };
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Ok(());
        }
        let mut journal = journal.lock().unwrap_or_else(PoisonError::into_inner);
        if journal.noted.insert(path.to_string()) {
            // A file missing from the journal would not be staged out: refuse the open instead.
            if let Err(e) = writeln!(journal.file, "{path}") {
                eprintln!("surge mount: cannot note {path} in the writers journal: {e}");
                return Err(Errno::EIO);
            }
        }
        Ok(())
    }

    fn handles(&self) -> MutexGuard<'_, HashMap<u64, Handle>> {
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add_handle(&self, handle: Handle) -> FileHandle {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.handles().insert(fh, handle);
        FileHandle(fh)
    }

    fn handle(&self, fh: FileHandle) -> Result<Handle> {
        self.handles().get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn add_file(&self, node: u64, file: Arc<File>, flags: i32) -> FileHandle {
        let mode = file.buffer_file().map_or(0, |f| f.mode);
        // Set-group-ID without group execute marks mandatory locking, not privilege: it stays.
        let group_setid = if mode & libc::S_IXGRP != 0 { libc::S_ISGID } else { 0 };
        let setid = AtomicU32::new(mode & (libc::S_ISUID | group_setid));
        self.add_handle(Handle::File(Arc::new(OpenFile { file, append: flags & libc::O_APPEND != 0, node, setid })))
    }

    /// After a write through `open` by the caller of `req`: an
    /// unprivileged writer clears the file's set-user-ID and set-group-ID
    /// bits, once per handle. The write stands either way: a failure
    /// here (the file removed meanwhile) is logged, not the write's.
    fn drop_setid_after_write(&self, req: &Request, open: &OpenFile) {
        if req.uid() == 0 || open.setid.load(Ordering::Relaxed) == 0 {
            return;
        }
        let bits = open.setid.swap(0, Ordering::Relaxed);
        let path = open.file.path();
        let cleared = open.file.attr().and_then(|attr| {
            if attr.mode & bits == 0 {
                return Ok(());
            }
            let change = AttrUpdate { mode: Some(attr.mode & !bits), ..Default::default() };
            self.client.set_attr(path, &change).map(drop)
        });
        if let Err(e) = cleared {
            errno(&e, "clear set-user-ID after write", path);
        }
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<OpenFile>> {
        match self.handle(fh)? {
            Handle::File(open) => Ok(open),
            Handle::Dir(_) => Err(Errno::EISDIR),
        }
    }

    /// unlink and rmdir: `remove` the path, then forget the name.
    fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        op: &str,
        remove: impl FnOnce(&str) -> surge_client::Result<()>,
    ) -> Result<()> {
        let (path, name) = self.child_path(parent, name)?;
        remove(&path).map_err(|e| errno(&e, op, &path))?;
        self.changed();
        self.nodes.detach(parent.0, &name);
        Ok(())
    }

    fn path(&self, ino: INodeNo) -> Result<String> {
        // The kernel asks about a node whose name is gone (unlinked, or
        // renamed over by another): as on a local file system, ENOENT.
        self.nodes.path(ino.0).ok_or(Errno::ENOENT)
    }

    /// The path of `ino` for a request the kernel makes on a name it
    /// looked up (readlink): a node replaced or unlinked since answers
    /// ESTALE, which makes the kernel look the name up again (once,
    /// LOOKUP_REVAL) and use what it names now, as a local call racing
    /// the rename would.
    fn looked_up_path(&self, ino: INodeNo) -> Result<String> {
        self.nodes.path(ino.0).ok_or(Errno::ESTALE)
    }

    fn open_path(&self, path: &str, flags: i32) -> Result<File> {
        self.note_writer(path, flags)?;
        self.client.open(path, flags, 0).map_err(|e| errno(&e, "open", path))
    }

    /// The kernel opens node `ino`, whose name went (a rename replaced
    /// it, or it was unlinked): through /proc/PID/fd, or because the open
    /// raced the rename after the kernel's lookup. A local file system
    /// opens the old file. Surge does too while a handle has it open (it
    /// shares that handle); otherwise it cannot reach the old file, and
    /// opens the regular file the name names now, which is what a local
    /// open racing the rename may also find. Anything else answers ESTALE
    /// and leaves it to the kernel's retry (a fresh lookup); that retry is
    /// made once only, so a writer replacing the name again in between
    /// used to fail a reader of an atomically replaced file.
    fn open_renamed_over(&self, ino: INodeNo, flags: i32) -> Result<Arc<File>> {
        let open_handles = self.open_handles_of(ino.0);
        if !open_handles.is_empty() {
            let open = open_handles.into_iter().find(|open| open.file.serves(flags)).ok_or(Errno::ESTALE)?;
            if flags & libc::O_TRUNC != 0 {
                open.file.set_len(0).map_err(|e| errno(&e, "open", open.file.path()))?;
            }
            return Ok(open.file.clone());
        }
        let path = self.nodes.last_path(ino.0).ok_or(Errno::ESTALE)?;
        match self.open_path(&path, flags) {
            Ok(file) if !file.is_dir() => Ok(Arc::new(file)),
            _ => Err(Errno::ESTALE),
        }
    }

    fn child_path(&self, parent: INodeNo, name: &OsStr) -> Result<(String, String)> {
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        let path = self.nodes.child_path(parent.0, name).ok_or(Errno::ENOENT)?;
        Ok((path, name.to_string()))
    }

    /// Passes the changes other clients make, as daemon 0's change feed
    /// brings them, on to the kernel through `notifier` (set once the
    /// session exists): the names they change, and the attributes of the
    /// nodes those names name. Sent from the client's watcher thread,
    /// never from a request's, as the kernel asks of notifications.
    pub fn pass_changes_to_kernel(&self, notifier: Arc<OnceLock<Notifier>>) {
        let nodes = Arc::clone(&self.nodes);
        let fresh_changes = Arc::clone(&self.changes);
        self.client.on_changes(move |changes| {
            fresh_changes.fetch_add(1, Ordering::AcqRel);
            if let Some(notifier) = notifier.get() {
                crate::own_changes::drop_from_kernel(notifier, &nodes, changes);
            }
        });
    }

    /// The kernel's nodes, for `own_changes`.
    pub fn nodes(&self) -> Arc<Nodes> {
        Arc::clone(&self.nodes)
    }

    fn attr_ttl(&self, attr: &Attr) -> Duration {
        if attr.kind == FileKind::Dir {
            self.config.dir_attr_ttl
        } else {
            self.config.attr_ttl
        }
    }

    fn file_attr(&self, attr: &Attr) -> FileAttr {
        let is_dir = attr.kind == FileKind::Dir;
        let size = if is_dir { 4096 } else { attr.size };
        let blksize = if attr.layout.stripe_size == 0 { MAX_REQUEST as u64 } else { attr.layout.stripe_size };
        let mtime = system_time(attr.mtime_ns);
        let id = |id: u32, cluster_user: u32| if id == CLUSTER_USER { cluster_user } else { id };
        FileAttr {
            ino: INodeNo(attr.ino),
            size,
            blocks: attr.shown_blocks(size),
            atime: system_time(attr.atime_ns),
            mtime,
            ctime: system_time(attr.ctime_ns),
            crtime: mtime,
            kind: file_type(attr.kind),
            perm: (attr.mode & 0o7777) as u16,
            // Directories say 1, "not counted" (as btrfs does): 2 would tell
            // find and fts that a directory has no subdirectories.
            nlink: attr.nlink,
            uid: id(attr.uid, self.owner.0),
            gid: id(attr.gid, self.owner.1),
            // The kernel's dev_t: major in bits 8..20 and 32.., minor in 0..8 and 20..32.
            rdev: attr.rdev as u32,
            blksize: blksize.min(u32::MAX as u64) as u32,
            flags: 0,
        }
    }

    /// Replies with a freshly looked-up entry and counts the kernel's lookup.
    fn reply_entry(&self, parent: INodeNo, name: &str, attr: &Attr, reply: ReplyEntry) {
        self.nodes.remember(attr.ino, parent.0, name, attr.kind == FileKind::File, attr.nlink > 1);
        reply.entry_with_ttls(&self.attr_ttl(attr), &self.config.entry_ttl, &self.file_attr(attr), Generation(0));
    }

    /// Replies to a lookup of `name` in `parent`, which names nothing: a
    /// negative entry the kernel keeps (`missing_ttl`), so a program
    /// probing missing names (shells, loaders, `stat` before `open`) asks
    /// once. The kernel drops it itself when a change through this mount
    /// makes the name, and at once when daemon 0's change feed brings
    /// another client's (`entries_at`, or every one the table remembers
    /// when the feed was cut off).
    fn reply_missing(&self, parent: INodeNo, name: &str, reply: ReplyEntry) {
        let ttl = self.config.missing_ttl;
        if ttl.is_zero() {
            return reply.error(Errno::ENOENT);
        }
        self.nodes.remember_missing(parent.0, name, ttl);
        // Node 0: no such entry, for as long as the entry's TTL says.
        let nothing = FileAttr {
            ino: INodeNo(0),
            size: 0,
            blocks: 0,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::RegularFile,
            perm: 0,
            nlink: 0,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 0,
            flags: 0,
        };
        reply.entry_with_ttls(&Duration::ZERO, &ttl, &nothing, Generation(0));
    }

    fn open_flags(&self) -> FopenFlags {
        if self.config.direct_io {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
        }
    }

    fn attr_of(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<Attr> {
        // A node whose name is gone (removed or replaced while open) is
        // known through any of its handles, as on a local file system.
        let open = match fh {
            Some(fh) => Some(self.handle(fh)?),
            None if self.nodes.path(ino.0).is_none() => {
                self.open_handles_of(ino.0).into_iter().next().map(Handle::File)
            }
            None => None,
        };
        if let Some(Handle::File(open)) = open {
            return open.file.attr().map_err(|e| errno(&e, "stat", open.file.path()));
        }
        let Some(path) = self.nodes.path(ino.0) else { return self.stat_renamed_over(ino) };
        self.client.stat(&path).map_err(|e| errno(&e, "stat", &path))
    }

    /// A stat of regular file `ino`, whose name went since the kernel's
    /// lookup and which no handle has open: the regular file its name
    /// names now, as for an open (`open_renamed_over`); else ESTALE, for
    /// the kernel's retry.
    fn stat_renamed_over(&self, ino: INodeNo) -> Result<Attr> {
        let path = self.nodes.last_path(ino.0).ok_or(Errno::ESTALE)?;
        match self.client.stat(&path) {
            Ok(attr) if attr.kind == FileKind::File => Ok(attr),
            _ => Err(Errno::ESTALE),
        }
    }

    /// The handles open on node `ino`.
    fn open_handles_of(&self, ino: u64) -> Vec<Arc<OpenFile>> {
        self.handles()
            .values()
            .filter_map(|h| match h {
                Handle::File(open) if open.node == ino => Some(open.clone()),
                _ => None,
            })
            .collect()
    }

    /// Makes the file the caller of `req` just created at `path` (its
    /// `attr`) theirs: a file made without an owner shows the mount's. The
    /// group is the caller's unless the file took its directory's
    /// (set-group-ID directories: the namespace does that).
    fn give_to_caller(&self, req: &Request, path: &str, mut attr: Attr) -> surge_client::Result<Attr> {
        let uid = req.uid();
        let gid = if attr.gid == CLUSTER_USER { req.gid() } else { attr.gid };
        let shown = |id: u32, mount: u32| if id == CLUSTER_USER { mount } else { id };
        if (shown(attr.uid, self.owner.0), shown(attr.gid, self.owner.1)) != (uid, gid) {
            let change =
                AttrUpdate { uid: Some(uid), gid: Some(gid), mtime_ns: Some(attr.mtime_ns), ..Default::default() };
            let given = self.client.set_attr(path, &change)?;
            (attr.uid, attr.gid, attr.ctime_ns) = (given.uid, given.gid, given.ctime_ns);
        }
        Ok(attr)
    }

    /// Replies to a request that made the entry `name` in `parent`.
    fn reply_made(&self, parent: INodeNo, made: Result<(String, Attr)>, reply: ReplyEntry) {
        match made {
            Ok((name, attr)) => self.reply_entry(parent, &name, &attr, reply),
            Err(e) => reply.error(e),
        }
    }

    fn set_attr(&self, ino: INodeNo, fh: Option<FileHandle>, change: AttrUpdate, size: Option<u64>) -> Result<Attr> {
        self.changed();
        let path = self.path(ino).or_else(|e| match fh {
            Some(_) => Ok(String::new()),
            None => Err(e),
        })?;
        if let Some(size) = size {
            let resized = match fh.map(|fh| self.file(fh)).transpose()? {
                Some(open) => open.file.set_len(size),
                None => self.client.truncate(&path, size),
            };
            resized.map_err(|e| errno(&e, "truncate", &path))?;
        }
        if change != AttrUpdate::default() && !path.is_empty() {
            self.client.set_attr(&path, &change).map_err(|e| errno(&e, "setattr", &path))?;
        }
        self.attr_of(ino, fh)
    }
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Socket => FileType::Socket,
    }
}

fn system_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn unix_ns(t: TimeOrNow) -> i64 {
    let t = match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    };
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        Err(before) => -(before.duration().as_nanos().min(i64::MAX as u128) as i64),
    }
}

/// The errno of a library error; failures other than the everyday ones a
/// program expects (no such file, exists, ...) go to the mount's log too,
/// with the library's message, so an EIO always has its reason on record.
fn errno(e: &surge_client::Error, op: &str, path: &str) -> Errno {
    if e.link_met().is_some() {
        // The kernel follows links before it asks; a request on a link
        // itself that only a follower could serve (`touch -h`: the link's
        // times) is not supported.
        return Errno::EOPNOTSUPP;
    }
    // ENODATA and EOPNOTSUPP: the extended attributes a file has not (`ls`
    // asks for security.selinux on every file).
    let everyday = [
        libc::ENOENT,
        libc::EEXIST,
        libc::ENOTDIR,
        libc::EISDIR,
        libc::ENOTEMPTY,
        libc::EINVAL,
        libc::EBADF,
        libc::ENXIO,
        libc::ENAMETOOLONG,
        libc::ENODATA,
        libc::EOPNOTSUPP,
    ];
    if !everyday.contains(&e.errno()) {
        eprintln!("surge mount: {op} {path}: {e}");
    }
    Errno::from_i32(e.errno())
}

/// An extended attribute name as Surge keeps it (UTF-8, `crate::xattrs`
/// of surged says which); others are not supported.
fn xattr_name(name: &OsStr) -> Result<&str> {
    name.to_str().ok_or(Errno::from_i32(libc::EOPNOTSUPP))
}

/// Answers getxattr/listxattr: the length when asked with `size` 0, else
/// the bytes if they fit (ERANGE if not).
fn reply_xattr(result: Result<Vec<u8>>, size: u32, reply: ReplyXattr) {
    match result {
        Ok(bytes) if size == 0 => reply.size(bytes.len() as u32),
        Ok(bytes) if bytes.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
        Ok(bytes) => reply.data(&bytes),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(result: Result<()>, reply: ReplyEmpty) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl fuser::Filesystem for SurgeFs {
    /// At unmount: what the kernel moved through the mount, for the job's summary.
    fn destroy(&mut self) {
        let Some(journal) = &self.writers else { return };
        let mut journal = journal.lock().unwrap_or_else(PoisonError::into_inner);
        let (written, read) = (*self.bytes_written.get_mut(), *self.bytes_read.get_mut());
        if let Err(e) = writeln!(journal.file, "bytes {written} {read}") {
            eprintln!("surge mount: cannot note the bytes moved in the writers journal: {e}");
        }
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_REQUEST);
        let _ = config.set_max_readahead(MAX_REQUEST);
        let _ = config.set_max_background(64);
        let caps = config.capabilities();
        // Large direct reads and writes go out as parallel requests, which
        // the server's threads serve at once.
        let mut wanted = InitFlags::FUSE_ASYNC_DIO | InitFlags::FUSE_PARALLEL_DIROPS;
        if self.config.direct_io {
            // Without it, mmap of a direct-I/O file fails (ENODEV): exec,
            // sqlite, numpy and git need it (Linux 6.6 and later).
            wanted |= InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        }
        let _ = config.add_capabilities(wanted & caps);
        if self.config.direct_io && !caps.contains(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP) {
            eprintln!("surge mount: this kernel cannot mmap direct-I/O files; using the page cache instead");
            self.config.direct_io = false;
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.as_caller(req, || {
            let looked_up = self.child_path(parent, name).map(|(path, name)| {
                let attr = self.client.stat(&path).map_err(|e| errno(&e, "lookup", &path));
                (name, attr)
            });
            match looked_up {
                Ok((name, Ok(attr))) => {
                    self.keep_fresh(req, &attr);
                    self.reply_entry(parent, &name, &attr, reply)
                }
                Ok((name, Err(e))) if e == Errno::ENOENT => self.reply_missing(parent, &name, reply),
                Ok((_, Err(e))) | Err(e) => reply.error(e),
            }
        })
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.nodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(attr) = self.fresh_attr(req, ino) {
            return reply.attr(&self.attr_ttl(&attr), &self.file_attr(&attr));
        }
        self.as_caller(req, || match self.attr_of(ino, fh) {
            Ok(attr) => reply.attr(&self.attr_ttl(&attr), &self.file_attr(&attr)),
            Err(e) => reply.error(e),
        })
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.as_caller(req, || {
            // Who may is the kernel's to check (`default_permissions`),
            // against the owner and mode this server reports; a chown's
            // clearing of set-user-ID and set-group-ID comes as its mode.
            let change = AttrUpdate {
                mode: mode.map(|m| m & 0o7777),
                uid,
                gid,
                atime_ns: atime.map(unix_ns),
                mtime_ns: mtime.map(unix_ns),
            };
            match self.set_attr(ino, fh, change, size) {
                Ok(attr) => reply.attr(&self.attr_ttl(&attr), &self.file_attr(&attr)),
                Err(e) => reply.error(e),
            }
        })
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.as_caller(req, || {
            let made = self.child_path(parent, name).and_then(|(path, name)| {
                self.client.mkdir(&path, mode & !umask).map_err(|e| errno(&e, "mkdir", &path))?;
                let attr = self.client.stat(&path).and_then(|attr| self.give_to_caller(req, &path, attr));
                Ok((name, attr.map_err(|e| errno(&e, "mkdir", &path))?))
            });
            self.reply_made(parent, made, reply);
        })
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        self.as_caller(req, || {
            let made = self.child_path(parent, link_name).and_then(|(path, name)| {
                // Namespace names and targets are UTF-8.
                let target = target.to_str().ok_or(Errno::EINVAL)?;
                let attr = self.client.symlink(target, &path).and_then(|attr| self.give_to_caller(req, &path, attr));
                Ok((name, attr.map_err(|e| errno(&e, "symlink", &path))?))
            });
            self.reply_made(parent, made, reply);
        })
    }

    /// mknod(2): a regular file (GNU tar makes them so) is created empty
    /// as by `open(O_CREAT|O_EXCL)`; FIFOs, sockets and devices are nodes
    /// without data, which the kernel serves itself once they exist.
    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        self.as_caller(req, || {
            let made = self.child_path(parent, name).and_then(|(path, name)| {
                let perm = mode & !umask & 0o7777;
                let kind = match mode & libc::S_IFMT {
                    libc::S_IFREG | 0 => None,
                    libc::S_IFIFO => Some(FileKind::Fifo),
                    libc::S_IFCHR => Some(FileKind::CharDevice),
                    libc::S_IFBLK => Some(FileKind::BlockDevice),
                    libc::S_IFSOCK => Some(FileKind::Socket),
                    _ => return Err(Errno::EINVAL),
                };
                let attr = match kind {
                    Some(kind) => self.client.mknod(&path, kind, perm, u64::from(rdev), req.uid(), req.gid()),
                    None => {
                        self.note_writer(&path, libc::O_WRONLY)?;
                        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
                        self.client
                            .open(&path, flags, perm)
                            .and_then(|file| file.attr())
                            .and_then(|attr| self.give_to_caller(req, &path, attr))
                    }
                };
                Ok((name, attr.map_err(|e| errno(&e, "mknod", &path))?))
            });
            self.reply_made(parent, made, reply);
        })
    }

    /// link(2): one more name of the inode (see the namespace's `link`).
    fn link(&self, req: &Request, ino: INodeNo, new_parent: INodeNo, new_name: &OsStr, reply: ReplyEntry) {
        self.as_caller(req, || {
            let made = self.looked_up_path(ino).and_then(|from| {
                let (to, name) = self.child_path(new_parent, new_name)?;
                let linked = self.client.link(&from, &to).map_err(|e| errno(&e, "link", &to))?;
                self.changed();
                if linked.kind == FileKind::File {
                    // A job's stage-out takes the files its mount noted: every name.
                    self.note_writer(&to, libc::O_WRONLY)?;
                }
                // A file's size is its objects'.
                let attr = self.client.stat(&to).map_err(|e| errno(&e, "link", &to))?;
                Ok((name, attr))
            });
            self.reply_made(new_parent, made, reply);
        })
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.as_caller(req, || {
            let target = self
                .looked_up_path(ino)
                .and_then(|path| self.client.readlink(&path).map_err(|e| errno(&e, "readlink", &path)));
            match target {
                Ok(target) => reply.data(target.as_bytes()),
                Err(e) => reply.error(e),
            }
        })
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.as_caller(req, || {
            reply_empty(self.remove(parent, name, "unlink", |path| self.client.unlink(path)), reply);
        })
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.as_caller(req, || {
            reply_empty(self.remove(parent, name, "rmdir", |path| self.client.rmdir(path)), reply);
        })
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.as_caller(req, || {
            let renamed = (|| {
                if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.contains(RenameFlags::RENAME_WHITEOUT) {
                    return Err(Errno::EINVAL);
                }
                let (from, name) = self.child_path(parent, name)?;
                let (to, new_name) = self.child_path(new_parent, new_name)?;
                if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                    match self.client.stat(&to) {
                        Ok(_) => return Err(Errno::EEXIST),
                        Err(e) if e.errno() == libc::ENOENT => {}
                        Err(e) => return Err(errno(&e, "rename", &to)),
                    }
                }
                self.client.rename(&from, &to).map_err(|e| errno(&e, "rename", &from))?;
                self.changed();
                self.nodes.rename(parent.0, &name, new_parent.0, &new_name);
                Ok(())
            })();
            reply_empty(renamed, reply);
        })
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.as_caller(req, || {
            let flags = flags.0 & !(libc::O_CREAT | libc::O_EXCL);
            let opened = match self.nodes.path(ino.0) {
                Some(path) => self.open_path(&path, flags).map(Arc::new),
                None => self.open_renamed_over(ino, flags),
            };
            let opened = opened.map(|file| self.add_file(ino.0, file, flags));
            match opened {
                Ok(fh) => reply.opened(fh, self.open_flags()),
                Err(e) => reply.error(e),
            }
        })
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.as_caller(req, || {
            let created = self.child_path(parent, name).and_then(|(path, name)| {
                self.note_writer(&path, libc::O_WRONLY)?;
                let file = self
                    .client
                    .open(&path, flags | libc::O_CREAT, mode & !umask)
                    .map_err(|e| errno(&e, "create", &path))?;
                // A new file is empty: its attributes are what `Open` answered.
                let attr = match file.created_attr() {
                    Some(attr) => self.give_to_caller(req, &path, attr),
                    None => file.attr(),
                };
                let attr = match attr {
                    Ok(attr) => attr,
                    Err(e) => {
                        // The owner could not be set (or, for a file that
                        // existed, a stripe's daemon is down): the open fails,
                        // and a file it created must not stay behind the
                        // program's error.
                        let created = file.opened_created();
                        drop(file);
                        if created {
                            if let Err(undo) = self.client.unlink(&path) {
                                eprintln!(
                                    "surge mount: create {path}: cannot remove the file of a failed create: {undo}"
                                );
                            }
                        }
                        return Err(errno(&e, "create", &path));
                    }
                };
                let fh = self.add_file(attr.ino, Arc::new(file), flags);
                Ok((name, attr, fh))
            });
            match created {
                Ok((name, attr, fh)) => {
                    self.keep_fresh(req, &attr);
                    self.nodes.remember(attr.ino, parent.0, &name, attr.kind == FileKind::File, attr.nlink > 1);
                    // One TTL covers the entry and its attributes here: the
                    // file's size must not be cached, so neither is the entry.
                    reply.created(&self.attr_ttl(&attr), &self.file_attr(&attr), Generation(0), fh, self.open_flags());
                }
                Err(e) => reply.error(e),
            }
        })
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.as_caller(req, || {
            READ_BUFFER.with_borrow_mut(|buf| {
                if buf.len() < size as usize {
                    buf.resize(size as usize, 0);
                }
                let buf = &mut buf[..size as usize];
                let read = self.file(fh).and_then(|open| {
                    let file = &open.file;
                    file.read_at(buf, offset).map_err(|e| errno(&e, "read", file.path()))
                });
                match read {
                    Ok(n) => {
                        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
                        reply.data(&buf[..n])
                    }
                    Err(e) => reply.error(e),
                }
            })
        })
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.as_caller(req, || {
            let written = self.file(fh).and_then(|open| {
                let OpenFile { file, append, .. } = &*open;
                // Write-back of a shared mapping has its own offsets, even
                // through a handle opened O_APPEND.
                let n = if *append && !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
                    file.append(data).map(|(_, n)| n)
                } else {
                    file.write_at(data, offset)
                };
                self.changed();
                let n = n.map_err(|e| errno(&e, "write", file.path()))?;
                self.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
                self.drop_setid_after_write(req, &open);
                Ok(n)
            });
            match written {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(e),
            }
        })
    }

    /// Nothing is buffered here (every write reached the daemons before it
    /// was answered) and locks are the kernel's: ENOSYS tells the kernel
    /// never to send a flush again, one request less per close.
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    /// Dropping a file's last handle closes it on daemon 0 (`Close`),
    /// after the answer: nothing waits for it (every write reached the
    /// daemons before it was answered).
    fn release(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // The kernel sends a release after the close returned, between
        // the caller's later requests: it leaves their `Fresh` attributes.
        self.charged_to_caller(req, || {
            let handle = self.handles().remove(&fh.0);
            reply.ok();
            drop(handle);
        })
    }

    fn fsync(&self, req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.as_caller(req, || {
            let synced = self.file(fh).and_then(|open| {
                let file = &open.file;
                file.fsync().map_err(|e| errno(&e, "fsync", file.path()))
            });
            reply_empty(synced, reply);
        })
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.as_caller(req, || {
            // The listing is taken whole at opendir, so entries created or
            // removed while a program walks it neither repeat nor vanish.
            let opened = self.path(ino).and_then(|path| {
                let entries = self.client.readdir(&path).map_err(|e| errno(&e, "readdir", &path))?;
                let parent = if ino.0 == ROOT { ROOT } else { self.nodes.parent(ino.0).unwrap_or(ROOT) };
                Ok(self.add_handle(Handle::Dir(Arc::new(Listing { entries, parent }))))
            });
            match opened {
                Ok(fh) => reply.opened(fh, FopenFlags::empty()),
                Err(e) => reply.error(e),
            }
        })
    }

    fn readdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.as_caller(req, || {
            let handle = match self.handle(fh) {
                Ok(h) => h,
                Err(e) => return reply.error(e),
            };
            let Handle::Dir(listing) = handle else { return reply.error(Errno::ENOTDIR) };
            let Listing { entries, parent } = &*listing;
            // Offsets: 1 after ".", 2 after "..", 3 + i after entries[i].
            let dots = [(ino.0, "."), (*parent, "..")];
            for (i, (node, name)) in dots.iter().enumerate().skip(offset as usize) {
                if reply.add(INodeNo(*node), i as u64 + 1, FileType::Directory, name) {
                    return reply.ok();
                }
            }
            for (i, e) in entries.iter().enumerate().skip((offset as usize).saturating_sub(2)) {
                if reply.add(INodeNo(e.ino), i as u64 + 3, file_type(e.kind), &e.name) {
                    break;
                }
            }
            reply.ok();
        })
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.handles().remove(&fh.0);
        reply.ok();
    }

    /// fsync of a directory: the names made in it (and every other
    /// namespace change so far) become durable.
    fn fsyncdir(&self, req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.as_caller(req, || {
            // A directory removed meanwhile still syncs (its path only names it in the log).
            let path = self.path(ino).unwrap_or_default();
            let synced = self.client.sync().map_err(|e| errno(&e, "fsync", &path));
            reply_empty(synced, reply);
        })
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.as_caller(req, || {
            const BLOCK: u64 = 4096;
            let (mut total, mut free, mut files) = (0u64, 0u64, 0u64);
            for (daemon, status) in self.client.status() {
                match status {
                    Ok(s) => {
                        total += s.capacity;
                        free += s.capacity.saturating_sub(s.bytes_used).min(s.device_free);
                        files += s.files + s.dirs;
                    }
                    Err(e) => {
                        return reply.error(errno(
                            &e,
                            "statfs",
                            &format!("daemon {} at {}", daemon.index, daemon.addr),
                        ));
                    }
                }
            }
            reply.statfs(
                total / BLOCK,
                free / BLOCK,
                free / BLOCK,
                files + (1 << 32),
                1 << 32,
                BLOCK as u32,
                255,
                BLOCK as u32,
            );
        })
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        // The kernel asks for security.capability before writes (to
        // drop file capabilities): answered here, without a round trip.
        if !name.as_encoded_bytes().starts_with(XATTR_KEPT_PREFIX.as_bytes()) {
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        self.as_caller(req, || {
            let value = xattr_name(name).and_then(|name| {
                let path = self.looked_up_path(ino)?;
                self.client.get_xattr(&path, name).map_err(|e| errno(&e, "getxattr", &path))
            });
            reply_xattr(value, size, reply);
        })
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.as_caller(req, || {
            let names = self
                .looked_up_path(ino)
                .and_then(|path| self.client.list_xattr(&path).map_err(|e| errno(&e, "listxattr", &path)));
            reply_xattr(names, size, reply);
        })
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.as_caller(req, || {
            let set = xattr_name(name).and_then(|name| {
                let path = self.looked_up_path(ino)?;
                self.client.set_xattr(&path, name, value, flags as u32).map_err(|e| errno(&e, "setxattr", &path))
            });
            reply_empty(set, reply);
        })
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.as_caller(req, || {
            let removed = xattr_name(name).and_then(|name| {
                let path = self.looked_up_path(ino)?;
                self.client.remove_xattr(&path, name).map_err(|e| errno(&e, "removexattr", &path))
            });
            reply_empty(removed, reply);
        })
    }

    /// With `default_permissions` the kernel checks modes itself; this answers access(2) on its behalf.
    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.as_caller(req, || {
            self.changed();
            let done = self.file(fh).and_then(|open| {
                let file = &open.file;
                file.fallocate(mode, offset, length).map_err(|e| errno(&e, "fallocate", file.path()))
            });
            reply_empty(done, reply);
        })
    }

    /// The kernel asks only for SEEK_DATA and SEEK_HOLE (it answers the
    /// other whences itself): from the objects' extents.
    fn lseek(&self, req: &Request, _ino: INodeNo, fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        self.as_caller(req, || {
            let found = self.file(fh).and_then(|open| {
                let file = &open.file;
                let offset = u64::try_from(offset).map_err(|_| Errno::ENXIO)?;
                let hole = match whence {
                    libc::SEEK_DATA => false,
                    libc::SEEK_HOLE => true,
                    _ => return Err(Errno::EINVAL),
                };
                file.seek_data_or_hole(offset, hole).map_err(|e| errno(&e, "lseek", file.path()))
            });
            match found {
                Ok(at) => reply.offset(at as i64),
                Err(e) => reply.error(e),
            }
        })
    }
}
