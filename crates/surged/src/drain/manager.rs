//! Daemon 0's data manager itself: what it is given (`Setting`), the drain
//! state, the books and the last plan, shared by the request path and the
//! tasks; the tasks' modules add its methods.

use super::books::Books;
use super::config::DrainConfig;
use super::evictions::Evictions;
use super::plan::Plan;
use super::replicas::Replicas;
use super::state_store::StateStore;
use crate::background::Wake;
use crate::failure::Failure;
use crate::handles::Handles;
use crate::locking::lock;
use crate::logging::log;
use crate::namespace::Namespace;
use crate::peers::Peers;
use crate::pfs::Pfs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use surge_bbos_state::DrainState;

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
    pub(super) setting: Setting,
    /// `None` with the policy `off`: nothing is recorded.
    pub(super) store: Option<StateStore>,
    pub(super) books: Mutex<Books>,
    /// The files clients hold open (the daemon's): never evicted.
    pub(crate) handles: Arc<Handles>,
    /// Where the files evicted since the start went.
    pub(super) evictions: Evictions,
    pub(super) plan: Mutex<Plan>,
    /// The last failure of a demotion or of the state store, for the report.
    pub(super) last_error: Mutex<String>,
    /// The replicator's, with `--drain-replica` (and a policy on).
    pub(super) replicas: Option<Replicas>,
}

impl DrainManager {
    /// Opens the state (with a policy on) and reconciles it with the
    /// namespace; `handles` are the daemon's count of open files.
    pub fn start(setting: Setting, handles: Arc<Handles>) -> Result<DrainManager, String> {
        let store = match setting.config.is_on() {
            true => Some(super::state_store::open(
                setting.config.state.as_deref(),
                &setting.buffer,
                &setting.cluster_id,
                0,
            )?),
            false => None,
        };
        let replicas = match (&setting.config.replica, setting.config.is_on()) {
            (Some(dir), true) => Some(Replicas::new(dir.clone(), setting.config.replica_rate)),
            _ => None,
        };
        let manager = DrainManager {
            setting,
            store,
            books: Mutex::default(),
            handles,
            evictions: Evictions::default(),
            plan: Mutex::default(),
            last_error: Mutex::default(),
            replicas,
        };
        manager.resume().map_err(|f| format!("cannot resume the drain state: {}", f.text()))?;
        Ok(manager)
    }

    /// The drain state, with a policy on.
    pub(super) fn state(&self) -> Option<&dyn DrainState> {
        self.store.as_ref().map(|s| &*s.state)
    }

    /// Runs `op` on the drain state (with a policy on); a failure is
    /// logged and kept for the report, and gives `None`.
    pub(super) fn with_state<T>(
        &self,
        what: &str,
        op: impl FnOnce(&dyn DrainState) -> surge_bbos_state::state::Result<T>,
    ) -> Option<T> {
        let state = self.state()?;
        op(state).map_err(|e| self.note_error(&format!("drain state: {what}: {e}"))).ok()
    }

    /// Logs a failure of the data manager and keeps it for the report.
    pub(super) fn note_error(&self, message: &str) {
        log!(Warn, 0, "{message}");
        self.remember_error(message);
    }

    /// Keeps a failure for the report only: one that ends a task's round,
    /// which the task's back-off logs when it is news (`background::Backoff`).
    pub(super) fn remember_error(&self, message: &str) {
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
