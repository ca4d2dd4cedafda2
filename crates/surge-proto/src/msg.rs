//! Requests and replies. A request body is its fields in order (see
//! `docs/protocol.md`); bulk data (the data of a `Write`) is the body's
//! tail so the client can send it straight from the application's buffer.
//! A `Read` reply body is the raw data. An error reply has a non-zero
//! status (errno) and a UTF-8 message as body.

use crate::auth::{MAC_LEN, NONCE_LEN};
use crate::codec::{DecodeError, Decoder, Encoder};
use crate::layout::Layout;

macro_rules! ops {
    ($($name:ident = $code:expr,)*) => {
        /// Operation codes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Op { $($name = $code,)* }

        impl Op {
            pub fn from_u8(v: u8) -> Option<Op> {
                match v { $($code => Some(Op::$name),)* _ => None }
            }
            pub const ALL: &'static [Op] = &[$(Op::$name,)*];
        }
    };
}

ops! {
    // Session.
    Hello = 0x01,
    Auth = 0x02,
    Status = 0x03,
    Shutdown = 0x04,
    // The data manager (daemon 0).
    DrainStatus = 0x05,
    SetMtbf = 0x06,
    Close = 0x07,
    PfsWrite = 0x08,
    PfsSync = 0x09,
    Hold = 0x0a,
    Evicted = 0x0b,
    MarkLost = 0x0c,
    // Namespace (metadata daemon).
    Open = 0x10,
    Stat = 0x11,
    Mkdir = 0x12,
    Rmdir = 0x13,
    Unlink = 0x14,
    Rename = 0x15,
    Readdir = 0x16,
    SetLayout = 0x17,
    StageBegin = 0x18,
    StageCommit = 0x19,
    StageAbort = 0x1a,
    PfsRead = 0x1b,
    SetAttr = 0x1c,
    AppendLock = 0x1d,
    AppendUnlock = 0x1e,
    Release = 0x1f,
    // Data objects (every daemon).
    Write = 0x20,
    Read = 0x21,
    ObjStat = 0x22,
    ObjTruncate = 0x23,
    ObjRemove = 0x24,
    ObjSync = 0x25,
    ObjStage = 0x26,
    ObjVerify = 0x27,
    ObjList = 0x28,
    DrainTick = 0x29,
    ObjRetire = 0x2a,
    ObjReinstate = 0x2b,
    ObjSeek = 0x2c,
    ObjAllocate = 0x2d,
    ObjSums = 0x2e,
    // The node-local data path (over a daemon's Unix socket only).
    ObjHandles = 0x42,
    LocalReadBegin = 0x2f,
    LocalWriteBegin = 0x40,
    LocalWriteCommit = 0x41,
    // Namespace, continued (0x10..0x1f is full).
    Symlink = 0x30,
    Readlink = 0x31,
    Mknod = 0x32,
    Link = 0x33,
    StageDir = 0x34,
    GetXattr = 0x35,
    SetXattr = 0x36,
    ListXattr = 0x37,
    RemoveXattr = 0x38,
    Fsck = 0x39,
    Sync = 0x3a,
    Watch = 0x3b,
}

impl Op {
    /// Does this operation belong to the metadata daemon?
    pub fn is_namespace(self) -> bool {
        matches!((self as u8) & 0xf0, 0x10 | 0x30)
    }

    /// Is this an operation only daemons send each other (daemon 0's
    /// deleter, collector, demotion and throttler), which a daemon refuses
    /// from a client with EPERM? Each would let a client destroy data or
    /// slow everyone down: a retired or removed object reads as ESTALE or
    /// zeros, a listing serves only the collector, and a tick sets every
    /// job's write rate.
    pub fn is_peer_only(self) -> bool {
        matches!(self, Op::MarkLost | Op::ObjRemove | Op::ObjList | Op::DrainTick | Op::ObjRetire | Op::ObjReinstate)
    }
}

impl Op {
    /// Is this an operation of the node-local data path, which a daemon
    /// serves only over its Unix socket (it hands out descriptors or
    /// expects the client to have written into one)?
    pub fn is_local_only(self) -> bool {
        matches!(self, Op::ObjHandles | Op::LocalReadBegin | Op::LocalWriteBegin | Op::LocalWriteCommit)
    }

    /// The operation a request is accounted as (per-job requests and
    /// bytes, the schedulers' view): a node-local grant moves the bytes of
    /// the `Write` or `Read` it stands for.
    pub fn charged_as(self) -> Op {
        match self {
            Op::LocalWriteBegin => Op::Write,
            Op::LocalReadBegin => Op::Read,
            op => op,
        }
    }
}

/// Most block checksums one `LocalWriteCommit` carries (a 64 MiB extent).
pub const MAX_COMMIT_CRCS: usize = 16_384;

/// Bytes of a `Write` body before its data (`ino`, `offset`): a receiver
/// that checks the data block by block as it arrives needs the offset first.
pub const WRITE_HEAD_LEN: usize = 16;

/// Most inodes one `Hold` names: a client holding more sends several.
pub const MAX_HOLD: usize = 65_536;

/// Most daemons an `Open` names as the caller's node's.
pub const MAX_LOCAL_DAEMONS: u32 = 4096;

/// A new client's `Hello` instance: random, so that two clients (even two
/// in one process) are never taken for one.
pub fn new_client_instance() -> u64 {
    let mut bytes = [0u8; 8];
    getrandom::getrandom(&mut bytes).expect("the OS random source is unavailable");
    u64::from_le_bytes(bytes)
}

/// The only extended-attribute namespace Surge keeps; every other name is
/// EOPNOTSUPP (docs/core.md).
pub const XATTR_KEPT_PREFIX: &str = "user.";

/// Largest extended attribute value (Linux's XATTR_SIZE_MAX).
pub const XATTR_SIZE_MAX: usize = 64 << 10;

/// `SetXattr` flags, setxattr(2)'s values.
pub mod xattr_flags {
    /// Fail with EEXIST if the attribute exists.
    pub const CREATE: u32 = 1;
    /// Fail with ENODATA if it does not.
    pub const REPLACE: u32 = 2;
}

/// `SetAttr` values that leave a field unchanged.
pub const KEEP_MODE: u32 = u32::MAX;
pub const KEEP_MTIME: i64 = i64::MIN;
/// `SetAttr`: leaves the owner or the group unchanged.
pub const KEEP_ID: u32 = u32::MAX;
/// The owner or group of a file made without one (by `Open`, `Mkdir` or
/// `Symlink`, and every file of a namespace older than owners): the user
/// the cluster runs as, whom each client shows there.
pub const CLUSTER_USER: u32 = u32::MAX;

