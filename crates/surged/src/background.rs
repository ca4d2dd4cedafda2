//! Background tasks: work a daemon does on its own, beside the requests it
//! serves. Daemon 0 runs the deleter (`crate::deleter`, the objects of
//! removed files) and the orphan collector (`crate::collector`) and, with
//! `--drain POLICY`, the data manager's throttler, demoters, evicter and
//! replicator (`crate::drain`).
//!
//! A task is a [`Task`]: a name, a period and a `run_once`. [`Background`]
//! gives each task its own thread, which runs it at once, then every period,
//! and whenever the task's [`Wake`] is woken (a request that made work for
//! it wakes it, so it need not poll), until the daemon stops. Stopping
//! wakes every task, waits for the rounds under way and joins the threads.
//! A round that fails or panics never takes the daemon down: the task backs
//! off ([`Backoff`]) and tries again, after its period at first, then twice
//! as long after each further failure, up to [`BACKOFF_CAP`] (or its period,
//! if longer), and wakes do not cut a back-off short, since what failed (a
//! daemon down, most often) does not come back because a request made more
//! work. The log says when a task starts failing (and when the errno
//! changes) and when it works again, not every attempt: a daemon down for
//! hours costs a few log lines and an attempt a minute.
//!
//! To add a task: implement `Task` (keep rounds short, or check
//! `Context::stopping` between steps, so a stop is prompt), and return its
//! [`Registration`] (the task and the [`Wake`] that starts a round early)
//! from `metadata_daemon_tasks` in `lib.rs`, or from `drain::tasks` for a
//! task of the data manager; `start_with` in `lib.rs` hands them all to
//! [`Background::start`].

use crate::failure::Failure;
use crate::locking::lock;
use crate::logging::log;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use surge_proto::Errno;

/// Longest wait between the attempts of a failing task whose period is shorter.
pub const BACKOFF_CAP: Duration = Duration::from_secs(60);

pub trait Task: Send {
    /// For the log and the thread's name.
    fn name(&self) -> &'static str;
    /// Time between rounds (a `Wake` starts one earlier).
    fn period(&self) -> Duration;
    /// One round of work.
    fn run_once(&mut self, cx: &Context) -> Result<(), Failure>;
}

/// What a round may ask of the background machinery.
pub struct Context {
    pub index: u32,
    signal: Arc<Signal>,
}

impl Context {
    /// True once the daemon is stopping: a long round ends early.
    pub fn stopping(&self) -> bool {
        lock(&self.signal.state).stopping
    }
}

/// Starts a round of its task now (or right after the one under way).
#[derive(Clone, Default)]
pub struct Wake(Arc<Signal>);

impl Wake {
    pub fn wake(&self) {
        lock(&self.0.state).woken = true;
        self.0.changed.notify_all();
    }
}

#[derive(Default)]
struct Signal {
    state: Mutex<SignalState>,
    changed: Condvar,
}

#[derive(Default)]
struct SignalState {
    woken: bool,
    stopping: bool,
}

impl Signal {
    /// Waits up to `period` for a wake; false once stopping.
    fn wait(&self, period: Duration) -> bool {
        let state = lock(&self.state);
        let (mut state, _) = self
            .changed
            .wait_timeout_while(state, period, |s| !s.woken && !s.stopping)
            .unwrap_or_else(PoisonError::into_inner);
        state.woken = false;
        !state.stopping
    }

    /// Waits `delay` whatever the wakes (they are kept for after); false once stopping.
    fn pause(&self, delay: Duration) -> bool {
        let state = lock(&self.state);
        let (state, _) =
            self.changed.wait_timeout_while(state, delay, |s| !s.stopping).unwrap_or_else(PoisonError::into_inner);
        !state.stopping
    }

    fn stop(&self) {
        lock(&self.state).stopping = true;
        self.changed.notify_all();
    }
}

/// The exponential back-off of work that keeps failing, and what of it is
/// worth a log line: the change from working to failing (or from one errno
/// to another), and back.
pub struct Backoff {
    first: Duration,
    cap: Duration,
    /// Failures in a row, when the last attempt failed.
    failures: u32,
    since: Option<Instant>,
    errno: Option<Errno>,
}

