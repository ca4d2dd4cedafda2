//! The scheduling point: every request passes it before it touches the
//! store or the namespace, and holds the [`Ticket`] it hands out until its
//! reply has been sent, so a read's bytes are charged to its job while they
//! go out. Connections run on their own threads, so a QoS scheduler
//! (SFQ(D), SFQ(D)+) can simply block in [`Scheduler::admit`] until the
//! request's turn comes.
//!
//! The point ([`SchedulingPoint`]) keeps the per-job counters that
//! `surge status`, `surge top` and the metrics show; [`Arrival`] and
//! [`Ticket`] update them on every event, whatever the scheduler does, and
//! only a scheduling point makes them. A [`Scheduler`] decides order and
//! admission only: it hears of each request's arrival (with its cost: the
//! job, the operation and the bytes it asks to move), blocks its admission
//! until its turn, and hears when it is done (with the bytes it moved) or
//! withdrawn, to keep its own queues; the request's arrival number tells
//! its requests apart.
//!
//! To plug one in, implement [`Scheduler`] (only `admit` when it keeps no
//! state per request) and register it in
//! [`crate::stages::SCHEDULERS`]; [`Fifo`] is the
//! default, [`JobRoundRobin`] serves jobs in turn (Lustre NRS's CRR-N
//! [Lustre], over jobs rather than clients), and
//! `testing::PriorityScheduler` is a blocking one the tests use.

use crate::locking::lock;
use crate::peers::BACKGROUND_JOB;
use std::collections::{HashMap, VecDeque};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use surge_proto::Op;

/// A request at the scheduling point: what it asked for, and its place in
/// the arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The job the request is charged to (the header's `job_id`).
    pub job: u64,
    pub op: Op,
    /// Bytes of file data the request moves (the header's `io_size`).
    pub io_size: u64,
    /// Numbers the requests in the order they arrived at this scheduling
    /// point, each once: what a scheduler keys its own state per request by.
    pub arrival: u64,
}

/// Decides when an arrived request may run. The scheduling point calls
/// `arrived` once per request, then either `admit` (from the request's
/// connection thread, when the request is the next on its connection) and
/// later `done`, or `withdrawn`; the per-job counters are the point's, not
/// the scheduler's.
pub trait Scheduler: Send + Sync {
    /// A request was read off its connection and waits from now on (behind
    /// the requests before it on that connection, which are served in
    /// order). Connections read ahead the requests a client pipelined, so
    /// every request received is seen here, not only each connection's
    /// head: where an SFQ scheduler gives a request its start tag.
    fn arrived(&self, _grant: &Grant) {}
    /// Returns when the arrived request may run. The request is in service
    /// until `done`, after its reply was sent.
    fn admit(&self, grant: &Grant);
    /// An admitted request is done; `moved`: the bytes of file data it
    /// moved (written, or read and sent; 0 when it failed), which may
    /// differ from what it asked for (`io_size`).
    fn done(&self, _grant: &Grant, _moved: u64) {}
    /// An arrived request left without being admitted (its connection
    /// closed first).
    fn withdrawn(&self, _grant: &Grant) {}
}

/// The daemon's scheduling point: a [`Scheduler`] and the per-job counters
/// it cannot skip.
pub struct SchedulingPoint {
    scheduler: Arc<dyn Scheduler>,
    loads: Mutex<JobLoads>,
}

impl SchedulingPoint {
    pub fn new(scheduler: Arc<dyn Scheduler>) -> SchedulingPoint {
        SchedulingPoint { scheduler, loads: Mutex::default() }
    }

    /// Registers a request that arrived: counted as waiting, numbered, and
    /// told to the scheduler.
    pub fn arrive(&self, job: u64, op: Op, io_size: u64) -> Arrival<'_> {
        let grant = lock(&self.loads).arrived(job, op, io_size);
        self.scheduler.arrived(&grant);
        Arrival { point: self, grant }
    }

    /// Per-job load, in job order.
    pub fn jobs(&self) -> Vec<JobLoad> {
        let mut out: Vec<JobLoad> = lock(&self.loads).jobs.values().copied().collect();
        out.sort_by_key(|l| l.job);
        out
    }
}