/// `Open` flags.
pub mod open_flags {
    pub const CREATE: u32 = 1;
    pub const EXCL: u32 = 2;
    pub const WRITE: u32 = 4;
    pub const TRUNC: u32 = 8;
    /// Open a directory (O_DIRECTORY): ENOTDIR if it is not one.
    pub const DIRECTORY: u32 = 16;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Hello {
        client: &'a str,
        job_label: &'a str,
        pid: u32,
        host: &'a str,
        /// Names one client (a process's `Client`) across all its
        /// connections, random: daemon 0 counts a client's open files
        /// under it with `pid`, and lets them go when the last connection
        /// of that client closes.
        instance: u64,
    },
    Auth {
        proof: [u8; MAC_LEN],
    },
    Status,
    Shutdown,
    /// What daemon 0's data manager does (`DrainReport`).
    DrainStatus,
    /// Sets the mean time between failures of job `job` to `seconds`: the
    /// longer, the later its checkpoints are demoted (`surge ckpt mtbf`).
    SetMtbf {
        job: u64,
        seconds: u64,
    },
    /// The caller closed a handle of buffer file `ino` it got from `Open`
    /// (daemon 0): the data manager does not evict a file any client holds.
    Close {
        ino: u64,
    },
    /// Writes `data` at `offset` into file `path`, which daemon 0 placed
    /// on the PFS directly when it was created (the data manager's
    /// direct-to-PFS placement); the reply is the bytes written (`u64`).
    /// Any other file is refused (EPERM).
    PfsWrite {
        path: &'a str,
        offset: u64,
        data: &'a [u8],
    },
    /// Makes the writes to directly placed file `path` durable on the PFS
    /// and verifies them: re-read from the device, their CRC-32C must be
    /// that of the bytes received.
    PfsSync {
        path: &'a str,
    },
    /// Sent by a client on a new connection to daemon 0 (after `Auth`): the
    /// buffer files it holds open, one inode per handle. A daemon 0 that
    /// restarted has lost its count of them, and counts them again: the
    /// client's count of each inode becomes at least its number of
    /// repetitions here (so a client may send it on every new connection,
    /// and twice, harmlessly). An inode that no longer exists is ignored.
    Hold {
        inos: Vec<u64>,
    },
    /// Asks daemon 0 whether buffer file `ino` was evicted from `path` and
    /// `path` still names the PFS copy it was evicted to (the reply: that
    /// copy's attr), or not (ESTALE: removed, replaced, renamed, or evicted
    /// before daemon 0 last started). A client whose `Read` or `Write` of
    /// `ino` failed with ESTALE goes on with the PFS copy when it is.
    Evicted {
        path: &'a str,
        ino: u64,
    },
    /// Daemon `daemon` came back without data it had (`surge start --daemon
    /// N --accept-loss`): daemon 0 marks the files that lost data `Lost`.
    /// With `whole`, the daemon's whole store was lost: every buffer file
    /// with a stripe on it; else the files of `inos`, whose objects went
    /// missing. The reply: the files marked, and the next inode number
    /// (every inode below it predates the loss).
    MarkLost {
        daemon: u32,
        whole: bool,
        inos: Vec<u64>,
    },
    /// Opens (and with `CREATE` makes) a file or directory; `layout` is
    /// applied to a file created by this call (unset fields inherit);
    /// `local` names the daemons of the caller's node, where a file created
    /// under `local` placement gets its first stripe.
    Open {
        path: &'a str,
        flags: u32,
        mode: u32,
        layout: Layout,
        local: Vec<u32>,
    },
    Stat {
        path: &'a str,
    },
    Mkdir {
        path: &'a str,
        mode: u32,
    },
    Rmdir {
        path: &'a str,
    },
    /// Removes a file; daemon 0 deletes its objects in the background.
    /// `keep`: the caller has files open, and keeps the removed file's
    /// objects until it sends `Release` (or the hold lease ends).
    Unlink {
        path: &'a str,
        keep: bool,
    },
    /// Renames like rename(2); a file it replaces is removed as by `Unlink`.
    Rename {
        from: &'a str,
        to: &'a str,
        keep: bool,
    },
    /// Creates the symbolic link `path` holding `target` (see
    /// [`crate::link::check_target`]); EEXIST if the name exists.
    Symlink {
        path: &'a str,
        target: &'a str,
    },
    /// The target of the symbolic link `path` (EINVAL if it is not one).
    Readlink {
        path: &'a str,
    },
    /// Creates the node `path` of `kind` (a FIFO, socket or device; a
    /// regular file or directory is refused, EINVAL: `Open` and `Mkdir`
    /// make those), with device number `rdev` and owner `uid`:`gid`
    /// (mknod(2)); EEXIST if the name exists.
    Mknod {
        path: &'a str,
        kind: FileKind,
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
    },
    /// Gives the file `from` (not a directory: EPERM) the further name `to`
    /// (link(2)): one inode, several names; EEXIST if `to` exists.
    Link {
        from: &'a str,
        to: &'a str,
    },
    /// Gives the PFS copy of directory `path` (made if missing) the
    /// directory's mode and times: the last step of staging out a tree.
    StageDir {
        path: &'a str,
    },
    /// The value of extended attribute `name` of `path` (not following a
    /// link); ENODATA if it has none.
    GetXattr {
        path: &'a str,
        name: &'a str,
    },
    /// Sets extended attribute `name` of `path` to `value`; `flags` as
    /// setxattr(2)'s ([`xattr_flags`]).
    SetXattr {
        path: &'a str,
        name: &'a str,
        value: &'a [u8],
        flags: u32,
    },
    /// The names of the extended attributes of `path`, each ended by a NUL,
    /// as listxattr(2) gives them.
    ListXattr {
        path: &'a str,
    },
    RemoveXattr {
        path: &'a str,
        name: &'a str,
    },
    /// The namespace changes committed after change number `after`
    /// (`Changes`), waiting up to `wait_ms` for one when there is none yet:
    /// the change feed clients invalidate their cached names and
    /// attributes by. Daemon 0 only; not scheduled (a waiting watch holds
    /// no slot).
    Watch {
        after: u64,
        wait_ms: u32,
    },
    /// Entries of a directory in name order, strictly after `after`.
    Readdir {
        path: &'a str,
        after: &'a str,
        max: u32,
    },
    SetLayout {
        path: &'a str,
        layout: Layout,
    },
    /// Prepares a verified copy of `path` (of `size` bytes) on the PFS.
    StageBegin {
        path: &'a str,
        size: u64,
    },
    /// Puts the verified copy in place and marks the file staged as of
    /// `version`, the [`objects_version`] its objects had when copied;
    /// `objects_mtime_ns` is their latest mtime ([`objects_mtime`]), from
    /// which daemon 0 gives the copy the file's mtime ([`file_mtime`]).
    StageCommit {
        path: &'a str,
        ino: u64,
        temp: &'a str,
        size: u64,
        version: u64,
        objects_mtime_ns: i64,
    },
    StageAbort {
        temp: &'a str,
    },
    PfsRead {
        path: &'a str,
        offset: u64,
        len: u32,
    },
    /// Sets the permission bits, the owner and group, and the access and
    /// modification times (chmod, chown, utimens). `KEEP_MODE`, `KEEP_ID`
    /// and `KEEP_MTIME` (for either time) leave one unchanged; the change
    /// time becomes now, as chmod(2), chown(2) and utimensat(2) do.
    SetAttr {
        path: &'a str,
        mode: u32,
        uid: u32,
        gid: u32,
        atime_ns: i64,
        mtime_ns: i64,
    },
    /// Waits until this client holds file `ino`'s append lock (`token`
    /// names the holder), at most `lease_ms`: an append reads the file's
    /// size and writes there under it, so appends from every client are
    /// atomic. A holder that never unlocks loses the lock after `lease_ms`.
    AppendLock {
        ino: u64,
        token: u64,
        lease_ms: u32,
    },
    AppendUnlock {
        ino: u64,
        token: u64,
    },
    /// The caller closed the last handle of file `ino`, removed with `keep`:
    /// its objects may be deleted now.
    Release {
        ino: u64,
    },
    /// Makes every namespace change made so far durable (fsync of a file or
    /// a directory): answered once they are.
    Sync,
    Write {
        ino: u64,
        offset: u64,
        data: &'a [u8],
    },
    Read {
        ino: u64,
        offset: u64,
        len: u32,
    },
    ObjStat {
        ino: u64,
    },
    ObjTruncate {
        ino: u64,
        len: u64,
    },
    ObjRemove {
        ino: u64,
    },
    ObjSync {
        ino: u64,
    },
    /// The node-local data path: the descriptors of this daemon's object
    /// of `ino` (its file read-write, its checksum sidecar read-only),
    /// passed with the reply (SCM_RIGHTS), which names the file's identity.
    ObjHandles {
        ino: u64,
    },
    /// The node-local data path: admits a read of `len` bytes at `offset`
    /// of the object, which the client then reads and checks itself.
    LocalReadBegin {
        ino: u64,
        offset: u64,
        len: u64,
    },
    /// The node-local data path: everything a `Write` does before its
    /// data, for `len` bytes at `offset`; the client then writes them into
    /// the object's file itself and ends the grant with `LocalWriteCommit`.
    LocalWriteBegin {
        ino: u64,
        offset: u64,
        len: u64,
    },
    /// Ends write grant `grant` with the checksums of the blocks its
    /// extent touches, first to last, as the object now holds them.
    LocalWriteCommit {
        grant: u64,
        crcs: Vec<u32>,
    },
    /// Copies `[object_offset, object_offset + len)` of this daemon's object
    /// of a file into the PFS file `temp` (a namespace path under the PFS
    /// root) at the file offsets the layout gives, re-reads the copy from
    /// the device and returns the checksum both sides agree on.
    ObjStage {
        ino: u64,
        layout: Layout,
        stripe: u32,
        temp: &'a str,
        object_offset: u64,
        len: u64,
    },
    /// Checks the object's blocks from `offset` (a multiple of 4096) on,
    /// up to `len` bytes, against the checksums the daemon keeps beside
    /// them (`surge scrub`); the daemon may check fewer bytes per request.
    ObjVerify {
        ino: u64,
        offset: u64,
        len: u64,
    },
    /// Up to `max` of this daemon's objects after the cursor `after` (0 to
    /// start; then the last inode of the previous page), for the orphan
    /// collector.
    ObjList {
        after: u64,
        max: u32,
    },
    /// Daemon 0's throttler to every daemon, each tick: the checkpoint
    /// write rate and the demotion copy rate this daemon enforces (bytes/s,
    /// 0 unlimited), the rate of the writes to files placed on the PFS
    /// directly (`PfsWrite`), and how long a write that finds the buffer
    /// full waits for space (0: it fails at once). The reply says what the
    /// daemon saw.
    DrainTick {
        checkpoint_bps: u64,
        demote_bps: u64,
        direct_bps: u64,
        wait_for_space_ms: u32,
    },
    /// Fences off this daemon's object of file `ino` (evicted or removed):
    /// from now on `Write`, `Read` and `ObjTruncate` of it fail with ESTALE,
    /// for good (durably; inode numbers are never reused). With `checked`,
    /// only if the object still has `size` and `mtime_ns` (its `ObjStat`),
    /// else ESTALE: it was written since. Retiring twice is harmless.
    ObjRetire {
        ino: u64,
        checked: bool,
        size: u64,
        mtime_ns: i64,
    },
    /// Undoes `ObjRetire` of `ino` (an eviction the namespace refused).
    ObjReinstate {
        ino: u64,
    },
    /// Where the object's next data (or, with `hole`, next hole) at or
    /// after `offset` starts, as SEEK_DATA/SEEK_HOLE on the object file say:
    /// what the client maps back to file offsets for lseek(2).
    ObjSeek {
        ino: u64,
        offset: u64,
        hole: bool,
    },
    /// fallocate(2) of `[offset, offset + len)` of the object, which keeps
    /// its length (the client grows the file itself where asked).
    ObjAllocate {
        ino: u64,
        offset: u64,
        len: u64,
        mode: AllocateMode,
    },
    /// Daemon 0 checks the namespace against every daemon's objects
    /// (`surge fsck`); with `repair`, it also does the safe repairs
    /// (`FsckClass::repair`).
    Fsck {
        repair: bool,
    },
    /// Re-reads `[offset, offset + len)` of the object from the store (not
    /// the read cache), checking every block against its checksum as a
    /// read does, and answers the CRC-32C of each `piece` bytes of it: a
    /// verified copy's read-back without the bytes crossing the network.
    ObjSums {
        ino: u64,
        offset: u64,
        len: u64,
        piece: u64,
    },
}

/// What an `ObjAllocate` does to its range (fallocate(2)'s modes, always
/// with FALLOC_FL_KEEP_SIZE on the object).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AllocateMode {
    /// Reserves blocks; the bytes stay as they are (mode 0, KEEP_SIZE).
    Preallocate = 0,
    /// Frees the blocks: the range reads as zeros (PUNCH_HOLE).
    PunchHole = 1,
    /// The range reads as zeros, its blocks reserved (ZERO_RANGE).
    ZeroRange = 2,
}

impl AllocateMode {
    fn decode(d: &mut Decoder<'_>) -> Result<AllocateMode, DecodeError> {
        match d.u8()? {
            0 => Ok(AllocateMode::Preallocate),
            1 => Ok(AllocateMode::PunchHole),
            2 => Ok(AllocateMode::ZeroRange),
            _ => Err(DecodeError::BadValue("allocate mode")),
        }
    }
}

