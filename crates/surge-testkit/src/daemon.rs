//! Starting `surged` for a test: its command line (the directories and
//! identity every daemon of a cluster shares) and the wait until it has
//! registered, which is when its address is known and it serves requests.
//! `SURGED_STAGES` names registry stages every daemon started so runs (see
//! [`stage_flags`]): `make test` runs the request-path suite once per
//! registered implementation that is not a default.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use surge_cluster::DaemonEntry;

/// Where daemon `index` of a test cluster keeps things, and who it is.
pub struct DaemonSetup<'a> {
    pub buffer: PathBuf,
    pub pfs: &'a Path,
    pub secret_file: &'a Path,
    pub cluster_id: &'a str,
    pub register_dir: &'a Path,
}

/// The `surged` command for daemon `index` of `daemons`, with `extra`
/// arguments after the setup's (an extra flag replaces the setup's flag of
/// the same name). Standard input is closed; output is the caller's choice.
pub fn surged_command(binary: &Path, index: u32, daemons: u32, setup: &DaemonSetup<'_>, extra: &[&str]) -> Command {
    let mut cmd = Command::new(binary);
    cmd.args(["--index", &index.to_string(), "--daemons", &daemons.to_string()]);
    let flags: [(&str, &std::ffi::OsStr); 5] = [
        ("--buffer", setup.buffer.as_os_str()),
        ("--pfs", setup.pfs.as_os_str()),
        ("--secret-file", setup.secret_file.as_os_str()),
        ("--cluster-id", setup.cluster_id.as_ref()),
        ("--register-dir", setup.register_dir.as_os_str()),
    ];
    for (flag, value) in flags {
        if !extra.contains(&flag) {
            cmd.arg(flag).arg(value);
        }
    }
    for [flag, name] in stage_flags(std::env::var("SURGED_STAGES").ok().as_deref()) {
        if !extra.contains(&flag.as_str()) {
            cmd.arg(flag).arg(name);
        }
    }
    cmd.args(extra).stdin(Stdio::null());
    cmd
}

/// The `surged` flags of `stages`, a comma-separated list of `KIND=NAME`
/// as `surged --list-stages` prints them (`cache=lru,store=dir-sync`);
/// none when unset. A test whose own flags name a stage keeps its own.
pub fn stage_flags(stages: Option<&str>) -> Vec<[String; 2]> {
    let entries = stages.unwrap_or("").split(',').map(str::trim).filter(|entry| !entry.is_empty());
    let flag = |entry: &str| match entry.split_once('=') {
        Some((kind, name)) => [format!("--{kind}"), name.to_string()],
        None => panic!("SURGED_STAGES: {entry:?} is not KIND=NAME (such as cache=lru; surged --list-stages)"),
    };
    entries.map(flag).collect()
}

/// Waits until daemon `index` (process `child`) has registered in
/// `register_dir`; panics with its log (`log()`) if it exits first or
/// takes more than 20 s.
pub fn wait_registered(register_dir: &Path, index: u32, child: &mut Child, log: impl Fn() -> String) -> DaemonEntry {
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = surge_cluster::registrations(register_dir).into_iter().find(|d| d.index == index && d.pid == pid);
        if let Some(entry) = found {
            return entry;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("surged {index} exited with {status} before registering:\n{}", log());
        }
        assert!(Instant::now() < deadline, "surged {index} did not register:\n{}", log());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surged_stages_become_the_daemons_stage_flags() {
        assert!(stage_flags(None).is_empty());
        let flags = stage_flags(Some("cache=lru, store=dir-sync"));
        assert_eq!(flags, [["--cache", "lru"].map(String::from), ["--store", "dir-sync"].map(String::from)]);
    }
}
