//! The namespace, kept by the metadata daemon (daemon 0) in a redb
//! database, as a union with the PFS tree.
//!
//! Table `entries` maps `(parent path, name)` to an encoded [`Record`];
//! table `config` holds the root's record, the inode counter, the file and
//! directory counts and the format version; table `doomed` maps the inode
//! of every removed file whose objects are still to be deleted to a
//! [`Doomed`] record, written in the transaction that removed the file
//! (the deleter, `crate::deleter`, deletes the objects, then the record);
//! table `stage_temps` maps the PFS path of every stage-out temp created
//! and not yet committed or aborted to its file's inode, so that an
//! abandoned one is removed (`crate::stage_temps`); table `inodes` maps the
//! inode of every file that has had several names (hard links, `Link`) to
//! its one record, which each of its entries then stands for (an entry
//! marked `linked` is read from there); table `xattrs` holds the extended
//! attributes (`crate::xattrs`).
//!
//! Every change is one write transaction, never torn. Durability is a
//! journaling file system's, with group commit (see [`GroupCommit`]): a
//! client's change (a create, a removal, a rename, new attributes) is
//! committed at once, visible to every later request, but made durable
//! together with the others of its commit interval by one durable commit,
//! at the end of the interval or when a client asks for it (`Sync`, sent
//! by fsync of a file or a directory). An interval of 0 makes every change
//! durable before it is acknowledged. Changes whose consequences cannot be
//! taken back (a stage-out, an eviction, a file marked lost, the doomed
//! files the deleter is about to delete) are durable before they act.
//! Inode numbers are reserved durably ahead of use ([`INO_RESERVE`]), so
//! a crash that loses recent creates never hands their numbers (and
//! objects, left for the orphan collector) to new files.
//!
//! The union view: a path the database does not have but the PFS does is
//! visible with tier `Pfs`. Invariant: the parent of every database entry
//! is the root or a database directory. A PFS-only directory is copied into
//! the database ("materialized") before anything is created in it, so a
//! directory rename is a key rewrite of its database subtree and nothing
//! else.
//!
//! Symbolic links are records of kind `Symlink` holding their target; the
//! PFS's links show as links too (`crate::pfs`). Nothing here follows a
//! link: a path crossing one, or an open of one, fails with
//! [`surge_proto::link::LINK_MET`] naming the link and its target, for the
//! client to resolve (see `surge_proto::link`). A link is never a
//! directory, so the invariant above keeps database entries out of links.

use crate::changes::ChangeFeed;
use crate::failure::Failure;
use crate::locking::lock;
use crate::nsdb::NamespaceDb;
use crate::pfs::{CopyMeta, Pfs, PfsNode, Times};
use crate::space::Device;
use crate::staged_copy::CopyStamp;
use crate::xattrs::{self, XATTRS};
use redb::{Database, Durability, ReadOnlyTable, ReadTransaction, ReadableTable, Table, TableDefinition};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use surge_proto::codec::{Decoder, Encoder};
use surge_proto::link::{self, LinkMet, LINK_MET};
use surge_proto::msg::{
    file_mtime, open_flags, Attr, DirEntry, FileKind, MarkLostReply, ReaddirReply, Removed, Tier, CLUSTER_USER,
    KEEP_ID, KEEP_MODE, KEEP_MTIME,
};
use surge_proto::{path, shards, Errno, Layout};

type EntryKey = (&'static str, &'static str);
const ENTRIES: TableDefinition<EntryKey, &[u8]> = TableDefinition::new("entries");
const CONFIG: TableDefinition<&str, &[u8]> = TableDefinition::new("config");
const DOOMED: TableDefinition<u64, &[u8]> = TableDefinition::new("doomed");
const STAGE_TEMPS: TableDefinition<&str, u64> = TableDefinition::new("stage_temps");
const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");

const FORMAT: &str = "format";
const ROOT: &str = "root";
const NEXT_INO: &str = "next_ino";
/// Inode numbers below this one may have been handed out by a change that
/// a crash lost: a load starts handing out from here.
const INO_RESERVED: &str = "ino_reserved";
/// Inode numbers reserved by one durable commit (a create that reaches the
/// reservation's end is made durable and reserves the next ones).
const INO_RESERVE: u64 = 4096;
const FILES: &str = "files";
const DIRS: &str = "dirs";
/// The cluster size the namespace was made for: layouts map stripes to
/// daemons modulo this number, so a restart with another count would
/// misplace every file.
const DAEMONS: &str = "daemons";
/// 0 in a namespace of its own (`--namespace one`); shard `k`'s of a
/// namespace spread over the daemons holds `k + 1`.
const SHARD_OF: &str = "shard_of";

/// Format 3 records a file's access time, owner, group, link count and
/// device number, and has the `inodes` table (hard links). Format 2
/// stamps a staged file's PFS copy (`CopyStamp`) and has the `stage_temps`
/// table. An older namespace is rewritten record by record when it is
/// opened (`migrate`): its files get their mtime as access time, the
/// cluster's user as owner (what every client showed) and one name each;
/// the staged files of format 1, whose copies were never stamped, read as
/// `Buffer` and are staged again (their copies are not trusted unchecked).
const FORMAT_VERSION: u64 = 3;
const FORMAT_UNOWNED: u64 = 2;
const FORMAT_UNSTAMPED: u64 = 1;
const ROOT_INO: u64 = 1;
/// Set in the inode numbers reported for PFS-only entries (their PFS inode
/// numbers), so they never collide with namespace inode numbers.
pub const PFS_INO_BIT: u64 = 1 << 63;
/// The first inode number a new namespace hands out: a random incarnation
/// in bits 32..62, so that a namespace made afresh over data daemons that
/// kept the objects of a lost one never names those objects (they would be
/// served as the new file's bytes). Left over, they are orphans.
/// A shard of a namespace spread over the daemons (`crate::shard`) keeps
/// its shard in bits 56..62 (`surge_proto::shards`) and a shorter
/// incarnation below them.
fn first_inode_of_a_new_namespace(shard: Option<Shard>) -> Result<u64, Failure> {
    let mut bytes = [0u8; 4];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| Failure::new(Errno::EIO, format!("no randomness for the namespace's incarnation: {e}")))?;
    let incarnation_bits = match shard {
        None => 0x7fff_ffff,
        Some(_) => (1 << (shards::INO_SHARD_SHIFT - 32)) - 1,
    };
    let incarnation = u64::from(u32::from_le_bytes(bytes) & incarnation_bits).max(1);
    let shard_bits = shard.map_or(0, |s| shards::ino_shard_bits(s.index, s.count));
    Ok(shard_bits | incarnation << 32 | (ROOT_INO + 1))
}

/// Which shard of a namespace spread over `count` daemons this one is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// How long a removed file kept for its handles (`keep`) may keep its
/// objects without a `Release` or its last close: a client that crashed
/// holding one, while daemon 0 was down, leaves nothing behind for longer
/// than this.
pub const HOLD_LEASE: Duration = Duration::from_secs(24 * 3600);

/// Whether a removal keeps the objects of the file it removes (from the
/// canonical path given, inode given): `true` when the caller has it open
/// (a client's `keep`), or a question asked inside the removal's
/// transaction (daemon 0's count of handles, `crate::handles`).
pub trait KeepRemoved {
    fn keep(&self, path: &str, ino: u64) -> bool;
}

impl KeepRemoved for bool {
    fn keep(&self, _path: &str, _ino: u64) -> bool {
        *self
    }
}

impl<F: Fn(&str, u64) -> bool> KeepRemoved for F {
    fn keep(&self, path: &str, ino: u64) -> bool {
        self(path, ino)
    }
}

/// A removed file whose objects are still to be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doomed {
    pub ino: u64,
    pub layout: Layout,
    /// Kept by a client that has the file open until this time (ns since
    /// the epoch), or until its `Release`; 0 when not kept.
    pub held_until_ns: i64,
}

impl Doomed {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.u32(self.layout.stripe_count).u64(self.layout.stripe_size).u32(self.layout.first).i64(self.held_until_ns);
        e.buf
    }

    fn decode(ino: u64, bytes: &[u8]) -> Result<Doomed, Failure> {
        let mut d = Decoder::new(bytes);
        let mut fields = || -> Result<Doomed, surge_proto::DecodeError> {
            let layout = Layout { stripe_count: d.u32()?, stripe_size: d.u64()?, first: d.u32()? };
            let held_until_ns = d.i64()?;
            d.finish()?;
            Ok(Doomed { ino, layout, held_until_ns })
        };
        fields().map_err(|e| Failure::new(Errno::EIO, format!("corrupt doomed record of inode {ino}: {e}")))
    }

    /// Kept for a client now (its hold lease runs)?
    pub fn held(&self) -> bool {
        !self.due(now_ns())
    }

    /// May its objects be deleted at `now_ns`?
    fn due(&self, now_ns: i64) -> bool {
        self.held_until_ns <= now_ns
    }
}

/// A regular file as `surge fsck` sees it ([`Namespace::audit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedFile {
    pub names: Vec<String>,
    pub layout: Layout,
    /// Some name of it has its contents in the buffer (tier `Buffer` or `Staged`).
    pub has_objects: bool,
    /// Some name of it is marked `Lost`.
    pub lost: bool,
    /// The link count its record gives; `None` when a name is marked as
    /// one of several and the inode's record is missing.
    pub nlink: Option<u32>,
}

/// The namespace as `surge fsck` checks it ([`Namespace::audit`]).
#[derive(Debug, Default)]
pub struct Audit {
    pub files: BTreeMap<u64, AuditedFile>,
    /// Records in table `inodes` that no entry names, with their link counts.
    pub unnamed: Vec<(u64, u32)>,
    pub doomed: Vec<Doomed>,
    /// The recorded stage-out temps and their files' inodes.
    pub stage_temps: Vec<(String, u64)>,
}

/// Files by the state of their contents ([`Namespace::unstaged_files`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileCounts {
    /// In the buffer only, not yet staged out.
    pub unstaged: u64,
    /// Marked lost (`MarkLost`).
    pub lost: u64,
}

/// What a `SetAttr` changes (`KEEP_MODE`, `KEEP_ID` and `KEEP_MTIME`
/// for what stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttrChange {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime_ns: i64,
    pub mtime_ns: i64,
}

/// Most entries one `Readdir` returns.
pub const READDIR_MAX: u32 = 4096;

/// What the database keeps about a file or directory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    ino: u64,
    kind: FileKind,
    mode: u32,
    atime_ns: i64,
    mtime_ns: i64,
    ctime_ns: i64,
    /// `CLUSTER_USER` when made without one.
    uid: u32,
    gid: u32,
    /// Names of the inode.
    nlink: u32,
    /// A device node's device number.
    rdev: u64,
    /// Has had several names: the record in table `inodes` is the one
    /// that counts, but for what belongs to this name, its PFS copy
    /// (`tier`, `staged_version`, `copy`: each name is staged out as a file
    /// of its own). A write through one name changes the objects' version,
    /// so the others' copies read as stale to every client (see
    /// `surge_proto::msg::objects_version`); a linked file is not evicted
    /// while it has several names, and never served from a PFS copy.
    linked: bool,
    /// A file's concrete layout, or a directory's own (possibly partial) default.
    layout: Layout,
    tier: Tier,
    /// While `Staged`: the version of the contents the PFS copy holds (see
    /// `surge_proto::msg::objects_version`). While `Lost`: the index of the
    /// daemon whose store lost its data.
    staged_version: u64,
    /// A symbolic link's target; empty for files and directories.
    target: String,
    /// While `Staged`: what the PFS copy was when put in place.
    copy: Option<CopyStamp>,
}

/// A link is `Staged` once its PFS copy is in place: it has no contents
/// whose versions could differ.
const LINK_STAGED_VERSION: u64 = 1;

impl Record {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.u64(self.ino).u8(self.kind as u8).u32(self.mode).i64(self.mtime_ns).i64(self.ctime_ns);
        e.i64(self.atime_ns).u32(self.uid).u32(self.gid).u32(self.nlink).u64(self.rdev).u8(self.linked as u8);
        e.u32(self.layout.stripe_count).u64(self.layout.stripe_size).u32(self.layout.first);
        e.u8(self.tier as u8).u64(self.staged_version);
        if self.kind == FileKind::Symlink {
            e.str(&self.target);
        }
        if let (Tier::Staged, Some(copy)) = (self.tier, &self.copy) {
            copy.encode(&mut e);
        }
        e.buf
    }

    fn decode(bytes: &[u8]) -> Result<Record, Failure> {
        Record::decode_format(bytes, FORMAT_VERSION)
    }

    /// A record as namespace format `format` wrote it.
    fn decode_format(bytes: &[u8], format: u64) -> Result<Record, Failure> {
        let corrupt = |what: &str| Failure::new(Errno::EIO, format!("corrupt namespace record: {what}"));
        let mut d = Decoder::new(bytes);
        let mut fields = || -> Result<Record, surge_proto::DecodeError> {
            let ino = d.u64()?;
            let kind = FileKind::from_u8(d.u8()?).ok_or(surge_proto::DecodeError::BadValue("file kind"))?;
            let (mode, mtime_ns, ctime_ns) = (d.u32()?, d.i64()?, d.i64()?);
            let (atime_ns, uid, gid, nlink, rdev, linked) = if format >= FORMAT_VERSION {
                (d.i64()?, d.u32()?, d.u32()?, d.u32()?, d.u64()?, d.u8()? != 0)
            } else {
                (mtime_ns, CLUSTER_USER, CLUSTER_USER, 1, 0, false)
            };
            let layout = Layout { stripe_count: d.u32()?, stripe_size: d.u64()?, first: d.u32()? };
            let tier = match d.u8()? {
                0 => Tier::Buffer,
                1 => Tier::Staged,
                2 => Tier::Pfs,
                3 => Tier::Lost,
                _ => return Err(surge_proto::DecodeError::BadValue("tier")),
            };
            // Records written before staged versions existed end here; their
            // staged files show as `Buffer` until staged again.
            let staged_version = if d.finish().is_ok() { 0 } else { d.u64()? };
            let target = if kind == FileKind::Symlink { d.str()?.to_string() } else { String::new() };
            // Records of format 1 end here: a staged one has no stamp of its
            // PFS copy, which is then not trusted (`FORMAT_VERSION`).
            let copy = if d.finish().is_ok() { None } else { Some(CopyStamp::decode(&mut d)?) };
            d.finish()?;
            let mut rec = Record {
                ino,
                kind,
                mode,
                atime_ns,
                mtime_ns,
                ctime_ns,
                uid,
                gid,
                nlink,
                rdev,
                linked,
                layout,
                tier,
                staged_version,
                target,
                copy,
            };
            if rec.copy.is_none() {
                rec.mark_dirty();
            }
            Ok(rec)
        };
        fields().map_err(|e| corrupt(&e.to_string()))
    }

    /// The times its PFS copy gets: those Surge shows.
    fn times(&self) -> Times {
        Times { atime_ns: self.atime_ns, mtime_ns: self.mtime_ns }
    }

    /// The PFS copy no longer matches: the file is `Buffer` until staged again.
    fn mark_dirty(&mut self) {
        if self.tier == Tier::Staged {
            self.tier = Tier::Buffer;
            self.staged_version = 0;
            self.copy = None;
        }
    }

    fn attr(&self) -> Attr {
        Attr {
            ino: self.ino,
            kind: self.kind,
            mode: self.mode,
            // Buffer files: the client derives the size from its objects.
            size: self.target.len() as u64,
            atime_ns: self.atime_ns,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            uid: self.uid,
            gid: self.gid,
            // Directories: "not counted" (see surge-fuse).
            nlink: if self.kind == FileKind::Dir { 1 } else { self.nlink },
            rdev: self.rdev,
            layout: self.layout,
            tier: self.tier,
            created: false,
            staged_version: if self.tier == Tier::Staged { self.staged_version } else { 0 },
            // Buffer files: the client sums its objects' allocation.
            blocks: 0,
        }
    }
}

/// A path as the union view resolves it.
enum Node {
    Root(Record),
    Db(Record),
    Pfs(PfsNode),
}

impl Node {
    fn kind(&self) -> FileKind {
        match self {
            Node::Root(_) => FileKind::Dir,
            Node::Db(rec) => rec.kind,
            Node::Pfs(node) => node.kind,
        }
    }

    fn is_dir(&self) -> bool {
        self.kind() == FileKind::Dir
    }

    fn is_link(&self) -> bool {
        self.kind() == FileKind::Symlink
    }

    /// What new entry `rec` of this directory takes from it: in a
    /// set-group-ID directory, its group, and a new directory the bit too
    /// (POSIX's rule for such directories, Linux's `inode_init_owner`).
    fn pass_group_on(&self, rec: &mut Record) {
        let (Node::Root(dir) | Node::Db(dir)) = self else { return };
        if dir.mode & libc::S_ISGID != 0 {
            rec.gid = dir.gid;
            if rec.kind == FileKind::Dir {
                rec.mode |= libc::S_ISGID;
            }
        }
    }

    fn attr(&self) -> Attr {
        match self {
            Node::Root(rec) | Node::Db(rec) => rec.attr(),
            Node::Pfs(node) => Attr {
                ino: node.ino | PFS_INO_BIT,
                kind: node.kind,
                mode: node.mode,
                size: node.size,
                atime_ns: node.mtime_ns,
                mtime_ns: node.mtime_ns,
                ctime_ns: node.ctime_ns,
                uid: CLUSTER_USER,
                gid: CLUSTER_USER,
                nlink: 1,
                rdev: 0,
                layout: Layout::INHERIT,
                tier: Tier::Pfs,
                created: false,
                staged_version: 0,
                blocks: node.blocks,
            },
        }
    }
}

/// A canonical path other than the root, with its directory and name.
#[derive(Clone, Copy)]
struct Entry<'a> {
    path: &'a str,
    dir: &'a str,
    name: &'a str,
}

