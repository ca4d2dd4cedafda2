//! A cluster of real daemons started with `surge start` in a temporary
//! directory and stopped on drop, for the tests that drive the `surge`
//! command (crates/surge-cli/tests). The binaries are the ones cargo built
//! beside the test: target/<profile>/surge and surged.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

/// target/<profile>/surge, for a test binary in target/<profile>/deps/.
pub fn surge_bin() -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test.parent().and_then(|deps| deps.parent()).expect("the test binary sits in <profile>/deps/");
    let bin = profile_dir.join("surge");
    for part in [&bin, &profile_dir.join("surged")] {
        assert!(
            part.is_file(),
            "{} is missing: build every binary first (`cargo build --workspace --bins`; `make test` does)",
            part.display()
        );
    }
    bin
}

/// A cluster of real daemons in a temporary directory, stopped on drop.
pub struct Cluster {
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// `surge start --daemons N` plus `extra`, with buffer and PFS in the temporary directory.
    pub fn start(daemons: u32, extra: &[&str]) -> Cluster {
        let c = Cluster::unstarted();
        let (n, buffer, pfs) = (daemons.to_string(), c.buffer(), c.pfs());
        let mut args =
            vec!["start", "--daemons", &n, "--buffer", buffer.to_str().unwrap(), "--pfs", pfs.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = c.surge_with(&args);
        assert!(out.status.success(), "surge start failed: {}", String::from_utf8_lossy(&out.stderr));
        c
    }

    pub fn unstarted() -> Cluster {
        Cluster { dir: tempfile::tempdir().unwrap() }
    }

    pub fn cluster_file(&self) -> PathBuf {
        self.dir.path().join("cluster.toml")
    }
    pub fn buffer(&self) -> PathBuf {
        self.dir.path().join("buffer")
    }
    pub fn pfs(&self) -> PathBuf {
        self.dir.path().join("pfs")
    }
    /// A path in a local directory beside the cluster (created).
    pub fn local(&self, name: &str) -> PathBuf {
        let d = self.dir.path().join("local");
        fs::create_dir_all(&d).unwrap();
        d.join(name)
    }

    /// `surge --cluster <this cluster> ARGS`, SURGE_MOUNT unset (so /surge).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(surge_bin());
        cmd.arg("--cluster").arg(self.cluster_file()).args(args).env("SURGE_TIMEOUT", "5").env_remove("SURGE_MOUNT");
        cmd
    }

    pub fn surge_with(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs `surge ARGS`, asserting success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.surge_with(args);
        assert!(
            out.status.success(),
            "surge {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `surge ARGS`, asserting failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.surge_with(args);
        assert!(!out.status.success(), "surge {args:?} should have failed: {}", String::from_utf8_lossy(&out.stdout));
        String::from_utf8(out.stderr).unwrap()
    }

    /// Kills daemon `index` with SIGKILL and waits until it is gone (as
    /// a crash, or the OOM killer, would end it).
    pub fn kill_daemon(&self, index: u32) {
        let pid = self.pids()[index as usize];
        // SAFETY: kill(2) of a daemon this cluster started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        while fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z")) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    pub fn pids(&self) -> Vec<u32> {
        let text = fs::read_to_string(self.cluster_file()).unwrap_or_default();
        let v: toml::Value = toml::from_str(&text).unwrap_or(toml::Value::Table(Default::default()));
        v.get("daemons")
            .and_then(|d| d.as_array())
            .map(|a| a.iter().filter_map(|d| d.get("pid")?.as_integer()).map(|p| p as u32).collect())
            .unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Registered daemons too: a failed start leaves no cluster file.
        let mut pids = self.pids();
        let reg = self.dir.path().join("cluster.toml.d");
        for entry in fs::read_dir(reg).into_iter().flatten().flatten() {
            let text = fs::read_to_string(entry.path()).unwrap_or_default();
            if let Some(pid) = toml::from_str::<toml::Value>(&text).ok().and_then(|v| v.get("pid")?.as_integer()) {
                pids.push(pid as u32);
            }
        }
        if self.cluster_file().exists() {
            let _ = self.surge_with(&["stop", "--timeout", "3"]);
        }
        for pid in pids {
            // SAFETY: kill with a pid this cluster started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}
