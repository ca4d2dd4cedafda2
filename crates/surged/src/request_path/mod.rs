//! The request path behind the connection, cut by family as GekkoFS's
//! daemon cuts its handlers over ops ([GekkoFS], docs/references.md): this
//! module decodes nothing itself (the connection does), routes each request
//! by its op's family ([`Family::of`], the one table of routes) to that
//! family's handler, and keeps the scheduling point. A request is
//! registered at the scheduling point as it is read
//! ([`RequestPath::arrive`]), admitted before `handle` and holds its ticket
//! until its reply was sent.
//!
//! The families, each a handler over only the state it needs:
//! - `data`: object reads, writes and changes on this daemon's store;
//! - `namespace`: daemon 0's file-system ops;
//! - `drain`: stage-out copies, the throttler's ticks, the data manager's ops;
//! - `admin`: the session ops the connection serves, and the daemon's status.
//!
//! To add an op: give it its line in `Family::of` and its arm in that
//! family's `handle`; state it needs goes into that family's handler (and
//! its `Parts` field, when built at start-up).

mod admin;
mod data;
mod drain;
mod namespace;

pub use admin::AdminHandler;
pub use data::DataHandler;
pub use drain::DrainHandler;
pub use namespace::NamespaceHandler;

use crate::appends::AppendLocks;
use crate::background::Wake;
use crate::cache::ReadThrough;
use crate::checksum::{BlockSums, ChecksumStage};
use crate::collector::OrphanCounts;
use crate::demotion_control::DemotionControl;
use crate::drain::trimmer::TrimStatus;
use crate::drain::DrainManager;
use crate::failure::Failure;
use crate::fence::Fence;
use crate::handles::Handles;
use crate::job::Job;
use crate::meter::StoreMeter;
use crate::namespace::Namespace;
use crate::pfs::Pfs;
use crate::rates::Rates;
use crate::sched::{Arrival, SchedulingPoint};
use crate::stage_out::StagedCounts;
use crate::stage_temps::StageTemps;
use crate::stamp::WriteClock;
use crate::store::{ObjectStore, SpaceFreed};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use surge_proto::msg::{DaemonStatus, Reply};
use surge_proto::{Encoder, Errno, Op, Request, RequestHeader};

/// A reply being built: encoded fields, then bulk data (the bytes of a read).
/// Both buffers are reused from request to request.
#[derive(Default)]
pub struct ReplyBody {
    head: Encoder,
    bulk: Vec<u8>,
    bulk_len: usize,
    /// The bulk's CRC-32C, when a read built it already.
    bulk_crc: Option<u32>,
}

