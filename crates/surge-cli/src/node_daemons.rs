//! One `surge start` per node of an allocation, for `surge run` on several
//! nodes: started through the job's launcher (srun inside a Slurm
//! allocation, else Open MPI's mpirun), so the ranks meet as any multi-host
//! `surge start` does (see `launch`), each in the foreground for the length
//! of the job (an srun step ends its processes when it ends). The cluster
//! file and the launcher's log live in a job directory on the PFS, which
//! every node sees; buffers stay node-local.

use crate::launch;
use crate::stage_settings::StageArgs;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use surge_client::ClusterFile;
use surge_proto::layout::LayoutPlacement;

/// How long the ranks' `surge start --timeout` gives every daemon to register.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(60);
/// On top of that, for the launcher to reach every node.
const LAUNCH_SLACK: Duration = Duration::from_secs(60);
/// How long the ranks get to exit after their daemons were stopped.
const EXIT_GRACE: Duration = Duration::from_secs(20);
/// Lines of the launcher's log quoted in an error.
const QUOTED_LINES: usize = 10;

/// What starts one process per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    Srun,
    Mpirun,
}

impl Launcher {
    /// srun inside a Slurm allocation (when it is on PATH), else mpirun.
    pub fn detect() -> Launcher {
        let in_slurm = std::env::var_os("SLURM_JOB_ID").is_some();
        if in_slurm && on_path("srun") {
            Launcher::Srun
        } else {
            Launcher::Mpirun
        }
    }

