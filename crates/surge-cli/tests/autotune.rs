//! `surge run --autotune` with the real binaries and the real tuner (this
//! checkout's tuner/src): a first run finds no history and is recorded, the
//! second gets a layout from it; a bad history, a missing tuner and a failed
//! job are said and change nothing; a directory outside the mount stops the
//! run before the job.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use surge_testkit::cluster::Cluster;

/// Four writers of one shared file, 16 MiB each at their own offsets.
const WRITERS: &str = "mkdir -p $M/out && rm -f $M/out/shared && : > $M/out/shared && \
    for i in 0 1 2 3; do dd if=/dev/zero of=$M/out/shared bs=1M count=16 seek=$((i*16)) conv=notrunc status=none & done; \
    wait";

fn tuner_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tuner/src")
}

struct Bed {
    cluster: Cluster,
}

impl Bed {
    fn new() -> Bed {
        let bed = Bed { cluster: Cluster::start(4, &[]) };
        fs::create_dir_all(bed.cluster.local("home")).unwrap();
        bed
    }

    fn mount(&self) -> String {
        self.cluster.local("mnt").display().to_string()
    }

    fn db(&self) -> PathBuf {
        self.cluster.local("tune.db")
    }

    /// `surge run --autotune EXTRA -- sh -c SCRIPT` joining the cluster, $M the mount.
    fn run(&self, extra: &[&str], script: &str, env: &[(&str, &str)]) -> (Output, String) {
        self.run_command(extra, &["sh", "-c", script], env)
    }

    fn run_command(&self, extra: &[&str], command: &[&str], env: &[(&str, &str)]) -> (Output, String) {
        let mut cmd = self.cluster.command(&["run", "--quiet", "--no-stage-out", "--mount", &self.mount()]);
        if surge_fuse::mountpoint::unavailable().is_some() {
            cmd.arg("--no-fuse");
        }
        cmd.arg("--autotune").args(extra).arg("--").args(command);
        cmd.env("M", self.mount()).env("HOME", self.cluster.local("home")).env("PYTHONPATH", tuner_src());
        cmd.env_remove("SURGE_TUNE_DB").envs(env.iter().copied());
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out, stderr)
    }

    fn stripe_count(&self, path: &str) -> u32 {
        self.cluster.ok(&["getstripe", "-c", path]).trim().parse().unwrap()
    }

    /// The recorded runs of `app`: (stripe count, shared file).
    fn history(&self, app: &str) -> Vec<(u64, bool)> {
        let out = Command::new("python3")
            .args(["-m", "surge_tune", "--db"])
            .arg(self.db())
            .args(["history", app, "--json"])
            .env("PYTHONPATH", tuner_src())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        runs.as_array()
            .unwrap()
            .iter()
            .map(|r| (r["stripe_count"].as_u64().unwrap(), r["shared_file"].as_bool().unwrap()))
            .collect()
    }
}

#[test]
fn the_first_run_is_recorded_and_the_second_gets_one_stripe_per_writer() {
    let bed = Bed::new();
    bed.cluster.ok(&["mkdir", "/out"]);
    bed.cluster.ok(&["setstripe", "-c", "1", "/out"]);
    let db = bed.db().display().to_string();
    let args = ["--autotune-dir", &format!("{}/out", bed.mount()), "--autotune-app", "writers", "--tune-db", &db];

    let (first, said) = bed.run(&args, WRITERS, &[]);
    assert!(first.status.success(), "{said}");
    assert!(said.contains("surge: autotune: no history yet for writers: layout unchanged"), "{said}");
    assert!(said.contains("autotune       recorded writers write run #1"), "the summary says it: {said}");
    assert_eq!(bed.stripe_count("/out/shared"), 1);
    assert_eq!(bed.history("writers"), [(1, true)]);

    let (second, said) = bed.run(&args, WRITERS, &[]);
    assert!(second.status.success(), "{said}");
    assert!(said.contains("writers write run #2: stripe count"), "{said}");
    assert!(said.contains("one stripe per I/O process") && said.contains("set on /out"), "why, and where: {said}");
    // One stripe per writer the profile saw (every writer, unless one's record was lost), on free daemons.
    let count = bed.stripe_count("/out/shared");
    assert!((2..=4).contains(&count), "stripe count {count}: {said}");
    assert_eq!(bed.stripe_count("/out"), count, "the directory's layout is the one the file got");
    assert_eq!(bed.history("writers"), [(1, true), (count as u64, true)], "the second run is recorded with its layout");
}