impl<'a> Entry<'a> {
    fn of(path: &'a str) -> Option<Entry<'a>> {
        path::split(path).map(|(dir, name)| Entry { path, dir, name })
    }
}

/// The path of entry `name` of directory `dir`.
fn entry_path(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn canonical(path: &str) -> Result<String, Failure> {
    path::canonical(path).map_err(|errno| Failure::new(errno, format!("invalid path {path:?}")))
}

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

macro_rules! redb_errors_are_eio {
    ($($ty:ty),*) => {$(
        impl From<$ty> for Failure {
            fn from(e: $ty) -> Failure {
                database_failure(e.into())
            }
        }
    )*};
}

/// ENOSPC when the device is full (so the user learns what to do), else EIO.
fn database_failure(e: redb::Error) -> Failure {
    let errno = match &e {
        redb::Error::Io(io) if io.raw_os_error() == Some(libc::ENOSPC) => Errno::ENOSPC,
        _ => Errno::EIO,
    };
    Failure::new(errno, format!("namespace database: {e}"))
}
redb_errors_are_eio!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// Read access to the namespace, in a read or a write transaction.
trait View {
    fn pfs(&self) -> &Pfs;
    fn entry(&self, dir: &str, name: &str) -> Result<Option<Record>, Failure>;
    fn root(&self) -> Result<Record, Failure>;
    /// Up to `limit` database entries of directory `dir` named after `after`, in name order.
    fn children(&self, dir: &str, after: &str, limit: usize) -> Result<Vec<(String, Record)>, Failure>;

    /// Why the PFS copy of staged `rec` (at `path`) is not the one stamped
    /// when it was staged; `None` when it is, or `rec` is not staged.
    fn copy_changed(&self, path: &str, rec: &Record) -> Result<Option<String>, Failure> {
        let (Tier::Staged, Some(copy)) = (rec.tier, &rec.copy) else { return Ok(None) };
        let now = match self.pfs().stat(path) {
            Ok(now) => now,
            Err(Errno::ENOTDIR) => None,
            Err(errno) => return Err(Failure::new(errno, format!("cannot check the PFS copy of {path}"))),
        };
        if now.is_none() && !self.pfs().root_present() {
            return Ok(Some("the PFS is not there to check it".to_string()));
        }
        Ok(copy.changed(now.as_ref()))
    }

    /// Resolves `path` in the union view, its last component not followed:
    /// `ENOENT` if it does not exist, `ENOTDIR` if a component on the way
    /// is a file, `LINK_MET` if one is a symbolic link.
    fn lookup(&self, path: &str) -> Result<Node, Failure> {
        let Some(e) = Entry::of(path) else { return Ok(Node::Root(self.root()?)) };
        // Fast path; the invariant vouches for the entry's ancestors.
        if let Some(rec) = self.entry(e.dir, e.name)? {
            return Ok(Node::Db(rec));
        }
        let dir = self.dir_node(e.dir)?;
        self.pfs_child(&dir, e)?.ok_or_else(|| Errno::ENOENT.into())
    }

    /// Resolves directory `path`: `LINK_MET` if it is a symbolic link (to
    /// be followed by the client), `ENOTDIR` if it is a file.
    fn dir_node(&self, path: &str) -> Result<Node, Failure> {
        let node = self.lookup_followed(path)?;
        if node.is_dir() {
            Ok(node)
        } else {
            Err(Errno::ENOTDIR.into())
        }
    }

    /// Resolves `path` for an operation that follows a last component that
    /// is a symbolic link: `LINK_MET` then.
    fn lookup_followed(&self, path: &str) -> Result<Node, Failure> {
        let node = self.lookup(path)?;
        self.followed(path, &node)?;
        Ok(node)
    }

    /// `LINK_MET` when `node` (at `path`) is a symbolic link an operation
    /// would follow; `Ok` otherwise.
    fn followed(&self, path: &str, node: &Node) -> Result<(), Failure> {
        if !node.is_link() {
            return Ok(());
        }
        let met = LinkMet { at: path.to_string(), target: self.target(path, node)? };
        Err(Failure::new(LINK_MET, met.message()))
    }

    /// The target of symbolic link `node` at `path`.
    fn target(&self, path: &str, node: &Node) -> Result<String, Failure> {
        match node {
            Node::Db(rec) if rec.kind == FileKind::Symlink => Ok(rec.target.clone()),
            Node::Pfs(pfs) if pfs.kind == FileKind::Symlink => Ok(self.pfs().read_link(path)?),
            _ => Err(Failure::new(Errno::EINVAL, format!("{path} is not a symbolic link"))),
        }
    }

    /// The entry `e` of directory node `dir` (already resolved), if it exists.
    fn lookup_in(&self, dir: &Node, e: Entry<'_>) -> Result<Option<Node>, Failure> {
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        match self.entry(e.dir, e.name)? {
            Some(rec) => Ok(Some(Node::Db(rec))),
            None => self.pfs_child(dir, e),
        }
    }

    /// The PFS entry `e` of directory node `dir`, for a name the database does not have.
    fn pfs_child(&self, dir: &Node, e: Entry<'_>) -> Result<Option<Node>, Failure> {
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        Ok(self.pfs().stat(e.path)?.map(Node::Pfs))
    }

    /// The default layout new files of directory `dir` get: its own layout,
    /// completed by its ancestors' up to the root's.
    fn inherited_layout(&self, dir: &str) -> Result<Layout, Failure> {
        let mut layout = Layout::INHERIT;
        let mut cur = dir;
        while let Some((parent, name)) = path::split(cur) {
            if let Some(rec) = self.entry(parent, name)? {
                layout = layout.inherit(rec.layout);
            }
            cur = parent;
        }
        Ok(layout.inherit(self.root()?.layout))
    }

    fn is_empty_dir(&self, path: &str) -> Result<bool, Failure> {
        Ok(self.children(path, "", 1)?.is_empty() && self.pfs().is_empty_dir(path)?)
    }
}

fn get_entry(
    table: &impl ReadableTable<EntryKey, &'static [u8]>,
    inodes: &impl ReadableTable<u64, &'static [u8]>,
    dir: &str,
    name: &str,
) -> Result<Option<Record>, Failure> {
    match table.get((dir, name))? {
        Some(value) => shared_record(inodes, Record::decode(value.value())?).map(Some),
        None => Ok(None),
    }
}

/// `rec`, an entry's copy, or when it is linked the inode's own record
/// with this name's PFS copy (see `Record::linked`).
fn shared_record(inodes: &impl ReadableTable<u64, &'static [u8]>, rec: Record) -> Result<Record, Failure> {
    if !rec.linked {
        return Ok(rec);
    }
    match inodes.get(rec.ino)? {
        Some(value) => {
            let Record { tier, staged_version, copy, .. } = rec;
            Ok(Record { tier, staged_version, copy, ..Record::decode(value.value())? })
        }
        None => Err(Failure::new(Errno::EIO, format!("namespace database has no record of linked inode {}", rec.ino))),
    }
}

fn get_root(config: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<Record, Failure> {
    match config.get(ROOT)? {
        Some(value) => Record::decode(value.value()),
        None => Err(Failure::new(Errno::EIO, "namespace database has no root record")),
    }
}

fn get_counter(config: &impl ReadableTable<&'static str, &'static [u8]>, key: &str) -> Result<u64, Failure> {
    let Some(value) = config.get(key)? else { return Ok(0) };
    let bytes: [u8; 8] =
        value.value().try_into().map_err(|_| Failure::new(Errno::EIO, format!("corrupt namespace counter {key}")))?;
    Ok(u64::from_le_bytes(bytes))
}

fn scan_children(
    table: &impl ReadableTable<EntryKey, &'static [u8]>,
    dir: &str,
    after: &str,
    limit: usize,
) -> Result<Vec<(String, Record)>, Failure> {
    let mut out = Vec::new();
    for item in table.range::<(&str, &str)>((dir, after)..)? {
        if out.len() >= limit {
            break;
        }
        let (key, value) = item?;
        let (parent, name) = key.value();
        if parent != dir {
            break;
        }
        if name != after {
            out.push((name.to_string(), Record::decode(value.value())?));
        }
    }
    Ok(out)
}

/// The namespace as one transaction sees it: read-only tables for a
/// reader, writable ones for a writer; `View` is implemented once for both.
struct Tables<'a, E, C, I> {
    entries: E,
    config: C,
    inodes: I,
    pfs: &'a Pfs,
}

type Reader<'a> = Tables<
    'a,
    ReadOnlyTable<EntryKey, &'static [u8]>,
    ReadOnlyTable<&'static str, &'static [u8]>,
    ReadOnlyTable<u64, &'static [u8]>,
>;
/// The tables of a write transaction.
type WriteTables<'a, 't> = Tables<
    'a,
    Table<'t, EntryKey, &'static [u8]>,
    Table<'t, &'static str, &'static [u8]>,
    Table<'t, u64, &'static [u8]>,
>;

impl<E, C, I> Tables<'_, E, C, I>
where
    I: ReadableTable<u64, &'static [u8]>,
{
    /// The record an entry's encoded `value` stands for.
    fn record_of(&self, value: &[u8]) -> Result<Record, Failure> {
        shared_record(&self.inodes, Record::decode(value)?)
    }
}

impl<E, C, I> View for Tables<'_, E, C, I>
where
    E: ReadableTable<EntryKey, &'static [u8]>,
    C: ReadableTable<&'static str, &'static [u8]>,
    I: ReadableTable<u64, &'static [u8]>,
{
    fn pfs(&self) -> &Pfs {
        self.pfs
    }
    fn entry(&self, dir: &str, name: &str) -> Result<Option<Record>, Failure> {
        get_entry(&self.entries, &self.inodes, dir, name)
    }
    fn root(&self) -> Result<Record, Failure> {
        get_root(&self.config)
    }
    fn children(&self, dir: &str, after: &str, limit: usize) -> Result<Vec<(String, Record)>, Failure> {
        scan_children(&self.entries, dir, after, limit)
    }
}

struct Writer<'a, 't> {
    tables: WriteTables<'a, 't>,
    doomed: Table<'t, u64, &'static [u8]>,
    stage_temps: Table<'t, &'static str, u64>,
    xattrs: Table<'t, (u64, &'static str), &'static [u8]>,
    /// How long a `keep` removal holds the objects.
    hold_lease: Duration,
    daemons: u32,
    /// Anything to commit?
    dirty: bool,
    /// Must this change be durable before it is acknowledged, whatever the
    /// commit interval (it reserved inode numbers)?
    durable: bool,
    /// The entries changed, for the change feed (with whether everything under them moved).
    changed: Vec<(String, bool)>,
}

// A writer reads through its own tables, so it sees its uncommitted changes.
impl<'a, 't> std::ops::Deref for Writer<'a, 't> {
    type Target = WriteTables<'a, 't>;
    fn deref(&self) -> &Self::Target {
        &self.tables
    }
}

impl Writer<'_, '_> {
    fn put(&mut self, e: Entry<'_>, rec: &Record) -> Result<(), Failure> {
        let encoded = rec.encode();
        if rec.linked {
            self.tables.inodes.insert(rec.ino, encoded.as_slice())?;
        }
        self.tables.entries.insert((e.dir, e.name), encoded.as_slice())?;
        self.dirty = true;
        self.changed.push((e.path.to_string(), false));
        Ok(())
    }

    /// Removes name `e` of `rec` and returns whether that was the inode's
    /// last name; its objects are then doomed (kept while `keep` says so).
    /// The directory's times move on.
    fn remove_name(&mut self, e: Entry<'_>, rec: &Record, keep: impl FnOnce() -> bool) -> Result<bool, Failure> {
        self.delete(e)?;
        self.count(rec.kind, false)?;
        self.touch_dir(e.dir)?;
        if rec.linked && rec.nlink > 1 {
            let now = now_ns();
            let rest = Record { nlink: rec.nlink - 1, ctime_ns: now, ..rec.clone() };
            self.tables.inodes.insert(rest.ino, rest.encode().as_slice())?;
            return Ok(false);
        }
        if rec.linked {
            self.tables.inodes.remove(rec.ino)?;
        }
        self.doom(rec, keep())?;
        self.drop_xattrs(rec.ino)?;
        Ok(true)
    }

    /// A name was added to or removed from directory `dir`: its
    /// modification and change times become now (a PFS-only directory
    /// keeps its PFS times).
    fn touch_dir(&mut self, dir: &str) -> Result<(), Failure> {
        let now = now_ns();
        let Some(e) = Entry::of(dir) else {
            let root = Record { mtime_ns: now, ctime_ns: now, ..self.root()? };
            return self.set_root(&root);
        };
        if let Some(rec) = self.entry(e.dir, e.name)? {
            self.put(e, &Record { mtime_ns: now, ctime_ns: now, ..rec })?;
        }
        Ok(())
    }

    fn delete(&mut self, e: Entry<'_>) -> Result<(), Failure> {
        self.tables.entries.remove((e.dir, e.name))?;
        self.dirty = true;
        self.changed.push((e.path.to_string(), false));
        Ok(())
    }

    fn set_counter(&mut self, key: &str, value: u64) -> Result<(), Failure> {
        self.tables.config.insert(key, value.to_le_bytes().as_slice())?;
        self.dirty = true;
        Ok(())
    }

    fn count(&mut self, kind: FileKind, added: bool) -> Result<(), Failure> {
        let key = if kind == FileKind::Dir { DIRS } else { FILES };
        let n = get_counter(&self.tables.config, key)?;
        self.set_counter(key, if added { n + 1 } else { n.saturating_sub(1) })
    }

    /// Forgets the extended attributes of inode `ino`, removed from the namespace.
    fn drop_xattrs(&mut self, ino: u64) -> Result<(), Failure> {
        self.dirty |= xattrs::remove_all(&mut self.xattrs, ino)?;
        Ok(())
    }

    /// Records that the objects of file `rec` (just removed from the
    /// namespace) are to be deleted; `keep`: not before a `Release` or the
    /// end of the hold lease.
    fn doom(&mut self, rec: &Record, keep: bool) -> Result<(), Failure> {
        if rec.kind != FileKind::File {
            return Ok(());
        }
        let held_until_ns = if keep { now_ns().saturating_add(self.hold_lease.as_nanos() as i64) } else { 0 };
        let doomed = Doomed { ino: rec.ino, layout: rec.layout, held_until_ns };
        self.doomed.insert(rec.ino, doomed.encode().as_slice())?;
        self.dirty = true;
        Ok(())
    }

    fn set_root(&mut self, rec: &Record) -> Result<(), Failure> {
        self.tables.config.insert(ROOT, rec.encode().as_slice())?;
        self.dirty = true;
        self.changed.push(("/".to_string(), false));
        Ok(())
    }

    /// Fills a new namespace: its root, counters and format.
    fn create_namespace(&mut self, root_layout: Layout, shard: Option<Shard>) -> Result<(), Failure> {
        let now = now_ns();
        self.set_root(&Record {
            ino: ROOT_INO,
            kind: FileKind::Dir,
            mode: 0o755,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            uid: CLUSTER_USER,
            gid: CLUSTER_USER,
            nlink: 1,
            rdev: 0,
            linked: false,
            layout: root_layout,
            tier: Tier::Buffer,
            staged_version: 0,
            target: String::new(),
            copy: None,
        })?;
        self.set_counter(NEXT_INO, first_inode_of_a_new_namespace(shard)?)?;
        self.set_counter(SHARD_OF, shard.map_or(0, |s| u64::from(s.index) + 1))?;
        self.set_counter(FILES, 0)?;
        self.set_counter(DIRS, 0)?;
        self.set_counter(DAEMONS, self.daemons as u64)?;
        self.set_counter(FORMAT, FORMAT_VERSION)
    }

    /// A new record with a fresh inode number (`layout` resolved for that
    /// number when `kind` is a file, its first daemon among `local` under
    /// `local` placement).
    fn new_record(&mut self, kind: FileKind, mode: u32, layout: Layout, local: &[u32]) -> Result<Record, Failure> {
        let ino = get_counter(&self.tables.config, NEXT_INO)?;
        self.set_counter(NEXT_INO, ino + 1)?;
        if ino >= get_counter(&self.tables.config, INO_RESERVED)? {
            self.set_counter(INO_RESERVED, ino + INO_RESERVE)?;
            self.durable = true;
        }
        let now = now_ns();
        let layout = if kind == FileKind::File { layout.resolve(self.daemons, ino, local) } else { layout };
        Ok(Record {
            ino,
            kind,
            mode: mode & 0o7777,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            uid: CLUSTER_USER,
            gid: CLUSTER_USER,
            nlink: 1,
            rdev: 0,
            linked: false,
            layout,
            tier: Tier::Buffer,
            staged_version: 0,
            target: String::new(),
            copy: None,
        })
    }

    /// Adds entry `e` (kind `kind`) to directory node `dir`, copying `dir`
    /// into the database first if it is PFS-only.
    fn add(&mut self, e: Entry<'_>, dir: &Node, rec: &Record) -> Result<(), Failure> {
        self.materialize(e.dir, dir)?;
        self.put(e, rec)?;
        self.touch_dir(e.dir)?;
        self.count(rec.kind, true)
    }

    /// Makes sure directory `path` (resolved as `node`) has a database record.
    fn materialize(&mut self, path: &str, node: &Node) -> Result<(), Failure> {
        let Node::Pfs(pfs_dir) = node else { return Ok(()) };
        let Some(e) = Entry::of(path) else { return Ok(()) };
        let parent = self.dir_node(e.dir)?;
        self.materialize(e.dir, &parent)?;
        let mut rec = self.new_record(FileKind::Dir, pfs_dir.mode, Layout::INHERIT, &[])?;
        rec.atime_ns = pfs_dir.mtime_ns;
        rec.mtime_ns = pfs_dir.mtime_ns;
        rec.ctime_ns = pfs_dir.ctime_ns;
        self.put(e, &rec)?;
        self.count(FileKind::Dir, true)
    }

    /// Changes the record of `path` (not the root), bringing a PFS-only
    /// directory into the namespace first.
    fn update(&mut self, path: &str, node: &Node, change: impl FnOnce(&mut Record)) -> Result<Record, Failure> {
        let e = Entry::of(path).ok_or(Errno::EINVAL)?;
        self.materialize(path, node)?;
        let mut rec = self.entry(e.dir, e.name)?.ok_or(Errno::ENOENT)?;
        change(&mut rec);
        self.put(e, &rec)?;
        Ok(rec)
    }

    fn create_file(
        &mut self,
        e: Entry<'_>,
        mode: u32,
        requested: Layout,
        local: &[u32],
        created: bool,
    ) -> Result<Attr, Failure> {
        requested.validate(self.daemons).map_err(|why| Failure::new(Errno::EINVAL, why))?;
        let dir = self.dir_node(e.dir)?;
        let layout = requested.inherit(self.inherited_layout(e.dir)?);
        let mut rec = self.new_record(FileKind::File, mode, layout, local)?;
        dir.pass_group_on(&mut rec);
        self.add(e, &dir, &rec)?;
        Ok(Attr { created, ..rec.attr() })
    }

    /// The record of buffer file `e`, if it still is inode `ino` (ESTALE
    /// saying the file `changed` otherwise).
    fn file_of(&self, e: Entry<'_>, ino: u64, changed: &str) -> Result<Record, Failure> {
        match self.entry(e.dir, e.name)? {
            Some(rec) if rec.kind == FileKind::File && rec.ino == ino => Ok(rec),
            _ => Err(Failure::new(Errno(libc::ESTALE), format!("{} {changed}", e.path))),
        }
    }

    /// Puts buffer file `rec` (at `e`) in `tier`: `Staged` as of contents
    /// `version`, or `Buffer` (its PFS copy is not current).
    fn set_tier(&mut self, e: Entry<'_>, rec: Record, tier: Tier, version: u64) -> Result<Attr, Failure> {
        let rec = match tier {
            Tier::Staged if version != 0 => {
                // The copy as it stands now that it is in place: what every check compares with.
                let node = self
                    .pfs
                    .stat(e.path)?
                    .ok_or_else(|| Failure::new(Errno::ENOENT, format!("{}: no PFS copy to mark staged", e.path)))?;
                Record { tier, staged_version: version, copy: Some(CopyStamp::of(&node)), ..rec }
            }
            Tier::Buffer => Record { tier, staged_version: 0, ..rec },
            _ => {
                return Err(Failure::new(
                    Errno::EINVAL,
                    format!("{}: a file is staged as of a version, made buffer, or evicted (tier {tier:?})", e.path),
                ))
            }
        };
        self.put(e, &rec)?;
        Ok(rec.attr())
    }

    /// Marks staged `rec` (at `path`) `Buffer` when its PFS copy is not the
    /// one stamped (changed or removed outside Surge), logged: the buffer
    /// copy is staged again, the PFS copy never trusted over it. Why, when
    /// it is not. With the PFS root absent nothing is marked (the copy may
    /// well come back with it), but the copy is not current meanwhile.
    fn check_copy(&mut self, e: Entry<'_>, rec: &mut Record) -> Result<Option<String>, Failure> {
        let Some(why) = self.copy_changed(e.path, rec)? else { return Ok(None) };
        if self.pfs.root_present() {
            rec.mark_dirty();
            self.put(e, rec)?;
            crate::logging::log!(
                Warn,
                0,
                "{}: its PFS copy is not the one staged ({why}); the file is in the buffer only again and is \
                 staged again from there",
                e.path
            );
        }
        Ok(Some(why))
    }

    /// Rewrites every record of a namespace of format `from` in this
    /// format (see `FORMAT_VERSION`) and marks it so; the records rewritten.
    fn migrate(&mut self, from: u64) -> Result<u64, Failure> {
        let mut entries = Vec::new();
        for item in self.tables.entries.iter()? {
            let (key, value) = item?;
            let (dir, name) = key.value();
            entries.push((dir.to_string(), name.to_string(), Record::decode_format(value.value(), from)?));
        }
        for (dir, name, rec) in &entries {
            self.tables.entries.insert((dir.as_str(), name.as_str()), rec.encode().as_slice())?;
        }
        let root = match self.tables.config.get(ROOT)? {
            Some(value) => Record::decode_format(value.value(), from)?,
            None => return Err(Failure::new(Errno::EIO, "namespace database has no root record")),
        };
        self.set_root(&root)?;
        self.set_counter(FORMAT, FORMAT_VERSION)?;
        Ok(entries.len() as u64 + 1)
    }

    /// Gives the PFS directories above `path` (the root aside) their
    /// namespace times and modes again after a stage-out put `path` in
    /// place, which moved their mtimes on. A mode without the owner's
    /// rwx keeps it until the directory is settled last
    /// ([`Namespace::stage_dir`]), so that the owner can still stage
    /// other files into it.
    fn settle_ancestors(&self, path: &str) -> Result<(), Failure> {
        let mut dir = path;
        while let Some(e) = Entry::of(dir) {
            dir = e.dir;
            if let Some(Entry { dir: parent, name, .. }) = Entry::of(dir) {
                // Above the anchor of a shard of a namespace spread over the
                // daemons (`crate::shard`): the ancestor's own shard settles it
                // (`stage_dir`). A whole namespace always has every ancestor.
                let Some(rec) = self.entry(parent, name)? else { break };
                let meta = CopyMeta {
                    mode: rec.mode | 0o700,
                    times: rec.times(),
                    xattrs: xattrs::all(&self.xattrs, rec.ino)?,
                };
                self.pfs.settle(dir, &meta)?;
            }
        }
        Ok(())
    }

    /// Renames the keys of every database entry below directory `from` to below `to`.
    fn move_descendants(&mut self, from: &str, to: &str) -> Result<(), Failure> {
        // '0' follows '/': every path below `from` sorts before `from0`.
        let upper = format!("{from}0");
        let mut moved = Vec::new();
        for item in self.tables.entries.range::<(&str, &str)>((from, "")..(upper.as_str(), ""))? {
            let (key, value) = item?;
            let (parent, name) = key.value();
            // The range also holds siblings such as "/a-b" of "/a".
            if path::is_within(parent, from) {
                moved.push((parent.to_string(), name.to_string(), value.value().to_vec()));
            }
        }
        for (parent, name, value) in moved {
            self.tables.entries.remove((parent.as_str(), name.as_str()))?;
            let new_parent = format!("{to}{}", &parent[from.len()..]);
            self.tables.entries.insert((new_parent.as_str(), name.as_str()), value.as_slice())?;
        }
        self.dirty = true;
        self.changed.extend([(from.to_string(), true), (to.to_string(), true)]);
        Ok(())
    }
}

/// What an `Open` must do, decided from the namespace as it is.
enum OpenPlan {
    Existing(Attr),
    Create,
    /// Shadow a PFS-only file with a new, empty buffer file (open with O_TRUNC).
    Shadow(PfsNode),
    /// Writing a staged file makes its PFS copy stale.
    BackToBuffer(Record),
    /// Replacing a lost file's contents (`O_TRUNC`) ends its loss.
    Replaced(Record),
}

fn plan_open(v: &impl View, path: &str, flags: u32) -> Result<OpenPlan, Failure> {
    let has = |flag: u32| flags & flag != 0;
    let existing = match Entry::of(path) {
        None => Some(Node::Root(v.root()?)),
        Some(e) => {
            let dir = v.dir_node(e.dir)?;
            v.lookup_in(&dir, e)?
        }
    };
    let Some(node) = existing else {
        return if !has(open_flags::CREATE) {
            Err(Errno::ENOENT.into())
        } else if has(open_flags::DIRECTORY) {
            Err(Failure::new(Errno::EINVAL, "O_CREAT with O_DIRECTORY"))
        } else {
            Ok(OpenPlan::Create)
        };
    };
    if has(open_flags::CREATE) && has(open_flags::EXCL) {
        return Err(Errno::EEXIST.into());
    }
    v.followed(path, &node)?;
    if node.is_dir() {
        return if has(open_flags::WRITE) || has(open_flags::TRUNC) {
            Err(Errno::EISDIR.into())
        } else {
            Ok(OpenPlan::Existing(node.attr()))
        };
    }
    if has(open_flags::DIRECTORY) {
        return Err(Errno::ENOTDIR.into());
    }
    match node {
        Node::Db(rec) if has(open_flags::WRITE) && rec.tier == Tier::Staged => Ok(OpenPlan::BackToBuffer(rec)),
        // Replacing the contents is the way back; anything else would read or keep what is missing.
        Node::Db(rec) if rec.tier == Tier::Lost && has(open_flags::WRITE) && has(open_flags::TRUNC) => {
            Ok(OpenPlan::Replaced(rec))
        }
        Node::Db(rec) if rec.tier == Tier::Lost => Err(Failure::new(
            Errno::EIO,
            format!(
                "{path}: data lost on daemon {}, whose store was lost (`surge ls -l` shows the file as lost): \
                 remove it (surge rm) or replace it (open with O_TRUNC), and restore it from its PFS copy or its source",
                rec.staged_version
            ),
        )),
        Node::Pfs(pfs) if has(open_flags::WRITE) => {
            if has(open_flags::TRUNC) {
                Ok(OpenPlan::Shadow(pfs))
            } else {
                // Its bytes are on the PFS only: modifying them in place would
                // need a copy into the buffer first.
                Err(Failure::new(
                    Errno::EROFS,
                    format!("{path} is on the PFS only: open it with O_TRUNC to replace it, or stage it in first"),
                ))
            }
        }
        other => Ok(OpenPlan::Existing(other.attr())),
    }
}

impl Drop for Namespace {
    /// A daemon that stops makes its last changes durable.
    fn drop(&mut self) {
        if let Err(f) = self.sync() {
            crate::logging::log!(Error, 0, "the namespace's last changes may be lost: {f}");
        }
    }
}

/// How a write transaction is committed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// Durable before the change is acknowledged.
    Durable,
    /// With the others of the commit interval (durable at once when it is 0).
    Grouped,
}