    /// The launcher's command line for one process on each of `nodes`, up to
    /// the program to run. Neither binds the process to a core: the daemons
    /// it starts need the node's cores.
    pub fn command(self, nodes: &[String]) -> Command {
        let (count, list) = (nodes.len(), nodes.join(","));
        match self {
            Launcher::Srun => {
                let mut cmd = Command::new("srun");
                // --overlap: the job's own srun steps run beside this one.
                cmd.args([
                    format!("--nodes={count}"),
                    format!("--ntasks={count}"),
                    "--ntasks-per-node=1".into(),
                    format!("--nodelist={list}"),
                    "--overlap".into(),
                    "--cpu-bind=none".into(),
                ]);
                cmd
            }
            Launcher::Mpirun => {
                let mut cmd = Command::new("mpirun");
                cmd.args(["--host", &list, "--map-by", "ppr:1:node", "--bind-to", "none"]);
                cmd
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Launcher::Srun => "srun",
            Launcher::Mpirun => "mpirun",
        }
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// What to start on every node.
pub struct NodePlan<'a> {
    pub nodes: &'a [String],
    /// Holds the cluster file: on the PFS, so every node sees it.
    pub job_dir: PathBuf,
    pub daemons_per_node: u32,
    /// Each node's own buffer directory (the same path on every node).
    pub buffer: &'a Path,
    pub pfs: &'a Path,
    /// The daemons' request-path stages, passed on to every node's `surge start`.
    pub stages: &'a StageArgs,
    /// The root directory's (stripe count, placement), passed on to every node's `surge start`.
    pub root_layout: (i64, LayoutPlacement),
    /// Where the namespace is kept, passed on to every node's `surge start`.
    pub namespace: surge_cluster::NamespacePolicy,
}

impl NodePlan<'_> {
    pub fn cluster_file(&self) -> PathBuf {
        self.job_dir.join("cluster.toml")
    }
}

/// The daemons of every node, running under the launcher until `surge stop`.
/// Dropped after the cluster was stopped, it waits for the launcher to end,
/// removes the other nodes' buffers when the first node's was removed (every
/// file had a verified PFS copy), and the job directory.
pub struct NodeDaemons {
    launcher: Launcher,
    child: Child,
    nodes: Vec<String>,
    job_dir: PathBuf,
    cluster_file: PathBuf,
    buffer: PathBuf,
}

/// Starts `surge start --foreground` on every node and waits until rank 0
/// wrote the cluster file (every daemon registered).
pub fn start(plan: &NodePlan<'_>, launcher: Launcher) -> Result<NodeDaemons, String> {
    surge_cluster::private_dir(&plan.job_dir, "job directory").map_err(|e| e.to_string())?;
    let cluster_file = plan.cluster_file();
    let surge = std::env::current_exe().map_err(|e| format!("cannot find the surge binary: {e}"))?;
    let mut cmd = launcher.command(plan.nodes);
    cmd.arg(surge)
        .arg("--cluster")
        .arg(&cluster_file)
        .args(["start", "--foreground", "--listen", &plan.nodes.join(",")])
        .args(["--daemons", &plan.daemons_per_node.to_string()])
        .arg("--buffer")
        .arg(plan.buffer)
        .arg("--pfs")
        .arg(plan.pfs)
        .args(["--timeout", &REGISTER_TIMEOUT.as_secs().to_string()])
        .args(plan.stages.flags());
    let (stripe_count, placement) = plan.root_layout;
    cmd.arg(format!("--stripe-count={stripe_count}"));
    if placement == LayoutPlacement::Local {
        cmd.args(["--placement", "local"]);
    }
    cmd.args(["--namespace", &plan.namespace.to_string()]);
    let mut child = spawn_logged(cmd, &log_path(&plan.job_dir), launcher)?;
    let failed = |why: String| {
        format!(
            "the daemons of {} node(s) did not come up: {why}; {} (the job directory {} stays for a look)",
            plan.nodes.len(),
            log_tail(&plan.job_dir),
            plan.job_dir.display()
        )
    };
    let deadline = Instant::now() + REGISTER_TIMEOUT + LAUNCH_SLACK;
    while ClusterFile::load(&cluster_file).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            let file = cluster_file.display();
            return Err(failed(format!("{} exited ({status}) before {file} was written", launcher.name())));
        }
        if Instant::now() > deadline {
            // The ranks give up after their own --timeout, stopping the daemons they started.
            let ended = match wait_or_kill(&mut child, LAUNCH_SLACK) {
                Ok(status) => format!("it then exited ({status})"),
                Err(why) => why,
            };
            let secs = (REGISTER_TIMEOUT + LAUNCH_SLACK).as_secs();
            return Err(failed(format!("not every daemon registered within {secs}s ({}: {ended})", launcher.name())));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(NodeDaemons {
        launcher,
        child,
        nodes: plan.nodes.to_vec(),
        job_dir: plan.job_dir.clone(),
        cluster_file,
        buffer: plan.buffer.to_path_buf(),
    })
}

fn log_path(job_dir: &Path) -> PathBuf {
    job_dir.join("launch.log")
}

/// Runs `cmd` with its output in `log`, in its own process group: a Ctrl-C
/// aimed at `surge run` must not end the daemons before the job's files are staged.
fn spawn_logged(mut cmd: Command, log: &Path, launcher: Launcher) -> Result<Child, String> {
    let file = surge_cluster::open_private_log(log).map_err(|e| format!("cannot open {}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(file.try_clone().map_err(|e| e.to_string())?).stderr(file).process_group(0);
    cmd.spawn().map_err(|e| {
        format!(
            "cannot run {}: {e} (several nodes need srun inside a Slurm allocation, or Open MPI's mpirun on PATH)",
            launcher.name()
        )
    })
}

fn log_tail(job_dir: &Path) -> String {
    let path = log_path(job_dir);
    let text = fs::read_to_string(&path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    format!("{} says:\n  {}", path.display(), lines[lines.len().saturating_sub(QUOTED_LINES)..].join("\n  "))
}

/// Waits for `child` until `grace` has passed; then ends its process group.
/// Returns how it ended, or why it was killed.
fn wait_or_kill(child: &mut Child, grace: Duration) -> Result<std::process::ExitStatus, String> {
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
    }
    // SAFETY: kill(2) on the process group this module made for the launcher.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: as above.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    child.wait().ok();
    Err(format!("it was still running after {}s and was killed", grace.as_secs()))
}

impl NodeDaemons {
    pub fn describe(&self) -> String {
        format!("{} node(s) through {}", self.nodes.len(), self.launcher.name())
    }

    /// Removes the job's buffer on every node, through the launcher.
    fn remove_buffers(&self) -> Result<(), String> {
        let mut cmd = self.launcher.command(&self.nodes);
        cmd.args(["rm", "-rf", "--"]).arg(&self.buffer);
        let log = self.job_dir.join("cleanup.log");
        let mut child = spawn_logged(cmd, &log, self.launcher)?;
        match wait_or_kill(&mut child, LAUNCH_SLACK) {
            Ok(status) if status.success() => Ok(()),
            Ok(status) => Err(format!("{} ({status}); see {}", self.launcher.name(), log.display())),
            Err(why) => Err(format!("{}: {why}", self.launcher.name())),
        }
    }
}

impl Drop for NodeDaemons {
    fn drop(&mut self) {
        if self.cluster_file.exists() {
            // Not stopped yet: `surge run` failed before its tear-down.
            match launch::stop(&self.cluster_file, Duration::from_secs(10)) {
                Ok(notes) => notes.iter().for_each(|n| note!("surge: {n}")),
                Err(e) => note!("surge: stopping the daemons of every node: {e}"),
            }
        }
        let ended = wait_or_kill(&mut self.child, EXIT_GRACE);
        let clean = matches!(&ended, Ok(status) if status.success());
        if !clean {
            let how = ended.map_or_else(|why| why, |status| format!("it exited with {status}"));
            note!(
                "surge: the {} that ran the nodes' daemons did not end cleanly: {how}; {}",
                self.launcher.name(),
                log_tail(&self.job_dir)
            );
        }
        if self.buffer.exists() {
            note!("surge: the job's buffer stays at {} on each of {}", self.buffer.display(), self.nodes.join(","));
        } else if let Err(e) = self.remove_buffers() {
            note!("surge: could not remove the job's buffer {} on every node: {e}", self.buffer.display());
        }
        if clean {
            // Only the launcher's logs are left in it.
            if let Err(e) = fs::remove_dir_all(&self.job_dir) {
                note!("surge: could not remove {}: {e}", self.job_dir.display());
            }
            if let Some(jobs) = self.job_dir.parent() {
                // Fails, as it should, while another job's directory is in it.
                let _ = fs::remove_dir(jobs);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &Command) -> Vec<String> {
        std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn each_launcher_starts_one_unbound_process_per_node() {
        let nodes = vec!["n01".to_string(), "n02".into(), "gpu3".into()];
        assert_eq!(
            words(&Launcher::Srun.command(&nodes)),
            [
                "srun",
                "--nodes=3",
                "--ntasks=3",
                "--ntasks-per-node=1",
                "--nodelist=n01,n02,gpu3",
                "--overlap",
                "--cpu-bind=none"
            ]
        );
        assert_eq!(
            words(&Launcher::Mpirun.command(&nodes)),
            ["mpirun", "--host", "n01,n02,gpu3", "--map-by", "ppr:1:node", "--bind-to", "none"]
        );
    }

    #[test]
    fn a_launcher_that_fails_is_quoted_and_one_that_hangs_is_killed() {
        let t = tempfile::tempdir().unwrap();
        let mut failing = Command::new("sh");
        failing.args(["-c", "echo cannot reach node b >&2; exit 3"]);
        let mut child = spawn_logged(failing, &log_path(t.path()), Launcher::Mpirun).unwrap();
        assert_eq!(wait_or_kill(&mut child, Duration::from_secs(10)).unwrap().code(), Some(3));
        assert!(log_tail(t.path()).ends_with("launch.log says:\n  cannot reach node b"), "{}", log_tail(t.path()));

        let mut hanging = Command::new("sleep");
        hanging.arg("30");
        let mut child = spawn_logged(hanging, &t.path().join("hang.log"), Launcher::Mpirun).unwrap();
        let started = Instant::now();
        let e = wait_or_kill(&mut child, Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("was killed") && started.elapsed() < Duration::from_secs(10), "{e}");
        assert!(!launch::pid_alive(child.id()));
    }
}
