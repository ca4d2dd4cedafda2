//! `surge run` across the nodes of an allocation, on a hosts-only test bed
//! (crates/surge-testbed): `surge run --hosts IP0,IP1,IP2` on host 0 starts
//! one `surge start` per host through mpirun (reaching the other hosts
//! through the test bed's launch agent), and the job's own mpirun spreads
//! an MPI checkpoint writer over hosts 1 and 2, whose ranks reach Surge
//! through the interposer (only host 0 has the job's FUSE mount).
//!
//! Needs root, iproute2 and Open MPI; otherwise each test shows
//! "SKIPPED: <test>: <reason>" (and fails under CI=true as root).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use surge_testbed::{down, up, Spec, Testbed};

fn surge_bin() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_surge"));
    for beside in ["surged", "libsurge_preload.so"] {
        assert!(
            bin.with_file_name(beside).is_file(),
            "{beside} is missing beside {}: build every binary first (`make build`; `make test` does)",
            bin.display()
        );
    }
    bin
}

fn workload(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workloads/build").join(name);
    assert!(p.exists(), "{} is missing: run `make -C workloads` (make test does)", p.display());
    p
}

/// A test bed can be made here and Open MPI runs.
fn ready() -> Result<(), String> {
    surge_testbed::check_host(false).map_err(|e| e.to_string())?;
    mpirun_installed()
}

fn mpirun_installed() -> Result<(), String> {
    match Command::new("mpirun").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        _ => Err("mpirun (Open MPI) is not installed: scripts/setup.sh installs it".into()),
    }
}

/// Open MPI refuses root unless told; the test bed runs as root.
const AS_ROOT: [(&str, &str); 2] = [("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")];

/// A hosts-only test bed (surge run starts the daemons), taken down on drop.
struct Bed {
    tb: Testbed,
    dir: tempfile::TempDir,
}

impl Bed {
    /// The bed `name` for `test`, or `None` after showing why the test cannot run here.
    fn for_test(test: &str, name: &str) -> Option<Bed> {
        surge_testkit::skip_unless_ready(test, ready())?;
        Some(Bed::up(name))
    }

