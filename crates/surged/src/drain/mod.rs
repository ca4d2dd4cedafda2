//! The data manager of BBOS [Sung20, ch. 5] in daemon 0: it records the
//! checkpoints jobs write into the buffer, decides each period at which
//! rates checkpoints write and the buffer demotes to the PFS (the policy
//! of `--drain`), demotes and evicts, and reports what it does
//! (`DrainStatus`). docs/bbos.md, "The data manager in the daemons", says
//! how to use it and how it works.
//!
//! - [`config`]: `--drain` and its companions;

pub mod config;

use crate::failure::Failure;
use crate::lock;
use config::DrainConfig;
use std::collections::BTreeMap;
use std::sync::Mutex;
use surge_proto::drain::{AppDrain, DrainReport};

/// Daemon 0's data manager: the state it keeps and what it reports.
pub(crate) struct DrainManager {
    config: DrainConfig,
    /// MTBF in seconds per job, as `SetMtbf` gave it.
    mtbfs: Mutex<BTreeMap<u64, u64>>,
}

impl DrainManager {
    pub fn new(config: DrainConfig) -> DrainManager {
        DrainManager { config, mtbfs: Mutex::default() }
    }

    /// `SetMtbf`: the job's mean time between failures.
    pub fn set_mtbf(&self, job: u64, seconds: u64) -> Result<(), Failure> {
        lock(&self.mtbfs).insert(job, seconds);
        Ok(())
    }

    /// `DrainStatus`.
    pub fn report(&self) -> Result<DrainReport, Failure> {
        let apps =
            lock(&self.mtbfs).iter().map(|(&job, &mtbf_s)| AppDrain { job, mtbf_s, ..AppDrain::default() }).collect();
        Ok(DrainReport {
            policy: self.config.policy.name().into(),
            period_s: self.config.period.as_secs(),
            state_healthy: true,
            apps,
            ..DrainReport::default()
        })
    }
}
