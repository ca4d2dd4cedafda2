//! Unmodified programs through the interposer: each scenario runs once on a
//! plain directory and once under `surge run` on /surge; what the programs
//! print and the files they leave (the verified stage-out copies on the
//! PFS) must be identical, byte for byte.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// target/<profile>, where `cargo build --workspace` put the binaries and libraries.
fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    for needed in ["surge", "surged", "libsurge_preload.so", "libsurge_preload_handler.so"] {
        assert!(
            dir.join(needed).exists(),
            "{} is missing: run `cargo build --workspace` (make test does)",
            dir.join(needed).display()
        );
    }
    dir
}

fn workload(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workloads/build").join(name);
    assert!(p.exists(), "{} is missing: run `make -C workloads` (make test does)", p.display());
    p
}

fn preload() -> PathBuf {
    build_dir().join("libsurge_preload.so")
}

/// Every regular file under `root`: relative path to contents.
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(root).unwrap().display().to_string(), fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

struct Scenario {
    dir: tempfile::TempDir,
    name: &'static str,
}

impl Scenario {
    fn new(name: &'static str) -> Scenario {
        Scenario { dir: tempfile::tempdir().unwrap(), name }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `surge run` on a job-scoped cluster in this scenario's directory,
    /// the interposer alone serving /surge (preload-only mode).
    fn surge_run(&self, extra_env: &[(&str, &str)], command: &[&str]) -> Output {
        self.surge_run_in(Mode::PreloadOnly, "", extra_env, command)
    }

    /// `surge run` in `mode`, with the buffer, PFS and profile of `tag`.
    fn surge_run_in(&self, mode: Mode, tag: &str, extra_env: &[(&str, &str)], command: &[&str]) -> Output {
        let mut cmd = Command::new(build_dir().join("surge"));
        cmd.args(["run", "--quiet", "--daemons", "2"])
            .arg("--buffer")
            .arg(self.path(&format!("{tag}buffer")))
            .arg("--pfs")
            .arg(self.path(&format!("{tag}pfs")))
            .arg("--profile")
            .arg(self.path(&format!("{tag}profile.jsonl")))
            .args(mode.run_args(self))
            .arg("--")
            .args(command)
            .env("SURGE_CLUSTER", self.path("no-running-cluster.toml"))
            .env("SURGE_TIMEOUT", "10")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env_remove("SURGE_MOUNT");
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    /// Runs `script` (sh, with $D the data directory and $O a host directory
    /// for its output) on a plain directory and under Surge in every mode
    /// this machine has, and compares.
    fn compare(&self, script: &str) {
        self.compare_in(&Mode::ALL, script)
    }

    /// As `compare`, in the given modes; the FUSE modes are skipped, with
    /// the reason, where FUSE is unavailable.
    fn compare_in(&self, modes: &[Mode], script: &str) {
        let plain_data = self.path("plain");
        let plain_out = self.path("out-plain");
        for d in [&plain_data, &plain_out] {
            fs::create_dir_all(d).unwrap();
        }
        let plain = Command::new("sh")
            .args(["-ec", script])
            .env("D", &plain_data)
            .env("O", &plain_out)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .output()
            .unwrap();
        assert!(plain.status.success(), "the scenario fails even on a plain directory: {}", text(&plain));
        for &mode in modes {
            if let (true, Some(why)) = (mode.needs_fuse(), surge_fuse::mountpoint::unavailable()) {
                let test = format!("{} in mode {mode:?}", self.name);
                surge_testkit::skip_unless_ready::<(), _>(&test, Err(format!("FUSE is unavailable ({why})")));
                continue;
            }
            self.compare_mode(mode, script, &plain_data, &plain_out);
        }
    }

    fn compare_mode(&self, mode: Mode, script: &str, plain_data: &Path, plain_out: &Path) {
        let tag = format!("{mode:?}-");
        let surge_out = self.path(&format!("{tag}out"));
        fs::create_dir_all(&surge_out).unwrap();
        let surge_data = format!("{}/{}", mode.mount(self), self.name);
        let surge = self.surge_run_in(
            mode,
            &tag,
            &[("D", &surge_data), ("O", surge_out.to_str().unwrap())],
            &["sh", "-ec", script],
        );
        assert!(surge.status.success(), "under surge run ({mode:?}): {}", text(&surge));
        let normalize = |dir: &Path, data: &str| -> BTreeMap<String, String> {
            tree(dir).into_iter().map(|(k, v)| (k, String::from_utf8_lossy(&v).replace(data, "$D"))).collect()
        };
        let (want, got) = (normalize(plain_out, plain_data.to_str().unwrap()), normalize(&surge_out, &surge_data));
        assert_eq!(
            want.keys().collect::<Vec<_>>(),
            got.keys().collect::<Vec<_>>(),
            "different output files ({mode:?})"
        );
        for (name, expected) in &want {
            assert!(
                got[name] == *expected,
                "output {name} differs ({mode:?}):\n--- plain\n{expected:.3000}\n--- surge\n{:.3000}",
                got[name]
            );
        }
        let staged = tree(&self.path(&format!("{tag}pfs")).join(self.name));
        let expected = tree(plain_data);
        assert_eq!(
            staged.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "different files ({mode:?})"
        );
        for (name, bytes) in &expected {
            assert!(staged[name] == *bytes, "{name} differs after stage-out ({mode:?})");
        }
    }
}

/// How a job under `surge run` reaches Surge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No kernel mount: the interposer serves /surge (`--no-fuse`).
    PreloadOnly,
    /// The FUSE mount alone (`--no-preload`).
    Fuse,
    /// The FUSE mount with the interposer as its fast path (the default).
    FuseWithPreload,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::PreloadOnly, Mode::Fuse, Mode::FuseWithPreload];
    const FUSE: [Mode; 2] = [Mode::Fuse, Mode::FuseWithPreload];

