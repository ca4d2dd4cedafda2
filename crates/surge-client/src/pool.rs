//! Connections to the daemons (Mulconn, [Sung20, ch. 4] in docs/references.md).
//!
//! Each daemon has up to [`MAX_CONNS`] lanes; a lane holds at most one
//! connection and lends it to one caller at a time, so N lanes are N
//! connections whatever the number of threads: with one lane, sixteen
//! threads queue for one socket, as they do behind a single-connection
//! file-system client. Callers name the lane they want by a number taken
//! modulo the lanes in use (the connection policy lives in `route`), and
//! give the connection back by dropping the guard. Connections are dialled
//! on first use, so unused lanes cost nothing.
//!
//! With `ConnCount::Auto` the number of lanes in use follows the measured
//! rates: every [`AUTO_EVAL_INTERVAL`] of traffic it becomes
//! `ceil(store rate / per-connection rate)`, the daemon's store rate coming
//! from its `Status` and the per-connection rate from the time lanes were
//! held for the bytes they moved.

use crate::conn::{Conn, Endpoint, LateFailures, Session};
use crate::deadline::{self, Operation};
use crate::error::{Error, Result};
use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use surge_cluster::{ConnCount, MAX_CONNS};
use surge_proto::msg::DaemonStatus;
use surge_proto::Request;

/// Lanes an `auto` pool starts with, before anything was measured: the
/// most it opens, since on every path measured more connections cost
/// nothing (docs/connections.md) while too few cap a slow path at once.
const AUTO_INITIAL: u32 = AUTO_MAX;
/// Most lanes `auto` opens: Mulconn's measurements stop at eight.
const AUTO_MAX: u32 = 8;
/// How often an `auto` pool re-measures, at most: enough traffic that the
/// rates mean something, and enough time to see a change.
const AUTO_EVAL_INTERVAL: Duration = Duration::from_millis(100);
const AUTO_EVAL_BYTES: u64 = 8 << 20;

pub(crate) struct Pool {
    session: Session,
    count: ConnCount,
    daemons: Vec<Daemon>,
}

struct Daemon {
    endpoint: Endpoint,
    lanes: Vec<Lane>,
    /// Lanes in use; callers' lane numbers are taken modulo this.
    active: AtomicU32,
    meter: LaneMeter,
    /// Until when requests to this daemon fail at once: it let a request
    /// time out just before, and an operation touching many files (`ls -l`)
    /// must not wait the timeout out again for each of them.
    silent_until: Mutex<Option<Instant>>,
}

impl Daemon {
    fn fell_silent(&self, for_how_long: Duration) {
        *self.silent_until.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + for_how_long);
    }

    /// The error for a request while the daemon counts as silent.
    fn silence(&self, timeout: Duration) -> Option<Error> {
        let until = (*self.silent_until.lock().unwrap_or_else(PoisonError::into_inner))?;
        let left = until.checked_duration_since(Instant::now())?;
        Some(Error::new(
            libc::EIO,
            format!(
                "{} did not answer within {timeout:?} a moment ago; not waiting for it again for {:.1} s                  (it may be stopped or overloaded: check `surge status`)",
                self.endpoint,
                left.as_secs_f64()
            ),
        ))
    }
}

struct Lane {
    state: Mutex<LaneState>,
    returned: Condvar,
}

#[derive(Default)]
struct LaneState {
    /// Lent out: its connection (if any) is with a caller.
    busy: bool,
    idle: Option<Conn>,
    /// The process the state belongs to: a forked child starts afresh
    /// instead of waiting for loans made to its parent's threads.
    pid: u32,
}

/// Bytes moved over this daemon's lanes and how long lanes were held for
/// them; `auto` compares consecutive readings.
#[derive(Default)]
struct LaneMeter {
    bytes: AtomicU64,
    held_ns: AtomicU64,
    last: Mutex<Option<Reading>>,
}

#[derive(Clone, Copy)]
struct Reading {
    at: Instant,
    bytes: u64,
    held_ns: u64,
    store_bytes: u64,
    store_busy_ns: u64,
}

