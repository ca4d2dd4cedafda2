//! `surge run --autotune`: the job's output directory gets the layout the
//! tuner proposes from the history of this application's runs, and the
//! job's profile goes into that history afterwards (docs/tuner.md,
//! "surge run --autotune").
//!
//! How it plugs in: `surge run` flattens [`AutotuneArgs`] into its own,
//! turns them into an [`Autotune`] before anything starts (a directory
//! outside the mount is a usage error then), calls [`Autotune::before`]
//! once its cluster is up and [`Autotune::after`] once the profile is
//! written, and prints [`Autotune::summary`] in its summary. The decision
//! is the tuner's (`python3 -m surge_tune autotune propose APP`, DCA-IO with
//! the daemons' queued requests as load, one JSON line); applying it is
//! ours: `mkdir -p` and the directory's default layout through the client,
//! as `surge setstripe` does. Nothing the tuner does can stop the job: a
//! missing tuner, a bad history or a layout the cluster refuses is said on
//! stderr and in the summary, and the job runs with its layout unchanged.

use crate::cmd::files::make_dirs;
use crate::cmd::spelled_in_surge;
use crate::cmd::tune::{tuner_command, INSTALL_HINT};
use clap::Args;
use std::path::{Path, PathBuf};
use surge_client::{Client, FileKind, Layout};
use surge_proto::layout::FIRST_AUTO;

#[derive(Args, Clone, Default)]
pub struct AutotuneArgs {
    /// Before the job, give its output directory the layout (stripe count, size, first daemon)
    /// the tuner proposes from the recorded runs of this application (DCA-IO) and the daemons'
    /// queued requests; after it, record the job's profile in that history. A first run finds no
    /// history and keeps its layout. If the tuner fails, the job runs with its layout unchanged.
    #[arg(long)]
    pub autotune: bool,
    /// The job's output directory, under the mount (default: the first command argument under
    /// the mount, `--opt=PATH` and `key=PATH` included: itself when it is a directory in Surge,
    /// else its parent).
    #[arg(long, value_name = "DIR", requires = "autotune")]
    pub autotune_dir: Option<String>,
    /// The application's name in the history (default: the program the command runs, after
    /// mpirun/mpiexec/srun/env/time and their options: the first word naming an executable).
    #[arg(long, value_name = "NAME", requires = "autotune")]
    pub autotune_app: Option<String>,
    /// The tuner's history database (default: $SURGE_TUNE_DB, else ~/.surge/tune.db).
    #[arg(long, value_name = "PATH", requires = "autotune")]
    pub tune_db: Option<PathBuf>,
}

/// Words of a command line that start the program rather than being it.
const LAUNCHERS: &[&str] = &["mpirun", "mpiexec", "orterun", "srun", "env", "time", "nice", "nohup", "stdbuf"];

/// Where the layout goes: a directory named by the user, or a path taken
/// from the command line (a directory, or a file whose parent gets it).
enum Target {
    Named(String),
    FromCommand(String),
}

/// One job's autotuning: what to tune and what happened, for the summary.
pub struct Autotune {
    app: String,
    target: Target,
    /// The job's mount prefix, for the tuner's `surge getstripe` of the job's files.
    mount: String,
    db: Option<PathBuf>,
    lines: Vec<String>,
}

impl AutotuneArgs {
    /// None without --autotune; a usage error when the directory is not under `mount`.
    pub fn plan(&self, command: &[String], mount: &str) -> Result<Option<Autotune>, String> {
        if !self.autotune {
            return Ok(None);
        }
        let target = match &self.autotune_dir {
            Some(dir) => match spelled_in_surge(dir, mount) {
                Some(path) => Target::Named(path?),
                None => return Err(format!("--autotune-dir {dir}: not under the mount {mount}")),
            },
            None => Target::FromCommand(output_argument(command, mount).ok_or_else(|| {
                format!(
                    "--autotune: no argument of the command names a path under {mount}; name the job's output \
                     directory with --autotune-dir DIR"
                )
            })?),
        };
        let app = self.autotune_app.clone().unwrap_or_else(|| program_name(command));
        Ok(Some(Autotune { app, target, mount: mount.to_string(), db: self.tune_db.clone(), lines: Vec::new() }))
    }
}

