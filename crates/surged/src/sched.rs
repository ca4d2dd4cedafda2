//! The scheduling point: every request passes `Scheduler::admit` before it
//! touches the store or the namespace, and holds the returned [`Ticket`]
//! until its reply has been sent, so a read's bytes are charged to its job
//! while they go out. Connections run on their own threads, so a QoS
//! scheduler (SFQ(D), SFQ(D)+) can simply block in `admit` until the
//! request's turn comes.
//!
//! To plug one in, implement [`Scheduler`] (keeping the counters with
//! [`JobLoads`]) and register it in [`crate::stages::SCHEDULERS`]; [`Fifo`]
//! is the default, and `testing::PriorityScheduler` a blocking one the
//! tests use.

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
    /// A request was read off its connection and waits from now on (behind
    /// the requests before it on that connection, which are served in
    /// order). Connections read ahead the requests a client pipelined, so
    /// every request received is seen here, not only each connection's
    /// head.
    fn arrived(&self, grant: &Grant);
    /// Returns when the arrived request may run. The request is in service
    /// until the ticket is dropped, after its reply was sent.
    fn admit(&self, grant: Grant) -> Ticket<'_>;
    /// Called once for every ticket, when it is dropped; `moved`: the bytes
    /// of file data the request moved (written, or read and sent; 0 when it
    /// failed), which may differ from what it asked for (`io_size`).
    fn release(&self, grant: &Grant, moved: u64);
    /// An arrived request left without being admitted (its connection
    /// closed first).
    fn withdrawn(&self, grant: &Grant);
    /// Per-job load, in job order.
    fn jobs(&self) -> Vec<JobLoad>;
}

/// A request that arrived and waits for [`Arrival::admit`]; dropped
/// without it, it tells the scheduler the request was withdrawn.
#[must_use = "the request counts as withdrawn as soon as its arrival is dropped"]
pub struct Arrival<'a> {
    scheduler: &'a dyn Scheduler,
    grant: Grant,
}

impl<'a> Arrival<'a> {
    pub fn new(scheduler: &'a dyn Scheduler, grant: Grant) -> Arrival<'a> {
        scheduler.arrived(&grant);
        Arrival { scheduler, grant }
    }

    /// Waits for the request's turn (`Scheduler::admit`).
    pub fn admit(self) -> Ticket<'a> {
        let (scheduler, grant) = (self.scheduler, self.grant);
        std::mem::forget(self);
        scheduler.admit(grant)
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        self.scheduler.withdrawn(&self.grant);
    }
}

/// A request in service; dropping it tells the scheduler the request is done.
#[must_use = "the request counts as finished as soon as its ticket is dropped"]
pub struct Ticket<'a> {
    scheduler: &'a dyn Scheduler,
    grant: Grant,
    moved: u64,
}

impl<'a> Ticket<'a> {
    pub fn new(scheduler: &'a dyn Scheduler, grant: Grant) -> Ticket<'a> {
        Ticket { scheduler, grant, moved: 0 }
    }

    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// Says how many bytes of file data the request moved.
    pub fn moved(&mut self, bytes: u64) {
        self.moved = bytes;
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.scheduler.release(&self.grant, self.moved);
    }
}

/// One job's requests and bytes: waiting and in service now, and served in
/// total (`bytes`: what they asked for), also by operation (`by_op`, with
/// the bytes they moved: what `surge top` and the metrics show).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobLoad {
    pub job: u64,
    /// Requests received and not yet admitted.
    pub waiting: u64,
    pub in_service: u64,
    pub in_service_bytes: u64,
    pub requests: u64,
    pub bytes: u64,
    pub by_op: OpLoads,
}

/// Requests served of one operation (counted when admitted), and the bytes
/// of file data they moved (counted when released).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpLoad {
    pub requests: u64,
    pub bytes: u64,
}

/// One slot per operation code, so that counting is an index, not a lookup.
pub(crate) const OP_SLOTS: usize = {
    let (mut i, mut top) = (0, 0);
    while i < Op::ALL.len() {
        if Op::ALL[i] as usize > top {
            top = Op::ALL[i] as usize;
        }
        i += 1;
    }
    top + 1
};

/// A job's served requests and bytes by operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpLoads([OpLoad; OP_SLOTS]);

impl Default for OpLoads {
    fn default() -> OpLoads {
        OpLoads([OpLoad::default(); OP_SLOTS])
    }
}

impl OpLoads {
    pub fn get(&self, op: Op) -> OpLoad {
        self.0[op as usize]
    }

    /// The operations with requests, in code order.
    pub fn served(&self) -> impl Iterator<Item = (Op, OpLoad)> + '_ {
        Op::ALL.iter().map(|&op| (op, self.get(op))).filter(|(_, load)| load.requests > 0)
    }

    fn admitted(&mut self, op: Op) {
        self.0[op as usize].requests += 1;
    }

    fn moved(&mut self, op: Op, bytes: u64) {
        self.0[op as usize].bytes += bytes;
    }
}