impl Lane {
    fn state(&self) -> MutexGuard<'_, LaneState> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let pid = crate::pid::current();
        if state.pid != pid {
            *state = LaneState { pid, ..LaneState::default() };
        }
        state
    }

    fn give_back(&self, conn: Option<Conn>) {
        let mut state = self.state();
        state.busy = false;
        state.idle = conn.filter(|c| !c.is_broken());
        drop(state);
        self.returned.notify_one();
    }
}

thread_local! {
    static THREAD_SLOT: Cell<Option<u64>> = const { Cell::new(None) };
}

/// This thread's number in the process, in order of first I/O: Mulconn
/// binds by `thread id mod N` and relies on consecutive thread ids, which
/// Linux does not promise; a counter does.
pub(crate) fn thread_slot() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    THREAD_SLOT.with(|slot| {
        slot.get().unwrap_or_else(|| {
            let mine = NEXT.fetch_add(1, Ordering::Relaxed);
            slot.set(Some(mine));
            mine
        })
    })
}

impl Pool {
    pub fn new(session: Session, endpoints: Vec<Endpoint>, count: ConnCount) -> Pool {
        let initial = match count {
            ConnCount::Fixed(n) => n.clamp(1, MAX_CONNS),
            ConnCount::Auto => AUTO_INITIAL,
        };
        let daemons = endpoints
            .into_iter()
            .map(|endpoint| Daemon {
                endpoint,
                lanes: (0..MAX_CONNS)
                    .map(|_| Lane { state: Mutex::new(LaneState::default()), returned: Condvar::new() })
                    .collect(),
                active: AtomicU32::new(initial),
                meter: LaneMeter::default(),
                silent_until: Mutex::new(None),
            })
            .collect();
        Pool { session, count, daemons }
    }

    pub fn daemon_count(&self) -> u32 {
        self.daemons.len() as u32
    }

    /// Is daemon `index` reached over its node-local socket?
    pub fn is_local(&self, index: u32) -> bool {
        self.session.local_sockets.get(index as usize).is_some_and(Option::is_some)
    }

    /// Begins an operation bounded by the I/O timeout (see `deadline`).
    pub fn operation(&self) -> Operation {
        deadline::begin(self.session.io_timeout)
    }

    fn daemon(&self, index: u32) -> Result<&Daemon> {
        self.daemons.get(index as usize).ok_or_else(|| {
            Error::new(libc::EINVAL, format!("no daemon {index}: the cluster has {} daemons", self.daemons.len()))
        })
    }

    /// A connection of its own to daemon `index`, outside the lanes: for
    /// a long poll (`Watch`), which would hold a lane from other callers.
    pub fn dial_own(&self, index: u32) -> Result<Conn> {
        Conn::dial(self.daemon(index)?.endpoint, &self.session)
    }

    /// This client as daemon 0 knows it: its `Hello` instance.
    pub fn instance(&self) -> u64 {
        self.session.instance
    }

    /// Failures of requests answered after their call returned.
    pub fn late_failures(&self) -> &LateFailures {
        &self.session.late_failures
    }

    /// Reads the replies still unread on daemon `index`'s connections
    /// (node-local commits; `Conn::unanswered`), waiting for lanes lent
    /// out to come back, so that `late_failures` holds every failure of a
    /// request sent before this call.
    pub fn settle(&self, index: u32) -> Result<()> {
        let daemon = self.daemon(index)?;
        for lane in &daemon.lanes {
            let mut state = lane.state();
            while state.busy {
                let Some(left) = deadline::time_left(self.session.io_timeout) else {
                    return Err(Error::new(
                        libc::EIO,
                        format!("{}: its connection stayed busy for {:?}", daemon.endpoint, self.session.io_timeout),
                    ));
                };
                state = lane.returned.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
            }
            let Some(mut conn) = state.idle.take_if(|conn| conn.has_unanswered()) else {
                drop(state);
                // Another caller may wait for the lane this one was woken for.
                lane.returned.notify_one();
                continue;
            };
            state.busy = true;
            drop(state);
            let read = conn.read_unanswered(u64::MAX);
            lane.give_back(Some(conn));
            read?;
        }
        Ok(())
    }

