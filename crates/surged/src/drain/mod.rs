//! The data manager of BBOS [Sung20, ch. 5] in daemon 0: it records the
//! checkpoints jobs write into the buffer, decides each period at which
//! rates checkpoints write and the buffer demotes to the PFS (the policy
//! of `--drain`), demotes and evicts, and reports what it does
//! (`DrainStatus`). docs/bbos.md, "The data manager in the daemons", says
//! how to use it and how it works.
//!
//! - [`config`]: `--drain` and its companions;
//! - `state_store`: the drain state (embedded, or Redis with failover);
//! - `books`: the index in memory the tasks choose files from;
//! - `accounting`: the I/O worker's part of Algorithm 5.1, on `Open`,
//!   `Unlink` and `Rename`;
//! - `throttler`, `demoter`, `evicter`: the background tasks;
//! - `calibration`: the buffer's rates at start;
//! - `resume`: the state reconciled with the namespace at start;
//! - `report`: `DrainStatus` and the metrics.

mod accounting;
mod books;
mod calibration;
pub mod config;
mod demoter;
mod evicter;
mod report;
mod resume;
mod state_store;
mod throttler;
mod version;

use crate::background::{Registration, Wake};
use crate::failure::Failure;
use crate::namespace::Namespace;
use crate::peers::Peers;
use crate::pfs::Pfs;
use crate::{lock, log};
use books::Books;
use config::DrainConfig;
use state_store::StateStore;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use surge_bbos_state::DrainState;
use throttler::Plan;

/// What daemon 0's data manager is given when it starts.
pub(crate) struct Setting {
    pub config: DrainConfig,
    pub daemons: u32,
    pub buffer: PathBuf,
    pub cluster_id: String,
    pub namespace: Arc<Namespace>,
    pub pfs: Arc<Pfs>,
    /// The PFS root (the calibration copies into it).
    pub pfs_dir: PathBuf,
    pub peers: Arc<Peers>,
    /// Starts a round of the deleter (evictions doom objects).
    pub deleter: Wake,
}

/// Daemon 0's data manager: the state it keeps, its books and the last
/// plan of its throttler.
pub(crate) struct DrainManager {
    setting: Setting,
    /// `None` with the policy `off`: nothing is recorded.
    store: Option<StateStore>,
    books: Mutex<Books>,
    plan: Mutex<Plan>,
    /// The last failure of a demotion or of the state store, for the report.
    last_error: Mutex<String>,
}

impl DrainManager {
    /// Opens the state (with a policy on) and reconciles it with the namespace.
    pub fn start(setting: Setting) -> Result<DrainManager, String> {
        let store = match setting.config.is_on() {
            true => Some(state_store::open(setting.config.state.as_deref(), &setting.buffer, &setting.cluster_id, 0)?),
            false => None,
        };
        let manager = DrainManager {
            setting,
            store,
            books: Mutex::default(),
            plan: Mutex::default(),
            last_error: Mutex::default(),
        };
        manager.resume().map_err(|f| format!("cannot resume the drain state: {}", f.text()))?;
        Ok(manager)
    }

    /// The drain state, with a policy on.
    fn state(&self) -> Option<&dyn DrainState> {
        self.store.as_ref().map(|s| &*s.state)
    }

    /// Runs `op` on the drain state (with a policy on); a failure is
    /// logged and kept for the report, and gives `None`.
    fn with_state<T>(
        &self,
        what: &str,
        op: impl FnOnce(&dyn DrainState) -> surge_bbos_state::state::Result<T>,
    ) -> Option<T> {
        let state = self.state()?;
        op(state).map_err(|e| self.note_error(&format!("drain state: {what}: {e}"))).ok()
    }

    /// Logs a failure of the data manager and keeps it for the report.
    fn note_error(&self, message: &str) {
        log!(Warn, 0, "{message}");
        *lock(&self.last_error) = message.to_string();
    }

    /// `SetMtbf`: the job's mean time between failures, which orders its demotion.
    pub fn set_mtbf(&self, job: u64, seconds: u64) -> Result<(), Failure> {
        if seconds == 0 {
            return Err(Failure::new(surge_proto::Errno::EINVAL, "an MTBF must be at least one second"));
        }
        let mut books = lock(&self.books);
        let entry = books.job(job);
        (entry.mtbf_s, entry.mtbf_given) = (seconds, true);
        if books.has_pending(job, false) {
            self.with_state("move the job in V-order", |s| {
                s.add_victim(surge_bbos_state::AppId(job), surge_bbos_state::Mtbf(seconds))
            });
        }
        Ok(())
    }
}

/// The data manager's background tasks: the throttler, a demoter per
/// daemon (device) and the evicter; none with the policy `off`.
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
    tasks
}