    fn needs_fuse(self) -> bool {
        self != Mode::PreloadOnly
    }

    /// Where the job sees Surge: /surge for the interposer alone; a mount
    /// point of the scenario's own for FUSE (tests run in parallel).
    fn mount(self, s: &Scenario) -> String {
        match self {
            Mode::PreloadOnly => "/surge".into(),
            _ => s.path(&format!("mnt-{self:?}")).display().to_string(),
        }
    }

    fn run_args(self, s: &Scenario) -> Vec<String> {
        match self {
            Mode::PreloadOnly => vec!["--no-fuse".into()],
            Mode::Fuse => vec!["--no-preload".into(), "--mount".into(), self.mount(s)],
            Mode::FuseWithPreload => vec!["--mount".into(), self.mount(s)],
        }
    }
}

#[test]
fn coreutils_cp_cat_ls_mv_rm_mkdir_dd_tar_find() {
    Scenario::new("coreutils").compare(
        r#"
        mkdir -p $D/a/b/c $D/x
        cp /etc/services $D/a/services
        cat $D/a/services | md5sum > $O/md5
        seq 1 200000 | head -c 1310720 > $O/random
        dd if=$O/random of=$D/a/b/random bs=64k status=none
        dd if=$D/a/b/random of=$D/a/b/middle bs=1000 skip=7 count=300 status=none
        dd if=/dev/zero of=$D/a/b/sparse bs=1 count=1 seek=3000000 status=none
        printf 'first\n' > $D/a/b/c/note
        printf 'second\n' >> $D/a/b/c/note
        mv $D/a/b/middle $D/a/middle
        cp -r $D/a/b $D/a/b2
        rm $D/a/b2/random
        rm -r $D/a/b2/c
        touch -d @1700000000 $D/a/b/c/note $D/a/middle $D/a/services
        ls -l --time-style=+%s $D/a/b/c $D/a/middle $D/a/services > $O/ls
        ls $D/a $D/a/b > $O/ls-short
        tar -C $D -cf $O/a.tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner a
        tar -C $D/x -xf $O/a.tar
        tar -C $D -cf $D/copy.tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner a
        cmp $D/copy.tar $O/a.tar
        find $D/a $D/x | sort > $O/find
        find $D -name note -type f | sort > $O/find-name
        cat $D/x/a/b/c/note > $O/note
        stat -c '%s %F %a' $D/a/b/sparse $D/a $D/x/a/middle > $O/stat
        rm -rf $D/x/a/b2
        "#,
    );
}

#[test]
fn python_open_read_write_listdir_stat() {
    Scenario::new("python").compare(
        r#"
        python3 - <<'PY'
import os, shutil, hashlib
d, o = os.environ["D"], os.environ["O"]
os.makedirs(f"{d}/py/sub", exist_ok=True)
with open(f"{d}/py/text.txt", "w") as f:
    for i in range(2000):
        print(f"line {i}", file=f)
with open(f"{d}/py/blob.bin", "wb") as f:
    f.write(bytes(range(256)) * 4096)
    f.seek(100)
    f.write(b"overwritten")
with open(f"{d}/py/blob.bin", "r+b") as f:
    f.seek(0, os.SEEK_END)
    end = f.tell()
    f.write(b"tail")
with open(f"{d}/py/text.txt") as f:
    lines = f.readlines()
shutil.copyfile(f"{d}/py/blob.bin", f"{d}/py/sub/copy.bin")
os.rename(f"{d}/py/sub/copy.bin", f"{d}/py/sub/moved.bin")
with open(f"{d}/py/gone", "w") as f:
    f.write("x")
os.remove(f"{d}/py/gone")
st = os.stat(f"{d}/py/blob.bin")
with open(f"{o}/report", "w") as r:
    print(len(lines), lines[1234].strip(), end, file=r)
    print(sorted(os.listdir(f"{d}/py")), sorted(os.listdir(f"{d}/py/sub")), file=r)
    print(st.st_size, oct(st.st_mode), os.path.isdir(f"{d}/py/sub"), os.path.exists(f"{d}/py/gone"), file=r)
    print(hashlib.sha256(open(f"{d}/py/sub/moved.bin", "rb").read()).hexdigest(), file=r)
    print(sorted(e.name for e in os.scandir(f"{d}/py")), file=r)
PY
        "#,
    );
}

