//! Job identity: every request carries the job it is charged to, so the
//! daemons' schedulers can queue and account per job. A client serving
//! other processes (the FUSE server) charges each of their requests to the
//! requester's job instead of its own ([`charged_to`], [`JobIdentity::of_process`]).

use std::cell::Cell;

thread_local! {
    // Reached with `try_with` only, as the deadline: late writes at exit
    // go out charged to the client's own job.
    static CHARGED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Runs `work` with the requests it sends from this thread (and the threads
/// it fans out to) charged to job `id`, when given, instead of the client's own.
pub fn charged_to<T>(id: Option<u64>, work: impl FnOnce() -> T) -> T {
    let previous = CHARGED.try_with(|c| c.replace(id)).ok().flatten();
    let out = work();
    let _ = CHARGED.try_with(|c| c.set(previous));
    out
}

/// The job this thread's requests are charged to, when not the client's own.
pub(crate) fn charged() -> Option<u64> {
    CHARGED.try_with(Cell::get).ok().flatten()
}

/// The job this process belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobIdentity {
    /// The id in every request header.
    pub id: u64,
    /// The original identity string, sent once in `Hello` for diagnostics.
    pub label: String,
}

impl JobIdentity {
    /// `SURGE_JOB_ID`, else `SLURM_JOB_ID`, else the process group.
    pub fn from_env() -> JobIdentity {
        let var = |name| std::env::var(name).ok();
        // SAFETY: getpgrp has no preconditions and cannot fail.
        let pgrp = unsafe { libc::getpgrp() };
        Self::choose(var("SURGE_JOB_ID"), var("SLURM_JOB_ID"), pgrp)
    }

    /// The job of process `pid`, as it would name its own: `SURGE_JOB_ID`,
    /// else `SLURM_JOB_ID` of the environment it was started with, else its
    /// process group (when its environment is not ours to read). `None`
    /// once the process is gone, and while it is inside exec (its new
    /// environment is not in place yet: ask again).
    pub fn of_process(pid: u32) -> Option<JobIdentity> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // After the command name, which may hold spaces: state (field 3), ppid, pgrp (5) ... env_end (51).
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let pgrp = fields.get(2)?.parse().ok()?;
        let environ = match std::fs::read(format!("/proc/{pid}/environ")) {
            Ok(environ) if environ.is_empty() && fields.get(48).is_some_and(|end| *end == "0") => return None,
            Ok(environ) => environ,
            Err(_) => Vec::new(),
        };
        let var = |name: &str| {
            environ.split(|&b| b == 0).find_map(|entry| {
                let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
                Some(String::from_utf8_lossy(value).into_owned())
            })
        };
        Some(Self::choose(var("SURGE_JOB_ID"), var("SLURM_JOB_ID"), pgrp))
    }

    /// The identity of a job named `label` (as `SURGE_JOB_ID` would give
    /// it): a number is its own id, a name hashes to one.
    pub fn named(label: &str) -> JobIdentity {
        let label = label.trim().to_string();
        JobIdentity { id: label.parse().unwrap_or_else(|_| fnv1a64(label.as_bytes())), label }
    }

    fn choose(surge: Option<String>, slurm: Option<String>, pgrp: libc::pid_t) -> JobIdentity {
        match surge.into_iter().chain(slurm).find(|s| !s.trim().is_empty()) {
            Some(label) => JobIdentity::named(&label),
            None => JobIdentity { id: pgrp as u64, label: format!("pgrp:{pgrp}") },
        }
    }
}

/// FNV-1a, 64 bits: a stable hash for non-numeric job names.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surge_then_slurm_then_process_group() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(JobIdentity::choose(s("42"), s("7"), 9), JobIdentity { id: 42, label: "42".into() });
        assert_eq!(JobIdentity::choose(None, s("7"), 9).id, 7);
        assert_eq!(JobIdentity::choose(s(""), s("7"), 9).id, 7);
        assert_eq!(JobIdentity::choose(None, None, 9), JobIdentity { id: 9, label: "pgrp:9".into() });
    }

    /// The job of `pid` once its exec is done.
    fn started(pid: u32) -> Option<JobIdentity> {
        for _ in 0..1000 {
            if let Some(job) = JobIdentity::of_process(pid) {
                return Some(job);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        None
    }

    #[test]
    fn a_process_is_charged_to_the_job_its_environment_names_else_its_group() {
        let job = |env: &[(&str, &str)]| {
            let mut child = std::process::Command::new("sleep");
            child.arg("5").env_remove("SURGE_JOB_ID").env_remove("SLURM_JOB_ID").envs(env.iter().copied());
            let mut child = child.spawn().unwrap();
            let found = started(child.id());
            child.kill().unwrap();
            child.wait().unwrap();
            found
        };
        assert_eq!(job(&[("SLURM_JOB_ID", "77"), ("SURGE_JOB_ID", "ckpt")]), Some(JobIdentity::named("ckpt")));
        assert_eq!(job(&[("SLURM_JOB_ID", "77")]).map(|j| j.id), Some(77));
        // SAFETY: getpgrp has no preconditions; the child stays in this process's group.
        let group = unsafe { libc::getpgrp() } as u64;
        assert_eq!(job(&[]).map(|j| j.id), Some(group));
        assert_eq!(started(u32::MAX), None);
    }

    #[test]
    fn requests_are_charged_to_the_given_job_inside_charged_to_only() {
        assert_eq!(charged(), None);
        charged_to(Some(9), || {
            assert_eq!(charged(), Some(9));
            charged_to(None, || assert_eq!(charged(), None));
            assert_eq!(charged(), Some(9));
        });
        assert_eq!(charged(), None);
    }

    #[test]
    fn names_hash_with_fnv1a() {
        // Reference values of FNV-1a 64.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        let job = JobIdentity::choose(Some("ckpt-run".into()), None, 1);
        assert_eq!((job.id, job.label.as_str()), (fnv1a64(b"ckpt-run"), "ckpt-run"));
    }
}
