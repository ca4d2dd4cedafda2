//! Running a job's command so that SIGINT, SIGTERM and SIGHUP sent to
//! `surge run` (Ctrl-C, `scancel`, a batch time limit, a closed terminal)
//! reach the command, and `surge run` itself lives on to unmount, stage out
//! and stop the cluster in order instead of dying with them.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};

const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: plain signal-set manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Runs `cmd` to its end, passing the forwarded signals on to it.
pub fn run_forwarding(cmd: &mut Command) -> io::Result<ExitStatus> {
    let set = forwarded_set();
    // Blocked here (and in every thread started from now on), taken by sigwait below.
    // SAFETY: set is a valid signal set.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    // SAFETY: sigprocmask is async-signal-safe; the command starts with nothing blocked.
    unsafe {
        cmd.pre_exec(move || {
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    std::thread::spawn(move || loop {
        let mut sig = 0;
        // SAFETY: set is a valid signal set; sig receives the signal's number.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            return;
        }
        eprintln!("surge: signal {sig}: passing it to the job, then unmounting, staging out and stopping in order");
        // SAFETY: plain kill of the child's pid (reaped only by the wait below).
        unsafe { libc::kill(pid, sig) };
    });
    child.wait()
}
