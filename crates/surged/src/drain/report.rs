//! `DrainStatus`: what the data manager does, from its books and its
//! throttler's last plan (docs/bbos.md explains each figure). The bytes of
//! the files still to demote are asked of the daemons holding their
//! objects (`ObjStat`) when the report is made: the namespace does not
//! keep buffer files' sizes.

use super::books::FileStatus;
use super::manager::DrainManager;
use crate::failure::Failure;
use crate::locking::lock;
use std::collections::BTreeMap;
use surge_bbos::thresholds::{Interference, Pattern};
use surge_proto::drain::{AppDrain, DrainRates, DrainReplicas, DrainReport};
use surge_proto::msg::ObjStatReply;
use surge_proto::Request;

/// Files whose sizes one report asks for, at most (beyond, they count with 0 bytes).
const SIZED_FILES: usize = 4096;

/// A threshold on DWSF as the wire carries it (`u64::MAX`: never).
fn threshold(bytes: f64) -> u64 {
    if bytes.is_finite() {
        bytes.max(0.0) as u64
    } else {
        u64::MAX
    }
}

fn pattern_name(pattern: Pattern) -> &'static str {
    match pattern {
        Pattern::IdleOnly => "idle-only",
        Pattern::Partial => "partial",
        Pattern::Always => "always",
    }
}

impl DrainManager {
    /// The bytes of buffer file `path`'s objects, as their daemons hold them.
    pub(super) fn object_bytes(&self, path: &str) -> Result<u64, Failure> {
        let attr = self.setting.namespace.stat(path)?;
        let mut bytes = 0;
        for stripe in 0..attr.layout.stripe_count {
            let daemon = attr.layout.daemon_of(stripe, self.setting.daemons);
            bytes += self.setting.peers.call::<ObjStatReply>(daemon, &Request::ObjStat { ino: attr.ino })?.size;
        }
        Ok(bytes)
    }

    /// `DrainStatus`.
    pub fn report(&self) -> Result<DrainReport, Failure> {
        let plan = lock(&self.plan).clone();
        let (mut apps, pending, totals) = {
            let books = lock(&self.books);
            let mut apps: BTreeMap<u64, AppDrain> = books
                .jobs
                .iter()
                .map(|(&job, entry)| {
                    let app = AppDrain {
                        job,
                        label: entry.label.clone(),
                        demoted_files: entry.demoted_files,
                        demoted_bytes: entry.demoted_bytes,
                        mtbf_s: entry.mtbf_s,
                        restarts: entry.restarts.len() as u64,
                        ..AppDrain::default()
                    };
                    (job, app)
                })
                .collect();
            let mut pending = Vec::new();
            for (path, file) in &books.files {
                let app = apps.entry(file.job).or_insert_with(|| AppDrain { job: file.job, ..AppDrain::default() });
                if !app.versions.contains(&file.version) {
                    app.versions.push(file.version);
                }
                if !matches!(file.status, FileStatus::Demoted { .. }) {
                    app.pending_files += 1;
                    pending.push((file.job, path.clone()));
                }
            }
            (apps, pending, books.totals.clone())
        };
        for (job, path) in pending.iter().take(SIZED_FILES) {
            // A file removed meanwhile, or a daemon down, counts as 0 bytes.
            let bytes = self.object_bytes(path).unwrap_or(0);
            if let Some(app) = apps.get_mut(job) {
                app.pending_bytes += bytes;
            }
        }
        for app in apps.values_mut() {
            app.versions.sort_unstable();
        }
        let rates = plan.rates.map_or_else(DrainRates::default, |(r, source)| {
            let line = Interference::through(&r);
            DrainRates {
                write_max: r.write_max as u64,
                write_min: r.write_min as u64,
                read_max: r.read_max as u64,
                read_min: r.read_min as u64,
                m: line.m,
                b: line.b,
                source: source.name().into(),
            }
        });
        let (pattern, threshold_start, threshold_full, schedule_note) = match &plan.schedule {
            Some(Ok(t)) => (pattern_name(t.pattern).into(), threshold(t.start), threshold(t.full), String::new()),
            Some(Err(why)) => ("infeasible".into(), u64::MAX, u64::MAX, why.to_string()),
            None => (String::new(), u64::MAX, u64::MAX, String::new()),
        };
        let (state_backend, state_note) = match &self.store {
            Some(store) => (store.backend.clone(), lock(&store.trouble).clone().unwrap_or_default()),
            None => ("none (the drain is off)".into(), String::new()),
        };
        Ok(DrainReport {
            policy: self.setting.config.policy.name(),
            evict_order: self.setting.config.evict.name().into(),
            state_backend,
            state_healthy: state_note.is_empty(),
            state_note,
            period_s: self.setting.config.period.as_secs(),
            period_index: plan.period_index,
            period_elapsed_ms: plan.period_started.map_or(0, |at| at.elapsed().as_millis() as u64),
            capacity: plan.capacity(),
            used: plan.used(),
            dwsf: plan.dwsf,
            dwpp_last: plan.dwpp_last,
            dwpp_predicted: plan.dwpp_predicted,
            pattern,
            threshold_start,
            threshold_full,
            schedule_note,
            checkpoint_bps: plan.order.checkpoint_bps,
            demote_bps: plan.order.demote_bps,
            wait_for_space_ms: plan.order.wait_for_space_ms,
            rates,
            demoted_files: totals.demoted_files,
            demoted_bytes: totals.demoted_bytes,
            evicted_files: totals.evicted_files,
            evicted_bytes: totals.evicted_bytes,
            failed_demotions: totals.failed_demotions,
            placement: self.setting.config.direct.name().into(),
            direct_files: totals.direct_files,
            direct_bytes: totals.direct_bytes,
            files_held: self.handles.files_held() as u64,
            last_error: lock(&self.last_error).clone(),
            apps: apps.into_values().collect(),
            replicas: self.replicas.as_ref().map_or_else(DrainReplicas::default, |replicas| {
                replicas.report(self.with_state("read R-order", |s| s.replications()).map_or(0, |l| l.len() as u64))
            }),
            rate_control: plan.rate_control(),
            trim: plan.trim(),
            trim_rate_bps: self.setting.config.trim_rate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_infinite_threshold_is_never_and_a_negative_one_is_zero() {
        assert_eq!((threshold(f64::INFINITY), threshold(-1.0), threshold(5.5)), (u64::MAX, 0, 5));
    }
}
