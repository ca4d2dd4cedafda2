//! A null object store, the template for a new one (as [Darshan]'s
//! null module is for a new module): copy this file to
//! `store_<name>.rs`, rename the type, keep objects in each call, and
//! register it with one entry in [`crate::stages::STORES`] (a constructor
//! from the `StoreSite` the daemon opens it at; docs/architecture.md,
//! "Adding a stage"). It is compiled with the crate's tests, which start a
//! daemon on it. The trait's provided methods (kernel copies, O_DIRECT
//! reads, listing for the orphan collector, losses) have fallbacks; a
//! store overrides those it can do better.
//!
//! Every byte a store keeps needs its checksum kept beside it (per 4 KiB
//! block, computed by `site.checksum`, see `blocksums`), and every write
//! it acknowledges must survive: `store::DirStore` shows how.

use crate::checksum::{BlockSums, Running};
use crate::failure::Failure;
use crate::store::{ObjectStore, Usage, Written};
use surge_proto::msg::{AllocateMode, ObjStatReply, ObjVerifyReply};
use surge_proto::Errno;

/// Keeps nothing: every object reads as absent (empty), and every change
/// is refused with EROFS, so no client believes its bytes were kept.
#[derive(Default)]
pub struct NullStore;

/// What a change gets from a store that keeps nothing.
fn refused<T>() -> Result<T, Failure> {
    Err(Failure::new(Errno(libc::EROFS), "the null store keeps nothing"))
}

impl ObjectStore for NullStore {
    /// Write `data` at `offset` of object `ino`, creating it; the checksums
    /// of the whole blocks are computed for you here (`write_summed`).
    fn write_at(&self, ino: u64, offset: u64, data: &[u8]) -> Result<Written, Errno> {
        self.write_summed(ino, offset, data, &BlockSums::default()).map_err(|f| f.errno)
    }
    fn write_summed(&self, _ino: u64, _offset: u64, _data: &[u8], _whole: &BlockSums) -> Result<Written, Failure> {
        refused()
    }
    /// Read into `buf`, checking each block against its checksum (EIO when
    /// one disagrees), adding the bytes to `sum` when given.
    fn read_summed(
        &self,
        _ino: u64,
        _offset: u64,
        _buf: &mut [u8],
        _sum: Option<&mut dyn Running>,
    ) -> Result<usize, Failure> {
        Ok(0)
    }
    fn seek(&self, _ino: u64, _offset: u64, _hole: bool) -> Result<Option<u64>, Failure> {
        Ok(None)
    }
    fn allocate(&self, _ino: u64, _offset: u64, _len: u64, _mode: AllocateMode) -> Result<(), Failure> {
        refused()
    }
    fn verify(&self, _ino: u64, _offset: u64, _len: u64) -> Result<ObjVerifyReply, Failure> {
        Ok(ObjVerifyReply { checked: 0, damaged: Vec::new() })
    }
    fn stat(&self, _ino: u64) -> Result<ObjStatReply, Failure> {
        Ok(ObjStatReply { size: 0, mtime_ns: 0, allocated: 0 })
    }
    fn truncate(&self, _ino: u64, _len: u64) -> Result<(), Failure> {
        refused()
    }
    fn set_mtime(&self, _ino: u64, _mtime_ns: i64) -> Result<(), Errno> {
        Ok(())
    }
    /// Removing what is absent succeeds (the deleter retries otherwise).
    fn remove(&self, _ino: u64) -> Result<(), Errno> {
        Ok(())
    }
    /// Make the object's acknowledged bytes and checksums durable.
    fn sync(&self, _ino: u64) -> Result<(), Errno> {
        Ok(())
    }
    fn usage(&self) -> Usage {
        Usage { objects: 0, bytes: 0 }
    }
}
