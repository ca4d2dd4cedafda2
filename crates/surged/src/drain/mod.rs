//! The data manager of BBOS [Sung20, ch. 5] in daemon 0: it records the
//! checkpoints jobs write into the buffer, decides each period at which
//! rates checkpoints write and the buffer demotes to the PFS (the policy
//! of `--drain`), demotes and evicts, and reports what it does
//! (`DrainStatus`). docs/bbos.md, "The data manager in the daemons", says
//! how to use it and how it works.
//!
//! - [`config`]: `--drain` and its companions;
//! - `manager`: the data manager, shared by the request path and the tasks;
//! - `plan`: what the throttler decided last;
//! - `state_store`: the drain state (embedded, or Redis with failover);
//! - `books`: the index in memory the tasks choose files from;
//! - `crate::handles` (the daemon's, shared): the files clients hold open,
//!   which are not evicted;
//! - `evictions`: where the files evicted went, for the clients that held
//!   them (`Evicted`);
//! - `accounting`: the I/O worker's part of Algorithm 5.1, on `Open`,
//!   `Unlink` and `Rename`;
//! - `placement`: direct-to-PFS placement of cold checkpoints on `Open`,
//!   kept in the drain state across restarts, and their writes
//!   (`PfsWrite`, `PfsSync`);
//! - `throttler`, `demoter`, `evicter`, `replicator`: the background tasks;
//! - `replicas`: the replicator's directory, pace, figures and verified copy;
//! - [`evict_order`]: the order the evicter takes files in (`--drain-evict`);
//! - [`trimmer`]: TRIM of every daemon's buffer after deletions (`--drain-trim`);
//! - `calibration`: the buffer's rates at start;
//! - `resume`: the state reconciled with the namespace at start;
//! - `report`: `DrainStatus` and the metrics.

mod accounting;
mod books;
mod calibration;
pub mod config;
mod demoter;
pub mod evict_order;
mod evicter;
mod evictions;
mod manager;
mod placement;
mod plan;
mod replicas;
mod replicator;
mod report;
mod resume;
mod state_store;
mod throttler;
pub(crate) mod trimmer;
mod version;

use crate::background::{Registration, Wake};
use std::sync::Arc;

pub(crate) use manager::{DrainManager, Setting};

/// The data manager's background tasks: the throttler, a demoter per
/// daemon (device), the evicter and, with `--drain-replica`, the
/// replicator; none with the policy `off`.
pub(crate) fn tasks(manager: &Arc<DrainManager>) -> Vec<Registration> {
    if !manager.setting.config.is_on() {
        return Vec::new();
    }
    let demoters: Vec<Wake> = (0..manager.setting.daemons).map(|_| Wake::default()).collect();
    let evicter = Wake::default();
    let mut tasks: Vec<Registration> = demoters
        .iter()
        .enumerate()
        .map(|(device, wake)| {
            Registration::new(demoter::Demoter::new(Arc::clone(manager), device as u32), wake.clone())
        })
        .collect();
    tasks.push(Registration::new(evicter::Evicter { manager: Arc::clone(manager) }, evicter.clone()));
    tasks.push(Registration::new(throttler::Throttler::new(Arc::clone(manager), demoters, evicter), Wake::default()));
    if let Some(replicas) = &manager.replicas {
        let replicator = replicator::Replicator { manager: Arc::clone(manager) };
        tasks.push(Registration::new(replicator, replicas.wake.clone()));
    }
    tasks
}