fn put_layout(e: &mut Encoder, l: &Layout) {
    e.u32(l.stripe_count).u64(l.stripe_size).u32(l.first);
}

fn get_layout(d: &mut Decoder<'_>) -> Result<Layout, DecodeError> {
    Ok(Layout { stripe_count: d.u32()?, stripe_size: d.u64()?, first: d.u32()? })
}

fn get_bool(d: &mut Decoder<'_>) -> Result<bool, DecodeError> {
    match d.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::BadValue("flag")),
    }
}

impl<'a> Request<'a> {
    pub fn op(&self) -> Op {
        match self {
            Request::Hello { .. } => Op::Hello,
            Request::Auth { .. } => Op::Auth,
            Request::Status => Op::Status,
            Request::Shutdown => Op::Shutdown,
            Request::DrainStatus => Op::DrainStatus,
            Request::SetMtbf { .. } => Op::SetMtbf,
            Request::Close { .. } => Op::Close,
            Request::PfsWrite { .. } => Op::PfsWrite,
            Request::PfsSync { .. } => Op::PfsSync,
            Request::Hold { .. } => Op::Hold,
            Request::Evicted { .. } => Op::Evicted,
            Request::MarkLost { .. } => Op::MarkLost,
            Request::Open { .. } => Op::Open,
            Request::Stat { .. } => Op::Stat,
            Request::Mkdir { .. } => Op::Mkdir,
            Request::Rmdir { .. } => Op::Rmdir,
            Request::Unlink { .. } => Op::Unlink,
            Request::Rename { .. } => Op::Rename,
            Request::Readdir { .. } => Op::Readdir,
            Request::Symlink { .. } => Op::Symlink,
            Request::Mknod { .. } => Op::Mknod,
            Request::Link { .. } => Op::Link,
            Request::Readlink { .. } => Op::Readlink,
            Request::StageDir { .. } => Op::StageDir,
            Request::GetXattr { .. } => Op::GetXattr,
            Request::SetXattr { .. } => Op::SetXattr,
            Request::ListXattr { .. } => Op::ListXattr,
            Request::RemoveXattr { .. } => Op::RemoveXattr,
            Request::Watch { .. } => Op::Watch,
            Request::SetLayout { .. } => Op::SetLayout,
            Request::StageBegin { .. } => Op::StageBegin,
            Request::StageCommit { .. } => Op::StageCommit,
            Request::StageAbort { .. } => Op::StageAbort,
            Request::PfsRead { .. } => Op::PfsRead,
            Request::SetAttr { .. } => Op::SetAttr,
            Request::AppendLock { .. } => Op::AppendLock,
            Request::AppendUnlock { .. } => Op::AppendUnlock,
            Request::Release { .. } => Op::Release,
            Request::Sync => Op::Sync,
            Request::Write { .. } => Op::Write,
            Request::Read { .. } => Op::Read,
            Request::ObjStat { .. } => Op::ObjStat,
            Request::ObjTruncate { .. } => Op::ObjTruncate,
            Request::ObjRemove { .. } => Op::ObjRemove,
            Request::ObjSync { .. } => Op::ObjSync,
            Request::ObjHandles { .. } => Op::ObjHandles,
            Request::LocalReadBegin { .. } => Op::LocalReadBegin,
            Request::LocalWriteBegin { .. } => Op::LocalWriteBegin,
            Request::LocalWriteCommit { .. } => Op::LocalWriteCommit,
            Request::ObjStage { .. } => Op::ObjStage,
            Request::ObjVerify { .. } => Op::ObjVerify,
            Request::ObjList { .. } => Op::ObjList,
            Request::DrainTick { .. } => Op::DrainTick,
            Request::ObjRetire { .. } => Op::ObjRetire,
            Request::ObjReinstate { .. } => Op::ObjReinstate,
            Request::ObjSeek { .. } => Op::ObjSeek,
            Request::ObjAllocate { .. } => Op::ObjAllocate,
            Request::Fsck { .. } => Op::Fsck,
            Request::ObjSums { .. } => Op::ObjSums,
        }
    }

    /// Bytes of file data the request moves (the header's `io_size`).
    pub fn io_size(&self) -> u64 {
        match self {
            Request::Write { data, .. } | Request::PfsWrite { data, .. } => data.len() as u64,
            Request::Read { len, .. } | Request::PfsRead { len, .. } => *len as u64,
            Request::LocalWriteBegin { len, .. } | Request::LocalReadBegin { len, .. } => *len,
            _ => 0,
        }
    }