impl Autotune {
    /// Asks the tuner for a layout and sets it on the output directory.
    pub fn before(&mut self, cluster_file: &Path) {
        let outcome = self.tuner(&["propose", &self.app], cluster_file).and_then(|proposal| {
            if proposal["status"] == "no-history" {
                return Ok(text(&proposal["message"]));
            }
            let dir = self.apply(cluster_file, &proposal)?;
            Ok(format!("{}; set on {dir}", text(&proposal["message"])))
        });
        self.say(outcome.map_err(|e| format!("{e}; the job runs with its layout unchanged")));
    }

    /// Records the job's profile in the history, unless the job did not
    /// finish well (`unfinished` says why): its throughput would mislead.
    pub fn after(&mut self, cluster_file: &Path, profile: &Path, job: &str, unfinished: Option<String>) {
        if let Some(why) = unfinished {
            self.say(Ok(format!("not recorded: {why}")));
            return;
        }
        let profile = profile.display().to_string();
        let outcome =
            self.tuner(&["record", &self.app, &profile, "--job", job], cluster_file).map(|r| text(&r["message"]));
        self.say(outcome.map_err(|e| format!("the run was not recorded: {e}")));
    }

    /// The summary's lines.
    pub fn summary(&self) -> &[String] {
        &self.lines
    }

    fn say(&mut self, outcome: Result<String, String>) {
        let line = match outcome {
            Ok(line) => line,
            Err(e) => format!("FAILED: {e}"),
        };
        note!("surge: autotune: {line}");
        self.lines.push(line);
    }