    /// A connection to daemon `index` on this thread's lane.
    pub fn get(&self, index: u32) -> Result<PooledConn<'_>> {
        self.lane(index, thread_slot())
    }

    /// A connection to daemon `index` on lane `pick mod lanes in use`,
    /// waiting while another caller has it.
    pub fn lane(&self, index: u32, pick: u64) -> Result<PooledConn<'_>> {
        let daemon = self.daemon(index)?;
        let timeout = self.session.io_timeout;
        if let Some(silent) = daemon.silence(timeout) {
            return Err(silent);
        }
        let lane_index = (pick % u64::from(daemon.active.load(Ordering::Relaxed).max(1))) as usize;
        let lane = &daemon.lanes[lane_index];
        let reused = {
            let mut state = lane.state();
            while state.busy {
                let Some(left) = deadline::time_left(timeout) else {
                    return Err(Error::new(
                        libc::EIO,
                        format!(
                            "{}: its connection stayed busy for {timeout:?}; it may be overloaded",
                            daemon.endpoint
                        ),
                    ));
                };
                state = lane.returned.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
            }
            state.busy = true;
            state.idle.take()
        };
        // Outside the lane's lock: the check peeks at the socket, the dial waits on the network.
        let conn = match reused.filter(Conn::is_usable) {
            Some(conn) => conn,
            None => {
                let dialled = Instant::now();
                match Conn::dial(daemon.endpoint, &self.session) {
                    Ok(conn) => conn,
                    Err(e) => {
                        lane.give_back(None);
                        // Connecting or the handshake used up the time: the daemon is not answering.
                        if dialled.elapsed() >= timeout || deadline::time_left(timeout).is_none() {
                            daemon.fell_silent(timeout);
                        }
                        return Err(e);
                    }
                }
            }
        };
        Ok(PooledConn { conn: Some(conn), pool: self, daemon: index, lane, held_since: Instant::now(), moved: 0 })
    }

    /// Runs idempotent `work` (reads, writes at given offsets, object
    /// requests) on lane `pick` of daemon `index`. If the connection breaks
    /// under it (the daemon closed it, a reset, a timeout) or a new one
    /// cannot be made, the work runs once more on the next lane over a fresh
    /// connection; a second failure is the caller's EIO. Namespace requests
    /// are not idempotent (a repeated create would say EEXIST) and never
    /// come here.
    pub fn with_retry<T>(
        &self,
        index: u32,
        pick: u64,
        mut work: impl FnMut(&mut PooledConn<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut attempt = |pick: u64| -> (Result<T>, bool) {
            match self.lane(index, pick) {
                Ok(mut conn) => {
                    let done = work(&mut conn);
                    let broken = conn.is_broken();
                    (done, broken)
                }
                // Dialling failed: the connection never carried the request.
                Err(e) => (Err(e), true),
            }
        };
        match attempt(pick) {
            (Err(first), true) if first.errno() == libc::EIO => attempt(pick.wrapping_add(1)).0.map_err(|e| {
                Error::new(
                    e.errno(),
                    format!("{} (after a retry on another connection; first: {})", e.message(), first.message()),
                )
            }),
            (done, _) => done,
        }
    }

    /// With `auto`: re-measures the rates if it is time, and sets the
    /// lanes in use to what the store can take over connections this fast.
    fn tune(&self, index: u32) {
        let daemon = &self.daemons[index as usize];
        let meter = &daemon.meter;
        let Ok(mut last) = meter.last.try_lock() else { return };
        let (bytes, held_ns) = (meter.bytes.load(Ordering::Relaxed), meter.held_ns.load(Ordering::Relaxed));
        if let Some(prev) = *last {
            if bytes - prev.bytes < AUTO_EVAL_BYTES || prev.at.elapsed() < AUTO_EVAL_INTERVAL {
                return;
            }
        }
        let Ok(status) = self.get(index).and_then(|mut c| c.call::<DaemonStatus>(&Request::Status)) else { return };
        let now = Reading {
            at: Instant::now(),
            bytes,
            held_ns,
            store_bytes: status.store_bytes,
            store_busy_ns: status.store_busy_ns,
        };
        if let Some(prev) = last.replace(now) {
            if let Some(lanes) = auto_lanes(&prev, &now) {
                daemon.active.store(lanes, Ordering::Relaxed);
            }
        }
    }
}