    /// Encodes the body's fields into `e` and returns the bulk tail to send after them.
    pub fn encode(&self, e: &mut Encoder) -> &'a [u8] {
        match *self {
            Request::Hello { client, job_label, pid, host, instance } => {
                e.str(client).str(job_label).u32(pid).str(host).u64(instance);
            }
            Request::Auth { proof } => {
                e.buf.extend_from_slice(&proof);
            }
            Request::Status | Request::Shutdown | Request::DrainStatus | Request::Sync => {}
            Request::SetMtbf { job, seconds } => {
                e.u64(job).u64(seconds);
            }
            Request::Hold { ref inos } => {
                e.u32(inos.len() as u32);
                for &ino in inos {
                    e.u64(ino);
                }
            }
            Request::Evicted { path, ino } => {
                e.str(path).u64(ino);
            }
            Request::MarkLost { daemon, whole, ref inos } => {
                e.u32(daemon).u8(whole.into()).u32(inos.len() as u32);
                for &ino in inos {
                    e.u64(ino);
                }
            }
            Request::Open { path, flags, mode, layout, ref local } => {
                e.str(path).u32(flags).u32(mode);
                put_layout(e, &layout);
                e.u32(local.len() as u32);
                for &daemon in local {
                    e.u32(daemon);
                }
            }
            Request::PfsWrite { path, offset, data } => {
                e.str(path).u64(offset);
                return data;
            }
            Request::Stat { path }
            | Request::Rmdir { path }
            | Request::PfsSync { path }
            | Request::Readlink { path }
            | Request::StageDir { path }
            | Request::ListXattr { path } => {
                e.str(path);
            }
            Request::GetXattr { path, name } | Request::RemoveXattr { path, name } => {
                e.str(path).str(name);
            }
            Request::SetXattr { path, name, value, flags } => {
                e.str(path).str(name).bytes(value).u32(flags);
            }
            Request::Unlink { path, keep } => {
                e.str(path).u8(keep as u8);
            }
            Request::Mkdir { path, mode } => {
                e.str(path).u32(mode);
            }
            Request::Rename { from, to, keep } => {
                e.str(from).str(to).u8(keep as u8);
            }
            Request::Readdir { path, after, max } => {
                e.str(path).str(after).u32(max);
            }
            Request::Mknod { path, kind, mode, rdev, uid, gid } => {
                e.str(path).u8(kind as u8).u32(mode).u64(rdev).u32(uid).u32(gid);
            }
            Request::Link { from, to } => {
                e.str(from).str(to);
            }
            Request::Symlink { path, target } => {
                e.str(path).str(target);
            }
            Request::SetLayout { path, layout } => {
                e.str(path);
                put_layout(e, &layout);
            }
            Request::StageBegin { path, size } => {
                e.str(path).u64(size);
            }
            Request::StageCommit { path, ino, temp, size, version, objects_mtime_ns } => {
                e.str(path).u64(ino).str(temp).u64(size).u64(version).i64(objects_mtime_ns);
            }
            Request::StageAbort { temp } => {
                e.str(temp);
            }
            Request::PfsRead { path, offset, len } => {
                e.str(path).u64(offset).u32(len);
            }
            Request::SetAttr { path, mode, uid, gid, atime_ns, mtime_ns } => {
                e.str(path).u32(mode).u32(uid).u32(gid).i64(atime_ns).i64(mtime_ns);
            }
            Request::AppendLock { ino, token, lease_ms } => {
                e.u64(ino).u64(token).u32(lease_ms);
            }
            Request::AppendUnlock { ino, token } => {
                e.u64(ino).u64(token);
            }
            Request::Watch { after, wait_ms } => {
                e.u64(after).u32(wait_ms);
            }
            Request::Write { ino, offset, data } => {
                e.u64(ino).u64(offset);
                return data;
            }
            Request::Read { ino, offset, len } => {
                e.u64(ino).u64(offset).u32(len);
            }
            Request::ObjStat { ino }
            | Request::ObjRemove { ino }
            | Request::ObjSync { ino }
            | Request::ObjHandles { ino }
            | Request::ObjReinstate { ino }
            | Request::Release { ino }
            | Request::Close { ino } => {
                e.u64(ino);
            }
            Request::ObjList { after, max } => {
                e.u64(after).u32(max);
            }
            Request::ObjTruncate { ino, len } => {
                e.u64(ino).u64(len);
            }
            Request::ObjVerify { ino, offset, len }
            | Request::LocalReadBegin { ino, offset, len }
            | Request::LocalWriteBegin { ino, offset, len } => {
                e.u64(ino).u64(offset).u64(len);
            }
            Request::ObjSums { ino, offset, len, piece } => {
                e.u64(ino).u64(offset).u64(len).u64(piece);
            }
            Request::LocalWriteCommit { grant, ref crcs } => {
                e.u64(grant).u32(crcs.len() as u32);
                for &crc in crcs {
                    e.u32(crc);
                }
            }
            Request::ObjStage { ino, layout, stripe, temp, object_offset, len } => {
                e.u64(ino);
                put_layout(e, &layout);
                e.u32(stripe).str(temp).u64(object_offset).u64(len);
            }
            Request::DrainTick { checkpoint_bps, demote_bps, direct_bps, wait_for_space_ms } => {
                e.u64(checkpoint_bps).u64(demote_bps).u64(direct_bps).u32(wait_for_space_ms);
            }
            Request::ObjRetire { ino, checked, size, mtime_ns } => {
                e.u64(ino).u8(checked.into()).u64(size).i64(mtime_ns);
            }
            Request::ObjSeek { ino, offset, hole } => {
                e.u64(ino).u64(offset).u8(hole.into());
            }
            Request::ObjAllocate { ino, offset, len, mode } => {
                e.u64(ino).u64(offset).u64(len).u8(mode as u8);
            }
            Request::Fsck { repair } => {
                e.u8(repair.into());
            }
        }
        &[]
    }

    pub fn decode(op: Op, body: &'a [u8]) -> Result<Request<'a>, DecodeError> {
        let mut d = Decoder::new(body);
        let req = match op {
            Op::Hello => Request::Hello {
                client: d.str()?,
                job_label: d.str()?,
                pid: d.u32()?,
                host: d.str()?,
                instance: d.u64()?,
            },
            Op::Auth => Request::Auth { proof: d.array::<MAC_LEN>()? },
            Op::Status => Request::Status,
            Op::Sync => Request::Sync,
            Op::Shutdown => Request::Shutdown,
            Op::DrainStatus => Request::DrainStatus,
            Op::SetMtbf => Request::SetMtbf { job: d.u64()?, seconds: d.u64()? },
            Op::Close => Request::Close { ino: d.u64()? },
            Op::PfsWrite => Request::PfsWrite { path: d.str()?, offset: d.u64()?, data: d.rest() },
            Op::PfsSync => Request::PfsSync { path: d.str()? },
            Op::Hold => {
                let n = d.u32()? as usize;
                if n > MAX_HOLD {
                    return Err(DecodeError::BadValue("held inode count"));
                }
                Request::Hold { inos: (0..n).map(|_| d.u64()).collect::<Result<_, _>>()? }
            }
            Op::Evicted => Request::Evicted { path: d.str()?, ino: d.u64()? },
            Op::MarkLost => {
                let (daemon, whole, n) = (d.u32()?, get_bool(&mut d)?, d.u32()? as usize);
                if n > MAX_HOLD {
                    return Err(DecodeError::BadValue("lost inode count"));
                }
                Request::MarkLost { daemon, whole, inos: (0..n).map(|_| d.u64()).collect::<Result<_, _>>()? }
            }
            Op::Open => {
                let (path, flags, mode, layout) = (d.str()?, d.u32()?, d.u32()?, get_layout(&mut d)?);
                let n = d.u32()?;
                if n > MAX_LOCAL_DAEMONS {
                    return Err(DecodeError::BadValue("local daemon count"));
                }
                Request::Open { path, flags, mode, layout, local: (0..n).map(|_| d.u32()).collect::<Result<_, _>>()? }
            }
            Op::Stat => Request::Stat { path: d.str()? },
            Op::Mkdir => Request::Mkdir { path: d.str()?, mode: d.u32()? },
            Op::Rmdir => Request::Rmdir { path: d.str()? },
            Op::Unlink => Request::Unlink { path: d.str()?, keep: get_bool(&mut d)? },
            Op::Rename => Request::Rename { from: d.str()?, to: d.str()?, keep: get_bool(&mut d)? },
            Op::Readdir => Request::Readdir { path: d.str()?, after: d.str()?, max: d.u32()? },
            Op::Symlink => Request::Symlink { path: d.str()?, target: d.str()? },
            Op::Readlink => Request::Readlink { path: d.str()? },
            Op::Mknod => Request::Mknod {
                path: d.str()?,
                kind: FileKind::decode(&mut d)?,
                mode: d.u32()?,
                rdev: d.u64()?,
                uid: d.u32()?,
                gid: d.u32()?,
            },
            Op::Link => Request::Link { from: d.str()?, to: d.str()? },
            Op::StageDir => Request::StageDir { path: d.str()? },
            Op::GetXattr => Request::GetXattr { path: d.str()?, name: d.str()? },
            Op::SetXattr => Request::SetXattr { path: d.str()?, name: d.str()?, value: d.bytes()?, flags: d.u32()? },
            Op::ListXattr => Request::ListXattr { path: d.str()? },
            Op::RemoveXattr => Request::RemoveXattr { path: d.str()?, name: d.str()? },
            Op::Watch => Request::Watch { after: d.u64()?, wait_ms: d.u32()? },
            Op::SetLayout => Request::SetLayout { path: d.str()?, layout: get_layout(&mut d)? },
            Op::StageBegin => Request::StageBegin { path: d.str()?, size: d.u64()? },
            Op::StageCommit => Request::StageCommit {
                path: d.str()?,
                ino: d.u64()?,
                temp: d.str()?,
                size: d.u64()?,
                version: d.u64()?,
                objects_mtime_ns: d.i64()?,
            },
            Op::StageAbort => Request::StageAbort { temp: d.str()? },
            Op::PfsRead => Request::PfsRead { path: d.str()?, offset: d.u64()?, len: d.u32()? },
            Op::SetAttr => Request::SetAttr {
                path: d.str()?,
                mode: d.u32()?,
                uid: d.u32()?,
                gid: d.u32()?,
                atime_ns: d.i64()?,
                mtime_ns: d.i64()?,
            },
            Op::AppendLock => Request::AppendLock { ino: d.u64()?, token: d.u64()?, lease_ms: d.u32()? },
            Op::AppendUnlock => Request::AppendUnlock { ino: d.u64()?, token: d.u64()? },
            Op::Release => Request::Release { ino: d.u64()? },
            Op::Write => Request::Write { ino: d.u64()?, offset: d.u64()?, data: d.rest() },
            Op::Read => Request::Read { ino: d.u64()?, offset: d.u64()?, len: d.u32()? },
            Op::ObjStat => Request::ObjStat { ino: d.u64()? },
            Op::ObjTruncate => Request::ObjTruncate { ino: d.u64()?, len: d.u64()? },
            Op::ObjRemove => Request::ObjRemove { ino: d.u64()? },
            Op::ObjSync => Request::ObjSync { ino: d.u64()? },
            Op::ObjVerify => Request::ObjVerify { ino: d.u64()?, offset: d.u64()?, len: d.u64()? },
            Op::ObjSums => Request::ObjSums { ino: d.u64()?, offset: d.u64()?, len: d.u64()?, piece: d.u64()? },
            Op::ObjHandles => Request::ObjHandles { ino: d.u64()? },
            Op::LocalReadBegin => Request::LocalReadBegin { ino: d.u64()?, offset: d.u64()?, len: d.u64()? },
            Op::LocalWriteBegin => Request::LocalWriteBegin { ino: d.u64()?, offset: d.u64()?, len: d.u64()? },
            Op::LocalWriteCommit => {
                let (grant, n) = (d.u64()?, d.u32()? as usize);
                if n > MAX_COMMIT_CRCS {
                    return Err(DecodeError::BadValue("committed checksum count"));
                }
                Request::LocalWriteCommit { grant, crcs: (0..n).map(|_| d.u32()).collect::<Result<_, _>>()? }
            }
            Op::ObjList => Request::ObjList { after: d.u64()?, max: d.u32()? },
            Op::ObjStage => Request::ObjStage {
                ino: d.u64()?,
                layout: get_layout(&mut d)?,
                stripe: d.u32()?,
                temp: d.str()?,
                object_offset: d.u64()?,
                len: d.u64()?,
            },
            Op::DrainTick => Request::DrainTick {
                checkpoint_bps: d.u64()?,
                demote_bps: d.u64()?,
                direct_bps: d.u64()?,
                wait_for_space_ms: d.u32()?,
            },
            Op::ObjRetire => {
                Request::ObjRetire { ino: d.u64()?, checked: get_bool(&mut d)?, size: d.u64()?, mtime_ns: d.i64()? }
            }
            Op::ObjReinstate => Request::ObjReinstate { ino: d.u64()? },
            Op::ObjSeek => Request::ObjSeek { ino: d.u64()?, offset: d.u64()?, hole: get_bool(&mut d)? },
            Op::ObjAllocate => Request::ObjAllocate {
                ino: d.u64()?,
                offset: d.u64()?,
                len: d.u64()?,
                mode: AllocateMode::decode(&mut d)?,
            },
            Op::Fsck => Request::Fsck { repair: get_bool(&mut d)? },
        };
        d.finish()?;
        Ok(req)
    }
}

/// A reply body type.
pub trait Reply: Sized {
    fn encode(&self, e: &mut Encoder);
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError>;

    fn to_body(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        self.encode(&mut e);
        e.buf
    }
    fn from_body(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(body);
        let v = Self::decode(&mut d)?;
        d.finish()?;
        Ok(v)
    }
}

impl Reply for () {
    fn encode(&self, _: &mut Encoder) {}
    fn decode(_: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(())
    }
}

impl Reply for u64 {
    fn encode(&self, e: &mut Encoder) {
        e.u64(*self);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        d.u64()
    }
}

/// An extended attribute's value, or a list of names each ended by a NUL.
impl Reply for Vec<u8> {
    fn encode(&self, e: &mut Encoder) {
        e.bytes(self);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(d.bytes()?.to_vec())
    }
}

