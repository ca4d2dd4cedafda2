//! The request path behind the connection: scheduling point, then the
//! namespace (daemon 0) or the read cache and object store.

use crate::appends::AppendLocks;
use crate::background::Wake;
use crate::cache::ReadCache;
use crate::checksum::{BlockSums, ChecksumStage};
use crate::collector::OrphanCounts;
use crate::failure::Failure;
use crate::meter::StoreMeter;
use crate::meta::Namespace;
use crate::pfs::Pfs;
use crate::sched::Scheduler;
use crate::stage::{stage_object, StageOrder};
use crate::stamp::WriteClock;
use crate::store::ObjectStore;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::sync::Arc;
use surge_proto::msg::{DaemonStatus, Reply, WriteReply};
use surge_proto::{path, Encoder, Errno, Request, RequestHeader};

/// A reply being built: encoded fields, then bulk data (the bytes of a read).
/// Both buffers are reused from request to request.
#[derive(Default)]
pub struct ReplyBody {
    head: Encoder,
    bulk: Vec<u8>,
    bulk_len: usize,
}

impl ReplyBody {
    pub fn clear(&mut self) {
        self.head.buf.clear();
        self.bulk_len = 0;
    }

    pub fn put(&mut self, reply: &impl Reply) {
        reply.encode(&mut self.head);
    }

    /// Room for `len` bytes of bulk data; say how many were filled with `set_bulk_len`.
    pub fn bulk_mut(&mut self, len: usize) -> &mut [u8] {
        if self.bulk.len() < len {
            self.bulk.resize(len, 0);
        }
        &mut self.bulk[..len]
    }

    pub fn set_bulk_len(&mut self, len: usize) {
        self.bulk_len = len;
    }

    pub fn head(&self) -> &[u8] {
        &self.head.buf
    }

    pub fn bulk(&self) -> &[u8] {
        &self.bulk[..self.bulk_len]
    }

    /// Frees the bulk buffer if a rare large read grew it past `keep` bytes.
    pub fn trim(&mut self, keep: usize) {
        if self.bulk.len() > keep {
            self.bulk = Vec::new();
        }
    }
}

pub struct Service {
    pub index: u32,
    pub checksum: Arc<dyn ChecksumStage>,
    pub scheduler: Box<dyn Scheduler>,
    pub store: Box<dyn ObjectStore>,
    pub cache: Box<dyn ReadCache>,
    /// Daemon 0 only (shared with its background tasks).
    pub namespace: Option<Arc<Namespace>>,
    /// Starts a round of the deleter (daemon 0): a removal doomed a file.
    pub deleter: Wake,
    pub orphans: Arc<OrphanCounts>,
    pub pfs: Arc<Pfs>,
    /// Largest read served at once (longer reads come back short).
    pub max_read: usize,
    pub buffer: PathBuf,
    pub capacity: Option<u64>,
    pub meter: StoreMeter,
    /// Daemon 0: who may append to which file now.
    pub appends: AppendLocks,
    /// Stamps every object change (a file's version comes from them).
    pub write_clock: WriteClock,
}