/// A request that arrived and waits for [`Arrival::admit`]; dropped
/// without it, it counts as withdrawn.
#[must_use = "the request counts as withdrawn as soon as its arrival is dropped"]
pub struct Arrival<'a> {
    point: &'a SchedulingPoint,
    grant: Grant,
}

impl<'a> Arrival<'a> {
    /// Waits for the request's turn (`Scheduler::admit`).
    pub fn admit(self) -> Ticket<'a> {
        // Should the scheduler panic, the arrival is dropped: withdrawn.
        self.point.scheduler.admit(&self.grant);
        let (point, grant) = (self.point, self.grant);
        std::mem::forget(self);
        lock(&point.loads).admitted(&grant);
        Ticket { point, grant, moved: 0 }
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        lock(&self.point.loads).withdrawn(&self.grant);
        self.point.scheduler.withdrawn(&self.grant);
    }
}

/// A request in service; dropping it counts the request done (with the
/// bytes it moved), then tells the scheduler.
#[must_use = "the request counts as finished as soon as its ticket is dropped"]
pub struct Ticket<'a> {
    point: &'a SchedulingPoint,
    grant: Grant,
    moved: u64,
}

impl Ticket<'_> {
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
        // Counted first: whoever the scheduler admits next sees this one done.
        lock(&self.point.loads).released(&self.grant, self.moved);
        self.point.scheduler.done(&self.grant, self.moved);
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

/// The point's counters: every job seen, and how many requests arrived.
#[derive(Debug, Default)]
struct JobLoads {
    jobs: HashMap<u64, JobLoad>,
    arrivals: u64,
}

impl JobLoads {
    fn load(&mut self, job: u64) -> &mut JobLoad {
        self.jobs.entry(job).or_insert_with(|| JobLoad { job, ..JobLoad::default() })
    }

    fn arrived(&mut self, job: u64, op: Op, io_size: u64) -> Grant {
        let arrival = self.arrivals;
        self.arrivals += 1;
        self.load(job).waiting += 1;
        Grant { job, op, io_size, arrival }
    }

    fn withdrawn(&mut self, grant: &Grant) {
        self.load(grant.job).waiting -= 1;
    }

    fn admitted(&mut self, grant: &Grant) {
        let load = self.load(grant.job);
        load.waiting -= 1;
        load.in_service += 1;
        load.in_service_bytes += grant.io_size;
        load.requests += 1;
        load.bytes += grant.io_size;
        load.by_op.admitted(grant.op);
    }

    fn released(&mut self, grant: &Grant, moved: u64) {
        let load = self.load(grant.job);
        load.in_service -= 1;
        load.in_service_bytes -= grant.io_size;
        load.by_op.moved(grant.op, moved);
    }
}

/// First come, first served: admits at once.
#[derive(Debug, Default)]
pub struct Fifo;

impl Scheduler for Fifo {
    fn admit(&self, _grant: &Grant) {}
}

/// Serves the jobs in turn, one request each, as Lustre NRS's CRR-N policy
/// serves clients [Lustre]: at most `depth` requests are in service, and
/// when one is done its slot goes to the oldest waiting request of the next
/// job in the round, so a job's deep queue cannot starve another job's
/// single request. A job joins the round's end when a request of its
/// starts waiting.
///
/// A request waits here once its connection is at it (in `admit`): the
/// requests a connection read ahead cannot run before the one in front of
/// them, so a slot is never held for one of them. The daemons' own requests
/// (`peers::BACKGROUND_JOB`: demotion, stage-out, peer calls) are admitted
/// at once and take no slot: a client's write in service may be waiting for
/// the space they free. A request holds its slot until its reply has been
/// sent, also while it waits for space or for its job's drain rate.
pub struct JobRoundRobin {
    depth: usize,
    round: Mutex<Round>,
}