    /// Runs `surge_tune autotune ARGS` against the job's cluster; its one JSON line.
    fn tuner(&self, args: &[&str], cluster_file: &Path) -> Result<serde_json::Value, String> {
        let (mut cmd, python) = tuner_command();
        if let Some(db) = &self.db {
            cmd.arg("--db").arg(db);
        }
        let out = cmd
            .arg("autotune")
            .args(args)
            .env("SURGE_CLUSTER", cluster_file)
            .env("SURGE_MOUNT", &self.mount)
            .output()
            .map_err(|e| format!("cannot run the tuner with {python} ({e}): {INSTALL_HINT}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            let hint = if stderr.contains("No module named") { format!(" ({INSTALL_HINT})") } else { String::new() };
            return Err(format!("the tuner failed: {}{hint}", last.trim().trim_start_matches("error: ")));
        }
        // What the tuner could not use (no per-target load, a part of the profile skipped) is said, not lost.
        for note in stderr.lines().filter(|l| l.starts_with("note: ") || l.starts_with("warning: ")) {
            note!("surge: autotune: {note}");
        }
        serde_json::from_slice(&out.stdout).map_err(|e| format!("the tuner's answer is not one JSON object ({e})"))
    }

    /// Sets the proposed layout on the output directory (created if needed); the directory.
    fn apply(&self, cluster_file: &Path, proposal: &serde_json::Value) -> Result<String, String> {
        let field = |name: &str| {
            proposal[name].as_i64().ok_or_else(|| format!("the tuner's proposal lacks {name}: {proposal}"))
        };
        let (count, size, start) = (field("stripe_count")?, field("stripe_size")?, field("start_target")?);
        let layout = Layout {
            stripe_count: u32::try_from(count).map_err(|_| format!("stripe count {count} out of range"))?,
            stripe_size: u64::try_from(size).map_err(|_| format!("stripe size {size} out of range"))?,
            first: if start < 0 {
                FIRST_AUTO
            } else {
                u32::try_from(start).map_err(|_| format!("start target {start} out of range"))?
            },
        };
        let client = Client::connect(cluster_file).map_err(|e| e.to_string())?;
        layout.validate(client.cluster().daemons.len() as u32)?;
        let dir = match &self.target {
            Target::Named(dir) => dir.clone(),
            Target::FromCommand(path) => match client.stat(path) {
                Ok(attr) if attr.kind == FileKind::Dir => path.clone(),
                _ => parent(path),
            },
        };
        make_dirs(&client, &dir)?;
        client.set_layout(&dir, layout).map_err(|e| format!("{dir}: {e}"))?;
        let first = if start < 0 { String::new() } else { format!(" -i {start}") };
        Ok(format!("{dir} (surge setstripe -c {count} -S {size}{first})"))
    }
}

fn text(v: &serde_json::Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

fn parent(path: &str) -> String {
    match path.trim_end_matches('/').rsplit_once('/') {
        Some(("", _)) | None => "/".into(),
        Some((dir, _)) => dir.into(),
    }
}

/// The namespace path of the first command argument under `mount` (the
/// value of `--opt=PATH` and `key=PATH` arguments too).
fn output_argument(command: &[String], mount: &str) -> Option<String> {
    command.iter().skip(1).find_map(|arg| {
        let value = arg.rsplit_once('=').map_or(arg.as_str(), |(_, v)| v);
        spelled_in_surge(value, mount).and_then(Result::ok).filter(|p| p != "/")
    })
}

/// The program a command line runs: after launchers, their options and
/// environment assignments, the first word naming an executable file (by
/// path, or on PATH); the first word's base name when there is none.
fn program_name(command: &[String]) -> String {
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let is_executable = |w: &str| {
        use std::os::unix::fs::PermissionsExt;
        let runs = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        match w.contains('/') {
            true => runs(Path::new(w)),
            false => std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).any(|d| runs(&d.join(w))),
        }
    };
    command
        .iter()
        .filter(|w| !w.starts_with('-') && !w.contains('=') && !LAUNCHERS.contains(&base(w).as_str()))
        .find(|w| is_executable(w))
        .map_or_else(|| command.first().map(|w| base(w)).unwrap_or_default(), |w| base(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_program_is_found_behind_launchers_and_their_options() {
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("vpic");
        std::fs::write(&app, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&app, std::fs::Permissions::from_mode(0o755)).unwrap();
        let line = format!("mpirun --host a,b -np 4 env OMP_NUM_THREADS=2 {} --out /surge/ckpt", app.display());
        assert_eq!(program_name(&words(&line)), "vpic");
        assert_eq!(program_name(&words("sh -c true")), "sh");
        assert_eq!(program_name(&words("./not-there --x")), "not-there");
    }

    #[test]
    fn the_output_directory_comes_from_the_first_argument_under_the_mount() {
        let cmd = words("./app --in /data/x --out=/surge/ckpt/run1 of=/surge/other");
        assert_eq!(output_argument(&cmd, "/surge").as_deref(), Some("/ckpt/run1"));
        assert_eq!(output_argument(&words("./app surge:/a/b"), "/surge").as_deref(), Some("/a/b"));
        assert_eq!(output_argument(&words("./app /surgeon/x /surge"), "/surge"), None);
        assert_eq!((parent("/ckpt/run1/"), parent("/ckpt")), ("/ckpt".to_string(), "/".to_string()));
    }

    #[test]
    fn a_directory_outside_the_mount_is_a_usage_error() {
        let a = AutotuneArgs { autotune: true, autotune_dir: Some("/tmp/out".into()), ..Default::default() };
        let e = a.plan(&words("./app"), "/surge").err().unwrap();
        assert!(e.contains("--autotune-dir /tmp/out: not under the mount /surge"), "{e}");
        let none = AutotuneArgs { autotune: true, ..Default::default() }.plan(&words("./app -o x"), "/surge");
        assert!(none.err().unwrap().contains("name the job's output directory with --autotune-dir"));
        assert!(AutotuneArgs::default().plan(&words("./app"), "/surge").unwrap().is_none());
    }
}
