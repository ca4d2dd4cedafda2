//! The data manager's report (`DrainStatus`, daemon 0): what BBOS [Sung20,
//! ch. 5] decides in the daemons (policy, period, thresholds, rates in
//! force) and what each application has in the buffer. Plain structs like
//! the other replies; docs/protocol.md gives the byte layout and
//! docs/bbos.md what each figure means.

use crate::codec::{DecodeError, Decoder, Encoder};
/// Lives beside `DrainTickReply`, which carries it too.
pub use crate::msg::DrainTrim;
use crate::msg::Reply;

/// `DrainStatus` reply.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DrainReport {
    /// The policy in force: a name of `surge_bbos::policy::DrainPolicyKind` (`off`, `bbos`, ...).
    pub policy: String,
    /// The order the evicter takes demoted files in: `bbos`, `lru` or `fifo`.
    pub evict_order: String,
    /// Where the drain state is kept: `embedded PATH` or the Redis URL.
    pub state_backend: String,
    /// False once the configured Redis failed and the embedded store took over.
    pub state_healthy: bool,
    /// Why the state store is not healthy (empty when it is).
    pub state_note: String,
    /// Length of a period, its index since the daemon started and how far into it we are.
    pub period_s: u64,
    pub period_index: u64,
    pub period_elapsed_ms: u64,
    /// The buffer's capacity S (summed over the daemons) and the bytes used in it.
    pub capacity: u64,
    pub used: u64,
    /// Checkpoint bytes written this period (DWSF), in the last one (DWPP)
    /// and predicted for this one.
    pub dwsf: u64,
    pub dwpp_last: u64,
    pub dwpp_predicted: u64,
    /// The threshold pattern of this period: `idle-only`, `partial`,
    /// `always`, `infeasible`, or empty for a policy without thresholds.
    pub pattern: String,
    /// DWSF at which demotion starts beside checkpoints, and at which it
    /// reaches full speed (`u64::MAX`: never).
    pub threshold_start: u64,
    pub threshold_full: u64,
    /// Why no schedule holds this period (empty when one does).
    pub schedule_note: String,
    /// The rates sent to the daemons in the last tick, bytes/s (0: unlimited),
    /// and how long a writer that finds the buffer full waits for space.
    pub checkpoint_bps: u64,
    pub demote_bps: u64,
    pub wait_for_space_ms: u32,
    /// The device rates the policy plans with.
    pub rates: DrainRates,
    /// Files demoted (copied to the PFS and verified) and evicted since start,
    /// and demotions that failed (their files stay in the buffer and are retried).
    pub demoted_files: u64,
    pub demoted_bytes: u64,
    pub evicted_files: u64,
    pub evicted_bytes: u64,
    pub failed_demotions: u64,
    /// Direct-to-PFS placement: `off`, or `cold` (new checkpoints the
    /// placement policy finds cold are written to the PFS, not the buffer).
    pub placement: String,
    /// Files placed on the PFS directly, and the bytes written to them, since
    /// daemon 0 started; those it read back from the drain state at its
    /// start count too, their sizes as their bytes.
    pub direct_files: u64,
    pub direct_bytes: u64,
    /// Buffer files clients hold open now (`Open` without its `Close`): not evicted.
    pub files_held: u64,
    /// The last failure of a demotion or of the state store (empty if none).
    pub last_error: String,
    /// Per application (job), in job order.
    pub apps: Vec<AppDrain>,
    /// What holds the daemons' demotion copies to the rate, from their last
    /// ticks: `token`, `blkio`, or each with the daemons that use it.
    pub rate_control: String,
    /// The replicator (`--drain-replica`).
    pub replicas: DrainReplicas,
    /// The trimmers (`--drain-trim`), summed over the daemons.
    pub trim: DrainTrim,
    /// The cap on every trimmer's pass, bytes/s of the ranges asked (`--drain-trim-rate`; 0: unlimited).
    pub trim_rate_bps: u64,
}

/// What the replicator [Sung20, §5.2.1] did since daemon 0 started: second
/// copies of demoted files in the replica directory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrainReplicas {
    /// The replica directory; empty when replication is off.
    pub dir: String,
    /// The replicator's cap in bytes/s (0: unlimited).
    pub rate_limit_bps: u64,
    /// Replicas made and verified, and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Files listed in R-order, waiting for their replica.
    pub pending: u64,
    /// Replications that failed (retried later) or were dropped (the PFS copy was gone).
    pub failures: u64,
    /// Bytes/s of the replications so far: their bytes over the time spent copying and verifying.
    pub rate_bps: u64,
}

