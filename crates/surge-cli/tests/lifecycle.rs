//! The job lifecycle of `surge run` as a batch system drives it: SIGINT,
//! SIGTERM and SIGHUP (Ctrl-C, `scancel`, a time limit, a lost terminal),
//! a job that ignores them, a second signal, a `surge run` killed outright
//! (its cluster wound down by the next run or `surge stop --orphans`), and
//! `surge stop --purge`. Each checks the exit status, that nothing is left
//! running, and where the job's bytes are.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn surge_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_surge"))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])))
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) of a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0, "kill {pid}");
}

/// Waits for `child` at most `limit`; its output and how long it took.
fn finish(child: Child, limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waiter.is_finished() {
        if started.elapsed() > limit {
            signal(pid, libc::SIGKILL);
            panic!("surge run did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (waiter.join().unwrap(), started.elapsed())
}

/// A job's world: a default buffer directory of its own (`SURGE_BUFFER`,
/// where job buffers go and abandoned ones are looked for), HOME, a PFS and
/// a mount point.
struct Job {
    dir: tempfile::TempDir,
}

impl Job {
    fn new() -> Job {
        let job = Job { dir: tempfile::tempdir().unwrap() };
        fs::create_dir_all(job.path("pfs")).unwrap();
        job
    }

    /// Where `surge run` puts job buffers by default, for this job.
    fn buffer_root(&self) -> PathBuf {
        self.path("buffers")
    }

    /// `surge ARGS` in this job's world.
    fn surge(&self, args: &[&str]) -> Output {
        Command::new(surge_bin())
            .args(args)
            .env("HOME", self.dir.path())
            .env("SURGE_BUFFER", self.buffer_root())
            .output()
            .unwrap()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `surge run` with `extra` flags; `script` (sh) writes to $M, the mount,
    /// and may touch $MARK to say it got there.
    fn command(&self, extra: &[&str], script: &str) -> Command {
        let mut cmd = Command::new(surge_bin());
        cmd.args(["run", "--quiet", "--daemons", "2", "--pfs"])
            .arg(self.path("pfs"))
            .arg("--mount")
            .arg(self.mount())
            .args(extra)
            .args(if surge_fuse::mountpoint::unavailable().is_some() { &["--no-fuse"][..] } else { &[] })
            .args(["--", "sh", "-c", script])
            .env("HOME", self.dir.path())
            .env("SURGE_BUFFER", self.buffer_root())
            .env("M", self.mount())
            .env("MARK", self.path("mark"))
            .env("SURGE_CLUSTER", self.path("no-running-cluster.toml"))
            .env("SURGE_TIMEOUT", "10")
            .env_remove("SURGE_MOUNT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn mount(&self) -> String {
        self.path("mnt").display().to_string()
    }

    /// Starts `surge run` and waits until its job has touched $MARK.
    fn start_until_marked(&self, extra: &[&str], script: &str) -> Child {
        let mut child = self.command(extra, script).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.path("mark").exists() {
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                panic!("surge run ended ({status}) before the job got going: {}", text(&out));
            }
            assert!(Instant::now() < deadline, "the job never touched $MARK");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// The pids the job wrote to `rel`, one per line.
    fn pids(&self, rel: &str) -> Vec<u32> {
        fs::read_to_string(self.path(rel)).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect()
    }

    /// The daemons of every job cluster under HOME, from their cluster files.
    fn daemon_pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for entry in fs::read_dir(self.buffer_root()).into_iter().flatten().flatten() {
            let text = fs::read_to_string(entry.path().join("cluster.toml")).unwrap_or_default();
            let v: toml::Value = toml::from_str(&text).unwrap_or(toml::Value::Table(Default::default()));
            let daemons = v.get("daemons").and_then(|d| d.as_array()).cloned().unwrap_or_default();
            pids.extend(daemons.iter().filter_map(|d| d.get("pid")?.as_integer()).map(|p| p as u32));
        }
        pids
    }

    /// The job buffers in the default directory (not its `.runs/` of buffers elsewhere).
    fn job_buffers(&self) -> Vec<PathBuf> {
        let entries = fs::read_dir(self.buffer_root()).into_iter().flatten().flatten();
        entries.filter(|e| !e.file_name().to_string_lossy().starts_with('.')).map(|e| e.path()).collect()
    }
}

fn assert_gone(what: &str, pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| alive(p)) {
        assert!(Instant::now() < deadline, "{what} still running: {pids:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes a file, starts a background child, records both pids, touches $MARK and waits.
const WRITE_THEN_WAIT: &str = r#"
    echo "written before the signal" > $M/result.txt
    sleep 300 & echo $$ > $MARK.pids; echo $! >> $MARK.pids
    touch $MARK
    wait
"#;

#[test]
fn sigint_sigterm_and_sighup_reach_the_job_and_what_it_wrote_is_staged_out() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let job = Job::new();
        let child = job.start_until_marked(&[], WRITE_THEN_WAIT);
        let daemons = job.daemon_pids();
        assert_eq!(daemons.len(), 2);
        signal(child.id(), sig);
        let (out, took) = finish(child, Duration::from_secs(60));
        assert_eq!(out.status.code(), Some(128 + sig), "signal {sig}: {}", text(&out));
        assert!(took < Duration::from_secs(30), "signal {sig}: took {took:?}");
        assert_eq!(fs::read_to_string(job.path("pfs/result.txt")).unwrap(), "written before the signal\n");
        assert!(text(&out).contains(&format!("interrupted    by signal {sig}")), "{}", text(&out));
        // The job's shell, its background child and the daemons are gone; so is the buffer.
        assert_gone("the job or a daemon", &[job.pids("mark.pids"), daemons].concat());
        assert_eq!(job.job_buffers(), Vec::<PathBuf>::new(), "signal {sig}: the job buffer stayed");
    }
}

/// Writes a file, touches $MARK, waits for $MARK.go, then writes more and
/// copies the first file (so both daemons serve it after the restart).
const WRITE_WAIT_WRITE: &str = r#"
    seq 1 200000 > $M/before.txt
    touch $MARK
    while [ ! -e $MARK.go ]; do sleep 0.05; done
    seq 1 100000 > $M/after.txt && cat $M/before.txt > $M/copy.txt
"#;

/// Kills daemon `index` of the job's cluster and waits until it is running
/// again under a new pid; returns (old pid, new pid).
fn kill_daemon_and_await_its_restart(job: &Job, index: usize) -> (u32, u32) {
    let old = job.daemon_pids()[index];
    signal(old, libc::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = job.daemon_pids();
        if now.len() > index && now[index] != old && alive(now[index]) {
            return (old, now[index]);
        }
        assert!(Instant::now() < deadline, "daemon {index} (pid {old}) was not started again: {now:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_daemon_killed_during_the_job_is_started_again_and_the_job_and_its_stage_out_go_through() {
    let job = Job::new();
    let child = job.start_until_marked(&[], WRITE_WAIT_WRITE);
    let (old, new) = kill_daemon_and_await_its_restart(&job, 1);
    fs::write(job.path("mark.go"), "").unwrap();
    let (out, _) = finish(child, Duration::from_secs(60));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(all.contains(&format!("daemon 1 (pid {old}) died")) && all.contains(&format!("(pid {new})")), "{all}");
    assert!(all.contains("  daemons        daemon 1"), "the summary does not list the restart: {all}");
    let numbers = |n: u32| (1..=n).map(|i| format!("{i}\n")).collect::<String>();
    assert_eq!(fs::read_to_string(job.path("pfs/before.txt")).unwrap(), numbers(200_000));
    assert_eq!(fs::read_to_string(job.path("pfs/copy.txt")).unwrap(), numbers(200_000));
    assert_eq!(fs::read_to_string(job.path("pfs/after.txt")).unwrap(), numbers(100_000));
    assert_gone("a daemon", &[new]);
}

#[test]
fn a_daemon_killed_as_the_job_ends_is_back_for_the_stage_out() {
    let job = Job::new();
    let script = r#"seq 1 100000 > $M/last.txt
        kill -9 $(python3 -c 'import os, tomllib; print(tomllib.load(open(os.environ["SURGE_CLUSTER"], "rb"))["daemons"][1]["pid"])')"#;
    let out = job.command(&[], script).output().unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(all.contains("daemon 1 (pid") && all.contains("was started again"), "{all}");
    let numbers: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    assert_eq!(fs::read_to_string(job.path("pfs/last.txt")).unwrap(), numbers);
    assert!(job.job_buffers().is_empty(), "the buffer goes after a complete stage-out: {all}");
}

#[test]
fn a_daemon_that_keeps_dying_is_left_down_after_three_restarts_and_the_run_says_so() {
    let job = Job::new();
    let child = job.start_until_marked(&["--keep"], WRITE_WAIT_WRITE);
    for _ in 0..3 {
        kill_daemon_and_await_its_restart(&job, 1);
    }
    let last = job.daemon_pids()[1];
    signal(last, libc::SIGKILL);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(job.daemon_pids()[1], last, "a fourth restart happened");
    fs::write(job.path("mark.go"), "").unwrap();
    let (out, _) = finish(child, Duration::from_secs(120));
    let all = text(&out);
    assert_ne!(out.status.code(), Some(0), "the job's I/O to a dead daemon succeeded: {all}");
    assert!(all.contains("restarted 3 times and is left down"), "{all}");
}

#[test]
fn a_job_that_ignores_the_signal_is_killed_after_the_grace_period_and_still_staged_out() {
    let job = Job::new();
    let script = format!("trap '' INT TERM HUP\n{WRITE_THEN_WAIT}");
    let child = job.start_until_marked(&["--grace", "2"], &script);
    signal(child.id(), libc::SIGTERM);
    let (out, took) = finish(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{}", text(&out));
    assert!(took >= Duration::from_secs(2), "the job was killed before its grace ran out ({took:?})");
    assert!(text(&out).contains("did not end 2s after the signal"), "{}", text(&out));
    assert_eq!(fs::read_to_string(job.path("pfs/result.txt")).unwrap(), "written before the signal\n");
    assert_gone("the job", &job.pids("mark.pids"));
}

#[test]
fn a_second_signal_kills_the_job_at_once_and_skips_the_stage_out_keeping_the_buffer() {
    let job = Job::new();
    let script = format!("trap '' INT TERM HUP\n{WRITE_THEN_WAIT}");
    let child = job.start_until_marked(&["--grace", "60"], &script);
    let daemons = job.daemon_pids();
    signal(child.id(), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    signal(child.id(), libc::SIGINT);
    let (out, took) = finish(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "the first signal sets the status: {}", text(&out));
    assert!(took < Duration::from_secs(30), "the second signal did not hurry the job ({took:?})");
    assert!(text(&out).contains("skipped after a second signal"), "{}", text(&out));
    assert!(!job.path("pfs/result.txt").exists(), "staged out although a second signal asked to skip it");
    assert_gone("the job or a daemon", &[job.pids("mark.pids"), daemons].concat());
    // Nothing lost: the buffer stays, and a later `surge stop --orphans` does not take it for abandoned.
    let [buffer] = &job.job_buffers()[..] else { panic!("one kept job buffer expected") };
    assert!(buffer.join("cluster.toml").exists() || buffer.join("daemon-0").exists());
    let out = job.surge(&["stop", "--orphans"]);
    assert!(text(&out).contains("no abandoned job cluster"), "{}", text(&out));
}

#[test]
fn a_run_killed_outright_leaves_a_cluster_that_the_next_run_stages_out_and_removes() {
    let job = Job::new();
    let child = job.start_until_marked(&[], WRITE_THEN_WAIT);
    let daemons = job.daemon_pids();
    signal(child.id(), libc::SIGKILL);
    // The job, in a group of its own, lives on (and holds the output pipes): end it too.
    for pid in job.pids("mark.pids") {
        signal(pid, libc::SIGKILL);
    }
    let (out, _) = finish(child, Duration::from_secs(10));
    assert_eq!(out.status.code(), None);
    // Nobody wound it down: the daemons run on and the file is only in the buffer.
    assert!(daemons.iter().all(|&p| alive(p)));
    assert!(!job.path("pfs/result.txt").exists());
    fs::remove_file(job.path("mark")).unwrap();

    let (out, _) = finish(job.command(&[], "touch $MARK").spawn().unwrap(), Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("of an abandoned job cluster"), "{}", text(&out));
    assert_eq!(fs::read_to_string(job.path("pfs/result.txt")).unwrap(), "written before the signal\n");
    assert_gone("a daemon of the abandoned cluster", &daemons);
    assert_eq!(job.job_buffers(), Vec::<PathBuf>::new());
}

#[test]
fn stop_orphans_starts_an_abandoned_cluster_whose_daemons_died_too_and_stages_it_out() {
    let job = Job::new();
    let child = job.start_until_marked(&[], WRITE_THEN_WAIT);
    let daemons = job.daemon_pids();
    for pid in [vec![child.id()], job.pids("mark.pids"), daemons.clone()].concat() {
        signal(pid, libc::SIGKILL);
    }
    finish(child, Duration::from_secs(10));
    assert_gone("a daemon", &daemons);

    let out = job.surge(&["stop", "--orphans"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("of an abandoned job cluster"), "{}", text(&out));
    assert_eq!(fs::read_to_string(job.path("pfs/result.txt")).unwrap(), "written before the signal\n");
    assert_eq!(job.job_buffers(), Vec::<PathBuf>::new());
}

#[test]
fn a_killed_run_with_a_buffer_of_its_own_is_found_by_stop_orphans_and_no_longer_once_wound_down() {
    let job = Job::new();
    let buffer = job.path("own-buffer");
    let child = job.start_until_marked(&["--buffer", buffer.to_str().unwrap()], WRITE_THEN_WAIT);
    for pid in [vec![child.id()], job.pids("mark.pids")].concat() {
        signal(pid, libc::SIGKILL);
    }
    finish(child, Duration::from_secs(10));
    assert!(job.job_buffers().is_empty(), "the buffer was given: nothing in the default directory");

    let out = job.surge(&["stop", "--orphans"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("of an abandoned job cluster"), "{}", text(&out));
    assert_eq!(fs::read_to_string(job.path("pfs/result.txt")).unwrap(), "written before the signal\n");
    assert!(!buffer.exists(), "the wound-down buffer stays");
    let again = job.surge(&["stop", "--orphans"]);
    assert!(text(&again).contains("no abandoned job cluster"), "{}", text(&again));
}

#[test]
fn a_run_whose_output_reader_went_away_still_stages_out_and_winds_its_cluster_down() {
    // `surge run ... 2>&1 | head -1` once head has gone: every line surge run
    // writes meets EPIPE.
    let job = Job::new();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut cmd = job.command(&[], "echo kept > $M/result.txt; touch $MARK");
    cmd.stdout(writer.try_clone().unwrap()).stderr(writer);
    let (out, _) = finish(cmd.spawn().unwrap(), Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{:?}", out.status);
    assert_eq!(fs::read_to_string(job.path("pfs/result.txt")).unwrap(), "kept\n");
    assert_eq!(job.job_buffers(), Vec::<PathBuf>::new(), "the job's buffer (and its daemons) stayed");
}

#[test]
fn the_default_buffer_is_named_by_the_uid_whatever_user_says() {
    // Without USER (cron, `env -i`) every user's was /dev/shm/surge-user.
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    for user in [Some("someone-else"), None] {
        let mut cmd = Command::new(surge_bin());
        cmd.args(["start", "--help"]).env_remove("SURGE_BUFFER");
        match user {
            Some(name) => cmd.env("USER", name),
            None => cmd.env_remove("USER"),
        };
        let help = text(&cmd.output().unwrap());
        assert!(help.contains(&format!("surge-{uid}]")), "{help}");
        assert!(!help.contains("surge-someone-else") && !help.contains("surge-user"), "{help}");
    }
}

#[test]
fn stop_purge_removes_the_buffer_directories_of_the_clusters_daemons() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, buffer) = (dir.path().join("cluster.toml"), dir.path().join("buffer"));
    let surge = |args: &[&str]| {
        let out = Command::new(surge_bin()).arg("--cluster").arg(&cluster).args(args).output().unwrap();
        assert!(out.status.success(), "surge {args:?}: {}", text(&out));
    };
    let pfs = dir.path().join("pfs");
    surge(&["start", "--daemons", "2", "--buffer", buffer.to_str().unwrap(), "--pfs", pfs.to_str().unwrap()]);
    let local = dir.path().join("local");
    fs::write(&local, vec![7u8; 100_000]).unwrap();
    surge(&["cp", local.to_str().unwrap(), "/surge/f"]);
    assert!(buffer.join("daemon-0").exists() && buffer.join("daemon-1").exists());
    surge(&["stop", "--purge"]);
    assert!(!buffer.join("daemon-0").exists() && !buffer.join("daemon-1").exists());
}

#[test]
fn the_summary_goes_to_stderr_and_to_a_file_leaving_stdout_to_the_job() {
    let job = Job::new();
    let summary = job.path("summary.txt");
    let out = job.command(&["--summary", summary.to_str().unwrap()], "echo job output").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "job output\n");
    let written = fs::read_to_string(&summary).unwrap();
    assert!(written.starts_with("surge: summary of job") && String::from_utf8_lossy(&out.stderr).contains(&written));
}

#[test]
fn a_profile_file_reused_by_a_second_run_sums_up_only_that_runs_own_processes() {
    let job = Job::new();
    let profile = job.path("reused.jsonl");
    let run = |script: &str| {
        let out = job.command(&["--profile", profile.to_str().unwrap()], script).output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // dd opens its output itself, so the interposer counts its bytes.
    let first = run(
        "dd if=/dev/zero of=$M/first bs=1M count=3 status=none && dd if=/dev/zero of=$M/more bs=1M count=1 status=none",
    );
    assert!(first.contains("written        4.0 MiB"), "{first}");
    let second = run("dd if=/dev/zero of=$M/second bs=1M count=1 status=none");
    assert!(second.contains("written        1.0 MiB"), "the first run's bytes were counted again: {second}");
    let jobs: std::collections::BTreeSet<String> = fs::read_to_string(&profile)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["job_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(jobs.len(), 2, "both runs' processes are in the file: {jobs:?}");
}

#[test]
fn bytes_a_shell_redirection_writes_through_the_fuse_mount_are_in_the_summary() {
    let test = "bytes_a_shell_redirection_writes_through_the_fuse_mount_are_in_the_summary";
    let fuse = surge_fuse::mountpoint::unavailable().map_or(Ok(()), Err);
    let Some(()) = surge_testkit::skip::skip_unless_ready(test, fuse) else { return };
    let job = Job::new();
    // The shell opens the file, so the kernel serves head's writes and cat's reads.
    let out = job.command(&[], "head -c 3145728 /dev/zero > $M/out && cat $M/out > /dev/null").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains("written        3.0 MiB (") && summary.contains("; 3.0 MiB through the FUSE mount)"),
        "{summary}"
    );
    assert!(summary.contains("read           3.0 MiB ("), "{summary}");
}

#[test]
fn directories_the_job_left_empty_are_made_on_the_pfs_with_their_modes() {
    use std::os::unix::fs::PermissionsExt;
    let job = Job::new();
    let script = "mkdir -p $M/out/empty/deeper $M/keep && echo x > $M/keep/f && chmod 700 $M/out/empty";
    let out = job.command(&[], script).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(job.path("pfs/out/empty/deeper").is_dir(), "{}", text(&out));
    assert_eq!(fs::metadata(job.path("pfs/out/empty")).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(fs::read_to_string(job.path("pfs/keep/f")).unwrap(), "x\n");
    assert!(job.job_buffers().is_empty(), "the buffer goes after a complete stage-out");
}

/// A directory the job left empty that cannot be made on the PFS (a file
/// took its name there during the job) fails the run loudly and keeps the
/// buffer; the job's files are staged out all the same.
#[test]
fn a_directory_that_cannot_be_made_on_the_pfs_fails_the_run_and_keeps_the_buffer() {
    let job = Job::new();
    let pfs = job.path("pfs");
    let script = format!(
        "mkdir -p $M/out/empty $M/keep && echo x > $M/keep/f && mkdir -p {p}/out && echo theirs > {p}/out/empty",
        p = pfs.display()
    );
    let out = job.command(&[], &script).output().unwrap();
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("directory(ies) could not be staged out") && all.contains("/out/empty"), "{all}");
    assert_eq!(fs::read_to_string(job.path("pfs/keep/f")).unwrap(), "x\n");
    assert_eq!(fs::read_to_string(job.path("pfs/out/empty")).unwrap(), "theirs\n");
    assert!(!job.job_buffers().is_empty(), "the buffer went although the stage-out was incomplete: {all}");
}

#[test]
fn stage_in_and_stage_out_directives_and_a_manifest_move_the_jobs_data_verified() {
    let job = Job::new();
    let inputs = job.path("inputs");
    fs::create_dir_all(inputs.join("sub")).unwrap();
    fs::write(inputs.join("mesh.dat"), surge_testkit::pattern(1, 3 << 20)).unwrap();
    fs::write(inputs.join("sub/params.txt"), "steps=3\n").unwrap();
    fs::write(job.path("single.dat"), "a single input\n").unwrap();
    let out = job.path("results");
    let manifest = job.path("manifest");
    fs::write(
        &manifest,
        format!(
            "# DataWarp's spelling and ours\n#DW stage_in source={} destination={}/single.dat type=file\n\
             stage_out {}/ckpt {}/ckpt\n",
            job.path("single.dat").display(),
            job.mount(),
            job.mount(),
            out.display()
        ),
    )
    .unwrap();
    let script = r#"
        cmp $M/inputs/mesh.dat $MARK.src/mesh.dat
        mkdir -p $M/ckpt/sub
        cat $M/inputs/sub/params.txt $M/single.dat > $M/ckpt/sub/echo.txt
        head -c 2000000 /dev/urandom > $M/ckpt/state.bin
        cp $M/ckpt/state.bin $MARK.state
        echo scratch > $M/other.txt
        ln -s state.bin $M/ckpt/latest
        setfattr -n user.step -v 3 $M/ckpt/state.bin
        chmod 0700 $M/ckpt/sub
        touch -h -d @978307100 $M/ckpt/latest
        touch -d @978307200 $M/ckpt/state.bin $M/ckpt/sub
    "#;
    fs::create_dir_all(job.path("mark.src")).unwrap();
    fs::copy(inputs.join("mesh.dat"), job.path("mark.src/mesh.dat")).unwrap();
    let stage_in = format!("{}:{}/inputs", inputs.display(), job.mount());
    let manifest_arg = manifest.display().to_string();
    let run = job.command(&["--stage-in", &stage_in, "--manifest", &manifest_arg], script).output().unwrap();
    assert!(run.status.success(), "{}", text(&run));
    assert_eq!(fs::read_to_string(out.join("ckpt/sub/echo.txt")).unwrap(), "steps=3\na single input\n");
    assert_eq!(fs::read(out.join("ckpt/state.bin")).unwrap(), fs::read(job.path("mark.state")).unwrap());
    // With their times and extended attributes, and a private directory stays private.
    use std::os::unix::fs::MetadataExt;
    let meta = |rel: &str| fs::metadata(out.join(rel)).unwrap();
    assert_eq!((meta("ckpt/sub").mode() & 0o7777, meta("ckpt/sub").mtime()), (0o700, 978_307_200));
    assert_eq!(meta("ckpt/state.bin").mtime(), 978_307_200);
    assert_eq!(fs::symlink_metadata(out.join("ckpt/latest")).unwrap().mtime(), 978_307_100, "the link's own time");
    let mut step = [0u8; 8];
    let n = rustix::fs::getxattr(out.join("ckpt/state.bin"), "user.step", &mut step).unwrap();
    assert_eq!(&step[..n], b"3");
    // Files no directive names go to their own PFS path; those it names only where it says.
    assert_eq!(fs::read_to_string(job.path("pfs/other.txt")).unwrap(), "scratch\n");
    assert!(!job.path("pfs/ckpt").exists(), "a directed file was also copied to its own PFS path");
    assert_eq!(job.job_buffers(), Vec::<PathBuf>::new(), "the buffer stayed although every file has a copy");
}

#[test]
fn a_missing_stage_in_source_or_a_bad_directive_stops_the_job_before_anything_starts() {
    let job = Job::new();
    let missing = format!("{}:{}/in", job.path("absent").display(), job.mount());
    let run = job.command(&["--stage-in", &missing], "touch $MARK").output().unwrap();
    assert!(!run.status.success());
    assert!(text(&run).contains("stage-in source") && text(&run).contains("absent"), "{}", text(&run));
    assert!(!text(&run).contains("started a job-scoped cluster"), "{}", text(&run));
    assert!(!job.path("mark").exists(), "the job ran without its inputs");
    assert_eq!(job.job_buffers(), Vec::<PathBuf>::new(), "a cluster was left behind");

    let both_host = format!("{}:{}", job.path("a").display(), job.path("b").display());
    let run = job.command(&["--stage-out", &both_host], "touch $MARK").output().unwrap();
    assert!(!run.status.success() && text(&run).contains("not a Surge path"), "{}", text(&run));
    assert!(!text(&run).contains("started a job-scoped cluster"), "{}", text(&run));
}

#[test]
fn a_mount_prefix_over_a_directory_with_files_is_refused_even_for_the_interposer_alone() {
    let job = Job::new();
    fs::create_dir_all(job.path("mnt")).unwrap();
    fs::write(job.path("mnt/precious.txt"), "mine").unwrap();
    let run = job.command(&["--no-fuse"], "touch $MARK").output().unwrap();
    assert!(!run.status.success() && text(&run).contains("holds files"), "{}", text(&run));
    assert!(!job.path("mark").exists());
    assert_eq!(fs::read_to_string(job.path("mnt/precious.txt")).unwrap(), "mine");
    let forced = job.command(&["--no-fuse", "--force-mount"], "touch $MARK").output().unwrap();
    assert!(forced.status.success(), "{}", text(&forced));
}