pub struct Namespace {
    db: NamespaceDb,
    /// Where the database lives: new names stop before it is full.
    device: Device,
    pfs: Arc<Pfs>,
    daemons: u32,
    hold_lease: Duration,
    commits: GroupCommit,
    /// Every committed change, for the clients' caches.
    changes: ChangeFeed,
}

/// Group commit: changes committed without durability (redb's
/// `Durability::None`: written, not flushed; a crash rolls the database
/// back to its last durable commit), then made durable all at once by one
/// durable commit ([`Namespace::sync`]): at the end of the commit interval
/// (`crate::group_commit`) or when a client asks (`Sync`). redb writes one
/// transaction at a time, so a durable commit covers every change
/// committed before it began.
#[derive(Default)]
struct GroupCommit {
    /// Longest time a change waits to be durable; zero: no wait (every
    /// change is a durable commit).
    interval: Duration,
    /// Changes committed without durability so far.
    made: AtomicU64,
    /// How many of `made` a durable commit has covered.
    durable: AtomicU64,
    /// Held while a durable commit of `sync` is under way, so that syncs
    /// asked meanwhile wait for it and find their changes covered.
    syncing: Mutex<()>,
}

impl Namespace {
    /// Opens (creating on first use, with `root_layout` as the root
    /// directory's default) the namespace database at `db_path`.
    #[cfg(test)]
    pub fn load(db_path: &Path, pfs: Arc<Pfs>, daemons: u32, root_layout: Layout) -> Result<Namespace, Failure> {
        Self::load_shard(db_path, pfs, daemons, root_layout, None)
    }

    /// `load`, for shard `shard` of a namespace spread over the daemons
    /// (`None`: the whole namespace).
    pub fn load_shard(
        db_path: &Path,
        pfs: Arc<Pfs>,
        daemons: u32,
        root_layout: Layout,
        shard: Option<Shard>,
    ) -> Result<Namespace, Failure> {
        let device = Device::holding(db_path.parent().unwrap_or(Path::new(".")));
        let ns = Namespace {
            db: NamespaceDb::open(db_path)?,
            device,
            pfs,
            daemons,
            hold_lease: HOLD_LEASE,
            commits: GroupCommit::default(),
            changes: ChangeFeed::default(),
        };
        ns.write(|w| {
            // Commits the tables (`doomed`, `stage_temps` and `xattrs` are new in namespaces made before them).
            w.dirty = true;
            let format = w.config.get(FORMAT)?.map(|v| v.value().to_vec());
            let older =
                [FORMAT_UNSTAMPED, FORMAT_UNOWNED].into_iter().find(|f| format == Some(f.to_le_bytes().to_vec()));
            match format {
                Some(_) if older.is_some() => {
                    let from = older.expect("matched above");
                    let records = w.migrate(from)?;
                    crate::logging::log!(
                        Info,
                        0,
                        "namespace {}: format {from} rewritten as {FORMAT_VERSION} ({records} records; owners are \
                         the cluster's user, access times the modification times){}",
                        db_path.display(),
                        if from == FORMAT_UNSTAMPED {
                            "; its staged files are staged again (their PFS copies were never stamped)"
                        } else {
                            ""
                        }
                    );
                }
                Some(v) if v == FORMAT_VERSION.to_le_bytes() => {}
                Some(_) => {
                    return Err(Failure::new(
                        Errno::EIO,
                        format!("namespace database format is not version {FORMAT_VERSION}"),
                    ))
                }
                None => return w.create_namespace(root_layout, shard),
            }
            // Numbers a crash may have lost with their creates are never handed out again.
            let reserved = get_counter(&w.tables.config, INO_RESERVED)?;
            if get_counter(&w.tables.config, NEXT_INO)? < reserved {
                w.set_counter(NEXT_INO, reserved)?;
            }
            let shard_of = get_counter(&w.tables.config, SHARD_OF)?;
            if shard_of != shard.map_or(0, |s| u64::from(s.index) + 1) {
                let was = if shard_of == 0 {
                    "whole (--namespace one)".to_string()
                } else {
                    format!("shard {}", shard_of - 1)
                };
                return Err(Failure::new(
                    Errno::EINVAL,
                    format!(
                        "the namespace in {} is {was}, not {}: start the cluster again with the --namespace it \
                         was made with, or use a new buffer directory",
                        db_path.display(),
                        shard.map_or("whole (--namespace one)".to_string(), |s| format!("shard {}", s.index)),
                    ),
                ));
            }
            let made_for = get_counter(&w.tables.config, DAEMONS)?;
            if made_for != daemons as u64 {
                return Err(Failure::new(
                    Errno::EINVAL,
                    format!(
                        "the namespace in {} was made for a cluster of {made_for} daemons, not {daemons}: \
                         start the cluster again with {made_for} daemons in all, or use a new buffer directory",
                        db_path.display()
                    ),
                ));
            }
            Ok(())
        })?;
        Ok(ns)
    }

    fn read<T>(&self, f: impl FnOnce(&Reader<'_>) -> Result<T, Failure>) -> Result<T, Failure> {
        let (_db, txn) = self.db.begin(Database::begin_read)?;
        f(&self.reader(&txn)?)
    }

    /// The namespace's tables in read transaction `txn`.
    fn reader(&self, txn: &ReadTransaction) -> Result<Reader<'_>, Failure> {
        Ok(Reader {
            entries: txn.open_table(ENTRIES)?,
            config: txn.open_table(CONFIG)?,
            inodes: txn.open_table(INODES)?,
            pfs: &self.pfs,
        })
    }

    /// Makes changes durable `interval` after they are made at the latest
    /// (0: every change is durable when acknowledged, as is the default).
    pub fn with_commit_interval(mut self, interval: Duration) -> Namespace {
        self.commits.interval = interval;
        self
    }

    /// The longest time a change waits to be made durable.
    pub fn commit_interval(&self) -> Duration {
        self.commits.interval
    }

    /// Makes every change committed so far durable (one durable commit for
    /// all of them, shared with the syncs asked meanwhile); nothing to do
    /// when they are already.
    pub fn sync(&self) -> Result<(), Failure> {
        let wanted = self.commits.made.load(Ordering::Acquire);
        if self.commits.durable.load(Ordering::Acquire) >= wanted {
            return Ok(());
        }
        let _syncing = lock(&self.commits.syncing);
        if self.commits.durable.load(Ordering::Acquire) >= wanted {
            return Ok(());
        }
        let (_db, txn) = self.db.begin(Database::begin_write)?;
        let covered = self.commits.made.load(Ordering::Acquire);
        txn.commit()?;
        self.commits.durable.fetch_max(covered, Ordering::AcqRel);
        Ok(())
    }

    /// Runs `f` in a write transaction, committed durably if `f` changed
    /// anything. An error drops the transaction, which aborts it.
    fn write<T>(&self, f: impl FnOnce(&mut Writer<'_, '_>) -> Result<T, Failure>) -> Result<T, Failure> {
        self.write_as(Commit::Durable, f)
    }

    /// Runs `f` as [`Namespace::write`] does, the commit grouped with the
    /// others of the commit interval (see [`GroupCommit`]).
    fn write_grouped<T>(&self, f: impl FnOnce(&mut Writer<'_, '_>) -> Result<T, Failure>) -> Result<T, Failure> {
        self.write_as(Commit::Grouped, f)
    }

    fn write_as<T>(
        &self,
        commit: Commit,
        f: impl FnOnce(&mut Writer<'_, '_>) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let (_db, mut txn) = self.db.begin(Database::begin_write)?;
        // Every commit made before this one began: a durable commit covers them.
        let covered = self.commits.made.load(Ordering::Acquire);
        let (out, dirty, durable) = {
            let mut w = Writer {
                tables: Tables {
                    entries: txn.open_table(ENTRIES)?,
                    config: txn.open_table(CONFIG)?,
                    inodes: txn.open_table(INODES)?,
                    pfs: &self.pfs,
                },
                doomed: txn.open_table(DOOMED)?,
                stage_temps: txn.open_table(STAGE_TEMPS)?,
                xattrs: txn.open_table(XATTRS)?,
                hold_lease: self.hold_lease,
                daemons: self.daemons,
                dirty: false,
                durable: false,
                changed: Vec::new(),
            };
            let out = f(&mut w)?;
            (out, w.dirty.then_some(w.changed), w.durable)
        };
        let Some(changed) = dirty else {
            txn.abort()?;
            return Ok(out);
        };
        if commit == Commit::Grouped && !durable && !self.commits.interval.is_zero() {
            txn.set_durability(Durability::None);
            txn.commit()?;
            self.commits.made.fetch_add(1, Ordering::AcqRel);
        } else {
            txn.commit()?;
            self.commits.durable.fetch_max(covered, Ordering::AcqRel);
        }
        // Visible from here on (durable or not): the clients' caches must drop it now.
        self.changes.publish(changed);
        Ok(out)
    }

    /// The feed of committed changes (`Watch`).
    pub fn changes(&self) -> &ChangeFeed {
        &self.changes
    }

    /// Files and directories in the database.
    pub fn counts(&self) -> Result<(u64, u64), Failure> {
        self.read(|r| Ok((get_counter(&r.config, FILES)?, get_counter(&r.config, DIRS)?)))
    }

    /// [`Namespace::open_from`] by a client on no daemon's node.
    #[cfg(test)]
    pub fn open(&self, path: &str, flags: u32, mode: u32, layout: Layout) -> Result<Attr, Failure> {
        self.open_from(path, flags, mode, layout, &[])
    }

    /// Opens (and with `CREATE` makes) `path` for a client on the node of
    /// daemons `local`: a file it creates under `local` placement starts on
    /// one of them.
    pub fn open_from(&self, path: &str, flags: u32, mode: u32, layout: Layout, local: &[u32]) -> Result<Attr, Failure> {
        let path = canonical(path)?;
        // Most opens change nothing: decide in a read transaction first (no commit, no fsync).
        // An exclusive create changes the namespace or fails: the write transaction decides alone
        // (one read transaction and one PFS lookup less per create).
        let exclusive_create = flags & (open_flags::CREATE | open_flags::EXCL) == open_flags::CREATE | open_flags::EXCL;
        if !exclusive_create {
            if let OpenPlan::Existing(attr) = self.read(|r| plan_open(r, &path, flags))? {
                return self.current(&path, attr);
            }
        }
        self.write_grouped(|w| {
            let plan = plan_open(&**w, &path, flags)?;
            let Some(e) = Entry::of(&path) else {
                return match plan {
                    OpenPlan::Existing(attr) => Ok(attr),
                    _ => Err(Errno::EISDIR.into()),
                };
            };
            match plan {
                OpenPlan::Existing(attr) => Ok(attr),
                OpenPlan::Create => {
                    self.device.check_new_name()?;
                    w.create_file(e, mode, layout, local, true)
                }
                OpenPlan::Shadow(pfs) => {
                    self.device.check_new_name()?;
                    w.create_file(e, pfs.mode, layout, local, false)
                }
                OpenPlan::BackToBuffer(mut rec) => {
                    rec.mark_dirty();
                    w.put(e, &rec)?;
                    Ok(rec.attr())
                }
                OpenPlan::Replaced(rec) => {
                    let rec = Record { tier: Tier::Buffer, staged_version: 0, ..rec };
                    w.put(e, &rec)?;
                    Ok(rec.attr())
                }
            }
        })
    }

    /// Creates `path` on the PFS instead of the buffer, for a checkpoint the
    /// data manager places there directly: only when `Open` with `flags`
    /// would create a new file (`None` otherwise: the name exists). The
    /// name then shows the PFS file, tier `Pfs`.
    pub fn create_on_pfs(&self, path: &str, flags: u32, mode: u32) -> Result<Option<Attr>, Failure> {
        let path = canonical(path)?;
        let e = Entry::of(&path).ok_or(Errno::EISDIR)?;
        // A write transaction, committing nothing: no other name is made meanwhile.
        self.write(|w| match plan_open(&**w, e.path, flags)? {
            OpenPlan::Create => Ok(Some(Attr { created: true, ..Node::Pfs(w.pfs.create_file(e.path, mode)?).attr() })),
            _ => Ok(None),
        })
    }

    pub fn stat(&self, path: &str) -> Result<Attr, Failure> {
        let path = canonical(path)?;
        let attr = self.read(|r| Ok(r.lookup(&path)?.attr()))?;
        self.current(&path, attr)
    }

    /// `attr`, which a read of `path` gave, with its staged mark checked
    /// against the PFS copy (`Writer::check_copy`): `Buffer` when the copy
    /// is not the one staged.
    fn current(&self, path: &str, attr: Attr) -> Result<Attr, Failure> {
        if attr.tier != Tier::Staged {
            return Ok(attr);
        }
        let Some(e) = Entry::of(path) else { return Ok(attr) };
        let changed = self.read(|r| match r.entry(e.dir, e.name)? {
            Some(rec) if rec.ino == attr.ino => Ok(r.copy_changed(path, &rec)?.is_some()),
            _ => Ok(false),
        })?;
        if !changed {
            return Ok(attr);
        }
        self.write(|w| {
            let Some(mut rec) = w.entry(e.dir, e.name)? else { return Ok(w.lookup(path)?.attr()) };
            let changed = w.check_copy(e, &mut rec)?.is_some();
            let mut attr = rec.attr();
            if changed {
                (attr.tier, attr.staged_version) = (Tier::Buffer, 0);
            }
            Ok(attr)
        })
    }