#[derive(Default)]
struct Round {
    in_service: usize,
    /// The jobs with requests waiting, in the order their turns come.
    turns: VecDeque<u64>,
    /// Each job's waiting requests, oldest first: arrival number and thread.
    queues: HashMap<u64, VecDeque<(u64, Thread)>>,
    /// The requests handed a slot whose threads have not taken it yet.
    handed: Vec<u64>,
}

impl JobRoundRobin {
    /// Requests in service at once by default: the depth at which small
    /// I/Os saturated the disks profiled for SFQ(D) in [vPFS+].
    pub const DEFAULT_DEPTH: NonZeroUsize = NonZeroUsize::new(14).expect("14 is not 0");

    pub fn new(depth: NonZeroUsize) -> JobRoundRobin {
        JobRoundRobin { depth: depth.get(), round: Mutex::default() }
    }
}

impl Default for JobRoundRobin {
    fn default() -> JobRoundRobin {
        JobRoundRobin::new(JobRoundRobin::DEFAULT_DEPTH)
    }
}

impl Scheduler for JobRoundRobin {
    fn admit(&self, grant: &Grant) {
        if grant.job == BACKGROUND_JOB {
            return;
        }
        let mut round = lock(&self.round);
        if round.in_service < self.depth && round.turns.is_empty() {
            round.in_service += 1;
            return;
        }
        let queue = round.queues.entry(grant.job).or_default();
        queue.push_back((grant.arrival, std::thread::current()));
        if queue.len() == 1 {
            round.turns.push_back(grant.job);
        }
        drop(round);
        loop {
            // `done` unparks this thread once it handed it the slot.
            std::thread::park();
            let mut round = lock(&self.round);
            if let Some(at) = round.handed.iter().position(|&arrival| arrival == grant.arrival) {
                round.handed.swap_remove(at);
                return;
            }
        }
    }

