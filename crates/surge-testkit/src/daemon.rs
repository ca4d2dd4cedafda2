//! Starting `surged` for a test: its command line (the directories and
//! identity every daemon of a cluster shares) and the wait until it has
//! registered, which is when its address is known and it serves requests.

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
    cmd.args(extra).stdin(Stdio::null());
    cmd
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
