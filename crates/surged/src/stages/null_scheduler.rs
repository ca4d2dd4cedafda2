//! A null scheduler, the template for a new one (as [Darshan]'s null
//! module is for a new instrumentation module): copy this file to
//! `sched_<name>.rs` (or into `sched.rs`), rename the type, decide the order
//! in `admit`, and register it with one entry in
//! [`crate::stages::SCHEDULERS`] (docs/architecture.md, "Adding a stage").
//! It is compiled with the crate's tests, which start a daemon on it, so it
//! keeps up with the trait.
//!
//! The per-job counters `surge status` and the metrics show are kept by
//! the scheduling point around it (`sched::SchedulingPoint`): a scheduler
//! only decides when each request runs.

use crate::sched::{Grant, Scheduler};

/// Admits every request at once, in no order of its own.
#[derive(Default)]
pub struct NullScheduler;

impl Scheduler for NullScheduler {
    /// A request arrived (pipelined ones too): note it in your queues, with
    /// its cost (`grant.op`, `grant.io_size`) and `grant.arrival`, which
    /// tells it apart from every other request of the daemon.
    fn arrived(&self, _grant: &Grant) {}

    /// Block here until it is `grant`'s turn (connections run on their own
    /// threads, so waiting on a `Condvar` is fine).
    fn admit(&self, _grant: &Grant) {}

    /// The request's reply went out, having moved `moved` bytes: charge
    /// them, and wake the next one you admit.
    fn done(&self, _grant: &Grant, _moved: u64) {}

    /// The request's connection closed before its turn: forget it.
    fn withdrawn(&self, _grant: &Grant) {}
}