#[test]
fn the_application_is_named_after_the_program_and_the_directory_after_its_output_argument() {
    let bed = Bed::new();
    let db = bed.db().display().to_string();
    let out = format!("{}/res/data", bed.mount());
    let script = "mkdir -p $M/res && dd if=/dev/zero of=\"$1\" bs=1M count=4 status=none";
    for _ in 0..2 {
        let (done, said) = bed.run_command(&["--tune-db", &db], &["sh", "-c", script, "sh", &out], &[]);
        assert!(done.status.success(), "{said}");
    }
    // `sh` is the program; /res/data does not exist before the first run and is a file: its parent is tuned.
    assert_eq!(bed.history("sh").len(), 2);
    assert_eq!(bed.stripe_count("/res"), 1, "one writer, file-per-process: one stripe");
}

#[test]
fn a_bad_history_or_a_missing_tuner_is_said_and_the_job_runs_with_its_layout() {
    let bed = Bed::new();
    let bad = bed.cluster.local("bad.db");
    fs::write(&bad, "not a database, but long enough to have a header of its own ............\n".repeat(4)).unwrap();
    let dir = format!("{}/out", bed.mount());
    let script = "mkdir -p $M/out && echo data > $M/out/f";

    let (done, said) = bed.run(&["--autotune-dir", &dir, "--tune-db", bad.to_str().unwrap()], script, &[]);
    assert!(done.status.success(), "{said}");
    assert!(said.contains("surge: autotune: FAILED: the tuner failed:"), "{said}");
    assert!(said.contains("not a usable history database") && said.contains("layout unchanged"), "{said}");
    assert!(said.contains("FAILED: the run was not recorded"), "{said}");
    assert_eq!(bed.cluster.ok(&["cat", "/out/f"]), "data\n", "the job ran");

    let (done, said) = bed.run(&["--autotune-dir", &dir], script, &[("SURGE_PYTHON", "/nonexistent/python3")]);
    assert!(done.status.success(), "{said}");
    assert!(said.contains("cannot run the tuner with /nonexistent/python3"), "{said}");
    assert!(said.contains("pip install -e tuner") && said.contains("layout unchanged"), "{said}");
}

#[test]
fn a_failed_job_is_not_recorded() {
    let bed = Bed::new();
    let db = bed.db().display().to_string();
    let dir = format!("{}/out", bed.mount());
    let (done, said) = bed.run(&["--autotune-dir", &dir, "--tune-db", &db], "exit 3", &[]);
    assert_eq!(done.status.code(), Some(3), "{said}");
    assert!(said.contains("autotune: not recorded: the job failed (exit status 3)"), "{said}");
    assert!(!said.contains("FAILED"), "{said}");
}

#[test]
fn an_output_directory_outside_the_mount_stops_the_run_before_the_job() {
    let bed = Bed::new();
    let mark = bed.cluster.local("mark");
    let script = format!("touch {}", mark.display());
    let (done, said) = bed.run(&["--autotune-dir", "/tmp/elsewhere"], &script, &[]);
    assert_eq!(done.status.code(), Some(1), "{said}");
    assert!(said.contains("--autotune-dir /tmp/elsewhere: not under the mount"), "{said}");
    assert!(!mark.exists(), "the job did not start");
    let (done, said) = bed.run(&[], &script, &[]);
    assert_eq!(done.status.code(), Some(1), "{said}");
    assert!(said.contains("name the job's output directory with --autotune-dir DIR"), "{said}");
    assert!(!mark.exists(), "the job did not start");
}

#[test]
fn the_benchmark_refuses_writes_that_do_not_divide_the_data() {
    let out = Command::new(env!("CARGO_BIN_EXE_surge"))
        .args(["bench", "autotune", "--mib", "32", "--xfer-mib", "3", "--on", "localhost"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--xfer-mib a divisor of --mib"));
}