/// What a failure means for the caller.
#[derive(Debug, PartialEq, Eq)]
pub struct Retry {
    /// Time to wait before the next attempt.
    pub delay: Duration,
    /// The first failure, or one with another errno than the last: log it.
    pub news: bool,
}

impl Backoff {
    /// Waits `first` after a first failure, doubling up to `cap` (or `first`, if longer).
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff { first, cap: cap.max(first), failures: 0, since: None, errno: None }
    }

    pub fn failed(&mut self, errno: Errno) -> Retry {
        self.failures = self.failures.saturating_add(1);
        self.since.get_or_insert_with(Instant::now);
        let news = self.errno.replace(errno) != Some(errno);
        let doubled = self.first.saturating_mul(1u32 << (self.failures - 1).min(20));
        Retry { delay: doubled.min(self.cap), news }
    }

    /// An attempt worked: the failures in a row before it, and for how
    /// long, if any (worth a log line).
    pub fn succeeded(&mut self) -> Option<(u32, Duration)> {
        self.errno = None;
        let failures = std::mem::take(&mut self.failures);
        let since = self.since.take()?;
        Some((failures, since.elapsed()))
    }
}

/// A task and the `Wake` that starts its rounds early.
pub struct Registration {
    task: Box<dyn Task>,
    wake: Wake,
}

impl Registration {
    pub fn new(task: impl Task + 'static, wake: Wake) -> Registration {
        Registration { task: Box::new(task), wake }
    }
}

/// The running tasks of a daemon.
pub struct Background {
    signals: Vec<Arc<Signal>>,
    threads: Vec<JoinHandle<()>>,
}

/// Stops every task of a [`Background`] (kept by whoever stops the daemon).
#[derive(Clone)]
pub struct Stopper(Vec<Arc<Signal>>);

impl Stopper {
    pub fn stop(&self) {
        for signal in &self.0 {
            signal.stop();
        }
    }
}

impl Background {
    /// Starts a thread per task.
    pub fn start(index: u32, tasks: Vec<Registration>) -> io::Result<Background> {
        let mut background = Background { signals: Vec::new(), threads: Vec::new() };
        for Registration { task, wake } in tasks {
            let signal = wake.0;
            let cx = Context { index, signal: Arc::clone(&signal) };
            let name = task.name();
            let thread = thread::Builder::new().name(format!("surged{index}-{name}")).spawn(move || run(task, &cx))?;
            background.signals.push(signal);
            background.threads.push(thread);
        }
        Ok(background)
    }

    pub fn stopper(&self) -> Stopper {
        Stopper(self.signals.clone())
    }

