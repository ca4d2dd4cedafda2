//! The admin family: the session ops `Hello`, `Auth`, `Status` and
//! `Shutdown`. The connection serves them during and after its handshake
//! (`server.rs`); the request path refuses them, and builds here the
//! storage and namespace part of the `Status` reply. Its state: the store's
//! usage and time, the buffer directory and capacity, the orphan and staged
//! counts; the namespace family and the scheduling point lend their parts.

use super::namespace::NamespaceCounts;
use crate::collector::OrphanCounts;
use crate::meter::StoreMeter;
use crate::sched::SchedulingPoint;
use crate::stage_out::StagedCounts;
use crate::store::ObjectStore;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use surge_proto::msg::{DaemonStatus, JobOpStatus, JobStatus};

pub struct AdminHandler {
    pub index: u32,
    pub store: Arc<dyn ObjectStore>,
    pub buffer: PathBuf,
    pub capacity: Option<u64>,
    pub meter: Arc<StoreMeter>,
    pub orphans: Arc<OrphanCounts>,
    pub staged: Arc<StagedCounts>,
}

impl AdminHandler {
    /// The storage and namespace part of the daemon's status, with the
    /// namespace's `counts` and the jobs `scheduling` has seen.
    pub fn status(&self, counts: NamespaceCounts, scheduling: &SchedulingPoint) -> DaemonStatus {
        let usage = self.store.usage();
        // The status stays useful when statvfs fails: it reports zeros.
        let (device_size, device_free) = surge_cluster::fs_space(&self.buffer).unwrap_or((0, 0));
        let (store_bytes, store_busy_ns) = self.meter.totals();
        let jobs = scheduling.jobs();
        DaemonStatus {
            index: self.index,
            objects: usage.objects,
            bytes_used: usage.bytes,
            capacity: self.capacity.unwrap_or(device_size),
            device_free,
            files: counts.files,
            dirs: counts.dirs,
            buffer_dir: self.buffer.display().to_string(),
            store_bytes,
            store_busy_ns,
            doomed: counts.doomed,
            held: counts.held,
            orphans_found: self.orphans.found.load(Ordering::Relaxed),
            orphans_collected: self.orphans.collected.load(Ordering::Relaxed),
            jobs: jobs
                .iter()
                .map(|l| JobStatus {
                    job: l.job,
                    waiting: l.waiting,
                    in_service: l.in_service,
                    requests: l.requests,
                    bytes: l.bytes,
                })
                .collect(),
            job_ops: jobs
                .iter()
                .flat_map(|l| {
                    l.by_op.served().map(|(op, load)| JobOpStatus {
                        job: l.job,
                        op: op as u8,
                        requests: load.requests,
                        bytes: load.bytes,
                    })
                })
                .collect(),
            staged_bytes: self.staged.bytes.load(Ordering::Relaxed),
            staged_objects: self.staged.objects.load(Ordering::Relaxed),
            unstaged_files: counts.contents.unstaged,
            lost_files: counts.contents.lost,
            ..DaemonStatus::default()
        }
    }
}