impl Reply for String {
    fn encode(&self, e: &mut Encoder) {
        e.str(self);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(d.str()?.to_string())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FileKind {
    File = 1,
    Dir = 2,
    /// A symbolic link: its size is its target's length in bytes.
    Symlink = 3,
    /// Nodes without data, which the kernel serves itself once they exist:
    /// a named pipe, character and block devices (with a device number),
    /// a Unix socket's name.
    Fifo = 4,
    CharDevice = 5,
    BlockDevice = 6,
    Socket = 7,
}

impl FileKind {
    pub fn from_u8(v: u8) -> Option<FileKind> {
        match v {
            1 => Some(FileKind::File),
            2 => Some(FileKind::Dir),
            3 => Some(FileKind::Symlink),
            4 => Some(FileKind::Fifo),
            5 => Some(FileKind::CharDevice),
            6 => Some(FileKind::BlockDevice),
            7 => Some(FileKind::Socket),
            _ => None,
        }
    }

    fn decode(d: &mut Decoder<'_>) -> Result<FileKind, DecodeError> {
        FileKind::from_u8(d.u8()?).ok_or(DecodeError::BadValue("file kind"))
    }
}

/// Where a file's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tier {
    /// Only in the buffer (written, not yet staged out).
    Buffer = 0,
    /// In the buffer, with a verified copy on the PFS.
    Staged = 1,
    /// Only on the PFS; reads are served from there.
    Pfs = 2,
    /// Data of it was lost with a daemon's store (`MarkLost`): opening it
    /// fails with EIO, except to replace its contents (`O_TRUNC`).
    Lost = 3,
}

/// File attributes. For a buffer file `size` is 0 from the metadata daemon:
/// the client derives it from its objects (`ObjStat`), as Lustre does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    pub mode: u32,
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// Owner and group; [`CLUSTER_USER`] for a file made without one.
    pub uid: u32,
    pub gid: u32,
    /// Names of the inode (hard links); 1 for a directory ("not counted").
    pub nlink: u32,
    /// A device node's device number (0 otherwise).
    pub rdev: u64,
    /// A file's concrete layout, or a directory's own default (may be partial).
    pub layout: Layout,
    pub tier: Tier,
    /// `Open` only: did this call create the file?
    pub created: bool,
    /// For a `Staged` file, the [`objects_version`] its PFS copy was made
    /// from (0 otherwise): the client shows the file as `Buffer` again when
    /// its objects' version differs, that is, when it was written since.
    pub staged_version: u64,
    /// 512-byte blocks the file's data takes (st_blocks): a buffer file's
    /// from its objects' allocation (0 from the metadata daemon), a PFS
    /// file's from the PFS. Holes take none.
    pub blocks: u64,
}

impl Attr {
    /// `st_blocks` as a program sees it, given the size it is shown: a
    /// file's data blocks, a directory's listing in whole pages, nothing for
    /// a link (its target lives in its record, as a fast symlink's in its
    /// inode) or a FIFO, socket or device node (they hold no data).
    pub fn shown_blocks(&self, shown_size: u64) -> u64 {
        match self.kind {
            FileKind::File => self.blocks,
            FileKind::Dir => shown_size.div_ceil(4096) * 8,
            FileKind::Symlink | FileKind::Fifo | FileKind::CharDevice | FileKind::BlockDevice | FileKind::Socket => 0,
        }
    }
}

impl Reply for Attr {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.ino).u8(self.kind as u8).u32(self.mode).u64(self.size);
        e.i64(self.atime_ns).i64(self.mtime_ns).i64(self.ctime_ns);
        e.u32(self.uid).u32(self.gid).u32(self.nlink).u64(self.rdev);
        put_layout(e, &self.layout);
        e.u8(self.tier as u8).u8(self.created as u8).u64(self.staged_version).u64(self.blocks);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(Attr {
            ino: d.u64()?,
            kind: FileKind::decode(d)?,
            mode: d.u32()?,
            size: d.u64()?,
            atime_ns: d.i64()?,
            mtime_ns: d.i64()?,
            ctime_ns: d.i64()?,
            uid: d.u32()?,
            gid: d.u32()?,
            nlink: d.u32()?,
            rdev: d.u64()?,
            layout: get_layout(d)?,
            tier: match d.u8()? {
                0 => Tier::Buffer,
                1 => Tier::Staged,
                2 => Tier::Pfs,
                3 => Tier::Lost,
                _ => return Err(DecodeError::BadValue("tier")),
            },
            created: d.u8()? != 0,
            staged_version: d.u64()?,
            blocks: d.u64()?,
        })
    }
}

/// `Unlink` and `Rename` reply: the file removed (the unlinked file, or
/// the one a rename replaced), if any. Daemon 0 deletes its objects; the
/// caller learns the inode to keep it until its last close (`keep`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed(pub Option<Attr>);

impl Reply for Removed {
    fn encode(&self, e: &mut Encoder) {
        match &self.0 {
            Some(a) => {
                e.u8(1);
                a.encode(e);
            }
            None => {
                e.u8(0);
            }
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(Removed(if d.u8()? == 1 { Some(Attr::decode(d)?) } else { None }))
    }
}

/// One committed namespace change (`Watch`): the path whose entry
/// changed, with everything under it when `subtree` (a rename), and the
/// client whose request made it (its `Hello` instance and pid; 0 and 0 for
/// the daemons' own work), which applied it itself already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub instance: u64,
    pub pid: u32,
    pub path: String,
    pub subtree: bool,
}

/// The reply to `Watch`: the changes after the one asked for, and `next`,
/// the number to ask after next time. `lost`: changes the watcher had not
/// seen are gone from daemon 0's ring (or daemon 0 restarted): everything
/// it cached is to be dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangesReply {
    pub next: u64,
    pub lost: bool,
    pub changes: Vec<Change>,
}

impl Reply for ChangesReply {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.next).u8(self.lost.into()).u32(self.changes.len() as u32);
        for c in &self.changes {
            e.u64(c.instance).u32(c.pid).str(&c.path).u8(c.subtree.into());
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let (next, lost, n) = (d.u64()?, get_bool(d)?, d.u32()? as usize);
        let mut changes = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            let (instance, pid, path) = (d.u64()?, d.u32()?, d.str()?.to_string());
            changes.push(Change { instance, pid, path, subtree: get_bool(d)? });
        }
        Ok(ChangesReply { next, lost, changes })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloReply {
    pub nonce: [u8; NONCE_LEN],
    pub daemon_index: u32,
    pub daemon_count: u32,
    pub cluster_id: String,
}

impl Reply for HelloReply {
    fn encode(&self, e: &mut Encoder) {
        e.buf.extend_from_slice(&self.nonce);
        e.u32(self.daemon_index).u32(self.daemon_count).str(&self.cluster_id);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(HelloReply {
            nonce: d.array()?,
            daemon_index: d.u32()?,
            daemon_count: d.u32()?,
            cluster_id: d.str()?.to_string(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: FileKind,
    pub ino: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirReply {
    pub entries: Vec<DirEntry>,
    /// No entries after these.
    pub end: bool,
}

impl Reply for ReaddirReply {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.entries.len() as u32);
        for ent in &self.entries {
            e.str(&ent.name).u8(ent.kind as u8).u64(ent.ino);
        }
        e.u8(self.end as u8);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let n = d.u32()? as usize;
        let mut entries = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            let name = d.str()?.to_string();
            let kind = FileKind::decode(d)?;
            entries.push(DirEntry { name, kind, ino: d.u64()? });
        }
        Ok(ReaddirReply { entries, end: d.u8()? != 0 })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjStatReply {
    pub size: u64,
    pub mtime_ns: i64,
    /// Bytes the object's blocks take on the daemon's device (holes take
    /// none): what the client sums into `st_blocks`.
    pub allocated: u64,
}

/// `MarkLost` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkLostReply {
    /// Files marked `Lost` by this request.
    pub files: u64,
    /// The namespace's next inode number: every file below it predates the loss.
    pub next_ino: u64,
}

impl Reply for MarkLostReply {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.files).u64(self.next_ino);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(MarkLostReply { files: d.u64()?, next_ino: d.u64()? })
    }
}

impl Reply for ObjStatReply {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.size).i64(self.mtime_ns).u64(self.allocated);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(ObjStatReply { size: d.u64()?, mtime_ns: d.i64()?, allocated: d.u64()? })
    }
}

/// The version of a file's contents: a 64-bit digest of its objects' sizes
/// and modification times, stripe by stripe. A daemon gives an object a
/// modification time never given before after every change to it, so the
/// version changes with every write or truncate; never 0.
pub fn objects_version(stats: &[ObjStatReply]) -> u64 {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    for st in stats {
        digest.update(st.size.to_le_bytes());
        digest.update(st.mtime_ns.to_le_bytes());
    }
    let head: [u8; 8] = digest.finalize()[..8].try_into().expect("a SHA-256 digest has 32 bytes");
    u64::from_le_bytes(head).max(1)
}

/// The latest modification time of a file's objects (0 when it has none).
pub fn objects_mtime(stats: &[ObjStatReply]) -> i64 {
    stats.iter().map(|st| st.mtime_ns).max().unwrap_or(0).max(0)
}

/// A buffer file's mtime: the namespace's (`ns_mtime_ns`) unless its
/// objects changed after the last chmod/utimens (the namespace's
/// `ns_ctime_ns`): a time set by utimens survives, a later write moves it on.
pub fn file_mtime(ns_mtime_ns: i64, ns_ctime_ns: i64, objects_mtime_ns: i64) -> i64 {
    if objects_mtime_ns > ns_ctime_ns {
        objects_mtime_ns
    } else {
        ns_mtime_ns
    }
}

/// `Write` reply: the bytes written (short only when the daemon's device
/// filled up part way) and the object's size before the write, so that a
/// client whose write failed on another daemon can take back the growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteReply {
    pub written: u64,
    pub size_before: u64,
}

impl Reply for WriteReply {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.written).u64(self.size_before);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(WriteReply { written: d.u64()?, size_before: d.u64()? })
    }
}

/// Which object file a node-local reply speaks of (`fstat`'s device and
/// inode): a client uses descriptors it holds only for the same file, so
/// a removed and re-created object is never written through the old one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
}

/// `ObjHandles` reply: the identity of the object file whose descriptors
/// come with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandlesReply(pub FileIdentity);

impl Reply for HandlesReply {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.0.dev).u64(self.0.ino);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(HandlesReply(FileIdentity { dev: d.u64()?, ino: d.u64()? }))
    }
}

/// `LocalReadBegin` reply: the object's length as recorded (0 and no file
/// when it does not exist here: the bytes read as zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadGrant {
    pub file: Option<FileIdentity>,
    pub len: u64,
}

impl Reply for ReadGrant {
    fn encode(&self, e: &mut Encoder) {
        let file = self.file.unwrap_or_default();
        e.u8(self.file.is_some().into()).u64(file.dev).u64(file.ino).u64(self.len);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let exists = get_bool(d)?;
        let file = FileIdentity { dev: d.u64()?, ino: d.u64()? };
        Ok(ReadGrant { file: exists.then_some(file), len: d.u64()? })
    }
}

