//! The job each FUSE request is charged to. The server is one client of
//! the daemons for every process that uses the mount; booked to the
//! server's own job, every FUSE-only writer of every job would look like one
//! job to the schedulers and the data manager. So a request is charged to
//! the job of the process that made it (the pid the kernel gives): its
//! `SURGE_JOB_ID`, else `SLURM_JOB_ID`, else its process group, as that
//! process would name itself (`JobIdentity::of_process`). Looked up once
//! per pid and kept for a few seconds, since pids are reused.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use surge_client::JobIdentity;

/// How long a pid's job is trusted before it is looked up again.
const KEPT: Duration = Duration::from_secs(2);
/// Beyond this many pids, those past `KEPT` are dropped.
const MOST: usize = 4096;

#[derive(Default)]
pub struct Jobs {
    known: Mutex<HashMap<u32, (u64, Instant)>>,
}

impl Jobs {
    /// The job of process `pid`; `None` (the server's own) for the kernel's
    /// own requests (pid 0) and processes already gone.
    pub fn of(&self, pid: u32) -> Option<u64> {
        if pid == 0 {
            return None;
        }
        let now = Instant::now();
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&(job, at)) = known.get(&pid) {
            if now.duration_since(at) < KEPT {
                return Some(job);
            }
        }
        let job = JobIdentity::of_process(pid).map(|j| j.id);
        // Unknown while its exec is under way (or gone): not kept, asked again next time.
        if let Some(job) = job {
            if known.len() >= MOST {
                known.retain(|_, (_, at)| now.duration_since(*at) < KEPT);
            }
            known.insert(pid, (job, now));
        }
        job
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_booked_to_its_own_job_and_the_kernel_to_the_servers() {
        let mut child = std::process::Command::new("sleep").arg("5").env("SURGE_JOB_ID", "4242").spawn().unwrap();
        let jobs = Jobs::default();
        let deadline = Instant::now() + Duration::from_secs(5);
        // Not yet while its exec is under way.
        while jobs.of(child.id()).is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(jobs.of(child.id()), Some(4242));
        assert_eq!(jobs.of(child.id()), Some(4242), "from the cache");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(jobs.of(0), None);
    }
}