    /// Stops every task and waits for its thread to end.
    pub fn stop_and_join(mut self) {
        self.stopper().stop();
        for thread in self.threads.drain(..) {
            // `run` catches the task's panics; nothing else can panic there.
            let _ = thread.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stopper().stop();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A task's thread: a round, then a wait for the period or a wake (or
/// the back-off after a failure), until stopped.
fn run(mut task: Box<dyn Task>, cx: &Context) {
    let (name, period) = (task.name(), task.period());
    let mut backoff = Backoff::new(period, BACKOFF_CAP);
    loop {
        if cx.stopping() {
            return;
        }
        let failure = match panic::catch_unwind(AssertUnwindSafe(|| task.run_once(cx))) {
            Ok(Ok(())) => None,
            Ok(Err(failure)) => Some(failure),
            Err(_) => Some(Failure::new(Errno::EIO, "panicked (see above)")),
        };
        let Some(failure) = failure else {
            if let Some((failures, over)) = backoff.succeeded() {
                log!(Info, cx.index, "{name}: working again after {failures} failed round(s) over {over:.1?}");
            }
            if !cx.signal.wait(period) {
                return;
            }
            continue;
        };
        let retry = backoff.failed(failure.errno);
        if retry.news {
            log!(
                Warn,
                cx.index,
                "{name}: {failure}; trying again in {:.1?}, then less often (at most every {:.0?}) until it \
                 works, logged again when it does",
                retry.delay,
                backoff.cap
            );
        }
        if !cx.signal.pause(retry.delay) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Counts its rounds and notes when each began; fails (and panics)
    /// in the rounds `fail_in` says.
    struct Counting {
        rounds: Arc<AtomicU32>,
        began: Arc<Mutex<Vec<Instant>>>,
        period: Duration,
        fail_in: fn(u32) -> Option<bool>,
    }

    impl Counting {
        fn new(period: Duration, fail_in: fn(u32) -> Option<bool>) -> Counting {
            Counting { rounds: Arc::default(), began: Arc::default(), period, fail_in }
        }
    }

    impl Task for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn period(&self) -> Duration {
            self.period
        }
        fn run_once(&mut self, _: &Context) -> Result<(), Failure> {
            lock(&self.began).push(Instant::now());
            let round = self.rounds.fetch_add(1, Ordering::SeqCst) + 1;
            match (self.fail_in)(round) {
                None => Ok(()),
                Some(panics) => {
                    assert!(!panics, "round {round} panics, as a test task may");
                    Err(Failure::new(Errno::ENOTCONN, "daemon 1 is down"))
                }
            }
        }
    }

    fn wait_for(rounds: &AtomicU32, at_least: u32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while rounds.load(Ordering::SeqCst) < at_least {
            assert!(Instant::now() < deadline, "the task ran {} rounds, not {at_least}", rounds.load(Ordering::SeqCst));
            thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_task_runs_at_start_and_on_every_wake() {
        let task = Counting::new(Duration::from_secs(3600), |_| None);
        let (rounds, wake) = (Arc::clone(&task.rounds), Wake::default());
        let background = Background::start(0, vec![Registration::new(task, wake.clone())]).unwrap();
        wait_for(&rounds, 1);
        wake.wake();
        wait_for(&rounds, 2);
        wake.wake();
        wait_for(&rounds, 3);
        let stopping = Instant::now();
        background.stop_and_join();
        assert!(stopping.elapsed() < Duration::from_secs(2), "a waiting task stops at once, not after its hour");
        wake.wake();
        assert_eq!(rounds.load(Ordering::SeqCst), 3, "no round after the stop");
    }

    #[test]
    fn a_failing_task_backs_off_twice_as_long_each_time_whatever_the_wakes_and_survives_its_panics() {
        // Rounds 1 to 4 fail, the second by panicking; then it works again.
        let task = Counting::new(Duration::from_millis(40), |round| (round <= 4).then_some(round == 2));
        let (rounds, began, wake) = (Arc::clone(&task.rounds), Arc::clone(&task.began), Wake::default());
        let background = Background::start(0, vec![Registration::new(task, wake.clone())]).unwrap();
        // A request making work for it every millisecond does not make it retry sooner.
        let waker = thread::spawn(move || {
            for _ in 0..1000 {
                wake.wake();
                thread::sleep(Duration::from_millis(1));
            }
        });
        wait_for(&rounds, 5);
        waker.join().unwrap();
        background.stop_and_join();
        let began = lock(&began).clone();
        let gaps: Vec<Duration> = began.windows(2).map(|w| w[1] - w[0]).collect();
        for (k, want) in [40u64, 80, 160, 320].into_iter().enumerate() {
            assert!(gaps[k] >= Duration::from_millis(want), "retry {k} after {:?}, not {want} ms: {gaps:?}", gaps[k]);
        }
        assert!(gaps.len() > 5, "woken every millisecond once working again: {gaps:?}");
    }

    #[test]
    fn a_back_off_doubles_up_to_its_cap_and_reports_only_the_changes() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let down = Errno::ENOTCONN;
        let retries: Vec<Retry> = (0..8).map(|_| backoff.failed(down)).collect();
        let delays: Vec<u64> = retries.iter().map(|r| r.delay.as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(retries.iter().filter(|r| r.news).count(), 1, "one log line for eight failures");
        assert!(backoff.failed(Errno::EIO).news, "another errno is news");
        assert_eq!(backoff.succeeded().map(|(n, _)| n), Some(9));
        assert_eq!(backoff.succeeded(), None, "working on: nothing to say");
        assert_eq!(backoff.failed(down), Retry { delay: Duration::from_secs(1), news: true }, "a fresh start");
        let mut slow = Backoff::new(Duration::from_secs(300), Duration::from_secs(60));
        assert_eq!(slow.failed(down).delay, Duration::from_secs(300), "never sooner than the period");
    }
}
