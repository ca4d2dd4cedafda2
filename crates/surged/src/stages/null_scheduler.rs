//! A null scheduling point, the template for a new scheduler (as [Darshan]'s
//! null module is for a new instrumentation module): copy this file to
//! `sched_<name>.rs` (or into `sched.rs`), rename the type, decide the order
//! in `admit`, and register it with one entry in
//! [`crate::stages::SCHEDULERS`] (docs/architecture.md, "Adding a stage").
//! It is compiled with the crate's tests, which start a daemon on it, so it
//! keeps up with the trait.

use crate::sched::{Grant, JobLoad, JobLoads, Scheduler, Ticket};

/// Admits every request at once, in no order of its own.
#[derive(Default)]
pub struct NullScheduler {
    /// The per-job counters `surge status` and the metrics show. A
    /// scheduler keeps them in each of the calls below.
    loads: JobLoads,
}

impl Scheduler for NullScheduler {
    /// A request arrived (pipelined ones too): note it in your queues.
    fn arrived(&self, grant: &Grant) {
        self.loads.arrived(grant);
    }

    /// Block here until it is `grant`'s turn (connections run on their own
    /// threads, so waiting on a `Condvar` is fine), then hand out the ticket.
    fn admit(&self, grant: Grant) -> Ticket<'_> {
        self.loads.admitted(&grant);
        Ticket::new(self, grant)
    }

    /// The request's reply went out: wake the next one you admit.
    fn release(&self, grant: &Grant, moved: u64) {
        self.loads.released(grant, moved);
    }

    /// The request's connection closed before its turn: forget it.
    fn withdrawn(&self, grant: &Grant) {
        self.loads.withdrawn(grant);
    }

    fn jobs(&self) -> Vec<JobLoad> {
        self.loads.list()
    }
}
