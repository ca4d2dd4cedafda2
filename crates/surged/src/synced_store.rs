//! The `dir-sync` object store ([`crate::stages::STORES`]): the default
//! [`DirStore`], with every change of an object's bytes (write, truncate,
//! allocate or punch) synced to the device, data and checksum sidecar, before
//! it is acknowledged. For a buffer on a device whose page cache does not
//! survive the node's crash (a local SSD rather than /dev/shm, which is lost
//! anyway), at the cost of a flush per request; without it a client that
//! wants the same asks for it per file (`fsync`, `ObjSync`).

use crate::checksum::{BlockSums, Running};
use crate::failure::Failure;
use crate::store::{CopyPiece, DirStore, Extent, ObjectStore, Usage, WriteGrant, Written};
use std::fs::File;
use surge_proto::msg::{AllocateMode, FileIdentity, ObjListReply, ObjStatReply, ObjVerifyReply};
use surge_proto::Errno;

/// A [`DirStore`] that syncs each object it changed before returning.
pub struct SyncedStore {
    inner: DirStore,
}

impl SyncedStore {
    pub fn new(inner: DirStore) -> SyncedStore {
        SyncedStore { inner }
    }

    /// `changed`'s result, once object `ino` is on the device. A change
    /// that failed part way is synced too: what it did reach stays.
    fn synced<T>(&self, ino: u64, changed: Result<T, Failure>) -> Result<T, Failure> {
        let synced = self.inner.sync(ino);
        let value = changed?;
        synced.map_err(|errno| Failure::new(errno, format!("object {ino} changed, but could not be synced")))?;
        Ok(value)
    }
}

impl ObjectStore for SyncedStore {
    fn write_at(&self, ino: u64, offset: u64, data: &[u8]) -> Result<Written, Errno> {
        self.synced(ino, self.inner.write_at(ino, offset, data).map_err(Failure::from)).map_err(|f| f.errno)
    }
    fn write_summed(&self, ino: u64, offset: u64, data: &[u8], whole: &BlockSums) -> Result<Written, Failure> {
        self.synced(ino, self.inner.write_summed(ino, offset, data, whole))
    }
    fn allocate(&self, ino: u64, offset: u64, len: u64, mode: AllocateMode) -> Result<(), Failure> {
        self.synced(ino, self.inner.allocate(ino, offset, len, mode))
    }
    fn truncate(&self, ino: u64, len: u64) -> Result<(), Failure> {
        self.synced(ino, self.inner.truncate(ino, len))
    }
    /// The client's bytes are in the page cache of the file the daemon syncs.
    fn commit_write(&self, grant: WriteGrant, crcs: Option<&[u32]>) -> Result<Written, Failure> {
        let ino = grant.ino;
        self.synced(ino, self.inner.commit_write(grant, crcs))
    }

    // Everything else is the directory store's own.
    fn read_summed(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        sum: Option<&mut dyn Running>,
    ) -> Result<usize, Failure> {
        self.inner.read_summed(ino, offset, buf, sum)
    }
    fn copy_out(&self, piece: &CopyPiece<'_>, sum: &mut dyn Running) -> Result<Option<u64>, Failure> {
        self.inner.copy_out(piece, sum)
    }
    fn read_direct(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        want: usize,
        sum: &mut dyn Running,
    ) -> Result<Option<usize>, Failure> {
        self.inner.read_direct(ino, offset, buf, want, sum)
    }
    fn seek(&self, ino: u64, offset: u64, hole: bool) -> Result<Option<u64>, Failure> {
        self.inner.seek(ino, offset, hole)
    }
    fn extent(&self, ino: u64, offset: u64, most: u64) -> Result<Extent, Failure> {
        self.inner.extent(ino, offset, most)
    }
    fn verify(&self, ino: u64, offset: u64, len: u64) -> Result<ObjVerifyReply, Failure> {
        self.inner.verify(ino, offset, len)
    }
    fn grant_write(&self, ino: u64, offset: u64, len: u64, stamp_ns: i64) -> Result<WriteGrant, Failure> {
        self.inner.grant_write(ino, offset, len, stamp_ns)
    }
    fn local_read(&self, ino: u64) -> Result<Option<(FileIdentity, u64)>, Failure> {
        self.inner.local_read(ino)
    }
    fn handles(&self, ino: u64) -> Result<(File, File, FileIdentity), Failure> {
        self.inner.handles(ino)
    }
    fn stat(&self, ino: u64) -> Result<ObjStatReply, Failure> {
        self.inner.stat(ino)
    }
    fn set_mtime(&self, ino: u64, mtime_ns: i64) -> Result<(), Errno> {
        self.inner.set_mtime(ino, mtime_ns)
    }
    fn remove(&self, ino: u64) -> Result<(), Errno> {
        self.inner.remove(ino)
    }
    fn sync(&self, ino: u64) -> Result<(), Errno> {
        self.inner.sync(ino)
    }
    fn usage(&self) -> Usage {
        self.inner.usage()
    }
    fn list(&self, after: u64, max: usize) -> Result<ObjListReply, Errno> {
        self.inner.list(after, max)
    }
    fn lost(&self) -> Vec<u64> {
        self.inner.lost()
    }
    fn accept_lost(&self) -> std::io::Result<()> {
        self.inner.accept_lost()
    }
}