    /// Refuses a read (`PfsRead`) of `now`, the PFS file at `path`, when
    /// the namespace has `path` staged and `now` is not the copy staged:
    /// a client reads a staged file there while a daemon of its stripes
    /// is down, and must not be served a copy changed outside Surge.
    pub fn check_copy_read(&self, path: &str, now: &PfsNode) -> Result<(), Failure> {
        let path = canonical(path)?;
        let Some(e) = Entry::of(&path) else { return Ok(()) };
        let rec = self.read(|r| r.entry(e.dir, e.name))?;
        if rec.as_ref().is_some_and(|rec| rec.linked) {
            return Err(Failure::new(
                Errno::EIO,
                format!(
                    "{path} has several names (hard links): its PFS copy is not served (a write through another \
                     name is not in it); the file is readable once the daemons holding it answer"
                ),
            ));
        }
        let Some(why) =
            rec.and_then(|rec| rec.copy.filter(|_| rec.tier == Tier::Staged)).and_then(|c| c.changed(Some(now)))
        else {
            return Ok(());
        };
        // Marks the file `Buffer` and logs it, as any look at it does.
        self.stat(&path)?;
        Err(Failure::new(
            Errno::EIO,
            format!(
                "{path}: its PFS copy is not the one staged ({why}): not served; the file's contents are its \
                 buffer copy, readable once the daemons holding it answer"
            ),
        ))
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<Attr, Failure> {
        self.add_name(path, FileKind::Dir, mode, |_| {})
    }

    /// Creates the symbolic link `path` holding `target`, with the rules of
    /// symlink(2) (see `surge_proto::link::check_target`).
    pub fn symlink(&self, path: &str, target: &str) -> Result<Attr, Failure> {
        link::check_target(target)?;
        self.add_name(path, FileKind::Symlink, 0o777, |rec| rec.target = target.to_string())
    }

    /// Creates the FIFO, socket or device node `path` (mknod(2)), owned
    /// by `uid`:`gid`; a node holds no data.
    pub fn mknod(&self, path: &str, kind: FileKind, mode: u32, rdev: u64, uid: u32, gid: u32) -> Result<Attr, Failure> {
        if !matches!(kind, FileKind::Fifo | FileKind::CharDevice | FileKind::BlockDevice | FileKind::Socket) {
            return Err(Failure::new(
                Errno::EINVAL,
                format!("mknod makes FIFOs, sockets and devices, not {kind:?} (open and mkdir make those)"),
            ));
        }
        let is_device = matches!(kind, FileKind::CharDevice | FileKind::BlockDevice);
        self.add_name(path, kind, mode, |rec| {
            (rec.uid, rec.gid) = (uid, gid);
            rec.rdev = if is_device { rdev } else { 0 };
        })
    }

    /// Adds the new directory, link or node `path` (EEXIST if the name
    /// exists), its record completed by `fill`.
    fn add_name(&self, path: &str, kind: FileKind, mode: u32, fill: impl FnOnce(&mut Record)) -> Result<Attr, Failure> {
        let path = canonical(path)?;
        let e = Entry::of(&path).ok_or(Errno::EEXIST)?;
        self.write_grouped(|w| {
            let dir = w.dir_node(e.dir)?;
            if w.lookup_in(&dir, e)?.is_some() {
                return Err(Errno::EEXIST.into());
            }
            self.device.check_new_name()?;
            let mut rec = w.new_record(kind, mode, Layout::INHERIT, &[])?;
            fill(&mut rec);
            dir.pass_group_on(&mut rec);
            w.add(e, &dir, &rec)?;
            Ok(Attr { created: true, ..rec.attr() })
        })
    }

    /// Gives the file at `from` the further name `to` (link(2)): both
    /// names are one inode from then on (`Record::linked`). The last
    /// component of `from` is not followed (Linux's link(2)). A directory
    /// is refused (EPERM), as is a file only on the PFS (EXDEV: its bytes
    /// are not Surge's to give another name).
    pub fn link(&self, from: &str, to: &str) -> Result<Attr, Failure> {
        let (from, to) = (canonical(from)?, canonical(to)?);
        let src_e = Entry::of(&from).ok_or(Errno(libc::EPERM))?;
        let dst_e = Entry::of(&to).ok_or(Errno::EEXIST)?;
        self.write_grouped(|w| {
            let rec = match w.lookup(&from)? {
                node if node.is_dir() => return Err(Errno(libc::EPERM).into()),
                Node::Db(rec) => rec,
                _ => {
                    return Err(Failure::new(
                        Errno(libc::EXDEV),
                        format!("{from} is only on the PFS: copy it into Surge to link it"),
                    ))
                }
            };
            let dir = w.dir_node(dst_e.dir)?;
            if w.lookup_in(&dir, dst_e)?.is_some() {
                return Err(Errno::EEXIST.into());
            }
            if rec.nlink == u32::MAX {
                return Err(Errno(libc::EMLINK).into());
            }
            self.device.check_new_name()?;
            let rec = Record { nlink: rec.nlink + 1, linked: true, ctime_ns: now_ns(), ..rec };
            w.put(src_e, &rec)?;
            // The new name has no PFS copy yet.
            let new_name = Record { tier: Tier::Buffer, staged_version: 0, copy: None, ..rec };
            w.add(dst_e, &dir, &new_name)?;
            Ok(new_name.attr())
        })
    }

    /// The target of the symbolic link `path`; EINVAL if it is not one.
    pub fn readlink(&self, path: &str) -> Result<String, Failure> {
        let path = canonical(path)?;
        self.read(|r| r.target(&path, &r.lookup(&path)?))
    }

    /// Gives directory `path`, whose name is on another shard of a
    /// namespace spread over the daemons, its anchor here: a record the
    /// creates in it find (`crate::shard`). Not counted: the name's shard
    /// counts the directory. `created` says whether it was made now.
    pub fn anchor(&self, path: &str, mode: u32) -> Result<Attr, Failure> {
        let path = canonical(path)?;
        let e = Entry::of(&path).ok_or(Errno::EEXIST)?;
        self.write_grouped(|w| match w.entry(e.dir, e.name)? {
            Some(rec) if rec.kind == FileKind::Dir => Ok(rec.attr()),
            Some(_) => Err(Failure::new(Errno::EEXIST, format!("{path} is anchored here as something else"))),
            None => {
                let rec = w.new_record(FileKind::Dir, mode, Layout::INHERIT, &[])?;
                w.put(e, &rec)?;
                Ok(Attr { created: true, ..rec.attr() })
            }
        })
    }

    /// Removes directory `path`'s anchor (see `anchor`) if nothing is in
    /// the directory here (ENOTEMPTY otherwise); true if there was one.
    pub fn unanchor(&self, path: &str) -> Result<bool, Failure> {
        let path = canonical(path)?;
        let e = Entry::of(&path).ok_or_else(|| Failure::new(Errno::EBUSY, "the root directory cannot be removed"))?;
        self.write_grouped(|w| {
            let Some(rec) = w.entry(e.dir, e.name)? else { return Ok(false) };
            if rec.kind != FileKind::Dir {
                return Err(Errno::ENOTDIR.into());
            }
            if !w.children(&path, "", 1)?.is_empty() {
                return Err(Errno::ENOTEMPTY.into());
            }
            w.delete(e)?;
            w.drop_xattrs(rec.ino)?;
            Ok(true)
        })
    }

    /// Removes an empty directory, and its PFS counterpart when there is one.
    pub fn rmdir(&self, path: &str) -> Result<(), Failure> {
        let path = canonical(path)?;
        let e = Entry::of(&path).ok_or_else(|| Failure::new(Errno::EBUSY, "the root directory cannot be removed"))?;
        self.write_grouped(|w| {
            let node = w.lookup(&path)?;
            if !node.is_dir() {
                return Err(Errno::ENOTDIR.into());
            }
            if !w.is_empty_dir(&path)? {
                return Err(Errno::ENOTEMPTY.into());
            }
            // Stage temps no stage-out records (a daemon 0 killed between
            // creating one and recording it, or of a version that did not
            // record them) would keep the PFS directory from going.
            for temp in w.pfs.stage_temps_in(&path, None)? {
                if w.stage_temps.get(temp.as_str())?.is_none() {
                    w.pfs.remove_stage_temp(&temp)?;
                }
            }
            // The PFS first: should the commit not happen, nothing is lost.
            w.pfs.remove_dir(&path)?;
            if let Node::Db(rec) = node {
                w.delete(e)?;
                w.count(FileKind::Dir, false)?;
                w.touch_dir(e.dir)?;
                w.drop_xattrs(rec.ino)?;
            }
            Ok(())
        })
    }

    /// Removes a file, and its PFS copy when there is one, and dooms its
    /// objects (kept, when `keep` says so, until a `Release`); returns it.
    pub fn unlink(&self, path: &str, keep: impl KeepRemoved) -> Result<Removed, Failure> {
        let path = canonical(path)?;
        let e = Entry::of(&path).ok_or(Errno::EISDIR)?;
        self.write_grouped(|w| {
            let node = w.lookup(&path)?;
            if node.is_dir() {
                return Err(Errno::EISDIR.into());
            }
            // Any PFS copy goes too, even under a buffer file shadowing it:
            // left alone it would reappear as the file.
            w.pfs.remove_file(&path)?;
            if let Node::Db(rec) = &node {
                if !w.remove_name(e, rec, || keep.keep(&path, rec.ino))? {
                    // Other names keep the inode: nothing for the caller to keep.
                    return Ok(Removed(None));
                }
            }
            Ok(Removed(Some(node.attr())))
        })
    }

    /// Renames `from` to `to` with rename(2)'s rules, moving the PFS copy
    /// along; returns the file it replaced, if any, whose objects are
    /// doomed as by `unlink`.
    pub fn rename(&self, from: &str, to: &str, keep: impl KeepRemoved) -> Result<Removed, Failure> {
        let (from, to) = (canonical(from)?, canonical(to)?);
        let (Some(src_e), Some(dst_e)) = (Entry::of(&from), Entry::of(&to)) else {
            return Err(Failure::new(Errno::EBUSY, "the root directory cannot be renamed or replaced"));
        };
        self.write_grouped(|w| {
            let mut src = w.lookup(&from)?;
            let dst_dir = w.dir_node(dst_e.dir)?;
            let dst = w.lookup_in(&dst_dir, dst_e)?;
            if from == to {
                return Ok(Removed(None));
            }
            // Two names of one inode: rename(2) does nothing.
            if let (Node::Db(s), Some(Node::Db(d))) = (&src, &dst) {
                if s.ino == d.ino {
                    return Ok(Removed(None));
                }
            }
            if src.is_dir() && path::is_within(&to, &from) {
                return Err(Failure::new(Errno::EINVAL, format!("cannot move {from} into itself")));
            }
            let mut replaced = match &dst {
                None => None,
                Some(d) => match (src.is_dir(), d.is_dir()) {
                    (true, false) => return Err(Errno::ENOTDIR.into()),
                    (false, true) => return Err(Errno::EISDIR.into()),
                    (true, true) if !w.is_empty_dir(&to)? => return Err(Errno::ENOTEMPTY.into()),
                    (true, true) => None,
                    (false, false) => Some(d.attr()),
                },
            };
            // A copy changed outside Surge must not be stamped anew below.
            if let Node::Db(rec) = &mut src {
                w.check_copy(src_e, rec)?;
            }
            // The PFS first (rename(2) replaces its target there too); a
            // crash before the commit then leaves the database as it was.
            if w.pfs.has_entry(&from)? {
                w.pfs.rename(&from, &to)?;
                // Rolled back alone, the PFS entry would show under both names.
                w.durable = true;
            } else if let Some(d) = &dst {
                if d.is_dir() {
                    w.pfs.remove_dir(&to)?;
                } else {
                    w.pfs.remove_file(&to)?;
                }
            }
            if let Some(Node::Db(old)) = &dst {
                if !w.remove_name(dst_e, old, || keep.keep(&to, old.ino))? {
                    replaced = None;
                }
            }
            if let Node::Db(mut rec) = src {
                w.delete(src_e)?;
                w.touch_dir(src_e.dir)?;
                w.materialize(dst_e.dir, &dst_dir)?;
                w.touch_dir(dst_e.dir)?;
                rec.ctime_ns = now_ns();
                if rec.tier == Tier::Staged {
                    // rename(2) moved the copy's ctime on: stamped as it is now.
                    match w.pfs.stat(&to)? {
                        Some(node) => rec.copy = Some(CopyStamp::of(&node)),
                        None => rec.mark_dirty(),
                    }
                }
                w.put(dst_e, &rec)?;
                if rec.kind == FileKind::Dir {
                    w.move_descendants(&from, &to)?;
                }
            }
            Ok(Removed(replaced))
        })
    }

    /// Up to `max` (at most [`READDIR_MAX`]; 0 means that) entries of
    /// directory `path` named after `after`, in name order: the database's
    /// and the PFS's, the database's winning on equal names.
    pub fn readdir(&self, path: &str, after: &str, max: u32) -> Result<ReaddirReply, Failure> {
        let path = canonical(path)?;
        let max = if max == 0 { READDIR_MAX } else { max.min(READDIR_MAX) } as usize;
        self.read(|r| {
            r.dir_node(&path)?;
            // One more than a page: enough to know whether the database has more.
            let mut db = r.children(&path, after, max + 1)?.into_iter().peekable();
            let mut pfs = r.pfs.list(&path)?.into_iter().filter(|p| p.name.as_str() > after).peekable();
            let mut entries = Vec::new();
            while entries.len() < max {
                let order = match (db.peek(), pfs.peek()) {
                    (None, None) => break,
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (Some((name, _)), Some(p)) => name.as_str().cmp(p.name.as_str()),
                };
                if order == std::cmp::Ordering::Equal {
                    pfs.next(); // shadowed by the database entry
                }
                let entry = if order == std::cmp::Ordering::Greater {
                    pfs.next().map(|p| DirEntry { name: p.name, kind: p.kind, ino: p.ino | PFS_INO_BIT })
                } else {
                    db.next().map(|(name, rec)| DirEntry { name, kind: rec.kind, ino: rec.ino })
                };
                entries.extend(entry);
            }
            let end = db.peek().is_none() && pfs.peek().is_none();
            Ok(ReaddirReply { entries, end })
        })
    }

    /// Sets the default layout of a directory's new files (a file's layout
    /// is fixed when it is created).
    pub fn set_layout(&self, path: &str, layout: Layout) -> Result<Attr, Failure> {
        let path = canonical(path)?;
        layout.validate(self.daemons).map_err(|why| Failure::new(Errno::EINVAL, why))?;
        self.write_grouped(|w| match w.lookup_followed(&path)? {
            Node::Root(mut rec) => {
                // The root's default stays complete.
                rec.layout = layout.inherit(Layout::ROOT_DEFAULT);
                w.set_root(&rec)?;
                Ok(rec.attr())
            }
            node if !node.is_dir() => Err(Failure::new(
                Errno::EINVAL,
                format!("{path} is a file: a file's layout is fixed when it is created"),
            )),
            node => Ok(w.update(&path, &node, |rec| rec.layout = layout)?.attr()),
        })
    }

    /// chmod, chown and utimens: sets the permission bits, the owner,
    /// the group and the access and modification times (`KEEP_MODE`,
    /// `KEEP_ID`, `KEEP_MTIME` leave one as it is). Who may is the
    /// caller's to check (the kernel does, for the mount). A PFS-only
    /// directory is brought into the namespace first; a PFS-only file is
    /// refused, as the PFS copy is never changed in place. A link is not
    /// followed: its times and owner change (`AT_SYMLINK_NOFOLLOW`,
    /// lchown), its mode cannot.
    pub fn set_attr(&self, path: &str, change: &AttrChange) -> Result<Attr, Failure> {
        let path = canonical(path)?;
        let AttrChange { mode, uid, gid, atime_ns, mtime_ns } = *change;
        let apply = |rec: &mut Record| {
            if mode != KEEP_MODE {
                rec.mode = mode & 0o7777;
            }
            if uid != KEEP_ID {
                rec.uid = uid;
            }
            if gid != KEEP_ID {
                rec.gid = gid;
            }
            if atime_ns != KEEP_MTIME {
                rec.atime_ns = atime_ns;
            }
            if mtime_ns != KEEP_MTIME {
                rec.mtime_ns = mtime_ns;
            }
            rec.ctime_ns = now_ns();
            // The PFS copy keeps the attributes it was staged with.
            rec.mark_dirty();
        };
        self.write_grouped(|w| match w.lookup(&path)? {
            // The kernel's rule: a link's own mode cannot change (lchmod).
            Node::Db(rec) if rec.kind == FileKind::Symlink && mode != KEEP_MODE => Err(Failure::new(
                Errno(libc::EOPNOTSUPP),
                format!("{path} is a symbolic link: its mode cannot change (follow it to change its target's)"),
            )),
            Node::Root(mut rec) => {
                apply(&mut rec);
                w.set_root(&rec)?;
                Ok(rec.attr())
            }
            Node::Pfs(pfs) if pfs.kind != FileKind::Dir => Err(Failure::new(
                Errno::EROFS,
                format!("{path} is only on the PFS: write to it first to bring it into the buffer"),
            )),
            node => Ok(w.update(&path, &node, apply)?.attr()),
        })
    }

    /// Starts a stage-out of buffer file `path` (`size` bytes): creates the
    /// temp file its copy is assembled in and returns the temp's path. A
    /// symbolic link is staged out at once (`stage_link`): the temp's path
    /// is then empty.
    pub fn stage_begin(&self, path: &str, size: u64) -> Result<String, Failure> {
        let path = canonical(path)?;
        if !self.pfs.root_present() {
            // Not ENOENT: the file is there, the PFS is not (yet).
            return Err(Failure::new(
                Errno::EIO,
                format!(
                    "cannot stage out {path}: the PFS root is not there (not mounted?); stage it out again once it \
                     is (the file stays in the buffer)"
                ),
            ));
        }
        let rec = self.read(|r| match r.lookup(&path)? {
            Node::Db(rec) if rec.tier == Tier::Lost => Err(Failure::new(
                Errno::EIO,
                format!(
                    "cannot stage out {path}: its data was lost on daemon {} (its store was lost); remove it or \
                     rewrite it",
                    rec.staged_version
                ),
            )),
            Node::Db(rec) if matches!(rec.kind, FileKind::File | FileKind::Symlink) => Ok(rec),
            node if node.is_dir() => Err(Errno::EISDIR.into()),
            Node::Db(rec) => Err(Failure::new(
                Errno::EINVAL,
                format!("{path} is a {:?} node: it holds no data and is not staged out", rec.kind),
            )),
            _ => Err(Failure::new(Errno::EINVAL, format!("{path} is on the PFS only: nothing to stage out"))),
        })?;
        if rec.kind == FileKind::Symlink {
            self.stage_link(&path, rec.ino)?;
            return Ok(String::new());
        }
        let temp = self.pfs.create_stage_temp(&path, rec.ino, size).map_err(|errno| {
            let why = match errno.0 {
                libc::ENOTDIR => "something that is not a directory stands in the way on the PFS; move it away, then ",
                libc::ENOSPC | libc::EDQUOT => "the PFS is full; free space there, then ",
                libc::EACCES | libc::EPERM | libc::EROFS => "the PFS refuses writes there; fix that, then ",
                _ => "",
            };
            let name = errno.name();
            Failure::new(
                errno,
                format!(
                    "cannot stage out {path}: its copy cannot be made on the PFS ({name}); {why}stage it out again \
                     (the file stays in the buffer)"
                ),
            )
        })?;
        let recorded = self.write(|w| {
            w.stage_temps.insert(temp.as_str(), rec.ino)?;
            w.dirty = true;
            Ok(())
        });
        if let Err(failure) = recorded {
            // Unrecorded, nothing would ever remove it.
            let _ = self.pfs.remove_stage_temp(&temp);
            return Err(failure);
        }
        Ok(temp)
    }

    /// Puts link `path` (inode `ino`) in place on the PFS with its target,
    /// replacing what the PFS had there (never following it), and marks
    /// the link staged.
    fn stage_link(&self, path: &str, ino: u64) -> Result<Attr, Failure> {
        let e = Entry::of(path).ok_or(Errno::EISDIR)?;
        self.write(|w| match w.entry(e.dir, e.name)? {
            Some(rec) if rec.kind == FileKind::Symlink && rec.ino == ino => {
                w.pfs.put_link(path, ino, &rec.target, &rec.times())?;
                w.settle_ancestors(path)?;
                w.set_tier(e, rec, Tier::Staged, LINK_STAGED_VERSION)
            }
            _ => Err(Failure::new(Errno(libc::ESTALE), format!("{path} changed during stage-out"))),
        })
    }

    /// Finishes a stage-out: puts the verified temp in place as the PFS copy
    /// of `path`, with the file's mode and times (its mtime from the
    /// record and `objects_mtime_ns`, see [`file_mtime`]), gives the
    /// directories above their times back, and marks the file staged as
    /// of contents `version`.
    pub fn stage_commit(
        &self,
        path: &str,
        ino: u64,
        temp: &str,
        size: u64,
        version: u64,
        objects_mtime_ns: i64,
    ) -> Result<Attr, Failure> {
        let (path, temp) = (canonical(path)?, canonical(temp)?);
        let e = Entry::of(&path).ok_or(Errno::EISDIR)?;
        match path::split(&temp) {
            Some((dir, name)) if dir == e.dir && crate::pfs::stage_temp_ino(name) == Some(ino) => {}
            _ => return Err(Failure::new(Errno::EINVAL, format!("{temp} is not a stage-out temp of {path}"))),
        }
        let result = self.write(|w| {
            let rec = w.file_of(e, ino, "changed during stage-out")?;
            let mtime_ns = file_mtime(rec.mtime_ns, rec.ctime_ns, objects_mtime_ns);
            let times = Record { mtime_ns, ..rec.clone() }.times();
            let meta = CopyMeta { mode: rec.mode, times, xattrs: xattrs::all(&w.xattrs, ino)? };
            w.pfs.commit_stage_temp(&temp, ino, &path, size, &meta)?;
            w.settle_ancestors(&path)?;
            w.stage_temps.remove(temp.as_str())?;
            w.set_tier(e, rec, Tier::Staged, version)
        });
        if result.is_err() {
            // The temp is useless now, and hidden if it stays.
            let _ = self.stage_abort(&temp);
        }
        result
    }

    /// Gives the PFS copy of directory `path` (made if missing) the
    /// directory's mode and times, checked: the last step of staging out a
    /// tree, once everything in the directory is in place.
    pub fn stage_dir(&self, path: &str) -> Result<Attr, Failure> {
        let path = canonical(path)?;
        let (rec, xattrs) = match self.read_xattrs(|r, table| {
            let node = r.lookup(&path)?;
            let xattrs = match &node {
                Node::Db(rec) => xattrs::all(table, rec.ino)?,
                _ => Vec::new(),
            };
            Ok((node, xattrs))
        })? {
            (Node::Db(rec), xattrs) if rec.kind == FileKind::Dir => (rec, xattrs),
            (Node::Root(_), _) => {
                return Err(Failure::new(Errno::EINVAL, "the root is the PFS directory itself: nothing to stage"))
            }
            (node, _) if node.is_dir() => return Ok(node.attr()), // on the PFS only: there already
            _ => return Err(Errno::ENOTDIR.into()),
        };
        if !self.pfs.root_present() {
            return Err(Failure::new(Errno::EIO, format!("cannot stage out {path}: the PFS root is not there")));
        }
        self.pfs.settle(&path, &CopyMeta { mode: rec.mode, times: rec.times(), xattrs })?;
        Ok(rec.attr())
    }

    /// Runs `f` on a read transaction's namespace and its `xattrs` table.
    fn read_xattrs<T>(
        &self,
        f: impl FnOnce(&Reader<'_>, &ReadOnlyTable<(u64, &'static str), &'static [u8]>) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let (_db, txn) = self.db.begin(Database::begin_read)?;
        f(&self.reader(&txn)?, &txn.open_table(XATTRS)?)
    }

    /// The value of extended attribute `name` of `path` (a link not
    /// followed); a PFS-only entry's are its PFS copy's (`crate::xattrs`).
    pub fn get_xattr(&self, path: &str, name: &str) -> Result<Vec<u8>, Failure> {
        let path = canonical(path)?;
        xattrs::check_name(name)?;
        let found = self.read_xattrs(|r, table| match r.lookup(&path)? {
            Node::Root(rec) | Node::Db(rec) => Ok(xattrs::get(table, rec.ino, name).map(Some)),
            Node::Pfs(_) => Ok(Ok(None)),
        })??;
        match found {
            Some(value) => Ok(value),
            None => self
                .pfs
                .xattrs(&path)?
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v)
                .ok_or_else(|| Errno(libc::ENODATA).into()),
        }
    }

    /// The names of `path`'s extended attributes, each ended by a NUL.
    pub fn list_xattr(&self, path: &str) -> Result<Vec<u8>, Failure> {
        let path = canonical(path)?;
        let listed = self.read_xattrs(|r, table| match r.lookup(&path)? {
            Node::Root(rec) | Node::Db(rec) => xattrs::list(table, rec.ino).map(Some),
            Node::Pfs(_) => Ok(None),
        })?;
        match listed {
            Some(list) => Ok(list),
            None => Ok(xattrs::names_list(self.pfs.xattrs(&path)?.iter().map(|(name, _)| name.as_str()))),
        }
    }

    /// Sets (`value`: `Some`, with setxattr(2)'s `flags`) or removes
    /// extended attribute `name` of `path`. A staged file's PFS copy is
    /// then not current; a PFS-only file is refused as by `set_attr`.
    pub fn set_xattr(&self, path: &str, name: &str, value: Option<&[u8]>, flags: u32) -> Result<(), Failure> {
        let path = canonical(path)?;
        xattrs::check_name(name)?;
        self.write_grouped(|w| {
            let node = w.lookup(&path)?;
            let ino = match node {
                _ if node.is_link() => {
                    return Err(Failure::new(
                        Errno(libc::EPERM),
                        format!("{path} is a symbolic link: it has no user.* extended attributes"),
                    ))
                }
                Node::Pfs(pfs) if pfs.kind != FileKind::Dir => {
                    return Err(Failure::new(
                        Errno::EROFS,
                        format!("{path} is only on the PFS: write to it first to bring it into the buffer"),
                    ))
                }
                Node::Root(rec) => rec.ino,
                // Not the ctime: it stands for the last chmod/utimens (`file_mtime`).
                node => w.update(&path, &node, Record::mark_dirty)?.ino,
            };
            match value {
                Some(value) => xattrs::set(&mut w.xattrs, ino, name, value, flags)?,
                None => xattrs::remove(&mut w.xattrs, ino, name)?,
            }
            w.dirty = true;
            Ok(())
        })
    }

    /// Removes the stage-out temp `temp` (absent is fine) and its record.
    pub fn stage_abort(&self, temp: &str) -> Result<(), Failure> {
        let temp = canonical(temp)?;
        self.pfs.remove_stage_temp(&temp)?;
        self.write(|w| {
            if w.stage_temps.remove(temp.as_str())?.is_some() {
                w.dirty = true;
            }
            Ok(())
        })
    }