/// `LocalWriteBegin` reply: the grant to commit, and the object file to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteGrant {
    pub grant: u64,
    pub file: FileIdentity,
    /// The object's length before the grant (the commit's `size_before`).
    pub size_before: u64,
}

impl Reply for WriteGrant {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.grant).u64(self.file.dev).u64(self.file.ino).u64(self.size_before);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(WriteGrant { grant: d.u64()?, file: FileIdentity { dev: d.u64()?, ino: d.u64()? }, size_before: d.u64()? })
    }
}

/// `ObjSeek` reply: the object offset found, `None` when there is no data
/// at or after the offset asked (ENXIO for the file, if no object has any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeekReply(pub Option<u64>);

impl Reply for SeekReply {
    fn encode(&self, e: &mut Encoder) {
        e.u8(self.0.is_some().into()).u64(self.0.unwrap_or(0));
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let found = get_bool(d)?;
        let offset = d.u64()?;
        Ok(SeekReply(found.then_some(offset)))
    }
}

/// `ObjVerify` reply: how many bytes of the object were checked (from the
/// asked offset; 0 past its end, fewer than asked when the daemon bounds the
/// work of one request) and the object offsets of the blocks that disagree
/// with their checksums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjVerifyReply {
    pub checked: u64,
    pub damaged: Vec<u64>,
}

impl Reply for ObjVerifyReply {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.checked).u32(self.damaged.len() as u32);
        for &offset in &self.damaged {
            e.u64(offset);
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let checked = d.u64()?;
        let n = d.u32()? as usize;
        let mut damaged = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            damaged.push(d.u64()?);
        }
        Ok(ObjVerifyReply { checked, damaged })
    }
}

/// `ObjSums` reply: the bytes re-read (short of the asked length at the
/// object's end, or where the daemon bounds the work of one request to
/// [`MAX_SUMS`] pieces) and the CRC-32C of each piece of them, the last
/// one short at the object's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjSumsReply {
    pub bytes: u64,
    pub crcs: Vec<u32>,
}

/// Most pieces one `ObjSums` answers.
pub const MAX_SUMS: usize = 4096;

impl Reply for ObjSumsReply {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.bytes).u32(self.crcs.len() as u32);
        for &crc in &self.crcs {
            e.u32(crc);
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let bytes = d.u64()?;
        let n = d.u32()? as usize;
        if n > MAX_SUMS {
            return Err(DecodeError::BadValue("piece checksum count"));
        }
        let crcs = (0..n).map(|_| d.u32()).collect::<Result<_, _>>()?;
        Ok(ObjSumsReply { bytes, crcs })
    }
}

/// `ObjStage` reply: bytes copied (short of the asked length where the
/// object ends) and their CRC-32C, checked against a re-read of the PFS copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagedObject {
    pub bytes: u64,
    pub crc: u32,
}

impl Reply for StagedObject {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.bytes).u32(self.crc);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(StagedObject { bytes: d.u64()?, crc: d.u32()? })
    }
}

/// One object in an `ObjList` reply: its inode and how long ago it last
/// changed, by the listing daemon's clock (so clocks need not agree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedObject {
    pub ino: u64,
    pub idle_ms: u64,
}

/// `ObjList` reply: a page of objects, and whether it is the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjListReply {
    pub objects: Vec<ListedObject>,
    pub end: bool,
}

impl Reply for ObjListReply {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.objects.len() as u32);
        for o in &self.objects {
            e.u64(o.ino).u64(o.idle_ms);
        }
        e.u8(self.end as u8);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let n = d.u32()? as usize;
        let mut objects = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            objects.push(ListedObject { ino: d.u64()?, idle_ms: d.u64()? });
        }
        Ok(ObjListReply { objects, end: d.u8()? != 0 })
    }
}

/// What a finding of `surge fsck` is about (`FsckFinding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum FsckClass {
    /// An object of no inode in use, unchanged for the orphan grace.
    Orphan = 1,
    /// An object of no inode in use, changed within the orphan grace (a
    /// write may still be landing): a note, the collector decides later.
    YoungOrphan = 2,
    /// An object of a file on a daemon its layout gives no stripe: longer
    /// than the layout allows there (nothing ever reads it).
    StrayObject = 3,
    /// A stripe's object the daemon had and lost (inventory says written,
    /// file gone), or a file marked lost.
    DataLost = 4,
    /// An object whose checksum record (sidecar header) disagrees with
    /// the object file, or is missing or damaged.
    Untrusted = 5,
    /// A removed file whose objects are due to be deleted and are not yet.
    Doomed = 6,
    /// A removed file kept for a client that has it open, until its
    /// `Release` or the end of its hold lease: a note.
    Held = 7,
    /// A stage-out temp recorded in the namespace that no stage-out under way owns.
    StageTemp = 8,
    /// A name marked as one of several of an inode whose record (table
    /// `inodes`) is missing.
    Dangling = 9,
    /// An inode's link count disagrees with the names that name it.
    LinkCount = 10,
}

impl FsckClass {
    pub fn from_u8(v: u8) -> Option<FsckClass> {
        use FsckClass::*;
        [Orphan, YoungOrphan, StrayObject, DataLost, Untrusted, Doomed, Held, StageTemp, Dangling, LinkCount]
            .into_iter()
            .find(|c| *c as u8 == v)
    }

    /// The name the report and `--toml` give it.
    pub fn name(self) -> &'static str {
        match self {
            FsckClass::Orphan => "orphan",
            FsckClass::YoungOrphan => "young-orphan",
            FsckClass::StrayObject => "stray-object",
            FsckClass::DataLost => "data-lost",
            FsckClass::Untrusted => "untrusted",
            FsckClass::Doomed => "doomed",
            FsckClass::Held => "held",
            FsckClass::StageTemp => "stage-temp",
            FsckClass::Dangling => "dangling",
            FsckClass::LinkCount => "link-count",
        }
    }

    /// A problem (counted in fsck's exit code), or a note of a state that
    /// is normal while it lasts.
    pub fn is_problem(self) -> bool {
        !matches!(self, FsckClass::YoungOrphan | FsckClass::Held)
    }

    /// What `--repair` does about it.
    pub fn repair(self) -> &'static str {
        match self {
            FsckClass::Orphan | FsckClass::StrayObject => "removes the object",
            FsckClass::YoungOrphan => "nothing yet: the orphan collector removes it once the grace has passed",
            FsckClass::DataLost | FsckClass::Untrusted => {
                "nothing: restore the file from its PFS copy or its source, or remove it"
            }
            FsckClass::Doomed => "wakes the deleter, which deletes the objects",
            FsckClass::Held => "nothing: the objects go at the holder's close or at the end of the lease",
            FsckClass::StageTemp => "removes the temp from the PFS and its record",
            FsckClass::Dangling => "nothing: copy the file's data out by another name, then remove this name",
            FsckClass::LinkCount => "sets the link count to the names found (an inode of no name loses its record)",
        }
    }
}

/// No daemon: a finding of the namespace alone.
pub const FSCK_NO_DAEMON: u32 = u32::MAX;

/// One thing `surge fsck` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsckFinding {
    pub class: FsckClass,
    pub ino: u64,
    /// The daemon whose object it is about, or `FSCK_NO_DAEMON`.
    pub daemon: u32,
    /// The file's names (space-separated), the temp's PFS path, or empty
    /// for an object of no file.
    pub path: String,
    pub detail: String,
    /// Repaired by this `Fsck` (asked with `repair`).
    pub repaired: bool,
}

/// `Fsck` reply: the findings, and what was looked at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FsckReply {
    pub files: u64,
    pub objects: u64,
    pub findings: Vec<FsckFinding>,
}

impl Reply for FsckReply {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.files).u64(self.objects).u32(self.findings.len() as u32);
        for f in &self.findings {
            e.u8(f.class as u8).u64(f.ino).u32(f.daemon).str(&f.path).str(&f.detail).u8(f.repaired.into());
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let (files, objects, n) = (d.u64()?, d.u64()?, d.u32()? as usize);
        let mut findings = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            let class = FsckClass::from_u8(d.u8()?).ok_or(DecodeError::BadValue("fsck class"))?;
            findings.push(FsckFinding {
                class,
                ino: d.u64()?,
                daemon: d.u32()?,
                path: d.str()?.to_string(),
                detail: d.str()?.to_string(),
                repaired: get_bool(d)?,
            });
        }
        Ok(FsckReply { files, objects, findings })
    }
}

/// `DrainTick` reply: the checkpoint bytes each job wrote to this daemon
/// since it started (`Write` data of every job but the daemons' own, in job
/// order), the object bytes its demotion copies read since it started, and
/// its usage and capacity (as `Status` gives them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrainTickReply {
    pub written: Vec<(u64, u64)>,
    pub demoted_bytes: u64,
    pub used: u64,
    pub capacity: u64,
    /// What holds the daemon's demotion copies to the rate: `token` or `blkio`.
    pub rate_control: String,
    /// The daemon's trimmer (`--drain-trim`).
    pub trim: DrainTrim,
}

impl Reply for DrainTickReply {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.written.len() as u32);
        for &(job, bytes) in &self.written {
            e.u64(job).u64(bytes);
        }
        e.u64(self.demoted_bytes).u64(self.used).u64(self.capacity).str(&self.rate_control);
        self.trim.encode(e);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let n = d.u32()? as usize;
        let mut written = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            written.push((d.u64()?, d.u64()?));
        }
        Ok(DrainTickReply {
            written,
            demoted_bytes: d.u64()?,
            used: d.u64()?,
            capacity: d.u64()?,
            rate_control: d.str()?.to_string(),
            trim: DrainTrim::decode(d)?,
        })
    }
}

/// What the trimmers did since their daemons started: FITRIM calls on the
/// buffers' file systems after deletions freed space. A daemon's tick
/// reply carries its own; the report sums them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrainTrim {
    /// `on`, `off`, `unsupported (reason)`; per daemon when they differ.
    pub state: String,
    /// FITRIM rounds made, and the bytes the file systems said they trimmed.
    pub trims: u64,
    pub bytes: u64,
    /// When the last round ended, seconds since the Unix epoch (0: never).
    pub last_unix_s: u64,
}