#[test]
fn fio_psync_and_posixaio_file_per_job_and_shared_file() {
    // verify=pattern with the offset in it: deterministic data that fio checks itself.
    // fio applies --directory only to a --filename given after it.
    Scenario::new("fio").compare(
        r#"
        common="--directory=$D --size=4m --bs=64k --verify=pattern --verify_pattern=%o --do_verify=1 --verify_state_save=0 --output=/dev/null"
        mkdir -p $D
        fio --name=psync_per_job --ioengine=psync --rw=write --numjobs=3 $common
        fio --name=aio_per_job --ioengine=posixaio --iodepth=4 --rw=write --numjobs=2 $common
        fio --name=shared $common --filename=shared.dat --ioengine=psync --rw=write --numjobs=2 --offset_increment=4m
        fio --name=readback --directory=$D --filename=shared.dat --ioengine=posixaio --rw=read --size=8m --bs=256k --output=/dev/null
        ls $D > $O/files
        "#,
    );
}

#[test]
fn mpi_io_on_ompio_and_romio_with_four_ranks() {
    let prog = workload("mpiio_shared");
    Scenario::new("mpiio").compare(&format!(
        r#"
        mkdir -p $D
        mpirun --oversubscribe -np 4 {p} $D/ompio.dat > $O/ompio
        mpirun --oversubscribe -np 4 --mca io romio321 {p} $D/romio.dat > $O/romio
        sed -i "s|$D|DIR|" $O/ompio $O/romio
        "#,
        p = prog.display()
    ));
}

#[test]
fn parallel_hdf5_collective_write_and_read() {
    let prog = workload("h5_parallel");
    Scenario::new("hdf5").compare(&format!(
        r#"
        mkdir -p $D
        mpirun --oversubscribe -np 4 {p} $D/data.h5 | sed -e "s|$D|DIR|" -e "s/seconds=[0-9.]*//" > $O/h5
        "#,
        p = prog.display()
    ));
}

#[test]
fn fork_and_exec_with_surge_files_open() {
    let prog = workload("fork_exec");
    Scenario::new("forkexec").compare(&format!(
        r#"
        mkdir -p $D
        {p} $D/fx | sed "s|$D|DIR|" > $O/out
        "#,
        p = prog.display()
    ));
}

#[test]
fn the_job_profile_counts_what_the_program_did() {
    let s = Scenario::new("profile");
    let out = s.surge_run(
        &[],
        &["sh", "-ec", "dd if=/dev/zero of=/surge/p bs=1M count=8 status=none; cat /surge/p > /dev/null"],
    );
    assert!(out.status.success(), "{}", text(&out));
    // The summary is on stderr: stdout is the job's.
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains("written        8.0 MiB") && summary.contains("staged out     1 file(s), 8.0 MiB"),
        "{summary}"
    );
    let profile = fs::read_to_string(s.path("profile.jsonl")).unwrap();
    let records: Vec<serde_json::Value> = profile.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len(), 2, "one record per process: {profile}");
    let file = |r: &serde_json::Value| {
        r["files"].as_array().unwrap().iter().find(|f| f["path"] == "/surge/p").cloned().unwrap()
    };
    let dd = file(&records[0]);
    assert_eq!(records[0]["schema"], "surge-profile/1");
    assert_eq!(dd["counters"]["POSIX_WRITES"], 8);
    assert_eq!(dd["counters"]["POSIX_BYTES_WRITTEN"], 8 << 20);
    assert_eq!(dd["counters"]["POSIX_SIZE_WRITE_100K_1M"], 8);
    assert_eq!(dd["counters"]["POSIX_CONSEC_WRITES"], 7);
    let cat = file(&records[1]);
    assert_eq!(cat["counters"]["POSIX_BYTES_READ"], 8 << 20);
    assert!(
        cat["fcounters"]["POSIX_F_READ_START_TIMESTAMP"].as_f64().unwrap()
            >= dd["fcounters"]["POSIX_F_WRITE_END_TIMESTAMP"].as_f64().unwrap()
    );
}

#[test]
fn surge_run_passes_on_the_exit_status_and_works_under_mpirun() {
    let s = Scenario::new("status");
    let out = s.surge_run(&[], &["sh", "-c", "echo data > /surge/f; exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    assert_eq!(fs::read_to_string(s.path("pfs/f")).unwrap(), "data\n", "staged out even so");
    let ckpt = workload("ckpt_restart");
    let ckpt = ckpt.to_str().unwrap();
    let args = "--dir /surge/ckpt --mb-per-rank 2 --steps 2 --xfer 256K";
    let out = s.surge_run(&[], &["sh", "-ec", &format!("mpirun --oversubscribe -np 3 {ckpt} {args} --phase checkpoint; mpirun --oversubscribe -np 3 {ckpt} {args} --phase restart")]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("mismatches=0 errors=0 OK"));
    // The staged-out copy restarts without Surge.
    let pfs_dir = s.path("pfs/ckpt");
    let restart = Command::new("mpirun")
        .args([
            "--oversubscribe",
            "-np",
            "3",
            ckpt,
            "--dir",
            pfs_dir.to_str().unwrap(),
            "--mb-per-rank",
            "2",
            "--steps",
            "2",
            "--xfer",
            "256K",
            "--phase",
            "restart",
        ])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    assert!(restart.status.success(), "{}", text(&restart));
    assert!(!s.path("buffer").exists(), "the job's buffer is removed after a complete stage-out");
}

#[test]
fn no_reachable_cluster_fails_fast_and_names_the_mount_and_cluster_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.toml");
    let started = Instant::now();
    let out = Command::new("cat")
        .arg("/surge/anything")
        .env("LD_PRELOAD", preload())
        .env("SURGE_CLUSTER", &missing)
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!out.status.success());
    let err = text(&out);
    assert!(err.contains("SURGE_MOUNT=/surge") && err.contains(missing.to_str().unwrap()), "{err}");
    assert!(err.contains("Transport endpoint is not connected"), "ENOTCONN: {err}");
    // Outside the mount, the same process works as ever.
    let host = Command::new("cat")
        .arg("/etc/hostname")
        .env("LD_PRELOAD", preload())
        .env("SURGE_CLUSTER", &missing)
        .output()
        .unwrap();
    assert!(host.status.success(), "{}", text(&host));
}