    /// Removes every recorded stage-out temp whose stage-out is not
    /// `under_way` (abandoned: see `crate::stage_temps`), and its record;
    /// how many went. A temp that cannot be removed stays recorded, for
    /// the next try, as do all while the PFS root is absent (a temp there
    /// cannot be told from one that is gone).
    pub fn remove_stage_temps(&self, under_way: &dyn Fn(&str) -> bool) -> Result<usize, Failure> {
        if !self.pfs.root_present() {
            return Ok(0);
        }
        let recorded: Vec<String> = {
            let (_db, txn) = self.db.begin(Database::begin_read)?;
            let mut recorded = Vec::new();
            for item in txn.open_table(STAGE_TEMPS)?.iter()? {
                recorded.push(item?.0.value().to_string());
            }
            recorded
        };
        let mut removed = 0;
        for temp in recorded.iter().filter(|temp| !under_way(temp)) {
            self.stage_abort(temp)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Changes the tier of buffer file `path`, if it still is inode `ino`
    /// (ESTALE otherwise): `Staged` as of contents `version` (what a
    /// stage-out commit records), or `Buffer`. Moving a file to the PFS
    /// tier is [`Namespace::evict`].
    #[allow(dead_code)] // for the data manager (BBOS), which is to call it; tested below
    pub fn set_tier(&self, path: &str, ino: u64, tier: Tier, version: u64) -> Result<Attr, Failure> {
        let path = canonical(path)?;
        let e = Entry::of(&path).ok_or(Errno::EISDIR)?;
        self.write(|w| {
            let rec = w.file_of(e, ino, "is no longer the file asked for")?;
            w.set_tier(e, rec, tier, version)
        })
    }

    /// Drops the buffer copy of file `path` (inode `ino`), staged as of
    /// contents `version` with its PFS copy in place: the name then shows
    /// the PFS copy (tier `Pfs`) and the objects are doomed. ESTALE when the
    /// file is not that inode, staged at that version, any more. The caller
    /// (`demote::evict`) first retires the objects at `version` on their
    /// daemons, so a handle still open on the buffer copy gets ESTALE.
    pub fn evict(&self, path: &str, ino: u64, version: u64) -> Result<Attr, Failure> {
        let path = canonical(path)?;
        let e = Entry::of(&path).ok_or(Errno::EISDIR)?;
        // A copy found changed is recorded (the file made `Buffer`) though the eviction fails.
        self.write(|w| {
            let mut rec = w.file_of(e, ino, "is no longer the file asked for")?;
            if rec.nlink > 1 {
                // Its other names need its objects.
                return Ok(Err(Failure::new(
                    Errno(libc::ESTALE),
                    format!("{path} has several names (hard links): it stays in the buffer"),
                )));
            }
            if rec.tier != Tier::Staged || rec.staged_version != version {
                return Ok(Err(Failure::new(
                    Errno(libc::ESTALE),
                    format!("{path} has no current PFS copy of version {version}"),
                )));
            }
            if let Some(why) = w.check_copy(e, &mut rec)? {
                return Ok(Err(Failure::new(
                    Errno(libc::ESTALE),
                    format!("{path}: its PFS copy is not the one staged ({why}); the buffer copy stays"),
                )));
            }
            w.delete(e)?;
            w.count(FileKind::File, false)?;
            if rec.linked {
                w.tables.inodes.remove(rec.ino)?;
            }
            w.doom(&rec, false)?;
            // The PFS copy carries them now, and serves them.
            w.drop_xattrs(rec.ino)?;
            Ok(Ok(w.lookup(&path)?.attr()))
        })?
    }

    fn read_doomed<T>(
        &self,
        f: impl FnOnce(&ReadOnlyTable<u64, &'static [u8]>) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let (_db, txn) = self.db.begin(Database::begin_read)?;
        f(&txn.open_table(DOOMED)?)
    }

    /// Up to `max` doomed files whose objects may be deleted now (not kept,
    /// or their hold lease ended). Their removals are made durable before
    /// they are returned (a sync covers the commits it follows): a crash must
    /// never bring back a name whose objects are gone.
    pub fn doomed_due(&self, max: usize) -> Result<Vec<Doomed>, Failure> {
        let now = now_ns();
        let due = self.read_doomed(|table| {
            let mut due = Vec::new();
            for item in table.iter()? {
                let (ino, value) = item?;
                let doomed = Doomed::decode(ino.value(), value.value())?;
                if doomed.due(now) {
                    due.push(doomed);
                    if due.len() >= max {
                        break;
                    }
                }
            }
            Ok(due)
        })?;
        if !due.is_empty() {
            self.sync()?;
        }
        Ok(due)
    }

    /// Doomed files, and how many of them are kept by a client.
    pub fn doomed_counts(&self) -> Result<(u64, u64), Failure> {
        let now = now_ns();
        self.read_doomed(|table| {
            let (mut doomed, mut held) = (0, 0);
            for item in table.iter()? {
                let (ino, value) = item?;
                doomed += 1;
                held += u64::from(!Doomed::decode(ino.value(), value.value())?.due(now));
            }
            Ok((doomed, held))
        })
    }

    /// The doomed files kept (for a client that holds them) until a
    /// `Release` or the end of their hold lease.
    pub fn kept_doomed(&self) -> Result<Vec<u64>, Failure> {
        let now = now_ns();
        self.read_doomed(|table| {
            let mut kept = Vec::new();
            for item in table.iter()? {
                let (ino, value) = item?;
                if !Doomed::decode(ino.value(), value.value())?.due(now) {
                    kept.push(ino.value());
                }
            }
            Ok(kept)
        })
    }

    /// Drops the record of a doomed file whose objects are deleted.
    pub fn forget_doomed(&self, ino: u64) -> Result<(), Failure> {
        self.write_grouped(|w| {
            if w.doomed.remove(ino)?.is_some() {
                w.dirty = true;
            }
            Ok(())
        })
    }

    /// The client that kept doomed file `ino` closed it: its objects may go.
    /// Nothing to do when it is not doomed (any more): releasing twice, or
    /// after the hold lease ended, is harmless.
    pub fn release(&self, ino: u64) -> Result<(), Failure> {
        self.write_grouped(|w| {
            let doomed = match w.doomed.get(ino)? {
                Some(value) => Doomed::decode(ino, value.value())?,
                None => return Ok(()),
            };
            w.doomed.insert(ino, Doomed { held_until_ns: 0, ..doomed }.encode().as_slice())?;
            w.dirty = true;
            Ok(())
        })
    }

    /// Every inode whose objects must stay (the namespace's files) or are
    /// the deleter's to delete (doomed files), seen in one transaction.
    pub fn inodes_in_use(&self) -> Result<HashSet<u64>, Failure> {
        let (_db, txn) = self.db.begin(Database::begin_read)?;
        let mut inodes = HashSet::new();
        for item in txn.open_table(ENTRIES)?.iter()? {
            let (_, value) = item?;
            let rec = Record::decode(value.value())?;
            if rec.kind == FileKind::File {
                inodes.insert(rec.ino);
            }
        }
        for item in txn.open_table(DOOMED)?.iter()? {
            inodes.insert(item?.0.value());
        }
        Ok(inodes)
    }

    /// What `surge fsck` checks of the namespace (`crate::fsck`): every
    /// file with its names, the records of inodes no name names, the
    /// doomed files and the stage-out temps, seen in one transaction.
    pub fn audit(&self) -> Result<Audit, Failure> {
        let (_db, txn) = self.db.begin(Database::begin_read)?;
        let inodes = txn.open_table(INODES)?;
        let mut audit = Audit::default();
        for item in txn.open_table(ENTRIES)?.iter()? {
            let (key, value) = item?;
            let own = Record::decode(value.value())?;
            if own.kind != FileKind::File {
                continue;
            }
            let (dir, name) = key.value();
            let nlink = match own.linked {
                true => inodes.get(own.ino)?.map(|v| Record::decode(v.value())).transpose()?.map(|rec| rec.nlink),
                false => Some(own.nlink),
            };
            let file = audit.files.entry(own.ino).or_insert_with(|| AuditedFile {
                names: Vec::new(),
                layout: own.layout,
                has_objects: false,
                lost: false,
                nlink,
            });
            file.names.push(entry_path(dir, name));
            file.has_objects |= matches!(own.tier, Tier::Buffer | Tier::Staged);
            file.lost |= own.tier == Tier::Lost;
            // A linked name whose inode record is missing wins over a sibling's count.
            file.nlink = file.nlink.and(nlink);
        }
        for item in inodes.iter()? {
            let (ino, value) = item?;
            if !audit.files.contains_key(&ino.value()) {
                audit.unnamed.push((ino.value(), Record::decode(value.value())?.nlink));
            }
        }
        for item in txn.open_table(DOOMED)?.iter()? {
            let (ino, value) = item?;
            audit.doomed.push(Doomed::decode(ino.value(), value.value())?);
        }
        for item in txn.open_table(STAGE_TEMPS)?.iter()? {
            let (temp, ino) = item?;
            audit.stage_temps.push((temp.value().to_string(), ino.value()));
        }
        Ok(audit)
    }

    /// Sets the link count of file `ino` to the names of it among `names`
    /// (its names when audited; those that name another inode now are left
    /// alone), and makes each of them a name of the inode's one record when
    /// there are several. Returns whether it changed anything.
    pub fn fix_link_count(&self, ino: u64, names: &[String]) -> Result<bool, Failure> {
        self.write(|w| {
            let mut found = Vec::new();
            for path in names {
                let e = Entry::of(path).ok_or(Errno::EINVAL)?;
                if let Some(value) = w.tables.entries.get((e.dir, e.name))? {
                    let own = Record::decode(value.value())?;
                    if own.ino == ino {
                        found.push((path, own));
                    }
                }
            }
            let Some((_, first)) = found.first() else { return Ok(false) };
            let shared = match w.tables.inodes.get(ino)? {
                Some(value) => Record::decode(value.value())?,
                None => first.clone(),
            };
            let nlink = found.len() as u32;
            let linked = nlink > 1 || found.iter().any(|(_, own)| own.linked);
            for (path, own) in &found {
                let e = Entry::of(path).expect("checked above");
                let Record { tier, staged_version, copy, .. } = own.clone();
                w.put(e, &Record { nlink, linked, tier, staged_version, copy, ..shared.clone() })?;
            }
            Ok(true)
        })
    }

    /// Drops the record of linked inode `ino` if no entry names it (looked
    /// for in every entry), dooming its objects. Returns whether it did.
    pub fn drop_unnamed_inode(&self, ino: u64) -> Result<bool, Failure> {
        self.write(|w| {
            let Some(rec) = w.tables.inodes.get(ino)?.map(|v| Record::decode(v.value())).transpose()? else {
                return Ok(false);
            };
            for item in w.tables.entries.iter()? {
                if Record::decode(item?.1.value())?.ino == ino {
                    return Ok(false);
                }
            }
            w.tables.inodes.remove(ino)?;
            w.doom(&rec, false)?;
            w.drop_xattrs(ino)?;
            Ok(true)
        })
    }

    /// Marks `Lost` the buffer files that lost data with daemon `daemon`'s
    /// store: with `whole`, every one with a stripe there; else those of
    /// `inos`. Files only on the PFS have nothing there to lose.
    pub fn mark_lost(&self, daemon: u32, whole: bool, inos: &[u64]) -> Result<MarkLostReply, Failure> {
        let listed: HashSet<u64> = inos.iter().copied().collect();
        let daemons = self.daemons;
        self.write(|w| {
            let next_ino = get_counter(&w.tables.config, NEXT_INO)?;
            let mut lost = Vec::new();
            for item in w.tables.entries.iter()? {
                let (key, value) = item?;
                let rec = w.tables.record_of(value.value())?;
                let affected = listed.contains(&rec.ino) || (whole && rec.layout.has_stripe_on(daemon, daemons));
                if rec.kind == FileKind::File && matches!(rec.tier, Tier::Buffer | Tier::Staged) && affected {
                    let (dir, name) = key.value();
                    lost.push((dir.to_string(), name.to_string(), rec));
                }
            }
            for (dir, name, rec) in &lost {
                let rec = Record { tier: Tier::Lost, staged_version: u64::from(daemon), ..rec.clone() };
                let path = entry_path(dir, name);
                w.put(Entry { dir, name, path: &path }, &rec)?;
            }
            Ok(MarkLostReply { files: lost.len() as u64, next_ino })
        })
    }

    /// The files whose contents are in the buffer only (tier `Buffer`),
    /// with their paths and attributes (the data manager books them when
    /// it starts). Reads every entry, in one read transaction.
    pub fn unstaged(&self) -> Result<Vec<(String, Attr)>, Failure> {
        self.read(|r| {
            let mut unstaged = Vec::new();
            for item in r.entries.iter()? {
                let (key, value) = item?;
                let rec = r.record_of(value.value())?;
                if rec.kind == FileKind::File && rec.tier == Tier::Buffer {
                    let (dir, name) = key.value();
                    let path = entry_path(dir, name);
                    unstaged.push((path, rec.attr()));
                }
            }
            Ok(unstaged)
        })
    }

    /// Files whose contents are in the buffer only (tier `Buffer`), what a
    /// stage-out has yet to copy, and files marked `Lost`. Reads every
    /// entry, in one read transaction (writers are not held up).
    pub fn unstaged_files(&self) -> Result<FileCounts, Failure> {
        self.read(|r| {
            let mut counts = FileCounts::default();
            for item in r.entries.iter()? {
                let rec = r.record_of(item?.1.value())?;
                if rec.kind == FileKind::File {
                    counts.unstaged += u64::from(rec.tier == Tier::Buffer);
                    counts.lost += u64::from(rec.tier == Tier::Lost);
                }
            }
            Ok(counts)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;
    use surge_proto::layout::{FIRST_AUTO, FIRST_LOCAL, STRIPE_ALL};
    use surge_proto::msg::open_flags::{CREATE, DIRECTORY, EXCL, TRUNC, WRITE};
    use surge_proto::msg::xattr_flags;

    struct Fixture {
        dir: tempfile::TempDir,
        ns: Namespace,
    }

    impl Fixture {
        fn pfs(&self) -> std::path::PathBuf {
            self.dir.path().join("pfs")
        }
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("pfs")).unwrap();
        let pfs = Arc::new(Pfs::open(&dir.path().join("pfs")).unwrap());
        let ns = Namespace::load(&dir.path().join("ns.redb"), pfs, 3, Layout::ROOT_DEFAULT).unwrap();
        Fixture { dir, ns }
    }

    fn errno<T: std::fmt::Debug>(r: Result<T, Failure>) -> Errno {
        r.unwrap_err().errno
    }

    /// A `SetAttr` of the mode and the mtime only.
    fn mode_and_mtime(mode: u32, mtime_ns: i64) -> AttrChange {
        AttrChange { mode, uid: KEEP_ID, gid: KEEP_ID, atime_ns: KEEP_MTIME, mtime_ns }
    }

    fn create(ns: &Namespace, path: &str) -> Attr {
        ns.open(path, CREATE | WRITE, 0o644, Layout::INHERIT).unwrap()
    }

    fn names(ns: &Namespace, path: &str) -> Vec<String> {
        ns.readdir(path, "", 0).unwrap().entries.into_iter().map(|e| e.name).collect()
    }

    #[test]
    fn reopening_with_another_daemon_count_is_refused_and_keeps_the_namespace() {
        let f = fixture();
        create(&f.ns, "/kept");
        let Fixture { dir, ns } = f;
        drop(ns);
        let db = dir.path().join("ns.redb");
        let pfs = || Arc::new(Pfs::open(&dir.path().join("pfs")).unwrap());
        let err = Namespace::load(&db, pfs(), 4, Layout::ROOT_DEFAULT).err().expect("a 4-daemon reopen must fail");
        assert_eq!(err.errno, Errno::EINVAL);
        assert!(err.to_string().contains("3 daemons"), "{err}");
        let ns = Namespace::load(&db, pfs(), 3, Layout::ROOT_DEFAULT).unwrap();
        assert_eq!(ns.stat("/kept").unwrap().kind, FileKind::File);
    }

    #[test]
    fn root_always_exists_and_cannot_be_removed_or_renamed() {
        let f = fixture();
        let root = f.ns.stat("/").unwrap();
        assert_eq!((root.ino, root.kind, root.layout), (ROOT_INO, FileKind::Dir, Layout::ROOT_DEFAULT));
        assert_eq!(f.ns.open("/", DIRECTORY, 0, Layout::INHERIT).unwrap().ino, ROOT_INO);
        assert_eq!(errno(f.ns.open("/", WRITE, 0, Layout::INHERIT)), Errno::EISDIR);
        assert_eq!(errno(f.ns.open("/", CREATE | EXCL, 0, Layout::INHERIT)), Errno::EEXIST);
        assert_eq!(errno(f.ns.mkdir("/", 0o755)), Errno::EEXIST);
        assert_eq!(errno(f.ns.rmdir("/")), Errno::EBUSY);
        assert_eq!(errno(f.ns.unlink("/", false)), Errno::EISDIR);
        assert_eq!(errno(f.ns.rename("/", "/x", false)), Errno::EBUSY);
        assert_eq!(errno(f.ns.rename("/x", "/", false)), Errno::EBUSY);
    }

    #[test]
    fn an_exclusive_create_decided_in_its_write_transaction_sees_the_union_view() {
        let f = fixture();
        fs::create_dir(f.pfs().join("old")).unwrap();
        fs::write(f.pfs().join("old/pfs-only"), b"pfs").unwrap();
        let before = f.ns.counts().unwrap();
        assert_eq!(errno(f.ns.open("/old/pfs-only", CREATE | EXCL | WRITE, 0o644, Layout::INHERIT)), Errno::EEXIST);
        assert_eq!(f.ns.counts().unwrap(), before, "a refused exclusive create materializes nothing");
        let new = f.ns.open("/old/new", CREATE | EXCL | WRITE, 0o644, Layout::INHERIT).unwrap();
        assert!(new.created);
        assert_eq!(errno(f.ns.open("/old/new", CREATE | EXCL | WRITE, 0o644, Layout::INHERIT)), Errno::EEXIST);
        assert_eq!(errno(f.ns.open("/none/new", CREATE | EXCL | WRITE, 0o644, Layout::INHERIT)), Errno::ENOENT);
        assert_eq!(f.ns.stat("/old/new").unwrap().ino, new.ino);
    }

    #[test]
    fn open_creates_files_with_errno_faithful_refusals() {
        let f = fixture();
        let a = create(&f.ns, "/a");
        assert!(a.created && a.kind == FileKind::File && a.tier == Tier::Buffer && a.size == 0);
        assert_eq!(a.mode, 0o644);
        assert!(a.layout.is_concrete());
        let again = f.ns.open("/a", CREATE | WRITE, 0o600, Layout::INHERIT).unwrap();
        assert_eq!((again.ino, again.created), (a.ino, false));
        assert_eq!(errno(f.ns.open("/a", CREATE | EXCL, 0, Layout::INHERIT)), Errno::EEXIST);
        assert_eq!(errno(f.ns.open("/a", DIRECTORY, 0, Layout::INHERIT)), Errno::ENOTDIR);
        assert_eq!(errno(f.ns.open("/missing", 0, 0, Layout::INHERIT)), Errno::ENOENT);
        assert_eq!(errno(f.ns.open("/no/such/dir", CREATE, 0, Layout::INHERIT)), Errno::ENOENT);
        assert_eq!(errno(f.ns.open("/a/b", CREATE, 0, Layout::INHERIT)), Errno::ENOTDIR);
        assert_eq!(errno(f.ns.open("/new", CREATE | DIRECTORY, 0, Layout::INHERIT)), Errno::EINVAL);
        for bad in ["relative", "/../x", "/a/../../etc", "/a\0b"] {
            assert_eq!(errno(f.ns.open(bad, CREATE, 0, Layout::INHERIT)), Errno::EINVAL, "{bad:?}");
        }
        let bad_layout = Layout { stripe_count: 9, ..Layout::INHERIT };
        let err = f.ns.open("/b", CREATE, 0, bad_layout).unwrap_err();
        assert_eq!(err.errno, Errno::EINVAL);
        assert!(err.message.contains("stripe count 9"), "{err}");
        f.ns.mkdir("/d", 0o755).unwrap();
        assert_eq!(errno(f.ns.open("/d", WRITE, 0, Layout::INHERIT)), Errno::EISDIR);
        assert_eq!(f.ns.open("/d", 0, 0, Layout::INHERIT).unwrap().kind, FileKind::Dir);
        assert_eq!(f.ns.counts().unwrap(), (1, 1));
        assert_ne!(create(&f.ns, "/d/x").ino, a.ino);
    }

    #[test]
    fn files_created_under_local_placement_start_on_their_creators_daemons() {
        let f = fixture();
        f.ns.mkdir("/out", 0o755).unwrap();
        let local = Layout { stripe_count: 1, stripe_size: 0, first: FIRST_LOCAL };
        assert!(f.ns.set_layout("/out", local).unwrap().layout.is_local());
        let firsts: Vec<u32> = (0..4)
            .map(|i| f.ns.open_from(&format!("/out/rank{i}"), CREATE | WRITE, 0o644, Layout::INHERIT, &[1, 2]))
            .map(|attr| attr.unwrap().layout.first)
            .collect();
        assert!(firsts.iter().all(|d| [1, 2].contains(d)), "{firsts:?}");
        assert!(firsts.contains(&1) && firsts.contains(&2), "both local daemons take files: {firsts:?}");
        let from_afar = f.ns.open_from("/out/remote", CREATE | WRITE, 0o644, Layout::INHERIT, &[]).unwrap();
        assert_eq!(from_afar.layout.first, (from_afar.ino % 3) as u32, "no local daemon: spread as auto");
        let top = f.ns.open_from("/top", CREATE | WRITE, 0o644, Layout::INHERIT, &[1]).unwrap();
        assert_eq!(top.layout.first, (top.ino % 3) as u32, "outside /out the placement stays auto");
    }

    #[test]
    fn layouts_are_inherited_from_the_nearest_directory_and_resolved() {
        let f = fixture();
        f.ns.mkdir("/d", 0o755).unwrap();
        f.ns.mkdir("/d/e", 0o755).unwrap();
        let dir_layout = Layout { stripe_count: 2, stripe_size: 0, first: FIRST_AUTO };
        assert_eq!(f.ns.set_layout("/d", dir_layout).unwrap().layout, dir_layout);
        let file = create(&f.ns, "/d/e/f");
        assert_eq!((file.layout.stripe_count, file.layout.stripe_size), (2, 1 << 20));
        assert_eq!(file.layout.first, (file.ino % 3) as u32);
        let own =
            f.ns.open("/d/e/g", CREATE, 0o600, Layout { stripe_count: 1, stripe_size: 128 << 10, first: 2 }).unwrap();
        assert_eq!(own.layout, Layout { stripe_count: 1, stripe_size: 128 << 10, first: 2 });
        let top = create(&f.ns, "/top");
        assert_eq!(top.layout.stripe_count, 3);
        f.ns.set_layout("/", Layout { stripe_count: 1, stripe_size: 256 << 10, first: 0 }).unwrap();
        let top2 = create(&f.ns, "/top2");
        assert_eq!(top2.layout, Layout { stripe_count: 1, stripe_size: 256 << 10, first: 0 });
        assert_eq!(errno(f.ns.set_layout("/top", dir_layout)), Errno::EINVAL);
        assert_eq!(errno(f.ns.set_layout("/d", Layout { stripe_size: 1000, ..Layout::INHERIT })), Errno::EINVAL);
        assert_eq!(errno(f.ns.set_layout("/nope", dir_layout)), Errno::ENOENT);
        assert_eq!(f.ns.set_layout("/", Layout::INHERIT).unwrap().layout.stripe_count, STRIPE_ALL);
    }

    #[test]
    fn mkdir_rmdir_unlink_and_readdir() {
        let f = fixture();
        f.ns.mkdir("/d", 0o700).unwrap();
        assert_eq!(errno(f.ns.mkdir("/d", 0o700)), Errno::EEXIST);
        assert_eq!(errno(f.ns.mkdir("/x/y", 0o700)), Errno::ENOENT);
        for name in ["c", "a", "b", "a-", "a0"] {
            create(&f.ns, &format!("/d/{name}"));
        }
        assert_eq!(errno(f.ns.mkdir("/d/a/z", 0o700)), Errno::ENOTDIR);
        assert_eq!(names(&f.ns, "/d"), ["a", "a-", "a0", "b", "c"]);
        let page = f.ns.readdir("/d", "a-", 2).unwrap();
        assert_eq!(page.entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a0", "b"]);
        assert!(!page.end);
        let last = f.ns.readdir("/d", "b", 2).unwrap();
        assert_eq!((last.entries.len(), last.end), (1, true));
        assert_eq!(errno(f.ns.readdir("/d/a", "", 0)), Errno::ENOTDIR);
        assert_eq!(errno(f.ns.readdir("/nope", "", 0)), Errno::ENOENT);
        assert_eq!(errno(f.ns.rmdir("/d")), Errno::ENOTEMPTY);
        assert_eq!(errno(f.ns.rmdir("/d/a")), Errno::ENOTDIR);
        assert_eq!(errno(f.ns.unlink("/d", false)), Errno::EISDIR);
        assert_eq!(errno(f.ns.unlink("/d/zz", false)), Errno::ENOENT);
        let a = f.ns.stat("/d/a").unwrap();
        assert_eq!(f.ns.unlink("/d/a", false).unwrap(), Removed(Some(a)));
        assert_eq!(errno(f.ns.stat("/d/a")), Errno::ENOENT);
        for name in ["a-", "a0", "b", "c"] {
            f.ns.unlink(&format!("/d/{name}"), false).unwrap();
        }
        f.ns.rmdir("/d").unwrap();
        assert_eq!(errno(f.ns.rmdir("/d")), Errno::ENOENT);
        assert_eq!(f.ns.counts().unwrap(), (0, 0));
    }

    #[test]
    fn rename_moves_a_directory_with_all_descendants() {
        let f = fixture();
        for d in ["/a", "/a/b", "/a/b/c", "/ab", "/a-"] {
            f.ns.mkdir(d, 0o755).unwrap();
        }
        let deep = create(&f.ns, "/a/b/c/file");
        create(&f.ns, "/a/top");
        create(&f.ns, "/ab/keep");
        create(&f.ns, "/a-/keep");
        assert_eq!(f.ns.rename("/a", "/z", false).unwrap(), Removed(None));
        assert_eq!(f.ns.stat("/z/b/c/file").unwrap().ino, deep.ino);
        assert!(f.ns.stat("/z/top").is_ok());
        assert_eq!(errno(f.ns.stat("/a/b")), Errno::ENOENT);
        assert_eq!(names(&f.ns, "/ab"), ["keep"]);
        assert_eq!(names(&f.ns, "/a-"), ["keep"]);
        assert_eq!(names(&f.ns, "/"), ["a-", "ab", "z"]);
        assert_eq!(names(&f.ns, "/z/b"), ["c"]);
        assert_eq!(f.ns.counts().unwrap(), (4, 5));
    }

    #[test]
    fn rename_follows_the_rules_of_rename_2() {
        let f = fixture();
        f.ns.mkdir("/d", 0o755).unwrap();
        f.ns.mkdir("/d/sub", 0o755).unwrap();
        f.ns.mkdir("/empty", 0o755).unwrap();
        let a = create(&f.ns, "/a");
        let b = create(&f.ns, "/b");
        create(&f.ns, "/d/sub/x");
        assert_eq!(errno(f.ns.rename("/d", "/d/sub/inside", false)), Errno::EINVAL);
        assert_eq!(errno(f.ns.rename("/d", "/a", false)), Errno::ENOTDIR);
        assert_eq!(errno(f.ns.rename("/a", "/d", false)), Errno::EISDIR);
        assert_eq!(errno(f.ns.rename("/empty", "/d", false)), Errno::ENOTEMPTY);
        assert_eq!(errno(f.ns.rename("/missing", "/q", false)), Errno::ENOENT);
        assert_eq!(errno(f.ns.rename("/a", "/missing/q", false)), Errno::ENOENT);
        assert_eq!(errno(f.ns.rename("/a", "/b/q", false)), Errno::ENOTDIR);
        assert_eq!(f.ns.rename("/a", "/a", false).unwrap(), Removed(None));
        // A file replaces a file: the replaced one is returned for its objects.
        assert_eq!(f.ns.rename("/a", "/b", false).unwrap(), Removed(Some(Attr { created: false, ..b })));
        assert_eq!(f.ns.stat("/b").unwrap().ino, a.ino);
        // A directory replaces an empty directory.
        f.ns.rename("/d", "/empty", false).unwrap();
        assert!(f.ns.stat("/empty/sub/x").is_ok());
        assert_eq!(f.ns.counts().unwrap(), (2, 2));
    }

    #[test]
    fn union_view_shows_pfs_only_files_and_directories() {
        let f = fixture();
        fs::create_dir_all(f.pfs().join("old/deep")).unwrap();
        fs::write(f.pfs().join("old/result.dat"), b"0123456789").unwrap();
        fs::write(f.pfs().join("both"), b"pfs copy").unwrap();
        assert_eq!(errno(f.ns.open("/both", CREATE | WRITE, 0o644, Layout::INHERIT)), Errno::EROFS);
        f.ns.open("/both", CREATE | WRITE | TRUNC, 0o644, Layout::INHERIT).unwrap();
        create(&f.ns, "/mine");
        let st = f.ns.stat("/old/result.dat").unwrap();
        assert_eq!((st.kind, st.size, st.tier), (FileKind::File, 10, Tier::Pfs));
        assert_ne!(st.ino & PFS_INO_BIT, 0);
        assert_eq!(f.ns.stat("/old").unwrap().tier, Tier::Pfs);
        assert_eq!(f.ns.stat("/both").unwrap().tier, Tier::Buffer);
        assert_eq!(names(&f.ns, "/"), ["both", "mine", "old"]);
        assert_eq!(names(&f.ns, "/old"), ["deep", "result.dat"]);
        assert_eq!(f.ns.open("/old/result.dat", 0, 0, Layout::INHERIT).unwrap().tier, Tier::Pfs);
        assert_eq!(errno(f.ns.open("/old/result.dat", WRITE, 0, Layout::INHERIT)), Errno::EROFS);
        assert_eq!(errno(f.ns.stat("/old/result.dat/x")), Errno::ENOTDIR);
        assert_eq!(errno(f.ns.mkdir("/old", 0o755)), Errno::EEXIST);
        assert_eq!(errno(f.ns.rmdir("/old")), Errno::ENOTEMPTY);
        // Creating inside a PFS-only directory copies it into the namespace.
        let new = create(&f.ns, "/old/deep/new");
        assert_eq!(new.tier, Tier::Buffer);
        assert_eq!(f.ns.stat("/old/deep").unwrap().tier, Tier::Buffer);
        assert_eq!(names(&f.ns, "/old/deep"), ["new"]);
        assert_eq!(names(&f.ns, "/old"), ["deep", "result.dat"]);
        // Unlinking a PFS-only file removes it from the PFS.
        assert_eq!(f.ns.unlink("/old/result.dat", false).unwrap().0.unwrap().tier, Tier::Pfs);
        assert!(!f.pfs().join("old/result.dat").exists());
        // ... and unlinking a buffer file removes the stale PFS copy under it.
        f.ns.unlink("/both", false).unwrap();
        assert!(!f.pfs().join("both").exists());
        assert_eq!(errno(f.ns.stat("/both")), Errno::ENOENT);
        f.ns.unlink("/old/deep/new", false).unwrap();
        f.ns.rmdir("/old/deep").unwrap();
        f.ns.rmdir("/old").unwrap();
        assert!(!f.pfs().join("old").exists());
        assert_eq!(names(&f.ns, "/"), ["mine"]);
    }

    #[test]
    fn opening_a_pfs_file_with_trunc_shadows_it_and_rename_moves_pfs_copies() {
        let f = fixture();
        fs::create_dir_all(f.pfs().join("p")).unwrap();
        fs::write(f.pfs().join("p/f"), b"old").unwrap();
        fs::write(f.pfs().join("victim"), b"v").unwrap();
        let shadow = f.ns.open("/p/f", WRITE | TRUNC, 0o600, Layout::INHERIT).unwrap();
        assert_eq!((shadow.tier, shadow.created), (Tier::Buffer, false));
        // Renaming the buffer file moves its stale PFS copy too, replacing the target's.
        let replaced = f.ns.rename("/p/f", "/victim", false).unwrap().0.unwrap();
        assert_eq!(replaced.tier, Tier::Pfs);
        assert_eq!(fs::read(f.pfs().join("victim")).unwrap(), b"old");
        assert!(!f.pfs().join("p/f").exists());
        // A PFS-only directory renamed into a new namespace directory.
        fs::create_dir_all(f.pfs().join("pdir/inner")).unwrap();
        f.ns.mkdir("/ns", 0o755).unwrap();
        f.ns.rename("/pdir", "/ns/moved", false).unwrap();
        assert!(f.pfs().join("ns/moved/inner").is_dir());
        assert_eq!(f.ns.stat("/ns/moved/inner").unwrap().tier, Tier::Pfs);
        // A buffer file replacing a PFS-only file removes the PFS copy.
        fs::write(f.pfs().join("ns/target"), b"t").unwrap();
        create(&f.ns, "/ns/src");
        f.ns.rename("/ns/src", "/ns/target", false).unwrap();
        assert!(!f.pfs().join("ns/target").exists());
        assert_eq!(f.ns.stat("/ns/target").unwrap().tier, Tier::Buffer);
    }

    fn link_met(r: Result<impl std::fmt::Debug, Failure>) -> LinkMet {
        let failure = r.unwrap_err();
        assert_eq!(failure.errno, LINK_MET, "{failure}");
        LinkMet::parse(&failure.message).expect("a LINK_MET message names the link and its target")
    }

    fn met(at: &str, target: &str) -> LinkMet {
        LinkMet { at: at.to_string(), target: target.to_string() }
    }

    #[test]
    fn a_symbolic_link_is_created_read_listed_renamed_and_removed_as_a_link() {
        let f = fixture();
        f.ns.mkdir("/run", 0o755).unwrap();
        let link = f.ns.symlink("/run/RRTM_DATA", "../tables/RRTM_DATA").unwrap();
        assert_eq!((link.kind, link.mode, link.size, link.created), (FileKind::Symlink, 0o777, 19, true));
        assert_eq!(f.ns.stat("/run/RRTM_DATA").unwrap(), Attr { created: false, ..link.clone() });
        assert_eq!(f.ns.readlink("/run/RRTM_DATA").unwrap(), "../tables/RRTM_DATA");
        assert_eq!(errno(f.ns.symlink("/run/RRTM_DATA", "x")), Errno::EEXIST);
        assert_eq!(errno(f.ns.symlink("/run", "x")), Errno::EEXIST);
        assert_eq!(errno(f.ns.symlink("/run/empty", "")), Errno::ENOENT);
        assert_eq!(errno(f.ns.symlink("/run/long", &"x".repeat(4096))), Errno::ENAMETOOLONG);
        assert_eq!(errno(f.ns.symlink("/missing/l", "x")), Errno::ENOENT);
        assert_eq!(errno(f.ns.readlink("/run")), Errno::EINVAL);
        let entries = f.ns.readdir("/run", "", 0).unwrap().entries;
        assert_eq!(entries, [DirEntry { name: "RRTM_DATA".into(), kind: FileKind::Symlink, ino: link.ino }]);
        // rmdir and mkdir see a link, not a directory.
        assert_eq!(errno(f.ns.rmdir("/run/RRTM_DATA")), Errno::ENOTDIR);
        assert_eq!(errno(f.ns.mkdir("/run/RRTM_DATA", 0o755)), Errno::EEXIST);
        f.ns.rename("/run/RRTM_DATA", "/run/moved", false).unwrap();
        assert_eq!(f.ns.readlink("/run/moved").unwrap(), "../tables/RRTM_DATA");
        assert_eq!(f.ns.counts().unwrap(), (1, 1));
        assert_eq!(f.ns.unlink("/run/moved", false).unwrap().0.unwrap().kind, FileKind::Symlink);
        assert_eq!(f.ns.doomed_counts().unwrap(), (0, 0), "a link has no objects to delete");
        assert_eq!(f.ns.counts().unwrap(), (0, 1));
    }

    #[test]
    fn a_path_through_a_link_and_an_open_of_one_give_the_link_to_the_client() {
        let f = fixture();
        f.ns.mkdir("/tables", 0o755).unwrap();
        create(&f.ns, "/tables/data");
        f.ns.symlink("/t", "tables").unwrap();
        f.ns.symlink("/dangling", "/nowhere").unwrap();
        assert_eq!(link_met(f.ns.stat("/t/data")), met("/t", "tables"));
        assert_eq!(link_met(f.ns.open("/t/data", 0, 0, Layout::INHERIT)), met("/t", "tables"));
        assert_eq!(link_met(f.ns.open("/t", 0, 0, Layout::INHERIT)), met("/t", "tables"));
        assert_eq!(link_met(f.ns.open("/t/new", CREATE | WRITE, 0o644, Layout::INHERIT)), met("/t", "tables"));
        assert_eq!(link_met(f.ns.readdir("/t", "", 0)), met("/t", "tables"));
        assert_eq!(link_met(f.ns.mkdir("/t/sub", 0o755)), met("/t", "tables"));
        assert_eq!(link_met(f.ns.unlink("/t/data", false)), met("/t", "tables"));
        assert_eq!(link_met(f.ns.set_attr("/t/data", &mode_and_mtime(0o700, KEEP_MTIME))), met("/t", "tables"));
        // chmod and utimens act on the link itself: its mode is fixed, its time is not.
        assert_eq!(errno(f.ns.set_attr("/t", &mode_and_mtime(0o700, KEEP_MTIME))), Errno(libc::EOPNOTSUPP));
        assert_eq!(f.ns.set_attr("/t", &mode_and_mtime(KEEP_MODE, 5)).unwrap().mtime_ns, 5);
        assert_ne!(f.ns.stat("/tables").unwrap().mtime_ns, 5);
        assert_eq!(link_met(f.ns.set_layout("/t", Layout::INHERIT)), met("/t", "tables"));
        assert_eq!(
            link_met(f.ns.open("/dangling", CREATE | WRITE, 0o644, Layout::INHERIT)),
            met("/dangling", "/nowhere")
        );
        // O_EXCL fails on any existing name, a link included, as in the kernel.
        assert_eq!(errno(f.ns.open("/dangling", CREATE | EXCL | WRITE, 0o644, Layout::INHERIT)), Errno::EEXIST);
        assert_eq!(f.ns.stat("/t").unwrap().kind, FileKind::Symlink);
        assert_eq!(f.ns.stat("/tables/data").unwrap().kind, FileKind::File);
    }

    #[test]
    fn links_survive_a_reopen() {
        let f = fixture();
        let link = f.ns.symlink("/l", "a/b").unwrap();
        let Fixture { dir, ns } = f;
        drop(ns);
        let pfs = Arc::new(Pfs::open(&dir.path().join("pfs")).unwrap());
        let ns = Namespace::load(&dir.path().join("ns.redb"), pfs, 3, Layout::ROOT_DEFAULT).unwrap();
        assert_eq!(ns.stat("/l").unwrap(), Attr { created: false, ..link });
        assert_eq!(ns.readlink("/l").unwrap(), "a/b");
    }

    #[test]
    fn pfs_links_show_as_links_and_are_never_followed_by_the_daemon() {
        let f = fixture();
        let outside = f.dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("passwd"), b"root").unwrap();
        fs::create_dir(f.pfs().join("tables")).unwrap();
        symlink(&outside, f.pfs().join("etc")).unwrap();
        symlink(outside.join("passwd"), f.pfs().join("pw")).unwrap();
        symlink("tables", f.pfs().join("t")).unwrap();
        let etc = outside.to_str().unwrap();
        assert_eq!(f.ns.stat("/etc").unwrap().kind, FileKind::Symlink);
        assert_eq!(f.ns.stat("/etc").unwrap().tier, Tier::Pfs);
        assert_eq!(f.ns.readlink("/etc").unwrap(), etc);
        assert_eq!(link_met(f.ns.stat("/etc/passwd")), met("/etc", etc));
        assert_eq!(link_met(f.ns.open("/etc/new", CREATE, 0o644, Layout::INHERIT)), met("/etc", etc));
        assert_eq!(link_met(f.ns.unlink("/etc/passwd", false)), met("/etc", etc));
        assert_eq!(link_met(f.ns.readdir("/t", "", 0)), met("/t", "tables"));
        let kinds: Vec<_> = f.ns.readdir("/", "", 0).unwrap().entries.into_iter().map(|e| (e.name, e.kind)).collect();
        let expected = [
            ("etc", FileKind::Symlink),
            ("pw", FileKind::Symlink),
            ("t", FileKind::Symlink),
            ("tables", FileKind::Dir),
        ];
        assert_eq!(kinds, expected.map(|(n, k)| (n.to_string(), k)));
        // Opening the link follows it (the client's to do); a file renamed
        // over it replaces the link itself, and so does its stage-out.
        assert_eq!(link_met(f.ns.open("/pw", CREATE | WRITE | TRUNC, 0o644, Layout::INHERIT)).at, "/pw");
        create(&f.ns, "/new");
        f.ns.rename("/new", "/pw", false).unwrap();
        assert!(!f.pfs().join("pw").exists());
        let temp = f.ns.stage_begin("/pw", 3).unwrap();
        let ino = f.ns.stat("/pw").unwrap().ino;
        f.ns.stage_commit("/pw", ino, &temp, 3, 1, 0).unwrap();
        assert_eq!(fs::read(outside.join("passwd")).unwrap(), b"root");
        assert!(!f.pfs().join("pw").is_symlink());
        // Removing a PFS link removes the link alone.
        f.ns.unlink("/etc", false).unwrap();
        assert!(!f.pfs().join("etc").exists());
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
    }

    #[test]
    fn staging_out_a_link_puts_a_link_with_the_same_target_on_the_pfs() {
        let f = fixture();
        f.ns.mkdir("/run", 0o755).unwrap();
        f.ns.symlink("/run/namelist", "../inputs/namelist.input").unwrap();
        fs::create_dir(f.pfs().join("run")).unwrap();
        fs::write(f.pfs().join("run/namelist"), b"an old file is replaced").unwrap();
        assert_eq!(f.ns.stage_begin("/run/namelist", 0).unwrap(), "", "nothing to copy");
        let on_pfs = f.pfs().join("run/namelist");
        assert_eq!(fs::read_link(&on_pfs).unwrap().to_str().unwrap(), "../inputs/namelist.input");
        assert_eq!(fs::read_dir(f.pfs().join("run")).unwrap().count(), 1, "no temp left behind");
        let staged = f.ns.stat("/run/namelist").unwrap();
        assert_eq!((staged.kind, staged.tier), (FileKind::Symlink, Tier::Staged));
        // Replaced by a link to elsewhere: staged again.
        f.ns.unlink("/run/namelist", false).unwrap();
        f.ns.symlink("/run/namelist", "/abs/target").unwrap();
        f.ns.stage_begin("/run/namelist", 0).unwrap();
        assert_eq!(fs::read_link(&on_pfs).unwrap().to_str().unwrap(), "/abs/target");
    }

    #[test]
    fn a_stage_out_keeps_modes_times_and_user_xattrs_and_a_private_directory_stays_private() {
        use std::os::unix::fs::MetadataExt;
        let f = fixture();
        let (old, older) = (1_000_000_000_123_456_789, 900_000_000_000_000_001);
        f.ns.mkdir("/priv", 0o700).unwrap();
        f.ns.mkdir("/priv/shared", 0o751).unwrap();
        let file = f.ns.open("/priv/shared/data", CREATE | WRITE, 0o640, Layout::INHERIT).unwrap();
        f.ns.set_xattr("/priv/shared/data", "user.origin", Some(b"\0run 7"), 0).unwrap();
        f.ns.set_xattr("/priv", "user.project", Some(b"climate"), 0).unwrap();
        f.ns.set_attr("/priv/shared/data", &mode_and_mtime(KEEP_MODE, older)).unwrap();
        f.ns.symlink("/priv/link", "shared/data").unwrap();
        f.ns.set_attr("/priv/link", &mode_and_mtime(KEEP_MODE, older)).unwrap();
        for dir in ["/priv/shared", "/priv"] {
            f.ns.set_attr(dir, &mode_and_mtime(KEEP_MODE, old)).unwrap();
        }
        let temp = f.ns.stage_begin("/priv/shared/data", 4).unwrap();
        let host = |p: &str| f.pfs().join(p);
        let mode = |p: &str| fs::symlink_metadata(host(p)).unwrap().mode() & 0o7777;
        let mtime = |p: &str| {
            let m = fs::symlink_metadata(host(p)).unwrap();
            m.mtime() * 1_000_000_000 + m.mtime_nsec()
        };
        assert_eq!((mode("priv"), mode("priv/shared")), (0o700, 0o700), "made private while the copy is under way");
        fs::write(host(&temp[1..]), b"data").unwrap();
        f.ns.stage_commit("/priv/shared/data", file.ino, &temp, 4, 7, 0).unwrap();
        // The objects wrote nothing after the utimens: the time set stands.
        assert_eq!((mode("priv/shared/data"), mtime("priv/shared/data")), (0o640, older));
        assert_eq!(f.ns.pfs.xattrs("/priv/shared/data").unwrap(), [("user.origin".to_string(), b"\0run 7".to_vec())]);
        assert_eq!((mode("priv/shared"), mtime("priv/shared")), (0o751, old), "times given back after the commit");
        f.ns.stage_begin("/priv/link", 0).unwrap();
        assert_eq!(mtime("priv/link"), older, "a link's own time, not its target's");
        f.ns.stage_dir("/priv/shared").unwrap();
        f.ns.stage_dir("/priv").unwrap();
        assert_eq!((mode("priv"), mtime("priv")), (0o700, old));
        assert_eq!(f.ns.pfs.xattrs("/priv").unwrap(), [("user.project".to_string(), b"climate".to_vec())]);
        assert_eq!(errno(f.ns.stage_dir("/priv/shared/data")), Errno::ENOTDIR);
        // Written after a stage-out: the objects' time is the file's.
        let temp = f.ns.stage_begin("/priv/shared/data", 4).unwrap();
        fs::write(host(&temp[1..]), b"new!").unwrap();
        let written = 2_000_000_000_000_000_007;
        f.ns.stage_commit("/priv/shared/data", file.ino, &temp, 4, 8, written).unwrap();
        assert_eq!(mtime("priv/shared/data"), written);
    }

    #[test]
    fn user_xattrs_live_with_their_inode_links_have_none_and_pfs_only_files_serve_their_copys() {
        let f = fixture();
        create(&f.ns, "/a");
        f.ns.set_xattr("/a", "user.k", Some(b"v"), xattr_flags::CREATE).unwrap();
        assert_eq!(f.ns.get_xattr("/a", "user.k").unwrap(), b"v");
        assert_eq!(errno(f.ns.get_xattr("/a", "user.none")), Errno(libc::ENODATA));
        assert_eq!(errno(f.ns.get_xattr("/a", "security.selinux")), Errno(libc::EOPNOTSUPP));
        assert_eq!(errno(f.ns.set_xattr("/a", "trusted.x", Some(b""), 0)), Errno(libc::EOPNOTSUPP));
        assert_eq!(f.ns.list_xattr("/a").unwrap(), b"user.k\0");
        // A rename keeps them (the inode), a removal drops them, a new file at the name has none.
        f.ns.rename("/a", "/b", false).unwrap();
        assert_eq!(f.ns.get_xattr("/b", "user.k").unwrap(), b"v");
        f.ns.unlink("/b", false).unwrap();
        create(&f.ns, "/b");
        assert!(f.ns.list_xattr("/b").unwrap().is_empty());
        f.ns.set_xattr("/", "user.root", Some(b"r"), 0).unwrap();
        assert_eq!(f.ns.list_xattr("/").unwrap(), b"user.root\0");
        f.ns.set_xattr("/", "user.root", None, 0).unwrap();
        assert_eq!(errno(f.ns.set_xattr("/", "user.root", None, 0)), Errno(libc::ENODATA));
        f.ns.symlink("/l", "b").unwrap();
        assert_eq!(errno(f.ns.set_xattr("/l", "user.k", Some(b""), 0)), Errno(libc::EPERM));
        assert!(f.ns.list_xattr("/l").unwrap().is_empty());
        fs::write(f.pfs().join("old"), b"from before").unwrap();
        rustix::fs::setxattr(f.pfs().join("old"), "user.kept", b"yes", rustix::fs::XattrFlags::empty()).unwrap();
        assert_eq!(f.ns.get_xattr("/old", "user.kept").unwrap(), b"yes");
        assert_eq!(f.ns.list_xattr("/old").unwrap(), b"user.kept\0");
        assert_eq!(errno(f.ns.set_xattr("/old", "user.k", Some(b""), 0)), Errno::EROFS);
    }

    #[test]
    fn files_striped_on_a_lost_daemon_are_marked_lost_refuse_opens_and_stage_outs_until_rewritten() {
        let f = fixture();
        let on = |count, first| Layout { stripe_count: count, stripe_size: 1 << 20, first };
        let wide = f.ns.open("/wide", CREATE | WRITE, 0o644, on(3, 0)).unwrap();
        let elsewhere = f.ns.open("/elsewhere", CREATE | WRITE, 0o644, on(1, 2)).unwrap();
        let listed = f.ns.open("/listed", CREATE | WRITE, 0o644, on(1, 2)).unwrap();
        f.ns.mkdir("/d", 0o755).unwrap();
        let reply = f.ns.mark_lost(1, true, &[]).unwrap();
        assert_eq!(reply.files, 1);
        assert!(reply.next_ino > listed.ino);
        assert_eq!(f.ns.stat("/wide").unwrap().tier, Tier::Lost);
        assert_eq!(f.ns.stat("/elsewhere").unwrap().tier, Tier::Buffer);
        assert_eq!(f.ns.mark_lost(2, false, &[listed.ino]).unwrap().files, 1);
        assert_eq!(f.ns.stat("/elsewhere").unwrap().ino, elsewhere.ino);
        assert_eq!(f.ns.unstaged_files().unwrap(), FileCounts { unstaged: 1, lost: 2 });
        let refused = f.ns.open("/wide", 0, 0, Layout::INHERIT).unwrap_err();
        assert_eq!(refused.errno, Errno::EIO);
        assert!(refused.message.contains("lost on daemon 1"), "{}", refused.message);
        assert_eq!(errno(f.ns.open("/listed", WRITE, 0, Layout::INHERIT)), Errno::EIO);
        assert!(f.ns.stage_begin("/wide", 1).unwrap_err().message.contains("lost on daemon 1"));
        f.ns.set_attr("/wide", &mode_and_mtime(0o600, KEEP_MTIME)).unwrap();
        assert_eq!(f.ns.stat("/wide").unwrap().tier, Tier::Lost, "a chmod keeps it lost");
        // Replacing the contents makes it a buffer file again; removing it is always allowed.
        let back = f.ns.open("/wide", WRITE | TRUNC, 0, Layout::INHERIT).unwrap();
        assert_eq!((back.ino, back.tier), (wide.ino, Tier::Buffer));
        f.ns.unlink("/listed", false).unwrap();
        assert_eq!(f.ns.unstaged_files().unwrap().lost, 0);
    }

    #[test]
    fn stage_begin_commit_and_abort() {
        let f = fixture();
        f.ns.mkdir("/out", 0o755).unwrap();
        let file = f.ns.open("/out/ckpt", CREATE | WRITE, 0o640, Layout::INHERIT).unwrap();
        assert_eq!(errno(f.ns.stage_begin("/out", 1)), Errno::EISDIR);
        assert_eq!(errno(f.ns.stage_begin("/nope", 1)), Errno::ENOENT);
        let temp = f.ns.stage_begin("/out/ckpt", 4).unwrap();
        assert!(temp.starts_with("/out/.ckpt.surge-stage."));
        assert!(names(&f.ns, "/out") == ["ckpt"]);
        fs::write(f.pfs().join(&temp[1..]), b"data").unwrap();
        assert_eq!(errno(f.ns.stage_commit("/out/ckpt", file.ino + 1, &temp, 4, 7, 0)), Errno::EINVAL);
        assert_eq!(
            f.ns.unstaged_files().unwrap().unstaged,
            1,
            "a new file waits for its stage-out (the directory does not)"
        );
        let staged = f.ns.stage_commit("/out/ckpt", file.ino, &temp, 4, 7, 0).unwrap();
        assert_eq!((staged.tier, staged.staged_version), (Tier::Staged, 7));
        assert_eq!(fs::read(f.pfs().join("out/ckpt")).unwrap(), b"data");
        assert_eq!(f.ns.unstaged_files().unwrap().unstaged, 0);
        // Opening for writing, or changing attributes, makes the PFS copy stale again.
        assert_eq!(f.ns.open("/out/ckpt", WRITE, 0, Layout::INHERIT).unwrap().tier, Tier::Buffer);
        assert_eq!(f.ns.unstaged_files().unwrap().unstaged, 1);
        assert_eq!(f.ns.stat("/out/ckpt").unwrap().tier, Tier::Buffer);
        assert_eq!(f.ns.stat("/out/ckpt").unwrap().staged_version, 0);
        let temp = f.ns.stage_begin("/out/ckpt", 4).unwrap();
        fs::write(f.pfs().join(&temp[1..]), b"data").unwrap();
        f.ns.stage_commit("/out/ckpt", file.ino, &temp, 4, 8, 0).unwrap();
        assert_eq!(f.ns.set_attr("/out/ckpt", &mode_and_mtime(0o600, KEEP_MTIME)).unwrap().tier, Tier::Buffer);
        // The file was replaced during a stage-out: the commit is refused and the temp removed.
        let temp = f.ns.stage_begin("/out/ckpt", 0).unwrap();
        f.ns.unlink("/out/ckpt", false).unwrap();
        create(&f.ns, "/out/ckpt");
        assert_eq!(errno(f.ns.stage_commit("/out/ckpt", file.ino, &temp, 0, 1, 0)), Errno(libc::ESTALE));
        assert!(!f.pfs().join(&temp[1..]).exists());
        let temp = f.ns.stage_begin("/out/ckpt", 10).unwrap();
        f.ns.stage_abort(&temp).unwrap();
        assert!(!f.pfs().join(&temp[1..]).exists());
        assert_eq!(errno(f.ns.stage_abort("/out/ckpt")), Errno::EINVAL);
        assert_eq!(
            errno(f.ns.stage_commit("/out/ckpt", file.ino, "/elsewhere/.ckpt.surge-stage.2.abcdef12", 0, 1, 0)),
            Errno::EINVAL
        );
    }

    #[test]
    fn set_attr_changes_mode_and_mtime_and_refuses_pfs_only_files() {
        let f = fixture();
        create(&f.ns, "/a");
        let a = f.ns.set_attr("/a", &mode_and_mtime(0o100600, KEEP_MTIME)).unwrap();
        assert_eq!(a.mode, 0o600);
        let b = f.ns.set_attr("/a", &mode_and_mtime(KEEP_MODE, 1_000_000_000)).unwrap();
        assert_eq!((b.mode, b.mtime_ns), (0o600, 1_000_000_000));
        assert!(b.ctime_ns >= a.ctime_ns);
        assert_eq!(f.ns.set_attr("/", &mode_and_mtime(0o700, KEEP_MTIME)).unwrap().mode, 0o700);
        assert_eq!(errno(f.ns.set_attr("/missing", &mode_and_mtime(0o600, KEEP_MTIME))), Errno::ENOENT);
        std::fs::create_dir(f.pfs().join("old")).unwrap();
        std::fs::write(f.pfs().join("old/data"), b"x").unwrap();
        assert_eq!(errno(f.ns.set_attr("/old/data", &mode_and_mtime(0o600, KEEP_MTIME))), Errno::EROFS);
        assert_eq!(f.ns.set_attr("/old", &mode_and_mtime(0o711, KEEP_MTIME)).unwrap().mode, 0o711);
        assert_eq!(f.ns.stat("/old").unwrap().mode, 0o711);
    }

    #[test]
    fn the_namespace_survives_a_reopen() {
        let f = fixture();
        f.ns.mkdir("/keep", 0o755).unwrap();
        let a = create(&f.ns, "/keep/a");
        let Fixture { dir, ns } = f;
        drop(ns);
        let pfs = Arc::new(Pfs::open(&dir.path().join("pfs")).unwrap());
        let custom = Layout { stripe_count: 1, ..Layout::ROOT_DEFAULT };
        let ns = Namespace::load(&dir.path().join("ns.redb"), pfs, 3, custom).unwrap();
        assert_eq!(ns.stat("/keep/a").unwrap(), Attr { created: false, ..a });
        // The root layout is set when the namespace is created, not on reopen.
        assert_eq!(ns.stat("/").unwrap().layout, Layout::ROOT_DEFAULT);
        assert!(create(&ns, "/b").ino > a.ino);
    }

    /// Runs `work` on the namespace in `dir` (with `interval`) in a forked
    /// child that then dies without closing or flushing anything, as a
    /// daemon killed with SIGKILL does.
    fn crash_after(dir: &Path, interval: Duration, work: impl FnOnce(&Namespace)) {
        // SAFETY: the child uses only its own namespace (no lock another
        // thread of the test process could hold) and ends with _exit.
        match unsafe { libc::fork() } {
            0 => {
                let worked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let pfs = Arc::new(Pfs::open(&dir.join("pfs")).unwrap());
                    let ns = Namespace::load(&dir.join("ns.redb"), pfs, 3, Layout::ROOT_DEFAULT)
                        .unwrap()
                        .with_commit_interval(interval);
                    work(&ns);
                    std::mem::forget(ns);
                }));
                // SAFETY: ends the child at once, running no destructor.
                unsafe { libc::_exit(i32::from(worked.is_err())) }
            }
            child => {
                let mut status = 0;
                // SAFETY: waiting for our own child.
                assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child failed: {status:#x}");
            }
        }
    }

    fn reopen(dir: &Path) -> Namespace {
        let pfs = Arc::new(Pfs::open(&dir.join("pfs")).unwrap());
        Namespace::load(&dir.join("ns.redb"), pfs, 3, Layout::ROOT_DEFAULT).unwrap()
    }

    #[test]
    fn a_crash_loses_only_changes_nobody_synced_and_never_hands_their_inode_numbers_out_again() {
        let Fixture { dir, ns } = fixture();
        drop(ns);
        let lost_ino = dir.path().join("lost-ino");
        crash_after(dir.path(), Duration::from_secs(3600), |ns| {
            ns.mkdir("/d", 0o755).unwrap();
            create(ns, "/d/kept");
            ns.sync().unwrap();
            let lost = create(ns, "/d/lost");
            ns.rename("/d/kept", "/d/moved", false).unwrap();
            assert_eq!(ns.stat("/d/lost").unwrap().ino, lost.ino, "a change is visible before it is durable");
            fs::write(&lost_ino, lost.ino.to_le_bytes()).unwrap();
        });
        let lost = u64::from_le_bytes(fs::read(&lost_ino).unwrap().try_into().unwrap());
        let ns = reopen(dir.path());
        assert_eq!(names(&ns, "/d"), ["kept"], "the synced create stays, the rest is rolled back whole");
        assert!(create(&ns, "/d/new").ino > lost, "a lost create's inode number (and objects) stay unused");
    }

    #[test]
    fn with_a_commit_interval_of_0_every_change_is_durable_when_acknowledged() {
        let Fixture { dir, ns } = fixture();
        drop(ns);
        crash_after(dir.path(), Duration::ZERO, |ns| {
            create(ns, "/a");
            ns.mkdir("/d", 0o700).unwrap();
        });
        assert_eq!(names(&reopen(dir.path()), "/"), ["a", "d"]);
    }

    #[test]
    fn a_removal_is_durable_before_the_deleter_is_told_its_objects_may_go() {
        let Fixture { dir, ns } = fixture();
        drop(ns);
        crash_after(dir.path(), Duration::from_secs(3600), |ns| {
            let gone = create(ns, "/gone");
            ns.sync().unwrap();
            ns.unlink("/gone", false).unwrap();
            assert_eq!(ns.doomed_due(10).unwrap().iter().map(|d| d.ino).collect::<Vec<_>>(), [gone.ino]);
        });
        let ns = reopen(dir.path());
        assert_eq!(errno(ns.stat("/gone")), Errno::ENOENT, "a name whose objects the deleter removes never comes back");
        assert_eq!(ns.doomed_counts().unwrap(), (1, 0));
    }

    #[test]
    fn a_namespace_dropped_after_a_clean_stop_keeps_its_grouped_changes() {
        let Fixture { dir, ns } = fixture();
        let ns = ns.with_commit_interval(Duration::from_secs(3600));
        create(&ns, "/a");
        drop(ns);
        assert_eq!(names(&reopen(dir.path()), "/"), ["a"]);
    }

    #[test]
    fn removed_files_are_doomed_with_their_layout_until_forgotten() {
        let f = fixture();
        let a = create(&f.ns, "/a");
        let b = create(&f.ns, "/b");
        let c = create(&f.ns, "/c");
        f.ns.mkdir("/d", 0o755).unwrap();
        f.ns.unlink("/a", false).unwrap();
        // The file a rename replaces is doomed too; `keep` holds it.
        f.ns.rename("/c", "/b", true).unwrap();
        f.ns.rmdir("/d").unwrap();
        assert_eq!(f.ns.doomed_counts().unwrap(), (2, 1));
        let due = f.ns.doomed_due(10).unwrap();
        assert_eq!(due, [Doomed { ino: a.ino, layout: a.layout, held_until_ns: 0 }]);
        let in_use = f.ns.inodes_in_use().unwrap();
        assert!([a.ino, b.ino, c.ino].iter().all(|ino| in_use.contains(ino)), "live and doomed files stay");
        f.ns.forget_doomed(a.ino).unwrap();
        assert!(f.ns.doomed_due(10).unwrap().is_empty());
        f.ns.release(b.ino).unwrap();
        f.ns.release(b.ino).unwrap();
        assert_eq!(f.ns.doomed_due(10).unwrap().iter().map(|d| d.ino).collect::<Vec<_>>(), [b.ino]);
        f.ns.forget_doomed(b.ino).unwrap();
        assert_eq!(f.ns.doomed_counts().unwrap(), (0, 0));
        assert_eq!(f.ns.inodes_in_use().unwrap(), HashSet::from([c.ino]));
    }

    /// Removes entry `path` behind the namespace's back (as a torn or
    /// hand-edited database would have it), leaving the inode's record.
    fn drop_entry_alone(ns: &Namespace, path: &str) {
        ns.write(|w| w.delete(Entry::of(path).unwrap())).unwrap();
    }

    #[test]
    fn an_audit_sees_every_file_by_inode_with_its_names_and_finds_link_counts_that_disagree() {
        let f = fixture();
        let a = create(&f.ns, "/a");
        f.ns.link("/a", "/b").unwrap();
        let c = create(&f.ns, "/c");
        f.ns.unlink("/c", true).unwrap();
        let audit = f.ns.audit().unwrap();
        assert_eq!(audit.files.len(), 1, "one inode of two names");
        let file = &audit.files[&a.ino];
        assert_eq!(
            (file.names.as_slice(), file.nlink, file.has_objects),
            (&["/a".into(), "/b".into()][..], Some(2), true)
        );
        assert!(audit.unnamed.is_empty());
        assert_eq!(audit.doomed.iter().map(|d| (d.ino, d.held())).collect::<Vec<_>>(), [(c.ino, true)]);

        drop_entry_alone(&f.ns, "/b");
        let audit = f.ns.audit().unwrap();
        assert_eq!((audit.files[&a.ino].names.len(), audit.files[&a.ino].nlink), (1, Some(2)));
        assert!(f.ns.fix_link_count(a.ino, &audit.files[&a.ino].names).unwrap());
        assert_eq!(f.ns.stat("/a").unwrap().nlink, 1);
        assert_eq!(f.ns.audit().unwrap().files[&a.ino].nlink, Some(1));
        // The last name's removal dooms it, as any file's.
        f.ns.unlink("/a", false).unwrap();
        assert!(f.ns.doomed_due(10).unwrap().iter().any(|d| d.ino == a.ino));
    }

    #[test]
    fn an_inode_record_no_name_names_is_dropped_and_its_objects_doomed_and_a_live_one_never() {
        let f = fixture();
        let a = create(&f.ns, "/a");
        f.ns.link("/a", "/b").unwrap();
        assert!(!f.ns.drop_unnamed_inode(a.ino).unwrap(), "an inode with names keeps its record");
        drop_entry_alone(&f.ns, "/a");
        drop_entry_alone(&f.ns, "/b");
        let audit = f.ns.audit().unwrap();
        assert!(audit.files.is_empty());
        assert_eq!(audit.unnamed, [(a.ino, 2)]);
        assert!(f.ns.drop_unnamed_inode(a.ino).unwrap());
        assert!(f.ns.audit().unwrap().unnamed.is_empty());
        assert_eq!(f.ns.doomed_due(10).unwrap(), [Doomed { ino: a.ino, layout: a.layout, held_until_ns: 0 }]);
    }

    #[test]
    fn a_name_of_several_whose_inode_record_is_missing_audits_as_dangling() {
        let f = fixture();
        let a = create(&f.ns, "/a");
        f.ns.link("/a", "/b").unwrap();
        f.ns.write(|w| {
            w.tables.inodes.remove(a.ino)?;
            w.dirty = true;
            Ok(())
        })
        .unwrap();
        assert_eq!(f.ns.audit().unwrap().files[&a.ino].nlink, None);
    }

    #[test]
    fn two_names_of_one_inode_without_its_record_are_made_links_of_one_record() {
        let f = fixture();
        let a = create(&f.ns, "/a");
        // A copy of /a's entry under another name, as a torn rename could leave it.
        f.ns.write(|w| {
            let rec = w.entry("/", "a")?.unwrap();
            w.put(Entry::of("/b").unwrap(), &rec)
        })
        .unwrap();
        let audit = f.ns.audit().unwrap();
        assert_eq!((audit.files[&a.ino].names.len(), audit.files[&a.ino].nlink), (2, Some(1)));
        assert!(f.ns.fix_link_count(a.ino, &audit.files[&a.ino].names).unwrap());
        assert_eq!((f.ns.stat("/a").unwrap().nlink, f.ns.stat("/b").unwrap().nlink), (2, 2));
        f.ns.unlink("/b", false).unwrap();
        assert!(f.ns.doomed_due(10).unwrap().is_empty(), "removing one name leaves the other's data");
        assert_eq!(f.ns.stat("/a").unwrap().nlink, 1);
    }

    #[test]
    fn a_removal_asks_whether_to_keep_the_file_it_removes_by_its_canonical_path_and_inode() {
        let f = fixture();
        let a = create(&f.ns, "/a");
        let b = create(&f.ns, "/b");
        create(&f.ns, "/c");
        let asked = std::sync::Mutex::new(Vec::new());
        let held = |path: &str, ino: u64| {
            asked.lock().unwrap().push((path.to_string(), ino));
            ino == b.ino
        };
        f.ns.unlink("//a", held).unwrap();
        f.ns.rename("/c", "/./b", held).unwrap();
        f.ns.rename("/b", "/d", held).unwrap(); // replaces nothing: nothing to ask
        assert_eq!(*asked.lock().unwrap(), [("/a".to_string(), a.ino), ("/b".to_string(), b.ino)]);
        assert_eq!(f.ns.kept_doomed().unwrap(), [b.ino]);
        f.ns.release(b.ino).unwrap();
        assert!(f.ns.kept_doomed().unwrap().is_empty());
    }

    #[test]
    fn a_kept_file_is_due_once_its_hold_lease_ends_and_doomed_records_survive_a_reopen() {
        let mut f = fixture();
        f.ns.hold_lease = Duration::ZERO;
        let a = create(&f.ns, "/a");
        f.ns.unlink("/a", true).unwrap();
        assert_eq!(f.ns.doomed_due(10).unwrap().len(), 1, "a hold lease of zero has ended at once");
        let Fixture { dir, ns } = f;
        drop(ns);
        let pfs = Arc::new(Pfs::open(&dir.path().join("pfs")).unwrap());
        let ns = Namespace::load(&dir.path().join("ns.redb"), pfs, 3, Layout::ROOT_DEFAULT).unwrap();
        assert_eq!(ns.doomed_due(10).unwrap()[0].ino, a.ino);
    }

    #[test]
    fn set_tier_and_evict_move_a_file_between_tiers_and_refuse_a_stale_inode() {
        let f = fixture();
        let a = create(&f.ns, "/a");
        // No PFS copy yet: nothing to mark staged.
        assert_eq!(errno(f.ns.set_tier("/a", a.ino, Tier::Staged, 5)), Errno::ENOENT);
        fs::write(f.pfs().join("a"), b"copy").unwrap();
        assert_eq!(f.ns.set_tier("/a", a.ino, Tier::Staged, 5).unwrap().staged_version, 5);
        assert_eq!(errno(f.ns.set_tier("/a", a.ino + 1, Tier::Buffer, 0)), Errno(libc::ESTALE));
        assert_eq!(errno(f.ns.set_tier("/a", a.ino, Tier::Pfs, 0)), Errno::EINVAL);
        assert_eq!(errno(f.ns.evict("/a", a.ino, 4)), Errno(libc::ESTALE), "another version was staged");
        let evicted = f.ns.evict("/a", a.ino, 5).unwrap();
        assert_eq!((evicted.tier, evicted.size), (Tier::Pfs, 4));
        assert_eq!(f.ns.doomed_due(10).unwrap()[0].ino, a.ino);
        assert_eq!(f.ns.counts().unwrap(), (0, 0));
        let b = create(&f.ns, "/b");
        fs::write(f.pfs().join("b"), b"copy").unwrap();
        f.ns.set_tier("/b", b.ino, Tier::Staged, 9).unwrap();
        assert_eq!(f.ns.set_tier("/b", b.ino, Tier::Buffer, 0).unwrap().tier, Tier::Buffer);
        assert_eq!(errno(f.ns.evict("/b", b.ino, 9)), Errno(libc::ESTALE), "not staged any more");
    }

    /// Stages `path` (a new buffer file) with `bytes` as its PFS copy.
    fn staged(f: &Fixture, path: &str, bytes: &[u8]) -> Attr {
        let file = create(&f.ns, path);
        let temp = f.ns.stage_begin(path, bytes.len() as u64).unwrap();
        fs::write(f.pfs().join(&temp[1..]), bytes).unwrap();
        f.ns.stage_commit(path, file.ino, &temp, bytes.len() as u64, 7, 0).unwrap()
    }

    #[test]
    fn a_pfs_copy_removed_truncated_or_touched_outside_surge_unstages_the_file_and_is_never_evicted_to() {
        let f = fixture();
        let touch = |path: &std::path::Path| {
            let file = fs::File::options().write(true).open(path).unwrap();
            file.set_modified(SystemTime::now() + Duration::from_secs(60)).unwrap();
        };
        type Change<'a> = (&'a str, &'a dyn Fn(&std::path::Path));
        let changes: [Change<'_>; 4] = [
            ("/removed", &|p| fs::remove_file(p).unwrap()),
            ("/truncated", &|p| fs::File::options().write(true).open(p).unwrap().set_len(100).unwrap()),
            ("/touched", &touch),
            ("/replaced", &|p| {
                fs::remove_file(p).unwrap();
                fs::write(p, b"0123456789").unwrap();
            }),
        ];
        for (path, change) in changes {
            let file = staged(&f, path, b"0123456789");
            assert_eq!(f.ns.stat(path).unwrap().tier, Tier::Staged, "{path} untouched is staged");
            change(&f.pfs().join(&path[1..]));
            let err = f.ns.evict(path, file.ino, 7).unwrap_err();
            assert_eq!(err.errno, Errno(libc::ESTALE), "{path}: {err}");
            assert!(err.message.contains("is not the one staged"), "{path}: {err}");
            let now = f.ns.stat(path).unwrap();
            assert_eq!((now.tier, now.staged_version), (Tier::Buffer, 0), "{path}");
            assert_eq!(f.ns.open(path, 0, 0, Layout::INHERIT).unwrap().tier, Tier::Buffer);
        }
        assert_eq!(f.ns.unstaged_files().unwrap().unstaged, 4, "every one waits for its stage-out again");
    }

    #[test]
    fn a_stat_sees_a_changed_copy_and_a_pfs_read_of_it_is_refused_by_name() {
        let f = fixture();
        let file = staged(&f, "/ckpt", b"0123456789");
        let copy = f.pfs().join("ckpt");
        let now = |f: &Fixture| crate::pfs::node_of(&fs::symlink_metadata(f.pfs().join("ckpt")).unwrap()).unwrap();
        f.ns.check_copy_read("/ckpt", &now(&f)).unwrap();
        fs::File::options().write(true).open(&copy).unwrap().set_len(3).unwrap();
        let err = f.ns.check_copy_read("/ckpt", &now(&f)).unwrap_err();
        assert_eq!(err.errno, Errno::EIO);
        assert!(err.message.contains("/ckpt: its PFS copy is not the one staged"), "{err}");
        assert!(err.message.contains("size changed from 10 to 3"), "{err}");
        assert_eq!(f.ns.stat("/ckpt").unwrap().tier, Tier::Buffer);
        // Staged again: the new copy is the one trusted.
        let temp = f.ns.stage_begin("/ckpt", 10).unwrap();
        fs::write(f.pfs().join(&temp[1..]), b"0123456789").unwrap();
        f.ns.stage_commit("/ckpt", file.ino, &temp, 10, 8, 0).unwrap();
        f.ns.check_copy_read("/ckpt", &now(&f)).unwrap();
        assert_eq!(f.ns.evict("/ckpt", file.ino, 8).unwrap().tier, Tier::Pfs);
    }

    #[test]
    fn a_rename_keeps_a_staged_file_staged_but_not_one_whose_copy_changed() {
        let f = fixture();
        let a = staged(&f, "/a", b"aaaa");
        f.ns.rename("/a", "/a2", false).unwrap();
        let moved = f.ns.stat("/a2").unwrap();
        assert_eq!((moved.tier, moved.staged_version), (Tier::Staged, 7), "rename(2) moved the copy's ctime on");
        staged(&f, "/b", b"bbbb");
        fs::write(f.pfs().join("b"), b"BBBB").unwrap();
        f.ns.rename("/b", "/b2", false).unwrap();
        assert_eq!(f.ns.stat("/b2").unwrap().tier, Tier::Buffer);
        assert_eq!(f.ns.evict("/a2", a.ino, 7).unwrap().tier, Tier::Pfs);
    }

    #[test]
    fn with_the_pfs_root_gone_a_staged_file_is_not_current_but_stays_staged_for_when_it_returns() {
        let f = fixture();
        let file = staged(&f, "/kept", b"data");
        let (root, away) = (f.pfs(), f.dir.path().join("pfs-unmounted"));
        fs::rename(&root, &away).unwrap();
        assert_eq!(f.ns.stat("/kept").unwrap().tier, Tier::Buffer);
        assert_eq!(errno(f.ns.evict("/kept", file.ino, 7)), Errno(libc::ESTALE));
        fs::rename(&away, &root).unwrap();
        assert_eq!(f.ns.stat("/kept").unwrap().tier, Tier::Staged);
    }

    #[test]
    fn a_format_1_namespace_is_taken_and_its_unstamped_staged_files_are_staged_again() {
        let f = fixture();
        let file = create(&f.ns, "/old");
        let Fixture { dir, ns } = f;
        // What a daemon of format 1 wrote: a staged record without a stamp, format 1.
        ns.write(|w| {
            let e = Entry::of("/old").unwrap();
            let rec = w.entry(e.dir, e.name)?.unwrap();
            let old = Record { tier: Tier::Staged, staged_version: 3, ..rec };
            w.tables.entries.insert((e.dir, e.name), unowned_encoding(&old).as_slice())?;
            w.tables.config.insert(ROOT, unowned_encoding(&w.root()?).as_slice())?;
            w.set_counter(FORMAT, FORMAT_UNSTAMPED)
        })
        .unwrap();
        drop(ns);
        fs::write(dir.path().join("pfs/old"), b"copy").unwrap();
        let pfs = Arc::new(Pfs::open(&dir.path().join("pfs")).unwrap());
        let ns = Namespace::load(&dir.path().join("ns.redb"), pfs, 3, Layout::ROOT_DEFAULT).unwrap();
        assert_eq!(ns.stat("/old").unwrap().tier, Tier::Buffer);
        assert_eq!(errno(ns.evict("/old", file.ino, 3)), Errno(libc::ESTALE));
        assert_eq!(ns.read(|r| get_counter(&r.config, FORMAT)).unwrap(), FORMAT_VERSION);
    }

    #[test]
    fn a_hard_link_is_one_inode_with_two_names_until_the_last_name_goes() {
        let f = fixture();
        let file = create(&f.ns, "/a");
        f.ns.mkdir("/d", 0o755).unwrap();
        let linked = f.ns.link("/a", "/d/b").unwrap();
        assert_eq!((linked.ino, linked.nlink), (file.ino, 2));
        f.ns.set_attr("/d/b", &mode_and_mtime(0o600, KEEP_MTIME)).unwrap();
        assert_eq!(f.ns.stat("/a").unwrap().mode, 0o600, "one inode: a change through one name shows through both");
        assert_eq!(errno(f.ns.link("/a", "/d/b")), Errno::EEXIST);
        assert_eq!(errno(f.ns.link("/d", "/d2")), Errno(libc::EPERM));
        // Renaming one name over the other changes nothing (rename(2)).
        assert_eq!(f.ns.rename("/a", "/d/b", false).unwrap(), Removed(None));
        assert_eq!(f.ns.stat("/a").unwrap().nlink, 2);
        assert_eq!(f.ns.unlink("/a", false).unwrap(), Removed(None), "the inode has another name");
        assert!(f.ns.doomed_due(10).unwrap().is_empty());
        assert_eq!(f.ns.stat("/d/b").unwrap().nlink, 1);
        assert!(f.ns.inodes_in_use().unwrap().contains(&file.ino));
        f.ns.rename("/d/b", "/c", false).unwrap();
        assert_eq!(f.ns.unlink("/c", false).unwrap().0.map(|a| a.ino), Some(file.ino));
        assert_eq!(f.ns.doomed_due(10).unwrap().iter().map(|d| d.ino).collect::<Vec<_>>(), [file.ino]);
    }

    #[test]
    fn each_name_of_a_hard_linked_file_is_staged_on_its_own_and_not_evicted_while_it_has_several() {
        let f = fixture();
        let file = create(&f.ns, "/a");
        f.ns.link("/a", "/b").unwrap();
        let temp = f.ns.stage_begin("/a", 4).unwrap();
        fs::write(f.pfs().join(&temp[1..]), b"data").unwrap();
        let staged = f.ns.stage_commit("/a", file.ino, &temp, 4, 7, 0).unwrap();
        assert_eq!((staged.tier, staged.staged_version), (Tier::Staged, 7));
        let unstaged: Vec<String> = f.ns.unstaged().unwrap().into_iter().map(|(path, _)| path).collect();
        assert_eq!(unstaged, ["/b"], "the other name has no copy yet");
        assert_eq!(errno(f.ns.evict("/a", file.ino, 7)), Errno(libc::ESTALE));
        let copy = crate::pfs::node_of(&fs::symlink_metadata(f.pfs().join("a")).unwrap()).unwrap();
        assert_eq!(errno(f.ns.check_copy_read("/a", &copy)), Errno::EIO);
        assert_eq!(f.ns.stat("/b").unwrap().tier, Tier::Buffer);
        // Its last name is evicted as any file.
        f.ns.unlink("/b", false).unwrap();
        assert_eq!(f.ns.evict("/a", file.ino, 7).unwrap().tier, Tier::Pfs);
        assert_eq!(f.ns.doomed_due(10).unwrap().iter().map(|d| d.ino).collect::<Vec<_>>(), [file.ino]);
    }

    #[test]
    fn nodes_without_data_are_made_with_their_kind_owner_and_device_and_never_staged() {
        let f = fixture();
        let fifo = f.ns.mknod("/fifo", FileKind::Fifo, 0o640, 99, 1000, 100).unwrap();
        assert_eq!((fifo.kind, fifo.mode, fifo.rdev, fifo.uid, fifo.gid), (FileKind::Fifo, 0o640, 0, 1000, 100));
        let dev = f.ns.mknod("/dev", FileKind::BlockDevice, 0o600, 0x0801, 0, 0).unwrap();
        assert_eq!((f.ns.stat("/dev").unwrap().kind, dev.rdev), (FileKind::BlockDevice, 0x0801));
        assert_eq!(errno(f.ns.mknod("/fifo", FileKind::Socket, 0o600, 0, 0, 0)), Errno::EEXIST);
        assert_eq!(errno(f.ns.mknod("/f", FileKind::File, 0o600, 0, 0, 0)), Errno::EINVAL);
        assert_eq!(errno(f.ns.stage_begin("/fifo", 0)), Errno::EINVAL);
        assert!(f.ns.unstaged().unwrap().is_empty());
        assert_eq!(f.ns.unlink("/fifo", false).unwrap().0.map(|a| a.kind), Some(FileKind::Fifo));
        assert!(f.ns.doomed_due(10).unwrap().is_empty(), "no objects to delete");
    }

    #[test]
    fn owner_group_and_access_time_are_set_apart_and_the_change_time_moves() {
        let f = fixture();
        let made = create(&f.ns, "/a");
        assert_eq!((made.uid, made.gid, made.atime_ns), (CLUSTER_USER, CLUSTER_USER, made.mtime_ns));
        let change = AttrChange { mode: KEEP_MODE, uid: 1000, gid: KEEP_ID, atime_ns: 5, mtime_ns: KEEP_MTIME };
        let set = f.ns.set_attr("/a", &change).unwrap();
        assert_eq!((set.uid, set.gid, set.atime_ns, set.mtime_ns), (1000, CLUSTER_USER, 5, made.mtime_ns));
        assert!(set.ctime_ns >= made.ctime_ns);
        f.ns.symlink("/l", "a").unwrap();
        let lchown = AttrChange { gid: 7, ..change };
        assert_eq!(f.ns.set_attr("/l", &lchown).unwrap().gid, 7, "a link's owner changes (lchown)");
    }

    #[test]
    fn a_set_group_id_directory_passes_its_group_on_and_the_bit_to_its_directories() {
        let f = fixture();
        f.ns.mkdir("/shared", 0o755).unwrap();
        let setgid = AttrChange { mode: 0o2775, uid: KEEP_ID, gid: 300, atime_ns: KEEP_MTIME, mtime_ns: KEEP_MTIME };
        f.ns.set_attr("/shared", &setgid).unwrap();
        assert_eq!(create(&f.ns, "/shared/f").gid, 300);
        let sub = f.ns.mkdir("/shared/sub", 0o755).unwrap();
        assert_eq!((sub.gid, sub.mode), (300, 0o2755));
        assert_eq!(f.ns.mknod("/shared/p", FileKind::Fifo, 0o600, 0, 1, 2).unwrap().gid, 300);
        assert_eq!(create(&f.ns, "/plain").gid, CLUSTER_USER);
    }

    #[test]
    fn a_directory_s_times_move_when_a_name_is_added_or_removed_in_it() {
        let f = fixture();
        f.ns.mkdir("/d", 0o755).unwrap();
        let past = AttrChange { mode: KEEP_MODE, uid: KEEP_ID, gid: KEEP_ID, atime_ns: 1, mtime_ns: 1 };
        let at_past = |path: &str| f.ns.set_attr(path, &past).unwrap();
        let moved = |path: &str| f.ns.stat(path).unwrap().mtime_ns > 1;
        at_past("/d");
        create(&f.ns, "/d/f");
        assert!(moved("/d"), "a create");
        at_past("/d");
        at_past("/");
        f.ns.rename("/d/f", "/f", false).unwrap();
        assert!(moved("/d") && moved("/"), "a rename, both directories");
        at_past("/");
        f.ns.unlink("/f", false).unwrap();
        assert!(moved("/"), "an unlink");
    }

    /// `rec` as formats 1 and 2 wrote it: without the fields format 3
    /// added after the change time.
    fn unowned_encoding(rec: &Record) -> Vec<u8> {
        const BEFORE: usize = 8 + 1 + 4 + 8 + 8;
        const ADDED: usize = 8 + 4 + 4 + 4 + 8 + 1;
        let mut bytes = rec.encode();
        bytes.drain(BEFORE..BEFORE + ADDED);
        bytes
    }

    #[test]
    fn a_format_2_namespace_is_rewritten_with_the_cluster_user_as_owner_and_one_name_per_file() {
        let f = fixture();
        let file = create(&f.ns, "/old");
        f.ns.mkdir("/d", 0o750).unwrap();
        let Fixture { dir, ns } = f;
        ns.write(|w| {
            for path in ["/old", "/d"] {
                let e = Entry::of(path).unwrap();
                let rec = Record { mtime_ns: 77, ..w.entry(e.dir, e.name)?.unwrap() };
                w.tables.entries.insert((e.dir, e.name), unowned_encoding(&rec).as_slice())?;
            }
            w.tables.config.insert(ROOT, unowned_encoding(&w.root()?).as_slice())?;
            w.set_counter(FORMAT, FORMAT_UNOWNED)
        })
        .unwrap();
        drop(ns);
        let pfs = Arc::new(Pfs::open(&dir.path().join("pfs")).unwrap());
        let ns = Namespace::load(&dir.path().join("ns.redb"), pfs, 3, Layout::ROOT_DEFAULT).unwrap();
        let old = ns.stat("/old").unwrap();
        assert_eq!((old.ino, old.uid, old.gid, old.nlink, old.atime_ns), (file.ino, CLUSTER_USER, CLUSTER_USER, 1, 77));
        assert_eq!((ns.stat("/d").unwrap().mode, ns.stat("/").unwrap().kind), (0o750, FileKind::Dir));
        assert_eq!(ns.read(|r| get_counter(&r.config, FORMAT)).unwrap(), FORMAT_VERSION);
    }

    #[test]
    fn recorded_stage_temps_not_under_way_are_removed_but_not_while_the_pfs_root_is_absent() {
        let f = fixture();
        create(&f.ns, "/a");
        create(&f.ns, "/b");
        let (a, b) = (f.ns.stage_begin("/a", 10).unwrap(), f.ns.stage_begin("/b", 10).unwrap());
        let (root, away) = (f.pfs(), f.dir.path().join("pfs-unmounted"));
        fs::rename(&root, &away).unwrap();
        assert_eq!(f.ns.remove_stage_temps(&|_| false).unwrap(), 0, "kept for when the PFS is back");
        fs::rename(&away, &root).unwrap();
        assert_eq!(f.ns.remove_stage_temps(&|temp| temp == b).unwrap(), 1);
        assert!(!f.pfs().join(&a[1..]).exists() && f.pfs().join(&b[1..]).exists());
        assert_eq!(f.ns.remove_stage_temps(&|temp| temp == b).unwrap(), 0, "its record went with it");
        f.ns.stage_abort(&b).unwrap();
        assert_eq!(f.ns.remove_stage_temps(&|_| false).unwrap(), 0);
    }
}