impl Reply for DrainTrim {
    fn encode(&self, e: &mut Encoder) {
        e.str(&self.state).u64(self.trims).u64(self.bytes).u64(self.last_unix_s);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(DrainTrim { state: d.str()?.to_string(), trims: d.u64()?, bytes: d.u64()?, last_unix_s: d.u64()? })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DaemonStatus {
    pub index: u32,
    pub pid: u32,
    pub uptime_s: u64,
    pub is_metadata: bool,
    /// Data objects and their bytes in this daemon's buffer directory.
    pub objects: u64,
    pub bytes_used: u64,
    /// The configured capacity (`--capacity`), else the device size.
    pub capacity: u64,
    /// Free bytes on the buffer device.
    pub device_free: u64,
    /// Metadata daemon only: files and directories in the namespace.
    pub files: u64,
    pub dirs: u64,
    pub connections: u32,
    pub requests: u64,
    pub buffer_dir: String,
    /// The per-connection rate cap in bytes/s (`surged --conn-rate`), 0 when off.
    pub conn_rate: u64,
    /// Data bytes the object store moved, and the time it was busy moving
    /// them (time with at least one store call in progress): their ratio is
    /// the store's measured rate, which `auto` connection counts aim at.
    pub store_bytes: u64,
    pub store_busy_ns: u64,
    /// Metadata daemon only: removed files whose objects are still to be
    /// deleted (`held` of them kept by a client that has them open).
    pub doomed: u64,
    pub held: u64,
    /// Metadata daemon only, since it started: objects the orphan collector
    /// found belonging to no file, and those it deleted.
    pub orphans_found: u64,
    pub orphans_collected: u64,
    /// Per-job load at the daemon's scheduling point, in job order. Last on
    /// the wire and absent from the replies of daemons before it: decoded
    /// as empty when missing.
    pub jobs: Vec<JobStatus>,
    /// Per job and operation, what the scheduling point served: the job
    /// list's `requests` broken down by operation (the ones with requests
    /// only) with the bytes they moved, in job then operation order.
    pub job_ops: Vec<JobOpStatus>,
    /// Stage-out copies this daemon made (`ObjStage`) since it started:
    /// the object bytes copied to the PFS and verified, and the copies.
    pub staged_bytes: u64,
    pub staged_objects: u64,
    /// Metadata daemon only: files whose contents are in the buffer only
    /// (tier `Buffer`), which a stage-out has yet to copy.
    pub unstaged_files: u64,
    /// Metadata daemon only: files marked `Lost` (`MarkLost`).
    pub lost_files: u64,
    /// The request-path stages the daemon runs, by their registry names
    /// (`scheduler=fifo checksum=crc32c cache=none store=dir`; empty from a
    /// daemon before them).
    pub stages: String,
    /// Reads its read cache served, and reads that missed it (every read
    /// with `cache=none`), since it started.
    pub cache_hits: u64,
    pub cache_misses: u64,
}

/// What one job's requests of one operation moved at a daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobOpStatus {
    pub job: u64,
    /// The operation's code ([`Op`]).
    pub op: u8,
    pub requests: u64,
    /// Bytes of file data they moved: written, or read and sent (a read
    /// past the end of a file moves less than its `io_size` asked for).
    pub bytes: u64,
}

/// One job's load on a daemon (`SchedulingPoint::jobs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobStatus {
    pub job: u64,
    /// Requests received and waiting to be admitted.
    pub waiting: u64,
    /// Requests in service now (admitted, reply not yet sent).
    pub in_service: u64,
    /// Requests served since the daemon started.
    pub requests: u64,
    /// Bytes of file data those requests moved.
    pub bytes: u64,
}