impl ReplyBody {
    pub fn clear(&mut self) {
        self.head.buf.clear();
        self.bulk_len = 0;
        self.bulk_crc = None;
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

    /// Says how many bulk bytes were filled, and their CRC-32C if known.
    pub fn set_bulk(&mut self, len: usize, crc: Option<u32>) {
        self.bulk_len = len;
        self.bulk_crc = crc;
    }

    pub fn bulk_crc(&self) -> Option<u32> {
        self.bulk_crc
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

/// The families the ops fall into, each served by its own handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Data,
    Namespace,
    Drain,
    Admin,
}

impl Family {
    /// The family that serves `op`: the one table of routes.
    pub fn of(op: Op) -> Family {
        match op {
            Op::Write
            | Op::Read
            | Op::ObjStat
            | Op::ObjTruncate
            | Op::ObjSeek
            | Op::ObjAllocate
            | Op::ObjRemove
            | Op::ObjRetire
            | Op::ObjReinstate
            | Op::ObjSync
            | Op::ObjVerify
            | Op::ObjSums
            | Op::ObjList
            | Op::ObjHandles
            | Op::LocalReadBegin
            | Op::LocalWriteBegin
            | Op::LocalWriteCommit => Family::Data,
            Op::Open
            | Op::Close
            | Op::Hold
            | Op::Release
            | Op::Sync
            | Op::Evicted
            | Op::MarkLost
            | Op::Stat
            | Op::Mkdir
            | Op::Symlink
            | Op::Mknod
            | Op::Link
            | Op::Readlink
            | Op::StageDir
            | Op::GetXattr
            | Op::ListXattr
            | Op::SetXattr
            | Op::RemoveXattr
            | Op::Rmdir
            | Op::Unlink
            | Op::Rename
            | Op::Readdir
            | Op::SetLayout
            | Op::SetAttr
            | Op::StageBegin
            | Op::StageCommit
            | Op::StageAbort
            | Op::AppendLock
            | Op::AppendUnlock
            | Op::PfsRead
            | Op::Fsck
            | Op::Watch => Family::Namespace,
            Op::ObjStage | Op::DrainTick | Op::DrainStatus | Op::SetMtbf | Op::PfsWrite | Op::PfsSync => Family::Drain,
            Op::Hello | Op::Auth | Op::Status | Op::Shutdown => Family::Admin,
        }
    }
}

/// A request that reached a family's handler its op does not belong to:
/// `Family::of` and that handler's arms disagree.
fn misrouted(req: &Request<'_>) -> Failure {
    Failure::new(Errno::EPROTO, format!("{:?} reached a request family that does not serve it", req.op()))
}

/// What the request path is built from at start-up, handed out to the families.
pub struct Parts {
    pub index: u32,
    /// This daemon's shard of a namespace spread over the daemons (`crate::shard`).
    pub shard: Option<crate::namespace::Shard>,
    pub checksum: Arc<dyn ChecksumStage>,
    pub scheduling: SchedulingPoint,
    pub store: Box<dyn ObjectStore>,
    pub cache: ReadThrough,
    pub namespace: Option<Arc<Namespace>>,
    pub deleter: Wake,
    /// Daemon 0: `surge fsck`'s checker.
    pub fsck: Option<crate::fsck::Fsck>,
    pub orphans: Arc<OrphanCounts>,
    pub pfs: Arc<Pfs>,
    pub max_read: usize,
    pub buffer: PathBuf,
    pub capacity: Option<u64>,
    pub drain: Option<Arc<DrainManager>>,
    pub handles: Arc<Handles>,
    pub stage_temps: Arc<StageTemps>,
    pub rates: Rates,
    pub demotion: Box<dyn DemotionControl>,
    pub space_freed: Arc<SpaceFreed>,
    pub trim: Arc<TrimStatus>,
    pub fence: Fence,
}

pub struct RequestPath {
    /// The scheduling point every scheduled request passes.
    pub scheduling: SchedulingPoint,
    /// The checksum stage of the connection's frames (the families hold it too).
    pub checksum: Arc<dyn ChecksumStage>,
    pub data: DataHandler,
    pub namespace: NamespaceHandler,
    pub drain: DrainHandler,
    pub admin: AdminHandler,
}

impl RequestPath {
    /// Hands `parts` out to the families; the state two families share
    /// (the store, the rates) is shared, not copied.
    pub fn new(parts: Parts) -> RequestPath {
        let store: Arc<dyn ObjectStore> = Arc::from(parts.store);
        let cache = Arc::new(parts.cache);
        let rates = Arc::new(parts.rates);
        let meter = Arc::<StoreMeter>::default();
        let staged = Arc::<StagedCounts>::default();
        RequestPath {
            data: DataHandler {
                checksum: Arc::clone(&parts.checksum),
                store: Arc::clone(&store),
                cache: Arc::clone(&cache),
                max_read: parts.max_read,
                meter: Arc::clone(&meter),
                write_clock: WriteClock::default(),
                rates: Arc::clone(&rates),
                space_freed: parts.space_freed,
                fence: parts.fence,
            },
            namespace: NamespaceHandler {
                index: parts.index,
                shard: parts.shard,
                namespace: parts.namespace,
                deleter: parts.deleter,
                fsck: parts.fsck,
                drain: parts.drain.clone(),
                handles: parts.handles,
                appends: AppendLocks::default(),
                stage_temps: parts.stage_temps,
                unstaged: Mutex::new(None),
                pfs: Arc::clone(&parts.pfs),
                cache,
                max_read: parts.max_read,
            },
            drain: DrainHandler {
                checksum: Arc::clone(&parts.checksum),
                store: Arc::clone(&store),
                pfs: parts.pfs,
                buffer: parts.buffer.clone(),
                capacity: parts.capacity,
                manager: parts.drain,
                rates,
                demotion: parts.demotion,
                staged: Arc::clone(&staged),
                trim: parts.trim,
            },
            admin: AdminHandler {
                index: parts.index,
                store,
                buffer: parts.buffer,
                capacity: parts.capacity,
                meter,
                orphans: parts.orphans,
                staged,
            },
            scheduling: parts.scheduling,
            checksum: parts.checksum,
        }
    }

    /// Registers a request just read off its connection at the scheduling
    /// point; the connection admits it ([`Arrival::admit`]) when its turn
    /// on the connection comes, and holds the ticket until the reply has
    /// been sent. `None` for the session requests, which are the
    /// connection's, and for `AppendLock` and `Watch`, which wait (for the
    /// lock, for a namespace change) outside the scheduling point (a
    /// blocked append or an idle watch holds no slot).
    pub fn arrive(&self, hdr: &RequestHeader) -> Option<Arrival<'_>> {
        let op = Op::from_u8(hdr.op)?;
        // A `DrainTick` steers the rates: it must not queue behind the data it paces.
        let scheduled = Family::of(op) != Family::Admin && !matches!(op, Op::AppendLock | Op::Watch | Op::DrainTick);
        scheduled.then(|| self.scheduling.arrive(hdr.job_id, op.charged_as(), hdr.io_size))
    }

    /// Serves a file-system request of `job` by its family's handler (the
    /// session requests are the connection's); `sums` are the block
    /// checksums of a `Write`'s data (`verify_write`).
    pub fn handle(
        &self,
        job: Job<'_>,
        req: &Request<'_>,
        sums: &BlockSums,
        out: &mut ReplyBody,
    ) -> Result<(), Failure> {
        match Family::of(req.op()) {
            Family::Data => self.data.handle(job, req, sums, out),
            Family::Namespace => self.namespace.handle(job, req, out),
            Family::Drain => self.drain.handle(job, req, out),
            Family::Admin => Err(Failure::new(Errno::EPROTO, "session request outside the session handshake")),
        }
    }

    /// Serves a request this daemon's background tasks make of it (through
    /// `peers`), as one from the network but past the scheduling point
    /// (background work is not a job's): the reply's fields (no bulk
    /// data), or the failure.
    pub fn call_locally(&self, req: &Request<'_>) -> Result<Vec<u8>, Failure> {
        let mut out = ReplyBody::default();
        self.handle(Job::BACKGROUND, req, &BlockSums::default(), &mut out)?;
        Ok(out.head().to_vec())
    }

    /// The storage, namespace and read-cache part of the daemon's status.
    pub fn status(&self) -> Result<DaemonStatus, Failure> {
        let counts = self.namespace.counts()?;
        let (cache_hits, cache_misses) = self.data.cache.counts();
        Ok(DaemonStatus {
            is_metadata: self.namespace.is_kept(),
            cache_hits,
            cache_misses,
            ..self.admin.status(counts, &self.scheduling)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::trimmer;
    use crate::store::DirStore;
    use crate::DrainConfig;

    /// A request path as a daemon other than daemon 0 builds it (no
    /// namespace, no data manager), over a store and PFS in `dir`.
    fn request_path(dir: &std::path::Path) -> RequestPath {
        let (buffer, pfs) = (dir.join("buffer"), dir.join("pfs"));
        std::fs::create_dir_all(&buffer).unwrap();
        std::fs::create_dir_all(&pfs).unwrap();
        let space_freed = Arc::<SpaceFreed>::default();
        let (_, trim) = trimmer::start(&DrainConfig::default(), 1, &buffer, &space_freed, 0);
        let stages = crate::Stages::default();
        RequestPath::new(Parts {
            index: 1,
            shard: None,
            checksum: stages.checksum,
            scheduling: SchedulingPoint::new(stages.scheduler),
            store: Box::new(DirStore::open(&buffer, None).unwrap()),
            cache: ReadThrough::new(stages.cache),
            namespace: None,
            deleter: Wake::default(),
            fsck: None,
            orphans: Arc::default(),
            pfs: Arc::new(Pfs::open(&pfs).unwrap()),
            max_read: 1 << 20,
            buffer: buffer.clone(),
            capacity: None,
            drain: None,
            handles: Arc::default(),
            stage_temps: Arc::default(),
            rates: Rates::until_first_tick(false),
            demotion: Box::new(crate::demotion_control::TokenBucket::default()),
            space_freed,
            trim,
            fence: Fence::open(&dir.join("fence")).unwrap(),
        })
    }

    /// A body `op` decodes from: the shortest all zeros (zero ids, empty
    /// strings and lists), else one with a single small non-zero byte (an
    /// op whose fields include a kind or mode that zero does not name).
    fn body_of(op: Op) -> Vec<u8> {
        let zeros = (0..64).map(|len| vec![0u8; len]);
        let one_set = (1..64).flat_map(|len| {
            (0..len).flat_map(move |at| {
                (1..=8).map(move |value| {
                    let mut body = vec![0u8; len];
                    body[at] = value;
                    body
                })
            })
        });
        zeros
            .chain(one_set)
            .find(|body| Request::decode(op, body).is_ok())
            .unwrap_or_else(|| panic!("no body of {op:?} to try decodes"))
    }

    #[test]
    fn every_op_reaches_a_handler_that_serves_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = request_path(dir.path());
        for &op in Op::ALL {
            let body = body_of(op);
            let req = Request::decode(op, &body).unwrap();
            let served = path.handle(Job::BACKGROUND, &req, &BlockSums::default(), &mut ReplyBody::default());
            assert_ne!(served, Err(misrouted(&req)), "{op:?} went to {:?}", Family::of(op));
        }
    }

    #[test]
    fn every_op_has_a_family_and_the_protocols_namespace_ops_go_to_the_namespace_family() {
        for &op in Op::ALL {
            let family = Family::of(op);
            if op.is_namespace() {
                assert_eq!(family, Family::Namespace, "{op:?}");
            }
        }
    }

    #[test]
    fn every_family_serves_some_op() {
        for family in [Family::Data, Family::Namespace, Family::Drain, Family::Admin] {
            assert!(Op::ALL.iter().any(|&op| Family::of(op) == family), "{family:?} serves no op");
        }
    }
}
