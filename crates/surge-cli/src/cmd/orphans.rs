//! Job-scoped clusters whose `surge run` died before winding them down
//! (SIGKILL, the batch system's kill after its grace, an OOM kill): their
//! daemons and a full buffer would otherwise stay on the node for good.
//! `surge run` marks each cluster it starts with its owner (pid and the
//! process's start time, so a reused pid is not taken for the owner); the
//! next `surge run` on the node, or `surge stop --orphans`, finds those
//! whose owner is gone and winds them down as their run would have: every
//! file staged out with verification, the daemons stopped, the buffer
//! removed only when every file has a verified PFS copy. A cluster whose
//! daemons died too is started again on its buffer first. A job buffer
//! given with `--buffer` lies outside the default buffer directory, where
//! the search looks, so its claim also leaves an entry naming it in the
//! default directory's `.runs/`; an entry whose buffer no longer carries
//! that claim (the run ended, or its orphan was wound down) is dropped when
//! next met.

use super::stage_out::{collect, stage_files, Report};
use crate::launch::{self, LaunchPlan, Rank};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;
use surge_client::{Client, ClusterFile};

/// In a job buffer: the `surge run` that owns it.
pub const OWNER_FILE: &str = "surge-run.owner";

/// In the default buffer directory: one file per claimed buffer elsewhere,
/// named after its owner and holding the buffer's path.
const CLAIMS_DIR: &str = ".runs";

/// A process, told apart from a later one with the same pid by its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    pid: u32,
    /// Clock ticks after boot (field 22 of /proc/PID/stat).
    started: u64,
}

impl Owner {
    fn of(pid: u32) -> Option<Owner> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name, which may hold spaces: state is field 3, start time field 22.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        Some(Owner { pid, started: fields.get(19)?.parse().ok()? })
    }

    fn parse(text: &str) -> Option<Owner> {
        let (pid, started) = text.trim().split_once(' ')?;
        Some(Owner { pid: pid.parse().ok()?, started: started.parse().ok()? })
    }

    fn alive(self) -> bool {
        launch::pid_alive(self.pid) && Owner::of(self.pid) == Some(self)
    }

    fn mark(self) -> String {
        format!("{} {}", self.pid, self.started)
    }

    /// Its entry's name in `.runs/`.
    fn claim_name(self) -> String {
        format!("{}-{}", self.pid, self.started)
    }

    /// The owner a buffer's mark names.
    fn of_buffer(buffer: &Path) -> Option<Owner> {
        Owner::parse(fs::read_to_string(buffer.join(OWNER_FILE)).ok()?.lines().next()?)
    }
}

/// Marks `buffer` as the cluster of this process, whose cluster file is
/// `cluster_file` (on the PFS for a cluster spanning nodes); a buffer
/// outside `root`, the directory [`find`] searches, is named in its `.runs/`.
pub fn claim(buffer: &Path, cluster_file: &Path, root: &Path) -> Result<(), String> {
    let me = Owner::of(std::process::id()).ok_or("cannot read this process's start time from /proc")?;
    let path = buffer.join(OWNER_FILE);
    let text = format!("{}\n{}\n", me.mark(), cluster_file.display());
    surge_cluster::write_atomically(&path, text.as_bytes(), 0o600)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let buffer = std::path::absolute(buffer).map_err(|e| format!("{}: {e}", buffer.display()))?;
    if buffer.parent() == Some(root) {
        return Ok(());
    }
    let claims = root.join(CLAIMS_DIR);
    surge_cluster::private_dir(&claims, "buffer directory").map_err(|e| e.to_string())?;
    let entry = claims.join(me.claim_name());
    surge_cluster::write_atomically(&entry, buffer.as_os_str().as_encoded_bytes(), 0o600)
        .map_err(|e| format!("cannot write {}: {e}", entry.display()))
}

/// The cluster file an owner mark names (older marks: the buffer's own).
fn cluster_file_of(buffer: &Path) -> PathBuf {
    let mark = fs::read_to_string(buffer.join(OWNER_FILE)).unwrap_or_default();
    mark.lines().nth(1).filter(|l| !l.is_empty()).map_or_else(|| buffer.join("cluster.toml"), PathBuf::from)
}

/// The job buffers under `root`, or named in its `.runs/`, whose owning
/// `surge run` is gone.
pub fn find(root: &Path) -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = fs::read_dir(root).into_iter().flatten().flatten().map(|e| e.path()).collect();
    for entry in fs::read_dir(root.join(CLAIMS_DIR)).into_iter().flatten().flatten() {
        let claimed = fs::read_to_string(entry.path()).ok().map(PathBuf::from);
        let name = entry.file_name();
        match claimed.filter(|b| Owner::of_buffer(b).is_some_and(|o| name == o.claim_name().as_str())) {
            Some(buffer) => candidates.push(buffer),
            None => drop(fs::remove_file(entry.path())),
        }
    }
    let mut found: Vec<PathBuf> =
        candidates.into_iter().filter(|dir| Owner::of_buffer(dir).is_some_and(|owner| !owner.alive())).collect();
    found.sort();
    found.dedup();
    found
}