impl Reply for DaemonStatus {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.index).u32(self.pid).u64(self.uptime_s).u8(self.is_metadata as u8);
        e.u64(self.objects).u64(self.bytes_used).u64(self.capacity).u64(self.device_free);
        e.u64(self.files).u64(self.dirs).u32(self.connections).u64(self.requests).str(&self.buffer_dir);
        e.u64(self.conn_rate).u64(self.store_bytes).u64(self.store_busy_ns);
        e.u64(self.doomed).u64(self.held).u64(self.orphans_found).u64(self.orphans_collected);
        e.u32(self.jobs.len() as u32);
        for j in &self.jobs {
            e.u64(j.job).u64(j.waiting).u64(j.in_service).u64(j.requests).u64(j.bytes);
        }
        e.u32(self.job_ops.len() as u32);
        for j in &self.job_ops {
            e.u64(j.job).u8(j.op).u64(j.requests).u64(j.bytes);
        }
        e.u64(self.staged_bytes).u64(self.staged_objects).u64(self.unstaged_files).u64(self.lost_files);
        e.str(&self.stages).u64(self.cache_hits).u64(self.cache_misses);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut status = DaemonStatus {
            index: d.u32()?,
            pid: d.u32()?,
            uptime_s: d.u64()?,
            is_metadata: d.u8()? != 0,
            objects: d.u64()?,
            bytes_used: d.u64()?,
            capacity: d.u64()?,
            device_free: d.u64()?,
            files: d.u64()?,
            dirs: d.u64()?,
            connections: d.u32()?,
            requests: d.u64()?,
            buffer_dir: d.str()?.to_string(),
            conn_rate: d.u64()?,
            store_bytes: d.u64()?,
            store_busy_ns: d.u64()?,
            doomed: d.u64()?,
            held: d.u64()?,
            orphans_found: d.u64()?,
            orphans_collected: d.u64()?,
            jobs: if d.is_empty() {
                Vec::new()
            } else {
                (0..d.u32()?)
                    .map(|_| {
                        let (job, waiting, in_service) = (d.u64()?, d.u64()?, d.u64()?);
                        Ok(JobStatus { job, waiting, in_service, requests: d.u64()?, bytes: d.u64()? })
                    })
                    .collect::<Result<_, DecodeError>>()?
            },
            ..DaemonStatus::default()
        };
        // The per-operation list and the stage-out counts came later: a
        // reply of a daemon from before them ends here.
        if !d.is_empty() {
            status.job_ops = (0..d.u32()?)
                .map(|_| {
                    let (job, op) = (d.u64()?, d.u8()?);
                    Ok(JobOpStatus { job, op, requests: d.u64()?, bytes: d.u64()? })
                })
                .collect::<Result<_, DecodeError>>()?;
            status.staged_bytes = d.u64()?;
            status.staged_objects = d.u64()?;
            status.unstaged_files = d.u64()?;
            status.lost_files = if d.is_empty() { 0 } else { d.u64()? };
            if !d.is_empty() {
                status.stages = d.str()?.to_string();
                status.cache_hits = d.u64()?;
                status.cache_misses = d.u64()?;
            }
        }
        Ok(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_bodys_data_starts_after_write_head_len_bytes() {
        let mut e = Encoder::new();
        let data = Request::Write { ino: 1, offset: 2, data: b"data" }.encode(&mut e);
        assert_eq!((e.buf.len(), data), (WRITE_HEAD_LEN, &b"data"[..]));
    }

    fn round_trip(req: Request<'_>) {
        let mut e = Encoder::new();
        let bulk = req.encode(&mut e);
        let mut body = e.buf.clone();
        body.extend_from_slice(bulk);
        assert_eq!(Request::decode(req.op(), &body).unwrap(), req);
        // Every strict prefix of a body with fields must fail to decode, never panic.
        for cut in 0..body.len().saturating_sub(bulk.len()) {
            assert!(Request::decode(req.op(), &body[..cut]).is_err() || cut == 0 && body.is_empty());
        }
    }

    #[test]
    fn every_request_round_trips() {
        let l = Layout { stripe_count: 2, stripe_size: 1 << 20, first: 1 };
        for req in [
            Request::Hello { client: "t", job_label: "j", pid: 4, host: "h", instance: 9 },
            Request::Auth { proof: [7; MAC_LEN] },
            Request::Status,
            Request::Shutdown,
            Request::DrainStatus,
            Request::SetMtbf { job: 42, seconds: 3600 },
            Request::Close { ino: 77 },
            Request::Open { path: "/a", flags: 3, mode: 0o644, layout: l, local: vec![] },
            Request::Open { path: "/b", flags: 1, mode: 0o600, layout: Layout::INHERIT, local: vec![2, 3] },
            Request::Stat { path: "/a" },
            Request::Mkdir { path: "/d", mode: 0o755 },
            Request::Rmdir { path: "/d" },
            Request::Unlink { path: "/a", keep: true },
            Request::Rename { from: "/a", to: "/b", keep: false },
            Request::Readdir { path: "/", after: "x", max: 10 },
            Request::Symlink { path: "/l", target: "../tables/x" },
            Request::Readlink { path: "/l" },
            Request::StageDir { path: "/d" },
            Request::GetXattr { path: "/a", name: "user.x" },
            Request::SetXattr { path: "/a", name: "user.x", value: b"\0v", flags: xattr_flags::CREATE },
            Request::ListXattr { path: "/a" },
            Request::RemoveXattr { path: "/a", name: "user.x" },
            Request::Watch { after: 7, wait_ms: 500 },
            Request::SetLayout { path: "/d", layout: l },
            Request::StageBegin { path: "/a", size: 9 },
            Request::StageCommit { path: "/a", ino: 3, temp: "/.a.t", size: 9, version: 7, objects_mtime_ns: -5 },
            Request::StageAbort { temp: "/.a.t" },
            Request::PfsRead { path: "/a", offset: 1, len: 2 },
            Request::SetAttr { path: "/a", mode: 0o600, uid: 1000, gid: KEEP_ID, atime_ns: 7, mtime_ns: -5 },
            Request::Mknod { path: "/p", kind: FileKind::CharDevice, mode: 0o620, rdev: 0x0501, uid: 0, gid: 5 },
            Request::Link { from: "/a", to: "/b" },
            Request::AppendLock { ino: 1, token: 2, lease_ms: 3 },
            Request::AppendUnlock { ino: 1, token: 2 },
            Request::Release { ino: 1 },
            Request::Sync,
            Request::Write { ino: 1, offset: 2, data: b"xyz" },
            Request::Read { ino: 1, offset: 2, len: 3 },
            Request::ObjStat { ino: 1 },
            Request::ObjTruncate { ino: 1, len: 5 },
            Request::ObjRemove { ino: 1 },
            Request::ObjSync { ino: 1 },
            Request::ObjStage { ino: 1, layout: l, stripe: 1, temp: "/t", object_offset: 0, len: 9 },
            Request::ObjVerify { ino: 1, offset: 4096, len: u64::MAX },
            Request::ObjSums { ino: 1, offset: 1 << 20, len: 64 << 20, piece: 1 << 20 },
            Request::ObjList { after: 7, max: 100 },
            Request::DrainTick {
                checkpoint_bps: 30_000_000,
                demote_bps: 0,
                direct_bps: 16_000_000,
                wait_for_space_ms: 20_000,
            },
            Request::PfsWrite { path: "/ckpt/7", offset: 4096, data: b"direct" },
            Request::PfsSync { path: "/ckpt/7" },
            Request::Hold { inos: vec![7, 7, 9] },
            Request::Hold { inos: Vec::new() },
            Request::Evicted { path: "/ckpt/7", ino: 7 },
            Request::MarkLost { daemon: 2, whole: false, inos: vec![7, 9] },
            Request::MarkLost { daemon: 1, whole: true, inos: Vec::new() },
            Request::ObjRetire { ino: 1, checked: true, size: 9, mtime_ns: -3 },
            Request::ObjReinstate { ino: 1 },
            Request::ObjSeek { ino: 1, offset: 4096, hole: true },
            Request::ObjAllocate { ino: 1, offset: 2, len: 3, mode: AllocateMode::PunchHole },
            Request::ObjAllocate { ino: 1, offset: 0, len: 1 << 40, mode: AllocateMode::ZeroRange },
            Request::Fsck { repair: true },
            Request::ObjHandles { ino: 5 },
            Request::LocalReadBegin { ino: 5, offset: 4096, len: 1 << 20 },
            Request::LocalWriteBegin { ino: 5, offset: 1, len: 3 },
            Request::LocalWriteCommit { grant: 9, crcs: vec![1, 0xdead_beef] },
        ] {
            round_trip(req);
        }
        assert_eq!(Op::ALL.len(), 59);
    }

    #[test]
    fn a_hold_naming_more_inodes_than_allowed_is_refused() {
        let mut e = Encoder::new();
        e.u32(MAX_HOLD as u32 + 1);
        assert_eq!(Request::decode(Op::Hold, &e.buf), Err(DecodeError::BadValue("held inode count")));
    }

    #[test]
    fn objects_version_changes_with_any_object_and_is_never_zero() {
        let st = |size, mtime_ns| ObjStatReply { size, mtime_ns, allocated: 0 };
        let base = [st(10, 1), st(0, 0), st(7, 5)];
        let v = objects_version(&base);
        assert_ne!(v, 0);
        assert_eq!(objects_version(&base), v);
        for changed in
            [[st(10, 2), st(0, 0), st(7, 5)], [st(10, 1), st(0, 0), st(8, 5)], [st(7, 5), st(0, 0), st(10, 1)]]
        {
            assert_ne!(objects_version(&changed), v);
        }
    }

    #[test]
    fn replies_round_trip() {
        let a = Attr {
            ino: 9,
            kind: FileKind::File,
            mode: 0o600,
            size: 10,
            atime_ns: 3,
            mtime_ns: 1,
            ctime_ns: 2,
            uid: 1000,
            gid: 100,
            nlink: 2,
            rdev: 0x0801,
            layout: Layout::ROOT_DEFAULT,
            tier: Tier::Staged,
            created: true,
            staged_version: 42,
            blocks: 24,
        };
        assert_eq!(Attr::from_body(&a.to_body()).unwrap(), a);
        let file = FileIdentity { dev: 0x803, ino: 77 };
        for grant in [ReadGrant { file: Some(file), len: 5 }, ReadGrant { file: None, len: 0 }] {
            assert_eq!(ReadGrant::from_body(&grant.to_body()).unwrap(), grant);
        }
        let grant = WriteGrant { grant: 3, file, size_before: 5 };
        assert_eq!(WriteGrant::from_body(&grant.to_body()).unwrap(), grant);
        assert_eq!(HandlesReply::from_body(&HandlesReply(file).to_body()).unwrap(), HandlesReply(file));
        let r = Removed(Some(a.clone()));
        assert_eq!(Removed::from_body(&r.to_body()).unwrap(), r);
        let rd = ReaddirReply { entries: vec![DirEntry { name: "x".into(), kind: FileKind::Dir, ino: 3 }], end: true };
        assert_eq!(ReaddirReply::from_body(&rd.to_body()).unwrap(), rd);
        let changes = ChangesReply {
            next: 9,
            lost: true,
            changes: vec![Change { instance: 7, pid: 3, path: "/d/x".into(), subtree: true }],
        };
        assert_eq!(ChangesReply::from_body(&changes.to_body()).unwrap(), changes);
        for seek in [SeekReply(None), SeekReply(Some(0)), SeekReply(Some(1 << 40))] {
            assert_eq!(SeekReply::from_body(&seek.to_body()).unwrap(), seek);
        }
        assert_eq!(SeekReply::from_body(&[2, 0, 0, 0, 0, 0, 0, 0, 0]), Err(DecodeError::BadValue("flag")));
        let v = ObjVerifyReply { checked: 8192, damaged: vec![0, 4096] };
        assert_eq!(ObjVerifyReply::from_body(&v.to_body()).unwrap(), v);
        let sums = ObjSumsReply { bytes: (2 << 20) + 5, crcs: vec![1, 2, 3] };
        assert_eq!(ObjSumsReply::from_body(&sums.to_body()).unwrap(), sums);
        let list = ObjListReply { objects: vec![ListedObject { ino: 5, idle_ms: 60_000 }], end: false };
        assert_eq!(ObjListReply::from_body(&list.to_body()).unwrap(), list);
        let fsck = FsckReply {
            files: 3,
            objects: 4,
            findings: vec![FsckFinding {
                class: FsckClass::LinkCount,
                ino: 9,
                daemon: FSCK_NO_DAEMON,
                path: "/a /b".into(),
                detail: "2 names, link count 1".into(),
                repaired: true,
            }],
        };
        assert_eq!(FsckReply::from_body(&fsck.to_body()).unwrap(), fsck);
        let tick = DrainTickReply {
            written: vec![(7, 1 << 30), (9, 5)],
            demoted_bytes: 3,
            used: 4,
            capacity: 5,
            rate_control: "blkio".into(),
            trim: DrainTrim { state: "on".into(), trims: 1, bytes: 2, last_unix_s: 3 },
        };
        assert_eq!(DrainTickReply::from_body(&tick.to_body()).unwrap(), tick);
        let st = DaemonStatus {
            index: 1,
            buffer_dir: "/b".into(),
            conn_rate: 5,
            store_bytes: 6,
            store_busy_ns: 7,
            doomed: 8,
            held: 9,
            orphans_found: 10,
            orphans_collected: 11,
            jobs: vec![JobStatus { job: 8, waiting: 12, in_service: 9, requests: 10, bytes: 11 }, JobStatus::default()],
            job_ops: vec![JobOpStatus { job: 8, op: Op::Write as u8, requests: 13, bytes: 14 }],
            staged_bytes: 15,
            staged_objects: 16,
            unstaged_files: 17,
            lost_files: 18,
            stages: "scheduler=fifo".into(),
            cache_hits: 19,
            cache_misses: 20,
            ..Default::default()
        };
        assert_eq!(DaemonStatus::from_body(&st.to_body()).unwrap(), st);
        // A daemon from before the per-operation list: its reply ends before it
        // (a u32 count, one entry, three u64 counts).
        let before_ops = DaemonStatus {
            job_ops: Vec::new(),
            staged_bytes: 0,
            staged_objects: 0,
            unstaged_files: 0,
            lost_files: 0,
            stages: String::new(),
            cache_hits: 0,
            cache_misses: 0,
            ..st.clone()
        };
        // A daemon from before the stages: its reply ends before them.
        let before_stages = DaemonStatus { stages: String::new(), cache_hits: 0, cache_misses: 0, ..st.clone() };
        let stages_len = 4 + "scheduler=fifo".len() + 16;
        let body = st.to_body();
        assert_eq!(DaemonStatus::from_body(&body[..body.len() - stages_len]).unwrap(), before_stages);
        let body = &body[..body.len() - stages_len];
        // The tail, as docs/protocol.md gives it: u32 m, m × (u64 job, u8 op, u64 requests,
        // u64 bytes), u64 staged_bytes, u64 staged_objects, u64 unstaged_files, u64 lost_files.
        let mut tail = Encoder::new();
        tail.u32(1).u64(8).u8(0x20).u64(13).u64(14).u64(15).u64(16).u64(17).u64(18);
        assert!(body.ends_with(&tail.buf));
        assert_eq!(DaemonStatus::from_body(&body[..body.len() - 4 - 25 - 32]).unwrap(), before_ops);
        // A daemon from before the lost count: its reply ends before it.
        let before_lost = DaemonStatus { lost_files: 0, ..before_stages.clone() };
        assert_eq!(DaemonStatus::from_body(&body[..body.len() - 8]).unwrap(), before_lost);
        // A daemon from before the job list: its reply ends before it.
        let old = DaemonStatus { jobs: Vec::new(), ..before_ops.clone() };
        let body = old.to_body();
        // (its empty stages and cache counts: 4 + 16 bytes)
        assert_eq!(DaemonStatus::from_body(&body[..body.len() - 4 - 4 - 32 - 20]).unwrap(), old);
        assert!(Attr::from_body(&[0; 5]).is_err());
        let mut bad = a.to_body();
        bad[8] = 9; // file kind
        assert_eq!(Attr::from_body(&bad), Err(DecodeError::BadValue("file kind")));
    }
}
