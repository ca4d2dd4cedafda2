//! The drain family: the ops of stage-out, demotion and the data manager —
//! `ObjStage` (an object's bytes copied to the PFS, by a client's stage-out
//! or daemon 0's demoter), `DrainTick` (daemon 0's throttler setting this
//! daemon's rates), and daemon 0's `DrainStatus`, `SetMtbf`, `PfsWrite`
//! and `PfsSync`. Its state: the object store and checksum stage (read
//! for copies), the PFS, the rates and demotion control the ticks set, the
//! staged and trimmed counts, and the data manager (`None` but on daemon 0).
//!
//! An op joins this family by an arm in `DrainHandler::handle` and its line
//! in `Family::of` (`mod.rs`).

use super::{misrouted, ReplyBody};
use crate::checksum::ChecksumStage;
use crate::demotion_control::DemotionControl;
use crate::drain::trimmer::TrimStatus;
use crate::drain::DrainManager;
use crate::failure::Failure;
use crate::job::Job;
use crate::peers::BACKGROUND_JOB;
use crate::pfs::Pfs;
use crate::rates::Rates;
use crate::stage_out::{stage_object, StageOrder, StagedCounts};
use crate::store::ObjectStore;
use std::path::PathBuf;
use std::sync::Arc;
use surge_proto::msg::DrainTickReply;
use surge_proto::{Errno, Request};

pub struct DrainHandler {
    pub checksum: Arc<dyn ChecksumStage>,
    pub store: Arc<dyn ObjectStore>,
    pub pfs: Arc<Pfs>,
    /// The buffer directory (its device's size, when no capacity is set).
    pub buffer: PathBuf,
    pub capacity: Option<u64>,
    /// Daemon 0: the data manager (BBOS, `crate::drain`).
    pub manager: Option<Arc<DrainManager>>,
    /// The data manager's rates, set by its ticks (every daemon).
    pub rates: Arc<Rates>,
    /// What holds demotion copies to the demotion rate (`--drain-rate-control`).
    pub demotion: Box<dyn DemotionControl>,
    pub staged: Arc<StagedCounts>,
    /// What this daemon's trimmer did (`drain::trimmer`), for `DrainTick`.
    pub trim: Arc<TrimStatus>,
}

impl DrainHandler {
    /// Serves a drain op of `job`.
    pub fn handle(&self, job: Job<'_>, req: &Request<'_>, out: &mut ReplyBody) -> Result<(), Failure> {
        let manager =
            || self.manager.as_deref().ok_or_else(|| Failure::new(Errno::EINVAL, "drain status is kept by daemon 0"));
        match *req {
            Request::ObjStage { ino, layout, stripe, temp, object_offset, len } => {
                let order = StageOrder { ino, layout, stripe, temp, object_offset, len };
                let demotion = job.id == BACKGROUND_JOB;
                let pacing = demotion.then(|| self.demotion.pacing());
                let staged = stage_object(&*self.store, &self.pfs, &*self.checksum, &order, pacing.as_ref())?;
                self.staged.add(&staged);
                if demotion {
                    self.rates.demoted(staged.bytes);
                }
                out.put(&staged);
            }
            Request::DrainTick { checkpoint_bps, demote_bps, direct_bps, wait_for_space_ms } => {
                self.rates.set(checkpoint_bps, direct_bps, wait_for_space_ms);
                self.demotion.set_rate(demote_bps);
                let device_size = surge_cluster::fs_space(&self.buffer).map_or(0, |(size, _)| size);
                out.put(&DrainTickReply {
                    written: self.rates.written(),
                    demoted_bytes: self.rates.demoted_bytes(),
                    used: self.store.usage().bytes,
                    capacity: self.capacity.unwrap_or(device_size),
                    rate_control: self.demotion.in_force().into(),
                    trim: self.trim.report(),
                });
            }
            Request::DrainStatus => out.put(&manager()?.report()?),
            Request::SetMtbf { job, seconds } => manager()?.set_mtbf(job, seconds)?,
            Request::PfsWrite { path, offset, data } => {
                out.put(&manager()?.write_direct(path, offset, data, &self.rates.direct)?)
            }
            Request::PfsSync { path } => manager()?.sync_direct(path)?,
            _ => return Err(misrouted(req)),
        }
        Ok(())
    }
}