/// Winds down the orphaned cluster of `buffer` (see the module); says what
/// became of it.
pub fn clean(buffer: &Path, quiet: bool) -> Result<String, String> {
    let cluster_file = cluster_file_of(buffer);
    let cluster = ClusterFile::load(&cluster_file).map_err(|e| {
        format!(
            "{}: {e}; its files stay there (remove it with `rm -r {}` once you have them)",
            buffer.display(),
            buffer.display()
        )
    })?;
    if !launch::cluster_alive(&cluster_file) {
        if cluster_file != buffer.join("cluster.toml") {
            return Err(format!(
                "the abandoned job cluster of {} spanned nodes and its daemons are gone; its files stay in \
                 each node's {0}",
                buffer.display()
            ));
        }
        restart(buffer, &cluster)?;
    }
    let client = Client::connect(&cluster_file).map_err(|e| e.to_string())?;
    let mut files = Vec::new();
    let listed = collect(&client, "/", false, &mut files).map_err(|e| format!("listing {}: {e}", buffer.display()));
    let report = listed.as_ref().ok().map(|()| stage_files(&client, &files, quiet, Report::Stderr, &|| false));
    drop(client);
    for note in launch::stop(&cluster_file, Duration::from_secs(10))? {
        note!("surge: {note}");
    }
    match (listed, report) {
        (Ok(()), Some(report)) if report.failures.is_empty() => {
            fs::remove_dir_all(buffer).map_err(|e| format!("cannot remove {}: {e}", buffer.display()))?;
            // Of a cluster that spanned nodes, the other nodes' buffers stay until their next run.
            Ok(format!(
                "staged out {} file(s) of an abandoned job cluster at {} and removed it",
                report.staged,
                buffer.display()
            ))
        }
        (listed, _) => {
            let why = listed.err().unwrap_or_else(|| "some of its files could not be staged out".into());
            // No longer anyone's: the next run does not try again on its own.
            fs::remove_file(buffer.join(OWNER_FILE)).ok();
            Ok(format!(
                "an abandoned job cluster at {} is stopped, its buffer kept ({why}); \
                 recover it with `surge start --buffer {0} --pfs {}` and `surge stage-out --all`",
                buffer.display(),
                cluster.pfs.display()
            ))
        }
    }
}

/// Starts the daemons of a cluster again on its own buffer, so its files can be staged.
fn restart(buffer: &Path, cluster: &ClusterFile) -> Result<(), String> {
    let daemons = fs::read_dir(buffer)
        .map_err(|e| format!("{}: {e}", buffer.display()))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("daemon-"))
        .count() as u32;
    let plan = LaunchPlan::local(buffer.join("cluster.toml"), daemons, buffer.to_path_buf(), cluster.pfs.clone());
    let rank = Rank { rank: 0, size: 1, launch_id: format!("recover-{}", std::process::id()) };
    launch::start(&plan, &rank)
        .map(drop)
        .map_err(|e| format!("cannot start the abandoned cluster at {} again: {e}", buffer.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_process_owns_its_mark_and_a_dead_or_reused_pid_does_not() {
        let me = Owner::of(std::process::id()).unwrap();
        assert!(me.alive());
        assert_eq!(Owner::parse(&format!("{} {}\n", me.pid, me.started)), Some(me));
        assert!(!Owner { started: me.started + 1, ..me }.alive(), "a pid reused by a later process");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!Owner { pid, started: 0 }.alive());
        assert_eq!(Owner::parse("garbage"), None);
    }

    #[test]
    fn an_abandoned_buffer_without_a_readable_cluster_file_is_left_whole_with_the_reason() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("abandoned");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("data"), "kept").unwrap();
        fs::write(dir.join(OWNER_FILE), format!("999999999 1\n{}\n", dir.join("cluster.toml").display())).unwrap();
        let err = clean(&dir, true).unwrap_err();
        assert!(err.contains("its files stay there"), "{err}");
        assert_eq!(fs::read_to_string(dir.join("data")).unwrap(), "kept");
    }

    #[test]
    fn a_buffer_elsewhere_is_found_through_its_entry_until_it_carries_that_claim_no_more() {
        let (root, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let live = elsewhere.path().join("live");
        fs::create_dir(&live).unwrap();
        claim(&live, &live.join("cluster.toml"), root.path()).unwrap();
        assert_eq!(fs::read_dir(root.path().join(CLAIMS_DIR)).unwrap().count(), 1);
        // As a killed run leaves its buffer: the mark and entry of an owner that is gone.
        let abandoned = elsewhere.path().join("abandoned");
        fs::create_dir(&abandoned).unwrap();
        fs::write(abandoned.join(OWNER_FILE), "999999999 1\n").unwrap();
        let entry = root.path().join(CLAIMS_DIR).join("999999999-1");
        fs::write(&entry, abandoned.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(find(root.path()), std::slice::from_ref(&abandoned));
        // Wound down (or ended cleanly): the entry goes when next met.
        fs::remove_file(abandoned.join(OWNER_FILE)).unwrap();
        assert_eq!(find(root.path()), Vec::<PathBuf>::new());
        assert!(!entry.exists());
    }

    #[test]
    fn only_buffers_whose_owner_is_gone_are_found() {
        let root = tempfile::tempdir().unwrap();
        for (name, owner) in [("mine", true), ("abandoned", false), ("unmarked", true)] {
            let dir = root.path().join(name);
            fs::create_dir(&dir).unwrap();
            if name == "unmarked" {
                continue;
            }
            if owner {
                claim(&dir, &dir.join("cluster.toml"), root.path()).unwrap();
            } else {
                fs::write(dir.join(OWNER_FILE), "999999999 1\n").unwrap();
            }
        }
        assert_eq!(find(root.path()), [root.path().join("abandoned")]);
    }
}
