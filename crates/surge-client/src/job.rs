//! Job identity: every request carries the job it is charged to, so the
//! daemons' schedulers can queue and account per job.

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

    #[test]
    fn names_hash_with_fnv1a() {
        // Reference values of FNV-1a 64.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        let job = JobIdentity::choose(Some("ckpt-run".into()), None, 1);
        assert_eq!((job.id, job.label.as_str()), (fnv1a64(b"ckpt-run"), "ckpt-run"));
    }
}