    fn up(name: &str) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = Spec::new(name, 3, surge_bin());
        spec.daemon_hosts = 0;
        spec.state_dir = dir.path().join("testbed");
        // A left-over of a killed run would make `up` refuse.
        let _ = down(name, Some(&spec.state_dir));
        Bed { tb: up(&spec).unwrap(), dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ips(&self) -> Vec<String> {
        self.tb.hosts.iter().map(|h| h.ip.to_string()).collect()
    }

    /// `surge run --hosts <every host> ... -- sh -ec SCRIPT` on host 0.
    fn surge_run(&self, script: &str) -> Command {
        let mut cmd = self.tb.command(0, surge_bin());
        cmd.args(["run", "--quiet", "--daemons", "1", "--hosts", &self.ips().join(",")])
            .arg("--buffer")
            .arg(self.path("buffer"))
            .arg("--pfs")
            .arg(self.path("pfs"))
            .arg("--profile")
            .arg(self.path("profile.jsonl"))
            .args(["--", "sh", "-ec", script])
            .envs(AS_ROOT)
            .env("SURGE_TIMEOUT", "5")
            .env_remove("SURGE_MOUNT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// `mpirun` of the checkpoint writer with 2 ranks on each of hosts 1
    /// and 2, passing on what the interposer needs (Open MPI forwards no
    /// environment unless told).
    fn ckpt_on_client_hosts(&self, args: &str) -> String {
        let ips = self.ips();
        format!(
            "mpirun --host {}:2,{}:2 -np 4 --bind-to none -x LD_PRELOAD -x SURGE_CLUSTER -x SURGE_MOUNT \
             -x SURGE_JOB_ID -x SURGE_JOB_START -x SURGE_PROFILE -x SURGE_TIMEOUT {} --dir /surge/ckpt {args}",
            ips[1],
            ips[2],
            workload("ckpt_restart").display()
        )
    }

    /// Fails naming the process if anything still runs on a host of the bed.
    fn assert_nothing_left_running(&self) {
        for h in &self.tb.hosts {
            let out = Command::new("ip").args(["netns", "pids", &h.netns]).output().unwrap();
            let pids: Vec<u32> =
                String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect();
            let running: Vec<String> = pids
                .into_iter()
                .filter(|&p| alive(p))
                .map(|p| fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default().replace('\0', " "))
                .collect();
            assert!(running.is_empty(), "still running on host {} after surge run: {running:?}", h.index);
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Err(e) = down(&self.tb.name, Some(&self.tb.state_dir)) {
            eprintln!("down {} after the test: {e}", self.tb.name);
        }
    }
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The daemons of a cluster file the job copied: (index, address, pid).
fn daemons_of(cluster_file: &Path) -> Vec<(u32, String, u32)> {
    let text = fs::read_to_string(cluster_file).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    v["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let int = |k: &str| d[k].as_integer().unwrap() as u32;
            (int("index"), d["addr"].as_str().unwrap().to_string(), int("pid"))
        })
        .collect()
}

fn wait_for(path: &Path, job: &mut Child, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !path.exists() {
        if let Ok(Some(status)) = job.try_wait() {
            panic!("surge run ended ({status}) before {} appeared", path.display());
        }
        assert!(Instant::now() < deadline, "{} did not appear within {timeout:?}", path.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

const CKPT_ARGS: &str = "--mb-per-rank 3 --steps 2 --xfer 256K";

#[test]
fn surge_run_spans_the_hosts_of_its_allocation_and_leaves_nothing_running() {
    let test = "surge_run_spans_the_hosts_of_its_allocation_and_leaves_nothing_running";
    let Some(bed) = Bed::for_test(test, "mn1") else { return };
    let seen = bed.path("cluster.seen");
    let script = format!(
        "cp \"$SURGE_CLUSTER\" {seen}; {ckpt} --phase checkpoint; {ckpt} --phase restart",
        seen = seen.display(),
        ckpt = bed.ckpt_on_client_hosts(CKPT_ARGS)
    );
    let out = bed.surge_run(&script).output().unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("on each of 3 node(s) through mpirun (from --hosts)"), "{all}");
    assert!(
        all.contains("checkpoint: mode=both ranks=4 steps=2") && all.contains("restart: mode=both ranks=4"),
        "{all}"
    );
    assert_eq!(all.matches("mismatches=0 errors=0 OK").count(), 2, "{all}");

    // One daemon on each host, listening on the host's own address.
    let daemons = daemons_of(&seen);
    let mut ips: Vec<String> =
        daemons.iter().map(|(_, addr, _)| addr.rsplit_once(':').unwrap().0.to_string()).collect();
    ips.sort();
    assert_eq!(ips, bed.ips(), "{daemons:?}");

    // The staged-out copy restarts without Surge: every byte is checked.
    let restart = Command::new("mpirun")
        .args(["--oversubscribe", "-np", "4"])
        .arg(workload("ckpt_restart"))
        .arg("--dir")
        .arg(bed.path("pfs/ckpt"))
        .args(CKPT_ARGS.split(' '))
        .args(["--phase", "restart"])
        .envs(AS_ROOT)
        .output()
        .unwrap();
    assert!(text(&restart).contains("mismatches=0 errors=0 OK"), "{}", text(&restart));

    bed.assert_nothing_left_running();
    for (index, _, pid) in &daemons {
        assert!(!alive(*pid), "daemon {index} (pid {pid}) survived the job");
    }
    assert!(!all.contains("did not end cleanly") && !all.contains("could not remove"), "{all}");
    assert!(!bed.path("buffer").exists(), "the buffer goes after a complete stage-out");
    assert!(!bed.path("pfs/.surge").exists(), "the job's cluster directory goes with the job");
}

#[test]
fn a_host_lost_mid_job_shows_as_errors_and_unstaged_files_and_leaves_nothing_running() {
    let test = "a_host_lost_mid_job_shows_as_errors_and_unstaged_files_and_leaves_nothing_running";
    let Some(bed) = Bed::for_test(test, "mn2") else { return };
    let (seen, written, go) = (bed.path("cluster.seen"), bed.path("written"), bed.path("go"));
    let ckpt = bed.ckpt_on_client_hosts(CKPT_ARGS);
    let script = format!(
        "cp \"$SURGE_CLUSTER\" {seen}; {ckpt} --phase checkpoint; touch {written}; \
         while [ ! -e {go} ]; do sleep 0.1; done; {ckpt} --phase restart",
        seen = seen.display(),
        written = written.display(),
        go = go.display(),
    );
    let mut job = bed.surge_run(&script).spawn().unwrap();
    wait_for(&written, &mut job, Duration::from_secs(180));

    // Host 2 dies: its daemon goes at once, with the files' stripes on it.
    let daemons = daemons_of(&seen);
    let host2 = bed.ips()[2].clone();
    let (index, _, pid) = daemons.iter().find(|(_, addr, _)| addr.starts_with(&format!("{host2}:"))).unwrap().clone();
    // SAFETY: kill(2) of the daemon this test's job started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    surge_testkit::eventually("the killed daemon is gone", Duration::from_secs(10), || !alive(pid));
    fs::write(&go, "").unwrap();

    let out = job.wait_with_output().unwrap();
    let all = text(&out);
    assert!(!out.status.success(), "surge run must fail when a host is lost: {all}");
    // The job saw errors: reading back what the lost host held fails.
    assert!(all.contains("stat /surge/ckpt/step1/rank0.ckpt: Input/output error"), "{all}");
    assert_eq!(all.matches("mismatches=0 errors=0 OK").count(), 1, "only the checkpoint succeeds: {all}");
    // Every file has stripes on the lost daemon: none is staged, each is named.
    for file in ["/ckpt/step1/rank0.ckpt", "/ckpt/step1/rank3.ckpt", "/ckpt/step1/shared.ckpt"] {
        assert!(all.contains(&format!("stage-out of {file} failed")), "{file}: {all}");
    }
    assert!(all.contains("not staged (their buffer copies are intact)"), "{all}");
    assert!(all.contains(&format!("daemon {index} ({host2}:")) && all.contains("not reachable"), "{all}");
    assert!(all.contains("the job's buffer stays at"), "{all}");

    bed.assert_nothing_left_running();
    for (index, _, pid) in &daemons {
        assert!(!alive(*pid), "daemon {index} (pid {pid}) survived the job");
    }
}

#[test]
fn a_node_the_launcher_cannot_reach_stops_the_run_before_the_job_in_the_launchers_words() {
    let test = "a_node_the_launcher_cannot_reach_stops_the_run_before_the_job_in_the_launchers_words";
    if surge_testkit::skip_unless_ready(test, mpirun_installed()).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    // `false` as the launch agent: Open MPI cannot start anything on the other node.
    let out = Command::new(surge_bin())
        .args(["run", "--quiet", "--daemons", "1", "--hosts", "localhost,node-that-is-not-there"])
        .arg("--buffer")
        .arg(dir.path().join("buffer"))
        .arg("--pfs")
        .arg(dir.path().join("pfs"))
        .args(["--", "touch"])
        .arg(&ran)
        .envs(AS_ROOT)
        .env("OMPI_MCA_plm_rsh_agent", "false")
        .env_remove("SURGE_MOUNT")
        .output()
        .unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("the daemons of 2 node(s) did not come up: mpirun exited"), "{all}");
    assert!(all.contains("launch.log says:"), "{all}");
    assert!(!ran.exists(), "the job ran without its cluster");
    let surged = Command::new("pgrep").args(["-f", &dir.path().display().to_string()]).output().unwrap();
    assert!(surged.stdout.is_empty(), "left running: {}", String::from_utf8_lossy(&surged.stdout));
}

/// `surge start --foreground` on one host, as a launcher would run it on each node.
fn foreground_start(dir: &Path) -> Child {
    Command::new(surge_bin())
        .arg("--cluster")
        .arg(dir.join("cluster.toml"))
        .args(["start", "--foreground", "--daemons", "2", "--buffer"])
        .arg(dir.join("buffer"))
        .arg("--pfs")
        .arg(dir.join("pfs"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_foreground_start_stays_with_its_daemons_until_they_stop_or_it_is_told_to_end() {
    for by_signal in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut start = foreground_start(dir.path());
        let cluster = dir.path().join("cluster.toml");
        surge_testkit::eventually("the cluster file", Duration::from_secs(30), || cluster.exists());
        let daemons = daemons_of(&cluster);
        std::thread::sleep(Duration::from_millis(300));
        assert!(start.try_wait().unwrap().is_none(), "surge start --foreground left its daemons");
        if by_signal {
            // SAFETY: kill(2) of the surge start this test spawned.
            unsafe { libc::kill(start.id() as i32, libc::SIGTERM) };
        } else {
            let stop = Command::new(surge_bin()).arg("--cluster").arg(&cluster).arg("stop").output().unwrap();
            assert!(stop.status.success(), "{}", text(&stop));
        }
        let status = wait_for_exit(&mut start, "surge start --foreground outlived its daemons");
        let mut stderr = String::new();
        std::io::Read::read_to_string(start.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert!(status.success(), "{stderr}");
        let said = if by_signal { "signal 15: daemon 0" } else { "daemon 0" };
        assert!(stderr.contains(said), "{stderr}");
        for (index, _, pid) in daemons {
            assert!(!alive(pid), "daemon {index} survived (stopped by signal: {by_signal})");
        }
    }
}
