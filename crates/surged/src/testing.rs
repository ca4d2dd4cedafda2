//! Second implementations of the request stages, for tests (as IOR proves
//! its `aiori.h` interface with `aiori-DUMMY.c`): a blocking priority
//! scheduler, a checksum stage that counts what it checks, and a store that
//! fails on demand. The real implementations are registered in
//! [`crate::stages`].
//! Tests start daemons with them through [`crate::start_with`]; built for
//! the crate's own tests and with the `testing` feature.

use crate::checksum::{Batch, BlockSums, ChecksumStage, InlineCrc32c, Running};
use crate::failure::Failure;
use crate::locking::lock;
use crate::sched::{Grant, Scheduler};
use crate::store::{DirStore, Extent, ObjectStore, OpenStore, Usage, Written};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use surge_proto::msg::{AllocateMode, ObjStatReply, ObjVerifyReply};
use surge_proto::Errno;

/// Serves one request at a time, the waiting request of the job with the
/// highest priority first (then in arrival order); blocks in `admit` until
/// then. `pause` holds every request back, so a test can line several up.
/// It decides order only: the scheduling point keeps the counters.
#[derive(Default)]
pub struct PriorityScheduler {
    priorities: HashMap<u64, u32>,
    state: Mutex<PriorityState>,
    turn: Condvar,
}

#[derive(Default)]
struct PriorityState {
    paused: bool,
    busy: bool,
    /// (priority, arrival number) of each waiting request.
    waiting: Vec<(u32, u64)>,
    /// The jobs of the requests admitted, in admission order.
    admitted: Vec<u64>,
}

impl PriorityScheduler {
    /// Jobs not listed have priority 0.
    pub fn new(priorities: &[(u64, u32)]) -> PriorityScheduler {
        PriorityScheduler { priorities: priorities.iter().copied().collect(), ..PriorityScheduler::default() }
    }

    pub fn pause(&self) {
        lock(&self.state).paused = true;
    }

    pub fn resume(&self) {
        lock(&self.state).paused = false;
        self.turn.notify_all();
    }

    /// Requests blocked in `admit`.
    pub fn waiting(&self) -> usize {
        lock(&self.state).waiting.len()
    }

    /// The job of every request admitted so far, in order.
    pub fn admitted(&self) -> Vec<u64> {
        lock(&self.state).admitted.clone()
    }
}

impl Scheduler for PriorityScheduler {
    fn admit(&self, grant: &Grant) {
        let priority = self.priorities.get(&grant.job).copied().unwrap_or(0);
        let mut state = lock(&self.state);
        let me = (priority, grant.arrival);
        state.waiting.push(me);
        // Highest priority first; among equals, the earliest arrival.
        let first = |s: &PriorityState| s.waiting.iter().copied().max_by_key(|&(p, arrival)| (p, u64::MAX - arrival));
        while state.paused || state.busy || first(&state) != Some(me) {
            state = self.turn.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        state.waiting.retain(|&w| w != me);
        state.busy = true;
        state.admitted.push(grant.job);
    }

    fn done(&self, _grant: &Grant, _moved: u64) {
        lock(&self.state).busy = false;
        self.turn.notify_all();
    }
}

/// CRC-32C as the default computes it, counting what passes through it, so
/// that a test sees a checksum was taken (and when: while a body was still
/// arriving, say).
#[derive(Default)]
pub struct CountingCrc {
    counts: Arc<Mutex<ChecksumCounts>>,
}

/// What a [`CountingCrc`] has checksummed so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ChecksumCounts {
    /// Bytes added to running checksums as bytes, and in how many pieces.
    pub bytes: u64,
    pub pieces: u64,
    /// Blocks checksummed (data at rest, a write's data), and in how many
    /// calls of the stage (each a batch of them).
    pub blocks: u64,
    pub batches: u64,
}

impl CountingCrc {
    pub fn counts(&self) -> ChecksumCounts {
        *lock(&self.counts)
    }
}

impl ChecksumStage for CountingCrc {
    fn begin(&self) -> Box<dyn Running> {
        Box::new(CountingRunning { inner: InlineCrc32c.begin(), counts: Arc::clone(&self.counts) })
    }

    fn sum_blocks(&self, batches: &mut [Batch<'_>]) {
        let mut counts = lock(&self.counts);
        counts.blocks += batches.iter().map(|batch| batch.blocks() as u64).sum::<u64>();
        counts.batches += 1;
        drop(counts);
        InlineCrc32c.sum_blocks(batches);
    }
}

struct CountingRunning {
    inner: Box<dyn Running>,
    counts: Arc<Mutex<ChecksumCounts>>,
}

impl Running for CountingRunning {
    fn update(&mut self, bytes: &[u8]) {
        let mut counts = lock(&self.counts);
        counts.bytes += bytes.len() as u64;
        counts.pieces += u64::from(!bytes.is_empty());
        self.inner.update(bytes);
    }

    fn update_blocks(&mut self, crcs: &[u32]) {
        self.inner.update_blocks(crcs);
    }

    fn finish(&self) -> u32 {
        self.inner.finish()
    }
}

/// The operations of [`ObjectStore`], for [`StoreProbe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    Write,
    Read,
    Verify,
    Stat,
    Truncate,
    SetMtime,
    Remove,
    Sync,
    Seek,
    Allocate,
}