/// `ceil(store rate / per-connection rate)` between two readings, within
/// 1..=AUTO_MAX; `None` when either rate was not measured in between.
fn auto_lanes(prev: &Reading, now: &Reading) -> Option<u32> {
    let rate = |bytes: u64, ns: u64| (ns > 0 && bytes > 0).then(|| bytes as f64 / ns as f64);
    let per_conn = rate(now.bytes - prev.bytes, now.held_ns - prev.held_ns)?;
    let store =
        rate(now.store_bytes.checked_sub(prev.store_bytes)?, now.store_busy_ns.checked_sub(prev.store_busy_ns)?)?;
    Some(((store / per_conn).ceil() as u32).clamp(1, AUTO_MAX))
}

/// A connection on loan from a lane; it goes back when dropped, unless a
/// transport failure broke it.
pub(crate) struct PooledConn<'p> {
    conn: Option<Conn>,
    pool: &'p Pool,
    daemon: u32,
    lane: &'p Lane,
    held_since: Instant,
    moved: u64,
}

impl PooledConn<'_> {
    /// Counts file data this loan moved, for `auto`'s per-connection rate.
    pub fn moved(&mut self, bytes: u64) {
        self.moved += bytes;
    }
}

impl Deref for PooledConn<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("a pooled connection is present until drop")
    }
}

impl DerefMut for PooledConn<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("a pooled connection is present until drop")
    }
}

impl Drop for PooledConn<'_> {
    fn drop(&mut self) {
        let held = self.held_since.elapsed();
        if self.conn.as_ref().is_some_and(Conn::timed_out) {
            self.pool.daemons[self.daemon as usize].fell_silent(self.pool.session.io_timeout);
        }
        self.lane.give_back(self.conn.take());
        if self.moved > 0 && self.pool.count == ConnCount::Auto {
            let meter = &self.pool.daemons[self.daemon as usize].meter;
            meter.held_ns.fetch_add(held.as_nanos() as u64, Ordering::Relaxed);
            meter.bytes.fetch_add(self.moved, Ordering::Relaxed);
            self.pool.tune(self.daemon);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(ms: u64, bytes: u64, held_ns: u64, store_bytes: u64, store_busy_ns: u64) -> Reading {
        Reading { at: Instant::now() + Duration::from_millis(ms), bytes, held_ns, store_bytes, store_busy_ns }
    }

    #[test]
    fn auto_opens_what_the_store_can_take_over_connections_this_fast() {
        let start = reading(0, 0, 0, 0, 0);
        // Connections carry 100 MB/s each, the store takes 2 GB/s: the most auto opens.
        assert_eq!(auto_lanes(&start, &reading(1, 100_000_000, 1_000_000_000, 100_000_000, 50_000_000)), Some(8));
        // 1 GB/s connections, a 2.5 GB/s store: three.
        assert_eq!(auto_lanes(&start, &reading(1, 1_000_000_000, 1_000_000_000, 250, 100)), Some(3));
        // A store slower than one connection: one.
        assert_eq!(auto_lanes(&start, &reading(1, 1_000, 10, 1_000, 1_000_000)), Some(1));
        // Nothing moved, or a restarted daemon whose counters went back: no decision.
        assert_eq!(auto_lanes(&start, &reading(1, 0, 0, 10, 10)), None);
        assert_eq!(auto_lanes(&reading(0, 0, 0, 50, 50), &reading(1, 10, 10, 10, 10)), None);
    }

    #[test]
    fn thread_slots_are_distinct_and_stable() {
        let here = thread_slot();
        assert_eq!(thread_slot(), here);
        let others: Vec<u64> = (0..4).map(|_| std::thread::spawn(thread_slot).join().unwrap()).collect();
        assert!(!others.contains(&here));
        let mut unique = others.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), others.len());
    }
}
