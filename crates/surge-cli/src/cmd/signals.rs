//! How `surge run` lives through SIGINT, SIGTERM and SIGHUP (Ctrl-C,
//! `scancel`, a batch time limit, a closed terminal): the signals are taken
//! on a thread of their own for the whole run, so that `surge run` itself
//! never dies of them and can unmount, stage out and stop the cluster in
//! order. The job runs in a process group of its own; the first signal is
//! passed to that whole group (a shell's children too), and if the job is
//! still running a grace period later, the group is killed. A second signal
//! means "hurry": the job is killed at once and the stage-out is skipped
//! (the buffer is kept, so nothing is lost). Processes the job left in its
//! group go with it once it was told to end. When `surge run` has a terminal,
//! the job gets the terminal's foreground while it runs, so it can read
//! from it and Ctrl-C reaches it directly.

use signal_hook::iterator::Signals;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The signals `surge run` received, and the job they go to.
#[derive(Default)]
pub struct Interrupts {
    count: AtomicU32,
    first: AtomicI32,
    /// The job's process group while it runs, else 0.
    job_group: AtomicI32,
}

impl Interrupts {
    /// Signals received so far.
    pub fn count(&self) -> u32 {
        self.count.load(Ordering::SeqCst)
    }

    /// The first signal received, if any.
    pub fn first(&self) -> Option<i32> {
        Some(self.first.load(Ordering::SeqCst)).filter(|&sig| sig != 0)
    }

    /// A second signal came: skip what can be skipped.
    pub fn hurry(&self) -> bool {
        self.count() >= 2
    }

    fn received(&self, sig: i32) {
        let _ = self.first.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
        let count = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        let group = self.job_group.load(Ordering::SeqCst);
        match (count, group) {
            (1, 0) => note!(
                "surge: signal {sig}: staging out what the job wrote, then stopping (again to skip the stage-out)"
            ),
            (1, _) => {
                note!("surge: signal {sig}: passing it to the job, then staging out and stopping (again to hurry)");
                // SAFETY: kill(2) of the job's own process group.
                unsafe { libc::kill(-group, sig) };
            }
            (_, 0) => note!("surge: signal {sig} again: skipping the stage-out; the buffer is kept"),
            (_, _) => {
                note!("surge: signal {sig} again: killing the job and skipping the stage-out; the buffer is kept");
                // SAFETY: kill(2) of the job's own process group.
                unsafe { libc::kill(-group, libc::SIGKILL) };
            }
        }
    }
}

/// Takes SIGINT, SIGTERM and SIGHUP for the rest of this process's life,
/// on a thread of its own (handlers, not a blocked mask, so the programs
/// this process starts get the signals' default actions).
pub fn watch() -> io::Result<Arc<Interrupts>> {
    let mut signals = Signals::new(FORWARDED)?;
    let interrupts = Arc::new(Interrupts::default());
    let watcher = Arc::clone(&interrupts);
    std::thread::spawn(move || {
        for sig in signals.forever() {
            watcher.received(sig);
        }
    });
    Ok(interrupts)
}

/// Runs `cmd` to its end in a process group of its own, which gets the
/// signals `interrupts` receives; killed `grace` after the first if it
/// has not ended by then.
pub fn run_job(cmd: &mut Command, interrupts: &Interrupts, grace: Duration) -> io::Result<ExitStatus> {
    let mut child = cmd.process_group(0).spawn()?;
    let pid = child.id() as libc::pid_t;
    let terminal = Terminal::give_to(pid);
    interrupts.job_group.store(pid, Ordering::SeqCst);
    if interrupts.count() > 0 {
        // A signal came while the job was starting: it goes to the job too.
        // SAFETY: kill(2) of the job's own process group.
        unsafe { libc::kill(-pid, interrupts.first().unwrap_or(libc::SIGTERM)) };
    }

    let (done, ended) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait());
    });
    // Set at the first signal; taken once the group has been killed.
    let mut deadline: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        match ended.recv_timeout(Duration::from_millis(50)) {
            Ok(status) => break status,
            Err(mpsc::RecvTimeoutError::Disconnected) => break Err(io::Error::other("lost the job's waiter")),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if interrupts.count() > 0 && !killed {
            let at = *deadline.get_or_insert_with(|| Instant::now() + grace);
            if Instant::now() >= at {
                note!("surge: the job did not end {}s after the signal: killing it", grace.as_secs());
                // SAFETY: kill(2) of the job's own process group.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                killed = true;
            }
        }
    };
    interrupts.job_group.store(0, Ordering::SeqCst);
    if interrupts.count() > 0 {
        // A job told to end takes what it left in its group (a shell's background children) along.
        // SAFETY: kill(2) of the job's own process group; ESRCH when it is empty.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    drop(terminal);
    status
}

/// The terminal's foreground, lent to the job while it runs.
struct Terminal {
    ours: libc::pid_t,
}

impl Terminal {
    /// Gives the foreground to `group` when this process holds it.
    fn give_to(group: libc::pid_t) -> Option<Terminal> {
        // SAFETY: plain queries and tcsetpgrp on descriptor 0.
        unsafe {
            let ours = libc::getpgrp();
            if libc::isatty(0) != 1 || libc::tcgetpgrp(0) != ours {
                return None;
            }
            (libc::tcsetpgrp(0, group) == 0).then_some(Terminal { ours })
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Taking the foreground back from the background sends SIGTTOU,
        // which would stop us: ignore it for that call.
        // SAFETY: signal disposition swap around one tcsetpgrp on descriptor 0.
        unsafe {
            let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(0, self.ours);
            libc::signal(libc::SIGTTOU, old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_is_remembered_and_a_second_one_means_hurry() {
        let interrupts = Interrupts::default();
        assert_eq!((interrupts.first(), interrupts.hurry()), (None, false));
        interrupts.received(libc::SIGTERM);
        assert_eq!((interrupts.first(), interrupts.hurry()), (Some(libc::SIGTERM), false));
        interrupts.received(libc::SIGINT);
        assert_eq!((interrupts.first(), interrupts.hurry(), interrupts.count()), (Some(libc::SIGTERM), true, 2));
    }
}