impl Service {
    /// Serves a file-system request (the session requests are the connection's);
    /// `sums` are the block checksums of a `Write`'s data (`verify_write`).
    pub fn handle(
        &self,
        hdr: &RequestHeader,
        req: &Request<'_>,
        sums: &BlockSums,
        out: &mut ReplyBody,
    ) -> Result<(), Failure> {
        let ns =
            || self.namespace.as_ref().ok_or_else(|| Failure::new(Errno::EINVAL, "namespace requests go to daemon 0"));
        if let Request::AppendLock { ino, token, lease_ms } = *req {
            // Waits outside the scheduling point: a blocked append holds no slot.
            ns()?;
            let lease = Duration::from_millis(lease_ms.into());
            return self.appends.lock(ino, token, lease).map_err(|_| {
                Failure::new(Errno(libc::ETIMEDOUT), format!("inode {ino}'s append lock stayed held for {lease:?}"))
            });
        }
        let _ticket = self.scheduler.admit(hdr.job_id, req.op(), hdr.io_size);
        match *req {
            Request::Open { path, flags, mode, layout } => out.put(&ns()?.open(path, flags, mode, layout)?),
            Request::Stat { path } => out.put(&ns()?.stat(path)?),
            Request::Mkdir { path, mode } => out.put(&ns()?.mkdir(path, mode)?),
            Request::Rmdir { path } => ns()?.rmdir(path)?,
            Request::Unlink { path, keep } => {
                out.put(&ns()?.unlink(path, keep)?);
                self.deleter.wake();
            }
            Request::Rename { from, to, keep } => {
                out.put(&ns()?.rename(from, to, keep)?);
                self.deleter.wake();
            }
            Request::Release { ino } => {
                ns()?.release(ino)?;
                self.deleter.wake();
            }
            Request::Readdir { path, after, max } => out.put(&ns()?.readdir(path, after, max)?),
            Request::SetLayout { path, layout } => out.put(&ns()?.set_layout(path, layout)?),
            Request::SetAttr { path, mode, mtime_ns } => out.put(&ns()?.set_attr(path, mode, mtime_ns)?),
            Request::StageBegin { path, size } => out.put(&ns()?.stage_begin(path, size)?),
            Request::StageCommit { path, ino, temp, size, version } => {
                out.put(&ns()?.stage_commit(path, ino, temp, size, version)?)
            }
            Request::StageAbort { temp } => ns()?.stage_abort(temp)?,
            Request::AppendLock { .. } => unreachable!("served before the scheduling point"),
            Request::AppendUnlock { ino, token } => {
                ns()?;
                if !self.appends.unlock(ino, token) {
                    return Err(Failure::new(Errno(libc::ESTALE), format!("inode {ino}'s append lock was not held by this append")));
                }
            }
            Request::PfsRead { path, offset, len } => {
                ns()?; // a namespace request, though the PFS is reachable from every daemon
                let path =
                    path::canonical(path).map_err(|errno| Failure::new(errno, format!("invalid path {path:?}")))?;
                let n = self.pfs.read_at(&path, offset, out.bulk_mut((len as usize).min(self.max_read)))?;
                out.set_bulk_len(n);
            }
            Request::Write { ino, offset, data } => {
                let timing = self.meter.begin();
                let written = self.store.write_summed(ino, offset, data, sums);
                timing.done(written.as_ref().map_or(0, |w| w.bytes as u64));
                self.cache.invalidate(ino, offset..offset.saturating_add(data.len() as u64));
                // Even a failed write may have changed some bytes.
                let stamped = self.stamp(ino);
                let written = written?;
                stamped?;
                out.put(&WriteReply { written: written.bytes as u64, size_before: written.size_before });
            }
            Request::Read { ino, offset, len } => {
                let buf = out.bulk_mut((len as usize).min(self.max_read));
                let n = match self.cache.lookup(ino, offset, buf) {
                    Some(n) => n,
                    None => {
                        let timing = self.meter.begin();
                        let n = self.store.read_at(ino, offset, buf)?;
                        timing.done(n as u64);
                        self.cache.insert(ino, offset, &buf[..n]);
                        n
                    }
                };
                out.set_bulk_len(n);
            }
            Request::ObjStat { ino } => out.put(&self.store.stat(ino)?),
            Request::ObjTruncate { ino, len } => {
                let result = self.store.truncate(ino, len);
                self.cache.invalidate(ino, len..u64::MAX);
                let stamped = self.stamp(ino);
                result?;
                stamped?;
            }
            Request::ObjRemove { ino } => {
                let result = self.store.remove(ino);
                self.cache.invalidate(ino, 0..u64::MAX);
                result?;
            }
            Request::ObjSync { ino } => self.store.sync(ino)?,
            Request::ObjVerify { ino, offset, len } => out.put(&self.store.verify(ino, offset, len)?),
            Request::ObjList { after, max } => out.put(&self.store.list(after, max as usize)?),
            Request::ObjStage { ino, layout, stripe, temp, object_offset, len } => {
                let order = StageOrder { ino, layout, stripe, temp, object_offset, len };
                out.put(&stage_object(&*self.store, &self.pfs, &order)?);
            }
            Request::Hello { .. } | Request::Auth { .. } | Request::Status | Request::Shutdown => {
                return Err(Failure::new(Errno::EPROTO, "session request outside the session handshake"));
            }
        }
        Ok(())
    }

    /// Serves a request this daemon's background tasks make of it (through
    /// `peers`), as one from the network: the reply's fields (no bulk
    /// data), or the failure.
    pub fn call_locally(&self, req: &Request<'_>) -> Result<Vec<u8>, Failure> {
        let hdr = RequestHeader {
            op: req.op() as u8,
            body_len: 0,
            request_id: 0,
            job_id: crate::peers::BACKGROUND_JOB,
            io_size: req.io_size(),
            body_crc: 0,
        };
        let mut out = ReplyBody::default();
        self.handle(&hdr, req, &BlockSums::default(), &mut out)?;
        Ok(out.head().to_vec())
    }

    /// Gives object `ino` a modification time no change had before.
    fn stamp(&self, ino: u64) -> Result<(), Failure> {
        self.store.set_mtime(ino, self.write_clock.next()).map_err(|errno| {
            Failure::new(errno, format!("object {ino} changed, but its write stamp could not be set"))
        })
    }

    /// The storage and namespace part of the daemon's status.
    pub fn status(&self) -> Result<DaemonStatus, Failure> {
        let usage = self.store.usage();
        // The status stays useful when statvfs fails: it reports zeros.
        let (device_size, device_free) = surge_cluster::fs_space(&self.buffer).unwrap_or((0, 0));
        let (store_bytes, store_busy_ns) = self.meter.totals();
        let ((files, dirs), (doomed, held)) = match &self.namespace {
            Some(ns) => (ns.counts()?, ns.doomed_counts()?),
            None => ((0, 0), (0, 0)),
        };
        Ok(DaemonStatus {
            index: self.index,
            is_metadata: self.namespace.is_some(),
            objects: usage.objects,
            bytes_used: usage.bytes,
            capacity: self.capacity.unwrap_or(device_size),
            device_free,
            files,
            dirs,
            buffer_dir: self.buffer.display().to_string(),
            store_bytes,
            store_busy_ns,
            doomed,
            held,
            orphans_found: self.orphans.found.load(Ordering::Relaxed),
            orphans_collected: self.orphans.collected.load(Ordering::Relaxed),
            ..DaemonStatus::default()
        })
    }
}
