//! Background tasks: work a daemon does on its own, beside the requests it
//! serves. Today daemon 0 runs two: the deleter (`crate::deleter`, the
//! objects of removed files) and the orphan collector (`crate::collector`);
//! the data manager's demoters, evicters and throttler are to be more.
//!
//! A task is a [`Task`]: a name, a period and a `run_once`. [`Background`]
//! gives each task its own thread, which runs it at once, then every period,
//! and whenever the task's [`Wake`] is woken (a request that made work for
//! it wakes it, so it need not poll), until the daemon stops. Stopping
//! wakes every task, waits for the rounds under way and joins the threads.
//! A round that fails is logged; one that panics is logged too, and the task
//! runs again next period: a task never takes the daemon down.
//!
//! To add a task: implement `Task` (keep rounds short, or check
//! `Context::stopping` between steps, so a stop is prompt), and register it
//! in `background_tasks` in `lib.rs`.

use crate::failure::Failure;
use crate::{lock, log};
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

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

    fn stop(&self) {
        lock(&self.state).stopping = true;
        self.changed.notify_all();
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

/// A task's thread: a round, then a wait for the period or a wake, until stopped.
fn run(mut task: Box<dyn Task>, cx: &Context) {
    let (name, period) = (task.name(), task.period());
    loop {
        if cx.stopping() {
            return;
        }
        match panic::catch_unwind(AssertUnwindSafe(|| task.run_once(cx))) {
            Ok(Ok(())) => {}
            Ok(Err(failure)) => log!(Warn, cx.index, "{name}: {failure}; trying again within {} s", period.as_secs()),
            Err(_) => log!(Error, cx.index, "{name} panicked (see above); it runs again within {} s", period.as_secs()),
        }
        if !cx.signal.wait(period) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Instant;

    /// Counts its rounds; panics in the rounds `panic_in` says.
    struct Counting {
        rounds: Arc<AtomicU32>,
        panic_in: fn(u32) -> bool,
    }

    impl Task for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn period(&self) -> Duration {
            Duration::from_secs(3600)
        }
        fn run_once(&mut self, _: &Context) -> Result<(), Failure> {
            let round = self.rounds.fetch_add(1, Ordering::SeqCst) + 1;
            assert!(!(self.panic_in)(round), "round {round} panics, as a test task may");
            Ok(())
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
    fn a_task_runs_at_start_and_on_every_wake_and_survives_its_panics() {
        let rounds = Arc::new(AtomicU32::new(0));
        let wake = Wake::default();
        let task = Counting { rounds: Arc::clone(&rounds), panic_in: |round| round == 2 };
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
}