impl Reply for DrainReplicas {
    fn encode(&self, e: &mut Encoder) {
        e.str(&self.dir).u64(self.rate_limit_bps).u64(self.files).u64(self.bytes);
        e.u64(self.pending).u64(self.failures).u64(self.rate_bps);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(DrainReplicas {
            dir: d.str()?.to_string(),
            rate_limit_bps: d.u64()?,
            files: d.u64()?,
            bytes: d.u64()?,
            pending: d.u64()?,
            failures: d.u64()?,
            rate_bps: d.u64()?,
        })
    }
}

/// Buffer rates of Eq. 5.1 [Sung20, ch. 5], bytes/s, and where they came from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DrainRates {
    pub write_max: u64,
    pub write_min: u64,
    pub read_max: u64,
    pub read_min: u64,
    /// The interference line BW_w = m·BW_r + b through them.
    pub m: f64,
    pub b: f64,
    /// `measured` (calibrated at start), `given` (`--drain-rates`) or `stored`
    /// (a calibration kept in the state store by an earlier start).
    pub source: String,
}

/// One application's checkpoints under the data manager.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppDrain {
    pub job: u64,
    /// The job's label as its clients gave it (`SURGE_JOB_ID`, `SLURM_JOB_ID`), if seen.
    pub label: String,
    /// Files (and their bytes) in the buffer that are not demoted yet.
    pub pending_files: u64,
    pub pending_bytes: u64,
    /// Files and bytes demoted to the PFS since the daemon started.
    pub demoted_files: u64,
    pub demoted_bytes: u64,
    /// Checkpoint versions with files in the buffer, oldest first.
    pub versions: Vec<u64>,
    /// Mean time between failures, seconds (`surge ckpt mtbf`, or estimated from restarts).
    pub mtbf_s: u64,
    /// Reads for a restart seen.
    pub restarts: u64,
}

impl Reply for DrainRates {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.write_max).u64(self.write_min).u64(self.read_max).u64(self.read_min);
        e.f64(self.m).f64(self.b).str(&self.source);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(DrainRates {
            write_max: d.u64()?,
            write_min: d.u64()?,
            read_max: d.u64()?,
            read_min: d.u64()?,
            m: d.f64()?,
            b: d.f64()?,
            source: d.str()?.to_string(),
        })
    }
}

impl Reply for AppDrain {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.job).str(&self.label).u64(self.pending_files).u64(self.pending_bytes);
        e.u64(self.demoted_files).u64(self.demoted_bytes).u32(self.versions.len() as u32);
        for &v in &self.versions {
            e.u64(v);
        }
        e.u64(self.mtbf_s).u64(self.restarts);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let (job, label) = (d.u64()?, d.str()?.to_string());
        let (pending_files, pending_bytes, demoted_files, demoted_bytes) = (d.u64()?, d.u64()?, d.u64()?, d.u64()?);
        let versions = (0..d.u32()?).map(|_| d.u64()).collect::<Result<_, _>>()?;
        Ok(AppDrain {
            job,
            label,
            pending_files,
            pending_bytes,
            demoted_files,
            demoted_bytes,
            versions,
            mtbf_s: d.u64()?,
            restarts: d.u64()?,
        })
    }
}