/// What runs once just before a store call (see [`StoreProbe::before_next`]).
type Hook = Box<dyn FnOnce() + Send>;

/// Counts the calls a [`FailingStore`] got, and says which fail, with what.
#[derive(Default)]
pub struct StoreProbe {
    faults: Mutex<HashMap<StoreOp, Errno>>,
    calls: Mutex<HashMap<StoreOp, u64>>,
    hooks: Mutex<HashMap<StoreOp, Hook>>,
}

impl StoreProbe {
    /// From now on, `op` fails with `errno` (without reaching the store).
    pub fn fail(&self, op: StoreOp, errno: Errno) {
        lock(&self.faults).insert(op, errno);
    }

    /// From now on, `op` reaches the store again.
    pub fn heal(&self, op: StoreOp) {
        lock(&self.faults).remove(&op);
    }

    /// Calls of `op` so far, failed ones included.
    pub fn calls(&self, op: StoreOp) -> u64 {
        lock(&self.calls).get(&op).copied().unwrap_or(0)
    }

    /// Runs `hook` once, just before the next call of `op` (a change that
    /// races a request, say).
    pub fn before_next(&self, op: StoreOp, hook: impl FnOnce() + Send + 'static) {
        lock(&self.hooks).insert(op, Box::new(hook));
    }

    fn enter(&self, op: StoreOp) -> Result<(), Errno> {
        *lock(&self.calls).entry(op).or_default() += 1;
        let hook = lock(&self.hooks).remove(&op);
        if let Some(hook) = hook {
            hook();
        }
        match lock(&self.faults).get(&op) {
            Some(&errno) => Err(errno),
            None => Ok(()),
        }
    }
}

/// A store that passes every call to the one it wraps, unless its probe
/// says that operation fails; it counts every call.
pub struct FailingStore {
    inner: Box<dyn ObjectStore>,
    probe: Arc<StoreProbe>,
}

impl FailingStore {
    pub fn new(inner: Box<dyn ObjectStore>, probe: Arc<StoreProbe>) -> FailingStore {
        FailingStore { inner, probe }
    }

    /// For [`crate::Stages::store`]: the default store, wrapped.
    pub fn around_dir_store(probe: Arc<StoreProbe>) -> OpenStore {
        Box::new(move |site| Ok(Box::new(FailingStore::new(Box::new(DirStore::open_at(site)?), probe))))
    }
}

impl ObjectStore for FailingStore {
    fn write_at(&self, ino: u64, offset: u64, data: &[u8]) -> Result<Written, Errno> {
        self.probe.enter(StoreOp::Write)?;
        self.inner.write_at(ino, offset, data)
    }
    fn write_summed(&self, ino: u64, offset: u64, data: &[u8], whole: &BlockSums) -> Result<Written, Failure> {
        self.probe.enter(StoreOp::Write)?;
        self.inner.write_summed(ino, offset, data, whole)
    }
    fn read_summed(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        sum: Option<&mut dyn Running>,
    ) -> Result<usize, Failure> {
        self.probe.enter(StoreOp::Read)?;
        self.inner.read_summed(ino, offset, buf, sum)
    }
    fn verify(&self, ino: u64, offset: u64, len: u64) -> Result<ObjVerifyReply, Failure> {
        self.probe.enter(StoreOp::Verify)?;
        self.inner.verify(ino, offset, len)
    }
    fn stat(&self, ino: u64) -> Result<ObjStatReply, Failure> {
        self.probe.enter(StoreOp::Stat)?;
        self.inner.stat(ino)
    }
    fn seek(&self, ino: u64, offset: u64, hole: bool) -> Result<Option<u64>, Failure> {
        self.probe.enter(StoreOp::Seek)?;
        self.inner.seek(ino, offset, hole)
    }
    fn extent(&self, ino: u64, offset: u64, most: u64) -> Result<Extent, Failure> {
        self.probe.enter(StoreOp::Seek)?;
        self.inner.extent(ino, offset, most)
    }
    fn allocate(&self, ino: u64, offset: u64, len: u64, mode: AllocateMode) -> Result<(), Failure> {
        self.probe.enter(StoreOp::Allocate)?;
        self.inner.allocate(ino, offset, len, mode)
    }
    fn truncate(&self, ino: u64, len: u64) -> Result<(), Failure> {
        self.probe.enter(StoreOp::Truncate)?;
        self.inner.truncate(ino, len)
    }
    fn set_mtime(&self, ino: u64, mtime_ns: i64) -> Result<(), Errno> {
        self.probe.enter(StoreOp::SetMtime)?;
        self.inner.set_mtime(ino, mtime_ns)
    }
    fn remove(&self, ino: u64) -> Result<(), Errno> {
        self.probe.enter(StoreOp::Remove)?;
        self.inner.remove(ino)
    }
    fn sync(&self, ino: u64) -> Result<(), Errno> {
        self.probe.enter(StoreOp::Sync)?;
        self.inner.sync(ino)
    }
    fn usage(&self) -> Usage {
        self.inner.usage()
    }
    fn lost(&self) -> Vec<u64> {
        self.inner.lost()
    }
    fn accept_lost(&self) -> std::io::Result<()> {
        self.inner.accept_lost()
    }
}
