//! The scheduling point: every request passes `Scheduler::admit` before it
//! touches the store or the namespace, and holds the returned [`Ticket`]
//! until its reply has been sent, so a read's bytes are charged to its job
//! while they go out. Connections run on their own threads, so a QoS
//! scheduler (SFQ(D), SFQ(D)+) can simply block in `admit` until the
//! request's turn comes.
//!
//! To plug one in, implement [`Scheduler`] (keeping the counters with
//! [`JobLoads`]) and pass it in [`crate::Stages`]; [`Fifo`] is the default,
//! and `testing::PriorityScheduler` a blocking one the tests use.

use crate::lock;
use std::collections::HashMap;
use std::sync::Mutex;
use surge_proto::Op;

/// What a request asked for when it was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The job the request is charged to (the header's `job_id`).
    pub job: u64,
    pub op: Op,
    /// Bytes of file data the request moves (the header's `io_size`).
    pub io_size: u64,
}

pub trait Scheduler: Send + Sync {
    /// Returns when the request may run. The request is in service until
    /// the ticket is dropped.
    fn admit(&self, job: u64, op: Op, io_size: u64) -> Ticket<'_>;
    /// Called once for every ticket, when it is dropped.
    fn release(&self, grant: &Grant);
    /// Per-job load, in job order.
    fn jobs(&self) -> Vec<JobLoad>;
}

/// A request in service; dropping it tells the scheduler the request is done.
#[must_use = "the request counts as finished as soon as its ticket is dropped"]
pub struct Ticket<'a> {
    scheduler: &'a dyn Scheduler,
    grant: Grant,
}

impl<'a> Ticket<'a> {
    pub fn new(scheduler: &'a dyn Scheduler, grant: Grant) -> Ticket<'a> {
        Ticket { scheduler, grant }
    }

    pub fn grant(&self) -> &Grant {
        &self.grant
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.scheduler.release(&self.grant);
    }
}

/// One job's requests and bytes: in service now, and served in total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobLoad {
    pub job: u64,
    pub in_service: u64,
    pub in_service_bytes: u64,
    pub requests: u64,
    pub bytes: u64,
}

/// Per-job counters every scheduler keeps for [`Scheduler::jobs`] (and so
/// for `surge status`): a scheduler calls `admitted` and `released` for
/// each of its tickets.
#[derive(Debug, Default)]
pub struct JobLoads {
    jobs: Mutex<HashMap<u64, JobLoad>>,
}

impl JobLoads {
    pub fn admitted(&self, grant: &Grant) {
        let mut jobs = lock(&self.jobs);
        let load = jobs.entry(grant.job).or_insert(JobLoad { job: grant.job, ..JobLoad::default() });
        load.in_service += 1;
        load.in_service_bytes += grant.io_size;
        load.requests += 1;
        load.bytes += grant.io_size;
    }

    pub fn released(&self, grant: &Grant) {
        if let Some(load) = lock(&self.jobs).get_mut(&grant.job) {
            load.in_service -= 1;
            load.in_service_bytes -= grant.io_size;
        }
    }

    /// Every job seen, in job order.
    pub fn list(&self) -> Vec<JobLoad> {
        let mut out: Vec<JobLoad> = lock(&self.jobs).values().copied().collect();
        out.sort_by_key(|l| l.job);
        out
    }
}

/// First come, first served: admits at once, and keeps the per-job counters.
#[derive(Debug, Default)]
pub struct Fifo {
    loads: JobLoads,
}

impl Scheduler for Fifo {
    fn admit(&self, job: u64, op: Op, io_size: u64) -> Ticket<'_> {
        let grant = Grant { job, op, io_size };
        self.loads.admitted(&grant);
        Ticket::new(self, grant)
    }

    fn release(&self, grant: &Grant) {
        self.loads.released(grant);
    }

    fn jobs(&self) -> Vec<JobLoad> {
        self.loads.list()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_counts_requests_in_service_and_served_per_job() {
        let fifo = Fifo::default();
        let a = fifo.admit(7, Op::Write, 4096);
        let b = fifo.admit(7, Op::Read, 100);
        let c = fifo.admit(3, Op::Stat, 0);
        assert_eq!(a.grant().job, 7);
        assert_eq!(
            fifo.jobs(),
            vec![
                JobLoad { job: 3, in_service: 1, in_service_bytes: 0, requests: 1, bytes: 0 },
                JobLoad { job: 7, in_service: 2, in_service_bytes: 4196, requests: 2, bytes: 4196 },
            ]
        );
        drop((a, c));
        assert_eq!(fifo.jobs()[1], JobLoad { job: 7, in_service: 1, in_service_bytes: 100, requests: 2, bytes: 4196 });
        drop(b);
        assert!(fifo.jobs().iter().all(|l| l.in_service == 0 && l.in_service_bytes == 0));
    }
}