impl Reply for DrainReport {
    fn encode(&self, e: &mut Encoder) {
        e.str(&self.policy)
            .str(&self.evict_order)
            .str(&self.state_backend)
            .u8(self.state_healthy as u8)
            .str(&self.state_note);
        e.u64(self.period_s).u64(self.period_index).u64(self.period_elapsed_ms);
        e.u64(self.capacity).u64(self.used).u64(self.dwsf).u64(self.dwpp_last).u64(self.dwpp_predicted);
        e.str(&self.pattern).u64(self.threshold_start).u64(self.threshold_full).str(&self.schedule_note);
        e.u64(self.checkpoint_bps).u64(self.demote_bps).u32(self.wait_for_space_ms);
        self.rates.encode(e);
        e.u64(self.demoted_files).u64(self.demoted_bytes).u64(self.evicted_files).u64(self.evicted_bytes);
        e.u64(self.failed_demotions).str(&self.placement).u64(self.direct_files).u64(self.direct_bytes);
        e.u64(self.files_held).str(&self.last_error).u32(self.apps.len() as u32);
        for app in &self.apps {
            app.encode(e);
        }
        e.str(&self.rate_control);
        self.replicas.encode(e);
        self.trim.encode(e);
        e.u64(self.trim_rate_bps);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(DrainReport {
            policy: d.str()?.to_string(),
            evict_order: d.str()?.to_string(),
            state_backend: d.str()?.to_string(),
            state_healthy: d.u8()? != 0,
            state_note: d.str()?.to_string(),
            period_s: d.u64()?,
            period_index: d.u64()?,
            period_elapsed_ms: d.u64()?,
            capacity: d.u64()?,
            used: d.u64()?,
            dwsf: d.u64()?,
            dwpp_last: d.u64()?,
            dwpp_predicted: d.u64()?,
            pattern: d.str()?.to_string(),
            threshold_start: d.u64()?,
            threshold_full: d.u64()?,
            schedule_note: d.str()?.to_string(),
            checkpoint_bps: d.u64()?,
            demote_bps: d.u64()?,
            wait_for_space_ms: d.u32()?,
            rates: DrainRates::decode(d)?,
            demoted_files: d.u64()?,
            demoted_bytes: d.u64()?,
            evicted_files: d.u64()?,
            evicted_bytes: d.u64()?,
            failed_demotions: d.u64()?,
            placement: d.str()?.to_string(),
            direct_files: d.u64()?,
            direct_bytes: d.u64()?,
            files_held: d.u64()?,
            last_error: d.str()?.to_string(),
            apps: (0..d.u32()?).map(|_| AppDrain::decode(d)).collect::<Result<_, _>>()?,
            rate_control: d.str()?.to_string(),
            replicas: DrainReplicas::decode(d)?,
            trim: DrainTrim::decode(d)?,
            trim_rate_bps: d.u64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> DrainReport {
        DrainReport {
            policy: "bbos".into(),
            evict_order: "lru".into(),
            state_backend: "redis://127.0.0.1:6379".into(),
            state_healthy: false,
            state_note: "Redis stopped answering; the embedded store took over".into(),
            period_s: 600,
            period_index: 3,
            period_elapsed_ms: 12_500,
            capacity: 1 << 30,
            used: 1 << 29,
            dwsf: 5,
            dwpp_last: 6,
            dwpp_predicted: 7,
            pattern: "partial".into(),
            threshold_start: 100,
            threshold_full: u64::MAX,
            schedule_note: String::new(),
            checkpoint_bps: 40_000_000,
            demote_bps: 0,
            wait_for_space_ms: 5000,
            rates: DrainRates {
                write_max: 40,
                write_min: 30,
                read_max: 16,
                read_min: 1,
                m: -0.666,
                b: 40.66,
                source: "given".into(),
            },
            demoted_files: 8,
            demoted_bytes: 9,
            evicted_files: 10,
            evicted_bytes: 11,
            failed_demotions: 1,
            placement: "cold".into(),
            direct_files: 2,
            direct_bytes: 3,
            files_held: 12,
            last_error: "EIO".into(),
            apps: vec![
                AppDrain {
                    job: 42,
                    label: "ckpt".into(),
                    pending_files: 2,
                    pending_bytes: 3,
                    demoted_files: 4,
                    demoted_bytes: 5,
                    versions: vec![10, 20],
                    mtbf_s: 3600,
                    restarts: 1,
                },
                AppDrain::default(),
            ],
            rate_control: "blkio on daemons 0, 2; token on 1".into(),
            replicas: DrainReplicas {
                dir: "/replica".into(),
                rate_limit_bps: 1,
                files: 2,
                bytes: 3,
                pending: 4,
                failures: 5,
                rate_bps: 6,
            },
            trim: DrainTrim {
                state: "unsupported (EOPNOTSUPP) on daemons 1".into(),
                trims: 7,
                bytes: 8,
                last_unix_s: 9,
            },
            trim_rate_bps: 10,
        }
    }

    #[test]
    fn a_drain_report_round_trips_and_every_cut_of_it_is_an_error() {
        let r = report();
        let body = r.to_body();
        assert_eq!(DrainReport::from_body(&body).unwrap(), r);
        for cut in 0..body.len() {
            assert!(DrainReport::from_body(&body[..cut]).is_err(), "a body cut at {cut} decoded");
        }
        assert_eq!(DrainReport::from_body(&DrainReport::default().to_body()).unwrap(), DrainReport::default());
    }
}