/// Per-job counters every scheduler keeps for [`Scheduler::jobs`] (and so
/// for `surge status`): a scheduler calls the method of the same name from
/// each of its own.
#[derive(Debug, Default)]
pub struct JobLoads {
    jobs: Mutex<HashMap<u64, JobLoad>>,
}

impl JobLoads {
    pub fn arrived(&self, grant: &Grant) {
        let mut jobs = lock(&self.jobs);
        jobs.entry(grant.job).or_insert_with(|| JobLoad { job: grant.job, ..JobLoad::default() }).waiting += 1;
    }

    pub fn withdrawn(&self, grant: &Grant) {
        if let Some(load) = lock(&self.jobs).get_mut(&grant.job) {
            load.waiting -= 1;
        }
    }

    pub fn admitted(&self, grant: &Grant) {
        let mut jobs = lock(&self.jobs);
        let load = jobs.entry(grant.job).or_insert_with(|| JobLoad { job: grant.job, ..JobLoad::default() });
        load.waiting -= 1;
        load.in_service += 1;
        load.in_service_bytes += grant.io_size;
        load.requests += 1;
        load.bytes += grant.io_size;
        load.by_op.admitted(grant.op);
    }

    pub fn released(&self, grant: &Grant, moved: u64) {
        if let Some(load) = lock(&self.jobs).get_mut(&grant.job) {
            load.in_service -= 1;
            load.in_service_bytes -= grant.io_size;
            load.by_op.moved(grant.op, moved);
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
    fn arrived(&self, grant: &Grant) {
        self.loads.arrived(grant);
    }

    fn admit(&self, grant: Grant) -> Ticket<'_> {
        self.loads.admitted(&grant);
        Ticket::new(self, grant)
    }

    fn release(&self, grant: &Grant, moved: u64) {
        self.loads.released(grant, moved);
    }

    fn withdrawn(&self, grant: &Grant) {
        self.loads.withdrawn(grant);
    }

    fn jobs(&self) -> Vec<JobLoad> {
        self.loads.list()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_counts_requests_waiting_in_service_and_served_per_job() {
        let fifo = Fifo::default();
        let arrive = |job, op, io_size| Arrival::new(&fifo, Grant { job, op, io_size });
        let (a, b, c, d) =
            (arrive(7, Op::Write, 4096), arrive(7, Op::Read, 100), arrive(3, Op::Stat, 0), arrive(3, Op::Stat, 0));
        assert_eq!(fifo.jobs()[0], JobLoad { job: 3, waiting: 2, ..JobLoad::default() });
        let (mut a, mut b, c) = (a.admit(), b.admit(), c.admit());
        drop(d); // its connection closed before its turn
        assert_eq!(a.grant().job, 7);
        let (three, seven) = (fifo.jobs()[0], fifo.jobs()[1]);
        let by_op = |load: JobLoad| load.by_op.served().collect::<Vec<_>>();
        // (`by_op` is checked on its own, below.)
        assert_eq!(
            (three, seven),
            (
                JobLoad {
                    job: 3,
                    waiting: 0,
                    in_service: 1,
                    in_service_bytes: 0,
                    requests: 1,
                    bytes: 0,
                    by_op: three.by_op
                },
                JobLoad {
                    job: 7,
                    waiting: 0,
                    in_service: 2,
                    in_service_bytes: 4196,
                    requests: 2,
                    bytes: 4196,
                    by_op: seven.by_op
                },
            )
        );
        assert_eq!(by_op(three), vec![(Op::Stat, OpLoad { requests: 1, bytes: 0 })]);
        // Bytes moved count once the request is done.
        assert_eq!(
            by_op(seven),
            vec![(Op::Write, OpLoad { requests: 1, bytes: 0 }), (Op::Read, OpLoad { requests: 1, bytes: 0 })]
        );
        a.moved(4096);
        drop((a, c));
        let seven_now = fifo.jobs()[1];
        assert_eq!(
            seven_now,
            JobLoad { in_service: 1, in_service_bytes: 100, by_op: seven_now.by_op, ..seven },
            "a released request still counts as served"
        );
        // The read asked for 100 bytes and found 60 before the end of the file.
        b.moved(60);
        drop(b);
        assert!(fifo.jobs().iter().all(|l| l.in_service == 0 && l.in_service_bytes == 0));
        assert_eq!(
            by_op(fifo.jobs()[1]),
            vec![(Op::Write, OpLoad { requests: 1, bytes: 4096 }), (Op::Read, OpLoad { requests: 1, bytes: 60 })]
        );
    }
}
