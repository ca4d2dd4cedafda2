//! Keeps the daemons of a cluster that `surge run` started running for the
//! job: a daemon that dies (a crash, the OOM killer, a stray `kill`) is
//! started again in place with [`launch::restart`] (same arguments,
//! directories and address), so it comes back with its objects and, for
//! daemon 0, the namespace, and clients reconnect to it. Requests in flight
//! when it died still fail with EIO, as they would without a supervisor;
//! the job's later I/O and the stage-out go through. A daemon that keeps
//! dying is left down after [`MAX_RESTARTS`], so a crash loop shows instead
//! of hiding a bug. Every event is said on stderr when it happens and
//! listed in the job's summary. Before its stage-out `surge run` waits for
//! one more look ([`Supervisor::settle`]), so a daemon that died as the job
//! ended is back for the stage-out.

use crate::launch;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use surge_cluster::ClusterFile;

/// How often the daemons' processes are looked at.
const POLL: Duration = Duration::from_millis(250);
/// Restarts of one daemon before it is left down.
pub const MAX_RESTARTS: u32 = 3;
/// How long a restarted daemon may take to register again.
const RESTART_TIMEOUT: Duration = Duration::from_secs(30);

/// The watching thread; [`Supervisor::stop`] ends it before the cluster is stopped.
pub struct Supervisor {
    stopping: Arc<AtomicBool>,
    /// Rounds the watcher has finished, for [`Supervisor::settle`].
    rounds: Arc<AtomicU64>,
    thread: JoinHandle<Vec<String>>,
}

impl Supervisor {
    /// Watches this host's daemons of the cluster in `cluster_file`.
    pub fn watch(cluster_file: PathBuf) -> Supervisor {
        let stopping = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let (flag, done) = (Arc::clone(&stopping), Arc::clone(&rounds));
        let thread = std::thread::spawn(move || watch_until(&cluster_file, &flag, &done));
        Supervisor { stopping, rounds, thread }
    }

    /// Waits until the watcher has looked at the daemons once more from
    /// now, restarting any that died (a daemon killed as the job ended):
    /// what comes next, the stage-out, then finds them up, or left down.
    pub fn settle(&self) {
        let seen = self.rounds.load(Ordering::SeqCst);
        while self.rounds.load(Ordering::SeqCst) < seen + 2 && !self.thread.is_finished() {
            std::thread::sleep(POLL / 5);
        }
    }

    /// Stops watching (a daemon stopping from now on is not restarted) and
    /// returns what happened, a sentence per event.
    pub fn stop(self) -> Vec<String> {
        self.stopping.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_else(|_| vec!["the daemon supervisor failed".into()])
    }
}

fn watch_until(cluster_file: &std::path::Path, stopping: &AtomicBool, rounds: &AtomicU64) -> Vec<String> {
    let started = Instant::now();
    let host = surge_cluster::hostname();
    let mut restarts: HashMap<u32, u32> = HashMap::new();
    let mut events = Vec::new();
    while !stopping.load(Ordering::SeqCst) {
        std::thread::sleep(POLL);
        // An unreadable cluster file (being rewritten) counts as a round that saw nothing.
        if let Ok(cluster) = ClusterFile::load(cluster_file) {
            for daemon in cluster.daemons.iter().filter(|d| d.host == host && !launch::pid_alive(d.pid)) {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                reap(daemon.pid);
                let count = restarts.entry(daemon.index).or_default();
                if *count == MAX_RESTARTS {
                    continue;
                }
                *count += 1;
                let at = started.elapsed().as_secs_f64();
                let event = match launch::restart(cluster_file, daemon.index, launch::Comeback::Whole, RESTART_TIMEOUT)
                {
                    Ok(back) => format!(
                        "daemon {} (pid {}) died {at:.1} s into the job and was started again (pid {}); requests in \
                     flight then failed with EIO",
                        daemon.index, daemon.pid, back.pid
                    ),
                    Err(e) => format!(
                        "daemon {} (pid {}) died {at:.1} s into the job and could not be started again: {e}",
                        daemon.index, daemon.pid
                    ),
                };
                note!("surge: {event}");
                events.push(event);
                if *count == MAX_RESTARTS {
                    let event = format!(
                        "daemon {} was restarted {MAX_RESTARTS} times and is left down if it dies again (see its \
                     surged.log in {})",
                        daemon.index,
                        daemon.buffer.display()
                    );
                    note!("surge: {event}");
                    events.push(event);
                }
            }
        }
        rounds.fetch_add(1, Ordering::SeqCst);
    }
    events
}

/// Collects the exit status of a daemon this process started (a dead child
/// stays a zombie until its parent waits for it); any other pid is left alone.
fn reap(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: WNOHANG never blocks, and no status is read back.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
}