#[test]
fn mmap_of_a_surge_file_is_refused_with_a_message() {
    let s = Scenario::new("mmap");
    let out = s.surge_run(
        &[],
        &[
            "python3",
            "-c",
            r#"
import mmap, os, errno
with open("/surge/m", "wb") as f:
    f.write(b"x" * 8192)
with open("/surge/m", "r+b") as f:
    try:
        mmap.mmap(f.fileno(), 0)
        raise SystemExit("mmap succeeded")
    except OSError as e:
        assert e.errno == errno.ENODEV, e
        print("refused", errno.errorcode[e.errno])
"#,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let all = text(&out);
    assert!(all.contains("refused ENODEV"), "{all}");
    assert!(all.contains("mmap on the Surge file /m is not supported"), "{all}");
    assert_eq!(fs::read(s.path("pfs/m")).unwrap(), vec![b'x'; 8192], "the data is intact");
}

/// Writes /surge/whole and closes it, then is killed while /surge/partial is open.
const CRASHING_WRITER: &str = r#"
import os, signal
with open("/surge/whole", "wb") as f:
    f.write(b"a" * 100000)
f = open("/surge/partial", "wb", buffering=0)
f.write(b"b" * 300000)
os.kill(os.getpid(), signal.SIGKILL)
"#;

#[test]
fn a_crash_mid_write_stages_what_was_written_and_names_the_file() {
    let s = Scenario::new("crash");
    let out = s.surge_run(&[], &["python3", "-c", CRASHING_WRITER]);
    assert_eq!(out.status.code(), Some(128 + 9), "{}", text(&out));
    let all = text(&out);
    assert!(all.contains("may be incomplete") && all.contains("/surge/partial"), "{all}");
    assert_eq!(fs::read(s.path("pfs/partial")).unwrap(), vec![b'b'; 300000], "acknowledged bytes are staged out");
    assert_eq!(fs::read(s.path("pfs/whole")).unwrap().len(), 100000);
}

/// Joining a running cluster, `surge run` stages only the files the job
/// wrote; those of a writer that crashed (no profile record) are among
/// them, staged as they are and flagged as suspect in the summary.
#[test]
fn on_a_running_cluster_a_crashed_writers_files_are_staged_and_flagged_suspect() {
    struct Running(PathBuf);
    impl Drop for Running {
        fn drop(&mut self) {
            let _ = Command::new(build_dir().join("surge")).arg("--cluster").arg(&self.0).arg("stop").output();
        }
    }
    let s = Scenario::new("crash-shared");
    let running = Running(s.path("running/cluster.toml"));
    let start = Command::new(build_dir().join("surge"))
        .arg("--cluster")
        .arg(&running.0)
        .args(["start", "--daemons", "2", "--buffer"])
        .arg(s.path("running/buffer"))
        .arg("--pfs")
        .arg(s.path("pfs"))
        .output()
        .unwrap();
    assert!(start.status.success(), "{}", text(&start));
    let out = s.surge_run(&[("SURGE_CLUSTER", running.0.to_str().unwrap())], &["python3", "-c", CRASHING_WRITER]);
    assert_eq!(out.status.code(), Some(128 + 9), "{}", text(&out));
    let all = text(&out);
    assert!(all.contains("joining the running cluster"), "{all}");
    assert!(all.contains("suspect        2 file(s)") && all.contains("/surge/partial"), "{all}");
    assert!(all.contains("staged out     2 file(s)"), "{all}");
    assert_eq!(fs::read(s.path("pfs/partial")).unwrap(), vec![b'b'; 300000], "acknowledged bytes are staged out");
    assert_eq!(fs::read(s.path("pfs/whole")).unwrap(), vec![b'a'; 100000]);
}

#[test]
fn calls_surge_cannot_serve_fail_with_a_defined_errno() {
    let s = Scenario::new("refusals");
    let out = s.surge_run(
        &[],
        &[
            "python3",
            "-c",
            r#"
import os, errno
os.mkdir("/surge/d")
open("/surge/d/f", "w").close()
def code(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print("link", code(lambda: os.link("/surge/d/f", "/surge/d/g")))
print("symlink", code(lambda: os.symlink("/surge/d/f", "/surge/d/s")))
print("cross-rename", code(lambda: os.rename("/surge/d/f", "/tmp/surge-cross")))
print("readlink", code(lambda: os.readlink("/surge/d/f")))
print("rmdir-nonempty", code(lambda: os.rmdir("/surge/d")))
print("open-missing", code(lambda: open("/surge/nope")))
print("write-rdonly", code(lambda: os.write(os.open("/surge/d/f", os.O_RDONLY), b"x")))
"#,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let all = text(&out);
    for expected in [
        "link EPERM",
        "symlink EPERM",
        "cross-rename EXDEV",
        "readlink EINVAL",
        "rmdir-nonempty ENOTEMPTY",
        "open-missing ENOENT",
        "write-rdonly EBADF",
    ] {
        assert!(all.contains(expected), "{expected}: {all}");
    }
}

#[test]
fn surge_run_refuses_a_bad_mount_or_a_missing_interposer_before_starting_anything() {
    let s = Scenario::new("badrun");
    let run = |env: &[(&str, &str)], extra: &[&str]| {
        let mut cmd = Command::new(build_dir().join("surge"));
        cmd.args(["run", "--buffer"]).arg(s.path("buffer")).arg("--pfs").arg(s.path("pfs")).args(extra);
        cmd.args(["--", "true"]).env("SURGE_CLUSTER", s.path("none.toml")).env_remove("SURGE_MOUNT");
        cmd.envs(env.iter().copied());
        cmd.output().unwrap()
    };
    let out = run(&[], &["--mount", "surge"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("must be an absolute path other than /"), "{}", text(&out));
    let missing = s.path("nowhere/libsurge_preload.so");
    let out = run(&[("SURGE_PRELOAD", missing.to_str().unwrap())], &[]);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(msg.contains(missing.to_str().unwrap()) && msg.contains("SURGE_PRELOAD"), "{msg}");
    assert!(!s.path("buffer").exists(), "no cluster was started");
}

#[test]
fn an_invalid_mount_prefix_turns_surge_off_with_a_message_and_the_program_runs() {
    let out = Command::new("cat")
        .arg("/etc/hostname")
        .env("LD_PRELOAD", preload())
        .env("SURGE_MOUNT", "surge")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("SURGE_MOUNT=surge must be an absolute path other than /; Surge is off"),
        "{}",
        text(&out)
    );
}

/// The MPI workloads the other tests run refuse bad command lines with the
/// reason and their usage, and exit 2 without touching any file.
#[test]
fn the_mpi_workloads_refuse_bad_arguments_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out");
    let file = file.to_str().unwrap();
    let cases: [(&str, Vec<&str>, &str); 6] = [
        ("mpiio_shared", vec!["--blocks", "0", file], "invalid value '0' for --blocks"),
        ("mpiio_shared", vec!["--block-size", "9X", file], "invalid value '9X' for --block-size"),
        ("mpiio_shared", vec![file, "extra"], "too many arguments"),
        ("mpiio_shared", vec!["--blocks", "65536", "--block-size", "64K", file], "must be < 2 GiB per rank"),
        ("h5_parallel", vec!["--cols", "512"], "missing FILE argument"),
        ("h5_parallel", vec!["--rows-per-rank", "99999999", file], "invalid value '99999999' for --rows-per-rank"),
    ];
    for (program, args, says) in cases {
        // A singleton MPI process: one rank, no launcher needed.
        let out = Command::new(workload(program)).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{program} {args:?}: {err}");
        assert!(err.contains(says), "{program} {args:?}: {err}");
        assert!(!Path::new(file).exists(), "{program} {args:?} created its file");
    }
    let out = Command::new(workload("h5_parallel")).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).contains("usage: mpirun -np P h5_parallel FILE"), "{}", text(&out));
}

// ---- Programs that only a kernel-visible mount serves (FUSE modes) ----

#[test]
fn shell_redirections_here_docs_and_text_tools_in_bash_and_dash() {
    Scenario::new("redirect").compare_in(
        &Mode::FUSE,
        r#"
        mkdir -p $D
        for sh in bash dash; do
            $sh -c "
                seq 1 1000 > $D/\$0.seq
                echo more >> $D/\$0.seq
                ls /nonexistent-surge 2> $D/\$0.err || true
                exec 3> $D/\$0.fd3
                echo one >&3
                echo two >&3
                exec 3>&-
                cat <<END > $D/\$0.here
here document
END
                seq 5 | tee $D/\$0.tee | sort -r > $D/\$0.sorted
                printf '%s\n' a b c > $D/\$0.printf
                awk '{ s += \$1 } END { print s }' $D/\$0.seq > $D/\$0.awk
                head -c 100 $D/\$0.seq > $D/\$0.head
                sort -o $D/\$0.sorto -n -r $D/\$0.seq
            " $sh
        done
        md5sum < $D/bash.seq > $O/md5-stdin
        cat $D/dash.here $D/bash.awk > $O/cat
        "#,
    );
}

#[test]
fn cd_into_the_mount_then_relative_paths_in_exec_d_programs() {
    Scenario::new("cwd").compare_in(
        &Mode::FUSE,
        r#"
        mkdir -p $D/work/sub
        cd $D/work
        touch empty
        echo relative > rel.txt
        sh -c 'cat rel.txt > copy.txt; cd sub && echo deeper > deep.txt'
        python3 -c "open('py.txt', 'w').write('python in cwd')"
        ls -R > $O/ls
        "#,
    );
}

#[test]
fn python_subprocess_popen_and_multiprocessing_keep_open_files() {
    Scenario::new("pyproc").compare_in(
        &Mode::FUSE,
        r#"
        mkdir -p $D
        python3 -c '
import multiprocessing, os, subprocess, sys
d = sys.argv[1]
def work(i):
    with open(f"{d}/part-{i}", "w") as p:
        p.write(str(i) * 1000)
    return i
if __name__ == "__main__":
    f = open(f"{d}/around.txt", "w")
    f.write("a" * 100); f.flush()
    subprocess.run(["true"], check=True)
    os.popen("echo popen").read()
    f.write("b" * 100); f.close()
    with open(f"{d}/child.txt", "w") as out:
        subprocess.run(["seq", "1", "500"], stdout=out, check=True)
    with multiprocessing.Pool(3) as pool:
        print(sum(pool.map(work, range(6))))
' $D > $O/sum
        "#,
    );
}

#[test]
fn mkstemp_users_rsync_both_ways_and_tar() {
    Scenario::new("tools").compare_in(
        &Mode::FUSE,
        r#"
        mkdir -p $D/tmp $D/tree
        seq 1 100000 | sort -S 64K -T $D/tmp -r > $D/sorted
        ls $D/tmp | wc -l > $O/tmp-left
        t=$(mktemp -p $D/tmp) && echo temp > $t && rm $t
        python3 -c "import os, sys, tempfile; fd, p = tempfile.mkstemp(dir=sys.argv[1]); os.write(fd, b'x'); os.close(fd); os.rename(p, sys.argv[1] + '/mkstemp.txt')" $D
        src=$(mktemp -d)
        mkdir -p $src/a/b && seq 1 3000 > $src/a/b/n && echo top > $src/t
        rsync -a $src/ $D/tree/
        back=$(mktemp -d)
        rsync -a $D/tree/ $back/
        diff -r $src $back > $O/rsync-diff
        tar -C $D --mtime=@0 --sort=name -cf $D/tree.tar tree
        mkdir -p $D/untar && tar -C $D/untar -xf $D/tree.tar
        diff -r $D/tree $D/untar/tree > $O/tar-diff
        rm -rf $src $back
        "#,
    );
}

#[test]
fn mmap_writers_and_readers_sqlite_wal_and_git() {
    Scenario::new("mapped").compare_in(
        &Mode::FUSE,
        r#"
        mkdir -p $D
        python3 -c '
import mmap, os, sqlite3, sys
d = sys.argv[1]
fd = os.open(f"{d}/shared.bin", os.O_CREAT | os.O_RDWR, 0o644)
os.ftruncate(fd, 1 << 20)
m = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED)
for i in range(0, 1 << 20, 4096):
    m[i:i + 8] = i.to_bytes(8, "little")
m.flush(); m.close(); os.close(fd)
db = sqlite3.connect(f"{d}/db.sqlite")
print(db.execute("pragma journal_mode=wal").fetchone()[0])
db.execute("create table t(x integer)")
db.executemany("insert into t values(?)", [(i,) for i in range(5000)])
db.commit()
db.execute("pragma wal_checkpoint(truncate)")
db.close()
' $D > $O/wal
        python3 -c "import sys; b = open(sys.argv[1] + '/shared.bin', 'rb').read(); print(all(int.from_bytes(b[i:i+8], 'little') == i for i in range(0, len(b), 4096)))" $D > $O/mmap-check
        python3 -c "import sqlite3, sys; print(sqlite3.connect(sys.argv[1] + '/db.sqlite').execute('select count(*), sum(x) from t').fetchone())" $D > $O/sqlite
        rm -f $D/db.sqlite-wal $D/db.sqlite-shm
        export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
        git init -q $D/repo
        (cd $D/repo && seq 1 100 > f && git add f && git -c user.email=t@t -c user.name=t commit -qm one && git log --format=%H > $O/git-log)
        git clone -q $D/repo $D/clone
        (cd $D/clone && git fsck && git log --format=%H > $O/clone-log && md5sum f > $O/clone-md5)
        rm -rf $D/repo/.git $D/clone/.git
        "#,
    );
}

#[test]
fn sizes_seen_by_stat_seek_end_and_other_processes_while_and_after_writing() {
    // Fast-path writes bypass the kernel, which bounds stat, SEEK_END and
    // copy_file_range by the size it caches.
    Scenario::new("sizes").compare_in(
        &Mode::FUSE,
        r#"
        mkdir -p $D
        python3 -c '
import os, subprocess, sys
p = sys.argv[1] + "/grown"
fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
for i in range(40):
    os.write(fd, b"%05d" % i * 13107)
    print(i, os.fstat(fd).st_size, os.lseek(fd, 0, os.SEEK_END), os.stat(p).st_size)
os.close(fd)
print(subprocess.run(["stat", "-c", "%s", p], capture_output=True, text=True).stdout.strip())
os.stat(p)
fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
os.write(fd, b"short")
print(os.lseek(fd, 0, os.SEEK_END), os.fstat(fd).st_size)
os.close(fd)
' $D > $O/sizes
        cp $D/grown $D/copy && wc -c < $D/copy > $O/copy-size
        "#,
    );
}

#[test]
fn a_file_removed_while_another_process_has_it_open_stays_readable_until_closed() {
    Scenario::new("unlinked").compare_in(
        &Mode::FUSE,
        r#"
        mkdir -p $D
        seq 1 20000 > $D/f
        exec 3< $D/f
        rm $D/f
        ls $D > $O/listing
        md5sum <&3 > $O/read-after-rm
        exec 3<&-
        python3 -c '
import os, subprocess, sys
p = sys.argv[1] + "/scratch"
f = open(p, "w+b")
f.write(b"kept" * 100000)
f.flush()
subprocess.run(["rm", p], check=True)
f.write(b"more")
f.seek(0)
print(len(f.read()), os.path.exists(p))
' $D > $O/python
        echo kept > $D/kept
        "#,
    );
}

#[test]
fn a_statically_linked_program_and_mpirun_x_and_wdir() {
    let s = Scenario::new("static");
    let src = s.path("static.c");
    let program = "#include <fcntl.h>\n#include <unistd.h>\nint main(int c, char **v) {\n  int fd = open(v[1], O_CREAT | O_WRONLY | O_TRUNC, 0644);\n  return fd < 0 || write(fd, \"static\\n\", 7) != 7 || close(fd);\n}\n";
    fs::write(&src, program).unwrap();
    let exe = s.path("static-writer");
    let cc = Command::new("cc").arg("-static").arg("-o").arg(&exe).arg(&src).output().unwrap();
    assert!(cc.status.success(), "cc -static (glibc's libc.a comes with build-essential): {}", text(&cc));
    s.compare_in(
        &Mode::FUSE,
        &format!(
            r#"
        mkdir -p $D/w
        {} $D/static.txt
        mpirun --oversubscribe -np 2 -x SURGE_TEST_VALUE=xvalue -wdir $D/w sh -c 'echo $SURGE_TEST_VALUE > rank-$OMPI_COMM_WORLD_RANK'
        "#,
            exe.display()
        ),
    );
}

/// Preload-only mode: after `cd` into /surge, the programs a shell or
/// Python starts resolve relative paths in Surge too (the working
/// directory passes through exec as SURGE_CWD). Nothing lands in the
/// host directory the job started in ($O/host), which the comparison
/// would show as an extra output file.
#[test]
fn in_preload_only_mode_cd_then_relative_paths_in_exec_d_programs_stay_in_surge() {
    Scenario::new("cwd-exec").compare_in(
        &[Mode::PreloadOnly],
        r#"
        mkdir -p $O/host && cd $O/host
        mkdir -p $D/work/sub
        cd $D/work
        touch empty
        printf 'builtin\n' > by-dash-builtin
        dd if=/etc/services of=services bs=4k status=none
        cp services copy
        bash -c 'cd sub && touch by-bash && cp ../services bash-copy && mkdir made && touch made/deeper'
        dash -c 'cd sub && touch by-dash && mv by-dash moved-by-dash'
        python3 -c "
import os, subprocess
open('py.txt', 'w').write('python in cwd')
os.system('touch by-system')
subprocess.run(['touch', 'by-subprocess'], check=True)
subprocess.run(['touch', 'in-sub'], cwd='sub', check=True)
subprocess.run(['sh', '-c', 'pwd; touch by-sh-in-sub'], cwd='sub', check=True)
print(os.getcwd())
" > $O/python
        pwd > $O/pwd
        ls -R > $O/ls
        cat sub/../copy | md5sum > $O/md5
        "#,
    );
}

/// Open MPI's mpirun changes into `-wdir` in the child it forks, then
/// execs the rank: in preload-only mode the ranks' relative paths land in
/// Surge. Between fork and exec Open MPI closes every descriptor, the
/// interposer's connections to the daemons too. A release build connects
/// again; a debug build aborts there (Rust's I/O-safety check on the
/// descriptor closed behind its back), so in a debug build the test checks
/// that the job fails loudly and that nothing reaches the host.
#[test]
fn in_preload_only_mode_mpirun_wdir_ranks_write_relative_paths_in_surge() {
    let s = Scenario::new("mpirun-wdir-preload");
    let script = r#"
        mkdir -p $O/host && cd $O/host
        mkdir -p $D/w
        mpirun --oversubscribe -np 2 -x SURGE_TEST_VALUE=xvalue -wdir $D/w sh -c 'touch rank-$OMPI_COMM_WORLD_RANK-$SURGE_TEST_VALUE; pwd' > $O/mpirun
        ls $D/w > $O/ls
        "#;
    if !cfg!(debug_assertions) {
        s.compare_in(&[Mode::PreloadOnly], script);
        return;
    }
    let host_out = s.path("out");
    fs::create_dir_all(&host_out).unwrap();
    let out = s.surge_run(&[("D", "/surge/mpirun-wdir"), ("O", host_out.to_str().unwrap())], &["sh", "-ec", script]);
    assert!(!out.status.success(), "a debug interposer aborts in Open MPI's child: {}", text(&out));
    assert_eq!(fs::read_dir(s.path("out/host")).unwrap().count(), 0, "nothing may land on the host: {}", text(&out));
}

/// MPICH's launcher changes into `-wdir` in its proxy and then execs the
/// rank: in preload-only mode the ranks' relative paths land in Surge.
#[test]
fn in_preload_only_mode_mpiexec_mpich_wdir_ranks_write_relative_paths_in_surge() {
    let have_mpich = Command::new("mpiexec.mpich").arg("--version").output().is_ok_and(|o| o.status.success());
    let test = "in_preload_only_mode_mpiexec_mpich_wdir_ranks_write_relative_paths_in_surge";
    if surge_testkit::skip_unless_ready(test, have_mpich.then_some(()).ok_or("mpiexec.mpich is not installed"))
        .is_none()
    {
        return;
    }
    Scenario::new("mpich-wdir-preload").compare_in(
        &[Mode::PreloadOnly],
        r#"
        mkdir -p $O/host && cd $O/host
        mkdir -p $D/w
        mpiexec.mpich -np 2 -genv SURGE_TEST_VALUE gvalue -wdir $D/w sh -c 'touch rank-$PMI_RANK-$SURGE_TEST_VALUE; pwd' | sort > $O/mpiexec
        ls $D/w > $O/ls
        "#,
    );
}

/// Where the interposer cannot carry the working directory (a program
/// without it, a cleared environment), relative paths fail with ENOENT
/// instead of reaching the host: the kernel's working directory is a
/// removed directory. A program with the interposer passes the directory
/// on even when it drops SURGE_CWD from its child's environment.
#[test]
fn in_preload_only_mode_a_program_the_interposer_cannot_follow_into_surge_fails_instead_of_writing_to_the_host() {
    let s = Scenario::new("cwd-guard");
    let host = s.path("host");
    fs::create_dir_all(&host).unwrap();
    let out = s.surge_run(
        &[("HOST", host.to_str().unwrap())],
        &[
            "sh",
            "-c",
            r#"cd "$HOST"; mkdir /surge/w; cd /surge/w
            env -u LD_PRELOAD touch without-interposer; echo without-interposer=$?
            env -u SURGE_CWD touch without-cwd; echo without-cwd=$?
            env -i /bin/sh -c 'echo x > cleared-env'; echo cleared-env=$?
            touch with-interposer; echo with-interposer=$?"#,
        ],
    );
    let all = text(&out);
    for program in ["without-interposer", "cleared-env"] {
        assert!(!all.contains(&format!("{program}=0")), "{program} must fail: {all}");
    }
    assert!(all.contains("with-interposer=0") && all.contains("without-cwd=0"), "{all}");
    assert!(all.contains("No such file or directory"), "the removed directory says ENOENT: {all}");
    assert_eq!(fs::read_dir(&host).unwrap().count(), 0, "nothing may land on the host: {all}");
    let mut staged: Vec<String> =
        fs::read_dir(s.path("pfs/w")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    staged.sort();
    assert_eq!(staged, ["with-interposer", "without-cwd"], "{all}");
}

/// Preload-only mode: stdio on a redirected standard stream reaches the
/// placeholder and fails. The program says so, and `surge run` names
/// every such file as suspect (not the files programs wrote or read with
/// plain read and write, which the interposer serves).
#[test]
fn in_preload_only_mode_files_stdio_failed_to_write_or_read_are_reported_suspect() {
    let s = Scenario::new("stdio-suspect");
    let out = s.surge_run(
        &[],
        &[
            "sh",
            "-c",
            "seq 1 1000 > /surge/seq; date > /surge/date; bash -c 'echo hi > /surge/bash'; \
             cat /etc/services > /surge/cat; md5sum < /surge/cat; wc -c < /surge/cat; \
             printf 'dash builtin\\n' > /surge/builtin; true",
        ],
    );
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let line = all.lines().find(|l| l.starts_with("  suspect") && l.contains("standard stream")).unwrap_or_else(|| {
        panic!("no suspect line for the standard streams: {all}");
    });
    assert!(line.contains("4 file(s)"), "{line}");
    for file in ["/surge/seq", "/surge/date", "/surge/bash", "/surge/cat"] {
        assert!(line.contains(file), "{file} is suspect: {line}");
    }
    assert!(!line.contains("/surge/builtin"), "written through write(2), which the interposer serves: {line}");
    assert!(all.contains("seq: write error") && all.contains("md5sum: -: Bad file descriptor"), "{all}");
    assert_eq!(fs::read(s.path("pfs/cat")).unwrap(), fs::read("/etc/services").unwrap(), "cat writes with write(2)");
    assert_eq!(fs::read(s.path("pfs/builtin")).unwrap(), b"dash builtin\n");
}