    fn done(&self, grant: &Grant, _moved: u64) {
        if grant.job == BACKGROUND_JOB {
            return;
        }
        let mut round = lock(&self.round);
        let Some(job) = round.turns.pop_front() else {
            round.in_service -= 1;
            return;
        };
        // The slot passes on: `in_service` stays.
        let queue = round.queues.get_mut(&job).expect("a job has its turn only while it has requests waiting");
        let (arrival, thread) = queue.pop_front().expect("a job has its turn only while it has requests waiting");
        if !queue.is_empty() {
            round.turns.push_back(job);
        }
        round.handed.push(arrival);
        drop(round);
        thread.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroUsize;
    use std::time::Duration;

    #[test]
    fn the_point_counts_requests_waiting_in_service_and_served_per_job() {
        let point = SchedulingPoint::new(Arc::new(Fifo));
        let (a, b, c, d) = (
            point.arrive(7, Op::Write, 4096),
            point.arrive(7, Op::Read, 100),
            point.arrive(3, Op::Stat, 0),
            point.arrive(3, Op::Stat, 0),
        );
        assert_eq!(point.jobs()[0], JobLoad { job: 3, waiting: 2, ..JobLoad::default() });
        let (mut a, mut b, c) = (a.admit(), b.admit(), c.admit());
        drop(d); // its connection closed before its turn
        assert_eq!((a.grant().job, a.grant().arrival, b.grant().arrival), (7, 0, 1));
        let (three, seven) = (point.jobs()[0], point.jobs()[1]);
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
        let seven_now = point.jobs()[1];
        assert_eq!(
            seven_now,
            JobLoad { in_service: 1, in_service_bytes: 100, by_op: seven_now.by_op, ..seven },
            "a released request still counts as served"
        );
        // The read asked for 100 bytes and found 60 before the end of the file.
        b.moved(60);
        drop(b);
        assert!(point.jobs().iter().all(|l| l.in_service == 0 && l.in_service_bytes == 0));
        assert_eq!(
            by_op(point.jobs()[1]),
            vec![(Op::Write, OpLoad { requests: 1, bytes: 4096 }), (Op::Read, OpLoad { requests: 1, bytes: 60 })]
        );
    }

    /// Polls `done` until it holds (10 s at most).
    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn blocked_in_admit(rr: &JobRoundRobin) -> usize {
        lock(&rr.round).queues.values().map(VecDeque::len).sum()
    }

    /// Starts a thread per job in `jobs`, each arriving and admitting one
    /// request once the ones before it are blocked in admit; returns the
    /// jobs in the order they were admitted once `release` lets the first
    /// ticket go (each ticket is dropped as soon as it is recorded).
    fn admission_order(depth: usize, held: &[u64], jobs: &[u64]) -> Vec<u64> {
        let rr = Arc::new(JobRoundRobin::new(NonZeroUsize::new(depth).unwrap()));
        let point = SchedulingPoint::new(rr.clone());
        let order = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            let tickets: Vec<Ticket> = held.iter().map(|&job| point.arrive(job, Op::Write, 1).admit()).collect();
            for (i, &job) in jobs.iter().enumerate() {
                let (point, order) = (&point, &order);
                s.spawn(move || {
                    let ticket = point.arrive(job, Op::Write, 1).admit();
                    lock(order).push(job);
                    drop(ticket);
                });
                until("the request waits", || blocked_in_admit(&rr) == i + 1);
            }
            drop(tickets);
        });
        order.into_inner().unwrap()
    }

    #[test]
    fn a_job_with_one_request_is_served_before_the_tenth_request_of_a_busy_job() {
        let order = admission_order(1, &[1], &[1, 1, 1, 1, 1, 1, 1, 1, 1, 2]);
        assert_eq!(order, [1, 2, 1, 1, 1, 1, 1, 1, 1, 1]);
    }

    #[test]
    fn jobs_take_turns_one_request_each_in_the_order_they_started_waiting() {
        let order = admission_order(1, &[9], &[3, 3, 3, 5, 5, 4]);
        assert_eq!(order, [3, 5, 4, 3, 5, 3]);
    }

    #[test]
    fn up_to_depth_requests_run_at_once_and_a_freed_slot_goes_to_the_next_job() {
        let rr = Arc::new(JobRoundRobin::new(NonZeroUsize::new(2).unwrap()));
        let point = SchedulingPoint::new(rr.clone());
        let (first, second) = (point.arrive(1, Op::Read, 0).admit(), point.arrive(1, Op::Read, 0).admit());
        std::thread::scope(|s| {
            let third = s.spawn(|| point.arrive(2, Op::Read, 0).admit().grant().job);
            until("the third request waits", || blocked_in_admit(&rr) == 1);
            assert_eq!(
                point.jobs().iter().map(|l| (l.job, l.waiting, l.in_service)).collect::<Vec<_>>(),
                [(1, 0, 2), (2, 1, 0)]
            );
            drop(first);
            assert_eq!(third.join().unwrap(), 2);
        });
        drop(second);
        assert_eq!((lock(&rr.round).in_service, point.jobs()[1].requests), (0, 1));
    }

    #[test]
    fn the_daemons_own_requests_never_wait_for_a_slot() {
        let point = SchedulingPoint::new(Arc::new(JobRoundRobin::new(NonZeroUsize::MIN)));
        let client = point.arrive(1, Op::Write, 4096).admit();
        let demotion = point.arrive(BACKGROUND_JOB, Op::Read, 4096).admit();
        drop((demotion, client));
        let served: Vec<_> = point.jobs().iter().map(|l| (l.job, l.requests, l.in_service)).collect();
        assert_eq!(served, [(BACKGROUND_JOB, 1, 0), (1, 1, 0)]);
    }
}
