//! Unmodified programs through the interposer: each scenario runs once on a
//! plain directory and once under `surge run` on /surge; what the programs
//! print and the files they leave (the verified stage-out copies on the
//! PFS) must be identical, byte for byte. The harness is in `common`.

mod common;

use common::{build_dir, preload, text, workload, Mode, Scenario};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

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
    let mpiio = |f: &serde_json::Value| f["counters"].as_object().unwrap().keys().any(|k| k.starts_with("MPIIO_"));
    assert!(!mpiio(&dd) && !mpiio(&cat), "programs that use no MPI-IO have no MPI-IO counters: {profile}");
    assert!(
        cat["fcounters"]["POSIX_F_READ_START_TIMESTAMP"].as_f64().unwrap()
            >= dd["fcounters"]["POSIX_F_WRITE_END_TIMESTAMP"].as_f64().unwrap()
    );
}

/// Each rank's MPI-IO counters of `file` (a path ending) in the profile at `profile`.
fn mpiio_counters(profile: &Path, file: &str) -> Vec<serde_json::Value> {
    let text = fs::read_to_string(profile).unwrap_or_else(|e| panic!("{}: {e}", profile.display()));
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .flat_map(|r| r["files"].as_array().cloned().unwrap_or_default())
        .filter(|f| f["path"].as_str().is_some_and(|p| p.ends_with(file)))
        .map(|f| f["counters"].clone())
        .collect()
}

/// The accuracy benchmark's MPI workload (tuner/.../pathologies.c), built with `compiler` into `dir`.
fn pathologies(dir: &Path, compiler: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tuner/src/surge_tune/accuracy/pathologies.c");
    let binary = dir.join(format!("pathologies-{compiler}"));
    let out = Command::new(compiler).arg("-O2").arg("-o").arg(&binary).arg(&source).output().unwrap();
    assert!(out.status.success(), "{compiler} {}: {}", source.display(), text(&out));
    binary
}

/// What a program asked of MPI-IO is in the profile, per rank and file,
/// with Darshan's MPI-IO counters: collective and independent writes of
/// pathologies.c (16 blocks of 64 KiB per rank), and mpiio_shared's
/// collective open, 3 views, a collective write of 16 x 64 KiB, 2 syncs,
/// 2 collective reads and one independent read of 1 MiB (32 KiB less on
/// the last rank). Under Open MPI (ompio) through the interposer alone,
/// and under MPICH (int handles) through FUSE with the interposer;
/// pathologies.c names its file relative to a working directory on the
/// mount (under MPICH after a ROMIO driver prefix, "ufs:./shared").
#[test]
fn the_profile_counts_collective_and_independent_mpi_io_per_rank_under_open_mpi_and_mpich() {
    let test = "the_profile_counts_collective_and_independent_mpi_io_per_rank_under_open_mpi_and_mpich";
    let s = Scenario::new("mpiio-profile");
    let ompi = (Mode::PreloadOnly, "mpirun --oversubscribe", "", pathologies(s.dir.path(), "mpicc"));
    let mut runs = vec![(ompi.0, ompi.1, ompi.2, ompi.3, workload("mpiio_shared"))];
    if let Some(mpich_shared) = mpich(test) {
        let mode = if Mode::FuseWithPreload.available(test) { Mode::FuseWithPreload } else { Mode::PreloadOnly };
        runs.push((mode, "mpiexec.mpich", "ufs:", pathologies(s.dir.path(), "mpicc.mpich"), mpich_shared));
    }
    for (mode, launcher, driver, pathologies, shared) in runs {
        let tag = format!("{mode:?}-{}-", launcher.split_whitespace().next().unwrap());
        let script = format!(
            "mkdir -p $M/c $M/i; cd $M/c; {launcher} -np 4 {p} {driver}. --MIB 1 --interleaved; cd $M/i; \
             {launcher} -np 4 {p} . --MIB 1 --independent; {launcher} -np 4 {shared} $M/m.dat",
            p = pathologies.display(),
            shared = shared.display()
        );
        let out = s.surge_run_in(mode, &tag, &[("M", &mode.mount(&s))], &["sh", "-ec", &script]);
        assert!(out.status.success(), "{tag}: {}", text(&out));
        let profile = s.path(&format!("{tag}profile.jsonl"));
        let n = |c: &serde_json::Value, k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{tag}: no {k} in {c}"));
        for (file, collective) in [("/c/shared", 16), ("/i/shared", 0)] {
            let ranks = mpiio_counters(&profile, file);
            assert_eq!(ranks.len(), 4, "{tag}: one record per rank of {file}");
            for c in &ranks {
                assert_eq!((n(c, "MPIIO_COLL_OPENS"), n(c, "MPIIO_INDEP_OPENS")), (1, 0), "{tag} {file}: {c}");
                assert_eq!((n(c, "MPIIO_COLL_WRITES"), n(c, "MPIIO_INDEP_WRITES")), (collective, 16 - collective));
                assert_eq!((n(c, "MPIIO_BYTES_WRITTEN"), n(c, "MPIIO_SIZE_WRITE_AGG_10K_100K")), (1 << 20, 16));
                assert_eq!((n(c, "MPIIO_NB_WRITES"), n(c, "MPIIO_SPLIT_WRITES"), n(c, "MPIIO_BYTES_READ")), (0, 0, 0));
            }
        }
        let ranks = mpiio_counters(&profile, "/m.dat");
        assert_eq!(ranks.len(), 4, "{tag}: one record per rank of m.dat");
        for c in &ranks {
            assert_eq!((n(c, "MPIIO_COLL_OPENS"), n(c, "MPIIO_VIEWS"), n(c, "MPIIO_SYNCS")), (1, 3, 2), "{tag}: {c}");
            assert_eq!(
                (n(c, "MPIIO_COLL_WRITES"), n(c, "MPIIO_INDEP_WRITES"), n(c, "MPIIO_BYTES_WRITTEN")),
                (1, 0, 1 << 20)
            );
            assert_eq!((n(c, "MPIIO_COLL_READS"), n(c, "MPIIO_INDEP_READS")), (2, 1), "{tag}: {c}");
        }
        let read: u64 = ranks.iter().map(|c| n(c, "MPIIO_BYTES_READ")).sum();
        assert_eq!(read, 4 * (3 << 20) - (32 << 10), "{tag}: bytes read over the ranks");
    }
}

/// An MPI library loaded outside the global scope (dlopen RTLD_LOCAL of a
/// plugin linked to it, as Python loads an extension such as mpi4py)
/// binds the plugin's MPI_File calls to the interposer's wrappers, which
/// find the library's own functions by their PMPI_ names: the program runs
/// and its calls are counted.
#[test]
fn mpi_io_of_an_mpi_library_loaded_rtld_local_by_a_plugin_is_served_and_counted() {
    let s = Scenario::new("mpiio-local");
    let plugin = s.path("plugin.c");
    fs::write(
        &plugin,
        "#include <mpi.h>\n\
         int plugin_run(int *argc, char ***argv, const char *path) {\n\
             MPI_File fh; static char buf[4096];\n\
             MPI_Init(argc, argv);\n\
             if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_WRONLY | MPI_MODE_CREATE, MPI_INFO_NULL, &fh)) return 1;\n\
             int rc = MPI_File_write_all(fh, buf, 4096, MPI_BYTE, MPI_STATUS_IGNORE) || MPI_File_close(&fh);\n\
             MPI_Finalize();\n\
             return rc;\n\
         }\n",
    )
    .unwrap();
    let host = s.path("host.c");
    fs::write(
        &host,
        "#include <dlfcn.h>\n#include <stdio.h>\n\
         int main(int argc, char **argv) {\n\
             void *p = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);\n\
             if (!p) { fprintf(stderr, \"%s\\n\", dlerror()); return 2; }\n\
             int (*run)(int *, char ***, const char *) = (int (*)(int *, char ***, const char *))dlsym(p, \"plugin_run\");\n\
             return run(&argc, &argv, argv[2]);\n\
         }\n",
    )
    .unwrap();
    let library = s.path("libplugin.so");
    for (compiler, args) in [
        ("mpicc", vec!["-shared", "-fPIC", "-o", library.to_str().unwrap(), plugin.to_str().unwrap()]),
        ("cc", vec!["-o", s.path("host").to_str().unwrap(), host.to_str().unwrap(), "-ldl"]),
    ] {
        let out = Command::new(compiler).args(&args).output().unwrap();
        assert!(out.status.success(), "{compiler}: {}", text(&out));
    }
    let script =
        format!("mpirun --oversubscribe -np 2 {} {} /surge/local.dat", s.path("host").display(), library.display());
    let out = s.surge_run(&[], &["sh", "-ec", &script]);
    assert!(out.status.success(), "{}", text(&out));
    let ranks = mpiio_counters(&s.path("profile.jsonl"), "/surge/local.dat");
    assert_eq!(ranks.len(), 2, "{}", text(&out));
    for c in &ranks {
        assert_eq!((c["MPIIO_COLL_OPENS"].as_u64(), c["MPIIO_COLL_WRITES"].as_u64()), (Some(1), Some(1)), "{c}");
        assert_eq!(c["MPIIO_BYTES_WRITTEN"], 4096, "{c}");
    }
}

/// A program that calls MPI_File_open with no MPI library loaded (a weak
/// reference the interposer's wrapper alone resolves) stops with a message
/// naming the call, not a crash through a null function.
#[test]
fn an_mpi_io_call_without_an_mpi_library_stops_with_a_message() {
    let s = Scenario::new("mpiio-none");
    let source = s.path("nompi.c");
    fs::write(
        &source,
        "#include <stdio.h>\n\
         extern int MPI_File_open(void *, const char *, int, void *, void *) __attribute__((weak));\n\
         int main(void) {\n\
             void *fh;\n\
             if (!MPI_File_open) { puts(\"unresolved\"); return 3; }\n\
             return MPI_File_open(0, \"/surge/x\", 0, 0, &fh);\n\
         }\n",
    )
    .unwrap();
    let program = s.path("nompi");
    let out = Command::new("cc").arg("-o").arg(&program).arg(&source).output().unwrap();
    assert!(out.status.success(), "cc: {}", text(&out));
    let out = s.surge_run(&[], &[program.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("surge: MPI_File_open was called, but no loaded MPI library defines it"),
        "{}",
        text(&out)
    );
}

/// The opens, fsyncs and layout of a file are in the profile whether the
/// interposer serves the call or the kernel does (FUSE mode, where only
/// reads and writes take the fast path): the tuner's fsync-per-write and
/// stripe rules read them.
#[test]
fn the_profile_counts_opens_fsyncs_and_the_layout_in_every_interposer_mode() {
    let s = Scenario::new("profile-meta");
    let test = "the_profile_counts_opens_fsyncs_and_the_layout_in_every_interposer_mode";
    for mode in [Mode::PreloadOnly, Mode::FuseWithPreload].into_iter().filter(|m| m.available(test)) {
        let tag = format!("{mode:?}-");
        let surge = build_dir().join("surge");
        let out = s.surge_run_in(
            mode,
            &tag,
            &[("M", &mode.mount(&s)), ("SURGE", surge.to_str().unwrap())],
            &["sh", "-ec", "mkdir $M/d; $SURGE setstripe -c 2 $M/d; dd if=/dev/zero of=$M/d/f bs=1M count=4 conv=fsync status=none"],
        );
        assert!(out.status.success(), "{mode:?}: {}", text(&out));
        let profile = fs::read_to_string(s.path(&format!("{tag}profile.jsonl"))).unwrap();
        let dd = profile
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .flat_map(|r| r["files"].as_array().cloned().unwrap_or_default())
            .find(|f| f["path"].as_str().is_some_and(|p| p.ends_with("/d/f")))
            .unwrap_or_else(|| panic!("{mode:?}: no record of d/f: {profile}"));
        assert_eq!(dd["counters"]["POSIX_OPENS"], 1, "{mode:?}: {dd}");
        assert_eq!(dd["counters"]["POSIX_FSYNCS"], 1, "{mode:?}: {dd}");
        assert_eq!(dd["counters"]["POSIX_BYTES_WRITTEN"], 4 << 20, "{mode:?}: {dd}");
        assert_eq!(dd["stripe_count"], 2, "{mode:?}: {dd}");
    }
}

/// Ranks creating one shared file at once through the FUSE mount: each
/// one's writes take the fast path and are in its profile record. (The
/// kernel shows a dentry a concurrent create replaced as "(deleted)"; the
/// fast path used to give such a descriptor to the kernel, and the writer's
/// record went missing, about one run in six with four writers.)
#[test]
fn in_fuse_mode_writers_creating_one_file_at_once_are_each_profiled() {
    let test = "in_fuse_mode_writers_creating_one_file_at_once_are_each_profiled";
    let mode = Mode::FuseWithPreload;
    if !mode.available(test) {
        return;
    }
    let s = Scenario::new("shared-create");
    let (files, writers) = (4, 8);
    let script = format!(
        "for f in $(seq 1 {files}); do for i in $(seq 0 {last}); do \
           yes $i | head -c 1048576 | dd of=$M/f$f bs=1M seek=$i conv=notrunc iflag=fullblock status=none & \
         done; wait; done",
        last = writers - 1
    );
    let out = s.surge_run_in(mode, "", &[("M", &mode.mount(&s))], &["sh", "-ec", &script]);
    assert!(out.status.success(), "{}", text(&out));
    let profile = fs::read_to_string(s.path("profile.jsonl")).unwrap();
    for f in 1..=files {
        let name = format!("/f{f}");
        let records: Vec<serde_json::Value> = profile
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["argv0"] == "dd")
            .flat_map(|r| r["files"].as_array().cloned().unwrap_or_default())
            .filter(|file| file["path"].as_str().is_some_and(|p| p.ends_with(&name)))
            .collect();
        assert_eq!(records.len(), writers, "{name}: a writer's record is missing: {profile}");
        assert!(records.iter().all(|r| r["counters"]["POSIX_BYTES_WRITTEN"] == 1 << 20), "{name}: {records:?}");
        let data = fs::read(s.path("pfs").join(&name[1..])).unwrap();
        assert_eq!(data.len(), writers << 20, "{name}");
        for (i, chunk) in data.chunks(1 << 20).enumerate() {
            assert!(chunk == format!("{i}\n").repeat(1 << 19).as_bytes(), "{name}: block {i} is not writer {i}'s");
        }
    }
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

#[test]
fn a_file_another_process_removed_stays_readable_and_writable_by_its_holder_until_closed() {
    // Under the interposer alone the remover is a client of its own with
    // nothing open: daemon 0 keeps the file for the holder, as POSIX asks.
    Scenario::new("removed-elsewhere").compare(
        r#"
        mkdir -p $D
        python3 -c '
import os, subprocess, sys, time
p = sys.argv[1] + "/held"
fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(fd, b"x" * 65536, 0)
# close_fds=False: a child that closes the parent Surge descriptors breaks them.
subprocess.run(["rm", p], check=True, close_fds=False)
time.sleep(1)  # the deleter had its turn
os.pwrite(fd, b"late", 0)
data = os.pread(fd, 70000, 0)
print(len(data), data[:6], data.count(b"x"), os.path.exists(p))
os.close(fd)
' $D > $O/held
        "#,
    );
}

#[test]
fn a_removed_file_a_killed_process_held_is_deleted_once_the_process_is_gone() {
    // The holder is a forked child (a client of its own); killed, its
    // connections end, and daemon 0 lets the deleter have the file.
    let s = Scenario::new("killed-holder");
    let buffer = s.path("buffer");
    let out = s.surge_run(
        &[],
        &[
            "python3",
            "-c",
            r#"
import glob, os, signal, subprocess, sys, time
p, buffer = "/surge/held", sys.argv[1]
with open(p, "wb") as f:
    f.write(b"x" * 100000)
ino = os.stat(p).st_ino
objects = lambda: glob.glob(f"{buffer}/**/{ino:016x}", recursive=True)
assert objects(), "no object file of the new file in the buffer"
ready_r, ready_w = os.pipe()
child = os.fork()
if child == 0:
    fd = os.open(p, os.O_RDONLY)
    os.write(ready_w, b"1")
    time.sleep(600)
os.read(ready_r, 1)
subprocess.run(["rm", p], check=True, close_fds=False)
time.sleep(1)  # the deleter had its turn
print("kept while held", bool(objects()))
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
deadline = time.time() + 20
while objects() and time.time() < deadline:
    time.sleep(0.1)
print("deleted once its holder was killed", not objects())
"#,
            buffer.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let all = text(&out);
    assert!(all.contains("kept while held True\ndeleted once its holder was killed True"), "{all}");
}

#[test]
fn atomic_replaces_under_concurrent_readers_never_fail_a_read_in_every_mode() {
    // The write-then-rename pattern of configuration files: every reader
    // opened (or stat'ed) either the old file or the new one, and reads it
    // whole, even when the rename removes the old one under it (each
    // process is a client of its own with the interposer).
    Scenario::new("replaced").compare(
        r#"
        mkdir -p $D
        python3 -c '
import multiprocessing as mp, os, sys
os.chdir(sys.argv[1])
with open("cfg", "w") as f: f.write("v0" * 1000)
def writer():
    for i in range(150):
        with open(f"cfg.tmp{i}", "w") as f: f.write(f"v{i % 10}" * 1000)
        os.replace(f"cfg.tmp{i}", "cfg")
def reader(q):
    bad = []
    for i in range(300):
        try:
            text = open("cfg").read()
            if len(text) != 2000 or text != text[:2] * 1000: bad.append(f"{len(text)} bytes")
            if os.stat("cfg").st_size != 2000: bad.append("stat size")
        except OSError as e: bad.append(str(e))
    q.put(bad)
q = mp.Queue(); w = mp.Process(target=writer); rs = [mp.Process(target=reader, args=(q,)) for _ in range(2)]
w.start(); [r.start() for r in rs]
bad = [b for _ in rs for b in q.get()]
w.join(); [r.join() for r in rs]
print("bad reads", len(bad), sorted(set(bad))[:3])
' $D > $O/readers
        ls $D > $O/listing
        "#,
    );
}

#[test]
fn a_file_removed_or_replaced_while_open_reopens_through_proc_in_every_mode() {
    // /proc/self/fd/N and /dev/fd/N name the open file, not its old name:
    // a program reopening or stat-ing one gets that file, with a position
    // of its own, and readlink says its name, "(deleted)" once removed or
    // replaced (in preload-only mode the kernel would open the placeholder
    // and read its record, and name the placeholder).
    Scenario::new("reopen").compare(
        r#"
        mkdir -p $D && cd $D
        echo one > s && exec 6< s && echo two > s.tmp && mv s.tmp s
        read line < /dev/fd/6 && echo "$line" > $O/shell-builtin-read-through-dev-fd
        cat <&6 > $O/child-reads-inherited-replaced
        cat /dev/fd/6 > $O/child-reopens-inherited-replaced
        exec 6<&-
        echo kept > r && exec 7<> r && readlink /proc/self/fd/7 > $O/name-through-proc && rm r
        readlink /dev/fd/7 > $O/name-of-the-removed-through-dev-fd
        echo more >&7
        cat /proc/self/fd/7 > $O/child-reopens-inherited-removed
        sh -c 'echo appended >> /dev/fd/7'
        cat /dev/fd/7 > $O/after-a-child-appended-through-dev-fd
        exec 7<&-
        python3 -c '
import os, sys
os.chdir(sys.argv[1])
def save(name, text): open(os.path.join(sys.argv[2], name), "w").write(text)
open("replaced", "w").write("old\n"); open("removed", "w").write("kept\n")
r = os.open("replaced", os.O_RDONLY); k = os.open("removed", os.O_RDONLY)
a = os.open("removed", os.O_WRONLY | os.O_APPEND)
open("replaced.tmp", "w").write("new\n")
os.replace("replaced.tmp", "replaced"); os.remove("removed")
save("replaced-through-proc", open(f"/proc/self/fd/{r}").read())
save("removed-through-dev-fd", open(f"/dev/fd/{k}").read())
with open(f"/proc/{os.getpid()}/fd/{a}", "a") as f: f.write("more\n")
save("removed-appended-through-proc-pid", open(f"/dev/fd/{k}").read())
save("removed-size-through-stat", str(os.stat(f"/dev/fd/{k}").st_size))
save("replaced-by-name", open("replaced").read())
save("names", " ".join(os.readlink(f"/proc/self/fd/{fd}") for fd in (r, k)))
refused = []
for flags in (os.O_CREAT | os.O_EXCL | os.O_WRONLY, os.O_RDONLY | os.O_DIRECTORY):
    try: os.open(f"/dev/fd/{r}", flags)
    except OSError as e: refused.append(e.strerror)
save("refused", " / ".join(refused))
os.read(r, 2)
save("own-position", open(f"/dev/fd/{r}").read() + "|" + os.read(r, 10).decode())
' $D $O
        ls $D > $O/listing
        "#,
    );
}

#[test]
fn in_preload_only_mode_an_inherited_descriptor_of_a_file_deleted_before_its_first_use_fails_with_estale() {
    // The interposer alone takes up an inherited descriptor on its first
    // use: a file removed, and closed by every other holder before then,
    // is deleted, and its I/O fails instead of reading nothing.
    let s = Scenario::new("inherited");
    let parent = r#"
import os, subprocess
open("/surge/f", "w").write("data\n")
fd = os.open("/surge/f", os.O_RDONLY)
child = subprocess.Popen(["sh", "-c", "sleep 4; cat; echo cat=$?"], stdin=fd)
os.remove("/surge/f")
os.close(fd)
child.wait()
"#;
    let out = s.surge_run(&[], &["python3", "-c", parent]);
    let all = text(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "cat=1\n", "{all}");
    assert!(all.contains("Stale file handle"), "{all}");
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

/// Symbolic links as WRF-style run directories, `cp -a`, `tar` and `rsync`
/// and Python use them: relative links into a sibling directory, a link to
/// a directory, an absolute link leading out of Surge, a dangling link and
/// a cycle; the staged-out run directory holds the same links.
const SYMLINKS_SCRIPT: &str = r#"
        mkdir -p $D/tables $D/run
        printf 'table one\n' > $D/tables/RRTM_DATA
        printf 'table two\n' > $D/tables/CAM_ABS_DATA
        (cd $D/run && ln -s ../tables/* .)
        ln -s ../tables $D/run/tables-dir
        ln -s /etc/services $D/run/services
        ln -s missing $D/run/dangling
        ln -s loop2 $D/run/loop1
        ln -s loop1 $D/run/loop2
        readlink $D/run/RRTM_DATA $D/run/tables-dir $D/run/services $D/run/dangling > $O/readlink
        ls -l --time-style=+ $D/run | tail -n +2 | awk '{print $1, $5, $6, $7, $8}' > $O/ls
        ls -L $D/run/tables-dir > $O/ls-dir
        stat -c '%F %s %N' $D/run/* > $O/stat
        cat $D/run/RRTM_DATA $D/run/tables-dir/CAM_ABS_DATA > $O/cat
        cat $D/run/tables-dir/../tables/RRTM_DATA > $O/dot-dot
        (cd $D/run/tables-dir && cat ../tables/CAM_ABS_DATA && pwd -P | sed "s|$D|D|") >> $O/dot-dot
        cmp $D/run/services /etc/services && echo same > $O/services
        if cat $D/run/dangling 2> $O/dangling; then echo opened >> $O/dangling; fi
        if cat $D/run/loop1 2> $O/loop; then echo opened >> $O/loop; fi
        if ln -s elsewhere $D/run/RRTM_DATA 2> $O/exists; then echo replaced >> $O/exists; fi
        cp -a $D/run $D/run-copy
        readlink $D/run-copy/RRTM_DATA $D/run-copy/tables-dir > $O/cp-a
        cat $D/run-copy/CAM_ABS_DATA >> $O/cp-a
        tar -C $D -cf $O/run.tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner run
        tar -tvf $O/run.tar | awk '{print $1, $6, $7, $8}' > $O/tar-list
        mkdir $D/untar
        tar -C $D/untar -xf $O/run.tar
        readlink $D/untar/run/RRTM_DATA > $O/untar
        if command -v rsync > /dev/null; then
            rsync -a $D/run/ $D/run-rsync/
            readlink $D/run-rsync/CAM_ABS_DATA $D/run-rsync/dangling > $O/rsync
        else
            printf '../tables/CAM_ABS_DATA\nmissing\n' > $O/rsync
        fi
        mv $D/run/dangling $D/run/renamed
        readlink $D/run/renamed > $O/renamed
        rm $D/run/loop1 $D/run/loop2 $D/run-copy/loop1 $D/run-copy/loop2 $D/untar/run/loop1 $D/untar/run/loop2
        rm -f $D/run-rsync/loop1 $D/run-rsync/loop2
        python3 - <<'PY'
import os
d, o = os.environ["D"], os.environ["O"]
os.symlink("tables/RRTM_DATA", f"{d}/py-link")
os.symlink(f"{d}/tables", f"{d}/py-abs")
with open(f"{o}/python", "w") as r:
    print(os.readlink(f"{d}/py-link"), os.path.islink(f"{d}/py-link"), os.path.isfile(f"{d}/py-link"), file=r)
    print(os.path.realpath(f"{d}/py-link") == os.path.realpath(f"{d}/tables/RRTM_DATA"), file=r)
    print(os.path.realpath(f"{d}/run/tables-dir/CAM_ABS_DATA").replace(d, "$D"), file=r)
    print(open(f"{d}/py-abs/RRTM_DATA").read().strip(), sorted(os.listdir(f"{d}/py-abs")), file=r)
    st = os.lstat(f"{d}/py-link")
    print(oct(st.st_mode), st.st_size, os.stat(f"{d}/py-link").st_size, file=r)
    try:
        os.symlink("x", f"{d}/py-link")
    except FileExistsError:
        print("EEXIST", file=r)
    try:
        os.symlink("", f"{d}/py-empty")
    except FileNotFoundError:
        print("ENOENT", file=r)
    try:
        os.open(f"{d}/py-link", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        print("O_NOFOLLOW", e.strerror, file=r)
    os.unlink(f"{d}/py-abs")
PY
        "#;

#[test]
fn symbolic_links_in_surge_with_ln_ls_cat_cp_tar_rsync_and_python_in_every_mode() {
    Scenario::new("symlinks").compare(SYMLINKS_SCRIPT);
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
print("cross-link", code(lambda: os.link("/surge/d/f", "/tmp/surge-cross-link")))
print("symlink-over-a-file", code(lambda: os.symlink("/surge/d/f", "/surge/d/f")))
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
        "cross-link EXDEV",
        "symlink-over-a-file EEXIST",
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
    Scenario::new("cwd").compare(
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

/// Python's subprocess runs its child with vfork, and the child closes
/// every descriptor before exec: the parent's open files must survive it.
#[test]
fn python_subprocess_children_leave_the_parents_open_files_working_in_every_mode() {
    Scenario::new("pyvfork").compare(
        r#"
        mkdir -p $D
        python3 -c '
import os, subprocess, sys
d = sys.argv[1]
f = open(f"{d}/around.txt", "w")
f.write("a" * 100); f.flush()
subprocess.run(["true"], check=True)
subprocess.run(["true"], check=True, cwd=d)
f.write("b" * 100); f.flush()
with open(f"{d}/source", "wb") as src:
    src.write(bytes(range(256)) * 83)
with open(f"{d}/source", "rb") as src, open(f"{d}/copied", "wb") as dst:
    subprocess.run(["cat"], stdin=src, stdout=dst, check=True)
print(os.popen("echo popen").read().strip())
f.write("c" * 100); f.close()
print(os.path.getsize(f"{d}/around.txt"))
' $D > $O/out
        cmp $D/source $D/copied > $O/cmp
        "#,
    );
}

#[test]
fn processes_appending_to_one_file_at_once_lose_no_line_in_every_mode() {
    // Each process is a client of its own under the interposer: every append
    // must take the file's append lock, or two land at the same end.
    Scenario::new("appenders").compare(
        r#"
        mkdir -p $D
        python3 -c '
import multiprocessing as mp, os, sys
d = sys.argv[1]
def append(k):
    fd = os.open(f"{d}/log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for i in range(200):
        os.write(fd, f"writer {k} line {i:04d}\n".encode())
    os.close(fd)
    with open(f"{d}/stdio.log", "a") as f:
        for i in range(200):
            f.write(f"writer {k} line {i:04d}\n"); f.flush()
workers = [mp.Process(target=append, args=(k,)) for k in range(4)]
[w.start() for w in workers]
[w.join() for w in workers]
' $D
        # Lines in order, as the processes interleave differently each run (sort -o
        # reopens its stdout, which the interposer alone cannot serve).
        python3 -c '
import os, sys
for name in ("log", "stdio.log"):
    path = os.path.join(sys.argv[1], name)
    with open(path) as f:
        lines = sorted(f)
    with open(path, "w") as f:
        f.writelines(lines)
' $D
        "#,
    );
}

#[test]
fn children_forked_by_a_process_that_already_appended_lose_no_line_in_every_mode() {
    // The parent's client is made before the fork, so every child inherits
    // its state: each child's append must still hold the lock alone (two
    // children once shared one lock token and wrote over each other).
    Scenario::new("forked-appenders").compare(
        r#"
        mkdir -p $D
        python3 -c '
import os, sys
d = sys.argv[1]
fd = os.open(f"{d}/log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.write(fd, b"parent line\n")
failed = 0
children = []
for k in range(6):
    pid = os.fork()
    if pid == 0:
        code = 0
        for i in range(100):
            try:
                os.write(fd, f"child {k} line {i:04d}\n".encode())
            except OSError as e:
                print(f"child {k}: {e}", file=sys.stderr)
                code = 1
        os._exit(code)
    children.append(pid)
for pid in children:
    failed += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0
os.close(fd)
with open(f"{d}/log") as f:
    lines = sorted(f)
print(len(lines), "lines,", failed, "children failed")
with open(f"{d}/log", "w") as f:
    f.writelines(lines)
' $D > $O/counts
        "#,
    );
}
#[test]
fn processes_taking_turns_under_flock_fcntl_and_lockf_lose_no_update_in_every_mode() {
    // Under the interposer alone a lock on a process's own placeholder would
    // exclude nobody: read-modify-write cycles would overwrite each other.
    Scenario::new("locks").compare(
        r#"
        mkdir -p $D
        python3 -c '
import ctypes, fcntl, multiprocessing as mp, os, sys
path = os.path.join(sys.argv[1], "counter")
libc = ctypes.CDLL(None, use_errno=True)
F_LOCK, F_ULOCK, F_TLOCK = 1, 0, 2
def lock(f, kind):
    if kind == "flock": fcntl.flock(f, fcntl.LOCK_EX)
    elif kind == "fcntl": fcntl.lockf(f, fcntl.LOCK_EX)
    else: assert libc.lockf(f.fileno(), F_LOCK, 0) == 0
def unlock(f, kind):
    if kind == "flock": fcntl.flock(f, fcntl.LOCK_UN)
    elif kind == "fcntl": fcntl.lockf(f, fcntl.LOCK_UN)
    else: assert libc.lockf(f.fileno(), F_ULOCK, 0) == 0
def bump(kind):
    for _ in range(100):
        with open(path, "r+") as f:
            lock(f, kind)
            v = int(f.read()); f.seek(0); f.write(str(v + 1)); f.truncate(); f.flush()
            unlock(f, kind)
def held_elsewhere(kind, ready, done):
    with open(path, "r+") as f:
        lock(f, kind); ready.set(); done.wait(); unlock(f, kind)
for kind in ("flock", "fcntl", "lockf"):
    with open(path, "w") as f: f.write("0")
    ps = [mp.Process(target=bump, args=(kind,)) for _ in range(3)]
    [p.start() for p in ps]; [p.join() for p in ps]
    print(kind, open(path).read())
    ready, done = mp.Event(), mp.Event()
    holder = mp.Process(target=held_elsewhere, args=(kind, ready, done)); holder.start(); ready.wait()
    with open(path, "r+") as f:
        if kind == "flock":
            try: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); print(kind, "not excluded")
            except BlockingIOError: print(kind, "excluded")
        elif kind == "fcntl":
            try: fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB); print(kind, "not excluded")
            except OSError: print(kind, "excluded")
        else:
            print(kind, "excluded" if libc.lockf(f.fileno(), F_TLOCK, 0) != 0 else "not excluded")
    done.set(); holder.join()
# A write lock needs a descriptor open for writing, as the kernel says.
with open(path) as f:
    try: fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB); print("write lock on a read-only descriptor taken")
    except OSError as e: print("write lock on a read-only descriptor:", e.errno)
# sqlite serializes its writers with fcntl locks (rollback journal).
import sqlite3
db = os.path.join(sys.argv[1], "db.sqlite")
sqlite3.connect(db).execute("create table t(writer integer, n integer)").connection.commit()
def insert(k):
    c = sqlite3.connect(db, timeout=60)
    for n in range(50):
        with c: c.execute("insert into t values(?, ?)", (k, n))
ps = [mp.Process(target=insert, args=(k,)) for k in range(3)]
[p.start() for p in ps]; [p.join() for p in ps]
c = sqlite3.connect(db)
print("sqlite", c.execute("select count(*), sum(n) from t").fetchone(), c.execute("pragma integrity_check").fetchone())
c.close()
os.remove(db)  # its pages differ with the order the writers took turns in
' $D > $O/counts
        "#,
    );
}

#[test]
fn sendfile_between_surge_and_host_files_in_every_mode() {
    // Under the interposer alone the shim moves the bytes through the interposed read and write.
    Scenario::new("sendfile").compare(
        r#"
        mkdir -p $D
        python3 -c '
import os, sys
d, o = sys.argv[1], sys.argv[2]
data = bytes(range(256)) * 1000
with open(f"{o}/host-src", "wb") as f: f.write(data)
with open(f"{o}/host-src", "rb") as src, open(f"{d}/from-host", "wb") as dst:
    print("host->surge", os.sendfile(dst.fileno(), src.fileno(), None, len(data)), src.tell())
with open(f"{d}/from-host", "rb") as src, open(f"{d}/surge-copy", "wb") as dst:
    print("surge->surge", os.sendfile(dst.fileno(), src.fileno(), 1000, 50000), src.tell())
with open(f"{d}/surge-copy", "rb") as src, open(f"{o}/back", "wb") as dst:
    src.seek(7)
    print("surge->host", os.sendfile(dst.fileno(), src.fileno(), None, 10**9), src.tell())
print(open(f"{o}/back", "rb").read() == data[1007:51000])
os.remove(f"{o}/host-src")
' $D $O > $O/sent
        "#,
    );
}

#[test]
fn a_sendfile_the_receiver_takes_part_of_leaves_the_rest_unread_in_every_mode() {
    // The kernel's rules when the write side fails part way: the count
    // sent, and the source's position (or offset) past those bytes only;
    // nothing sent, the error and no position moved.
    Scenario::new("sendfile-partial").compare(
        r#"
        mkdir -p $D
        python3 -c '
import fcntl, os, sys
d = sys.argv[1]
data = bytes(range(251)) * 800
with open(f"{d}/src", "wb") as f: f.write(data)
src = os.open(f"{d}/src", os.O_RDONLY)
r, w = os.pipe()
fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
os.set_blocking(w, False)
os.lseek(src, 10, os.SEEK_SET)
# How much a full pipe takes, the kernel chooses (up to a page
# boundary, or a whole page): what follows from it is fixed.
n = os.sendfile(w, src, None, len(data))
print("a full pipe takes part", 0 < n <= 4096, os.lseek(src, 0, os.SEEK_CUR) == 10 + n, os.read(r, 1 << 20) == data[10:10 + n])
position = os.lseek(src, 0, os.SEEK_CUR)
n = os.sendfile(w, src, 3000, len(data))
print("with an offset", 0 < n <= 4096, os.lseek(src, 0, os.SEEK_CUR) == position, os.read(r, 1 << 20) == data[3000:3000 + n])
os.close(r)
try:
    os.sendfile(w, src, None, 100)
except OSError as e:
    print("no reader:", e.strerror, os.lseek(src, 0, os.SEEK_CUR) == position)
' $D > $O/sent
        "#,
    );
}

#[test]
fn mkstemp_users_rsync_both_ways_and_tar() {
    // Under the interposer alone, glibc's mkstemp and mkdtemp (sort -T's) are the shim's.
    Scenario::new("tools").compare(
        r#"
        mkdir -p $D/tmp $D/tree
        seq 1 100000 | sort -S 64K -T $D/tmp -r > $D/sorted
        ls $D/tmp | wc -l > $O/tmp-left
        t=$(mktemp -p $D/tmp) && echo temp > $t && rm $t
        python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for name, suffix in ((b"/fileXXXXXX", 0), (b"/sufXXXXXX.dat", 4)):
    t = ctypes.create_string_buffer(sys.argv[1].encode() + name)
    fd = libc.mkstemps(t, suffix)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    os.write(fd, b"made"); os.close(fd)
    os.rename(t.value, sys.argv[1].encode() + b"/made" + name[1:4])
d = ctypes.create_string_buffer(sys.argv[1].encode() + b"/dirXXXXXX")
libc.mkdtemp.restype = ctypes.c_char_p
assert libc.mkdtemp(d) is not None and oct(os.stat(d.value).st_mode & 0o777) == "0o700"
os.rmdir(d.value)
bad = ctypes.create_string_buffer(sys.argv[1].encode() + b"/noX")
assert libc.mkstemp(bad) == -1 and ctypes.get_errno() == 22
' $D/tmp
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

#[test]
fn a_c_programs_glob_scandir_ftw_and_nftw_walk_surge_directories_in_every_mode() {
    // glibc walks with its internal opendir and stat: the shim's own walk serves Surge paths.
    let s = Scenario::new("walks");
    let src = s.path("walk.c");
    fs::write(&src, WALK_PROGRAM).unwrap();
    let exe = s.path("walker");
    let cc = Command::new("cc").arg("-o").arg(&exe).arg(&src).output().unwrap();
    assert!(cc.status.success(), "cc: {}", text(&cc));
    s.compare(&format!(
        r#"
        mkdir -p $D/r/s && touch $D/r/a.txt $D/r/b.txt && echo 12345 > $D/r/s/c
        {exe} "$D/r/*.txt" $D/r | sed "s|$D|D|" | sort > $O/absolute
        cd $D && {exe} "r/*.txt" r | sort > $O/relative
        "#,
        exe = exe.display()
    ));
}

/// Under the interposer alone, the nftw flags the shim's walk does not follow are refused, not ignored.
#[test]
fn in_preload_only_mode_nftw_refuses_ftw_chdir_and_ftw_actionretval_with_enotsup() {
    let s = Scenario::new("walk-refused");
    let src = s.path("nftw.c");
    let program = "#define _GNU_SOURCE\n#include <ftw.h>\n#include <errno.h>\n#include <stdio.h>\n\
        static int seen(const char *p, const struct stat *s, int t, struct FTW *w) { (void)p; (void)s; (void)t; (void)w; return 0; }\n\
        int main(int c, char **v) { (void)c;\n\
          int chdir_r = nftw(v[1], seen, 4, FTW_CHDIR); int chdir_e = errno;\n\
          int action_r = nftw(v[1], seen, 4, FTW_ACTIONRETVAL); int action_e = errno;\n\
          printf(\"chdir %d %d action %d %d plain %d\\n\", chdir_r, chdir_e == ENOTSUP, action_r, action_e == ENOTSUP, nftw(v[1], seen, 4, 0));\n\
          return 0; }\n";
    fs::write(&src, program).unwrap();
    let exe = s.path("nftw-flags");
    let cc = Command::new("cc").arg("-o").arg(&exe).arg(&src).output().unwrap();
    assert!(cc.status.success(), "cc: {}", text(&cc));
    let script = format!("mkdir -p /surge/w/d && {}  /surge/w", exe.display());
    let out = s.surge_run(&[], &["sh", "-c", &script]);
    let all = text(&out);
    assert!(all.contains("chdir -1 1 action -1 1 plain 0"), "{all}");
}

const WALK_PROGRAM: &str = r#"#define _GNU_SOURCE
#include <dirent.h>
#include <ftw.h>
#include <glob.h>
#include <stdio.h>
static int seen(const char *p, const struct stat *s, int type) { printf("ftw %s %d %lld\n", p, type, (long long)s->st_size); return 0; }
static int seen_n(const char *p, const struct stat *s, int type, struct FTW *w) { (void)s; printf("nftw %s %d %s %d\n", p, type, p + w->base, w->level); return 0; }
static int not_dot(const struct dirent *e) { return e->d_name[0] != '.'; }
int main(int c, char **v) {
    (void)c;
    glob_t g;
    int r = glob(v[1], 0, NULL, &g);
    printf("glob %d\n", r);
    for (size_t i = 0; r == 0 && i < g.gl_pathc; i++) printf("  %s\n", g.gl_pathv[i]);
    struct dirent **names;
    int n = scandir(v[2], &names, not_dot, alphasort);
    printf("scandir %d\n", n);
    for (int i = 0; i < n; i++) printf("  %s\n", names[i]->d_name);
    printf("ftw %d\n", ftw(v[2], seen, 4));
    printf("nftw %d\n", nftw(v[2], seen_n, 4, FTW_DEPTH | FTW_PHYS));
    return 0;
}
"#;

/// `Some(())` where `python3 -c 'import h5py'` works; otherwise the skip shows.
fn h5py_ready(test: &str) -> Option<()> {
    let import = Command::new("python3").args(["-c", "import h5py"]).output().unwrap();
    let ready = if import.status.success() {
        Ok(())
    } else {
        Err(format!("h5py is not installed (scripts/setup.sh installs it: pip install h5py): {}", text(&import)))
    };
    surge_testkit::skip_unless_ready(test, ready)
}

#[test]
fn h5py_creates_extends_and_reads_back_datasets() {
    if h5py_ready("h5py_creates_extends_and_reads_back_datasets").is_none() {
        return;
    }
    // track_times=False: no timestamps in the object headers, so the files
    // of two runs are byte-identical.
    Scenario::new("h5py").compare(
        r#"
        mkdir -p $D
        python3 - $D <<'PY'
import sys
import h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/data.h5", "w", libver="latest") as f:
    f.create_dataset("grid", data=np.arange(256 * 64, dtype="f8").reshape(256, 64), track_times=False)
    log = f.create_dataset("log", shape=(0, 64), maxshape=(None, 64), chunks=(32, 64), dtype="i4",
                           compression="gzip", track_times=False)
    for step in range(5):
        n = log.shape[0]
        log.resize(n + 100, axis=0)
        log[n:] = np.arange(100 * 64, dtype="i4").reshape(100, 64) + step
    f["grid"].attrs["units"] = "m/s"
with h5py.File(f"{d}/data.h5", "a") as f:
    f["log"].resize(f["log"].shape[0] + 7, axis=0)
    f["log"][-7:] = -1
    f["grid"][10:20, :] = 0.5
PY
        python3 - $D > $O/readback <<'PY'
import sys, zlib
import h5py
with h5py.File(sys.argv[1] + "/data.h5", "r") as f:
    for name in sorted(f):
        a = f[name][...]
        print(name, a.shape, a.dtype, zlib.crc32(a.tobytes()), dict(f[name].attrs))
PY
        "#,
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

/// Preload-only mode: a relative path from a host directory that leads into
/// the mount is Surge's. coreutils' `mkdir -p /scratch/bb/a/b` walks with
/// chdir and creates "bb" relative to "/scratch": that used to create the
/// directories on the host and succeed, and the job's next write failed.
/// Here the mount's parent exists on the host, as a mount prefix's does.
#[test]
fn in_preload_only_mode_relative_paths_from_the_mounts_parent_land_in_surge() {
    let s = Scenario::new("parent-relative");
    let parent = s.path("scratch");
    fs::create_dir_all(&parent).unwrap();
    let mount = parent.join("bb");
    let script = r#"
        mkdir -p $M/a/b
        echo abs > $M/a/b/f
        cd $P
        mkdir -p bb/rel/deeper
        echo rel > bb/rel/deeper/g
        cd bb/rel && echo in-surge > h && cd ../.. && cat bb/rel/h bb/a/b/f > bb/both
        ls bb/rel bb/rel/deeper
        "#;
    let out = Command::new(build_dir().join("surge"))
        .args(["run", "--quiet", "--no-fuse", "--daemons", "2", "--mount"])
        .arg(&mount)
        .arg("--buffer")
        .arg(s.path("buffer"))
        .arg("--pfs")
        .arg(s.path("pfs"))
        .args(["--", "sh", "-ec", script])
        .env("M", &mount)
        .env("P", &parent)
        .current_dir(s.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!mount.exists(), "the job created the mount directory on the host: {}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "bb/rel:\ndeeper\nh\n\nbb/rel/deeper:\ng\n", "{}", text(&out));
    for (file, bytes) in
        [("a/b/f", "abs\n"), ("rel/deeper/g", "rel\n"), ("rel/h", "in-surge\n"), ("both", "in-surge\nabs\n")]
    {
        assert_eq!(fs::read_to_string(s.path("pfs").join(file)).unwrap_or_default(), bytes, "{file}: {}", text(&out));
    }
}

/// MPICH's launcher and the MPI-IO workload built against MPICH, or why not.
fn mpich(test: &str) -> Option<PathBuf> {
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workloads/build/mpich/mpiio_shared");
    let launcher = Command::new("mpiexec.mpich").arg("--version").output();
    let ready = match launcher {
        Ok(out) if out.status.success() && program.exists() => Ok(program),
        Ok(out) if out.status.success() => {
            Err(format!("{} is missing: run `make -C workloads` (make test does)", program.display()))
        }
        _ => Err("MPICH is not installed (scripts/setup.sh installs it: apt-get install mpich libmpich-dev)".into()),
    };
    surge_testkit::skip_unless_ready(test, ready)
}

#[test]
fn mpich_romio_writes_the_same_file_as_open_mpi_and_genv_reaches_the_ranks() {
    let Some(mpich_prog) = mpich("mpich_romio_writes_the_same_file_as_open_mpi_and_genv_reaches_the_ranks") else {
        return;
    };
    Scenario::new("mpich").compare(&format!(
        r#"
        mkdir -p $D
        mpiexec.mpich -np 4 {mpich} $D/romio.dat | sed "s|$D|DIR|" > $O/mpich
        mpirun --oversubscribe -np 4 {ompi} $D/ompio.dat > /dev/null
        cmp $D/romio.dat $D/ompio.dat > $O/cmp
        mpiexec.mpich -np 2 -genv SURGE_TEST_VALUE gvalue sh -c 'echo $SURGE_TEST_VALUE-$PMI_RANK | dd of=$D/genv-$PMI_RANK status=none'
        "#,
        mpich = mpich_prog.display(),
        ompi = workload("mpiio_shared").display()
    ));
}

#[test]
fn mpiexec_mpich_wdir_and_genv_with_relative_paths_in_surge() {
    if mpich("mpiexec_mpich_wdir_and_genv_with_relative_paths_in_surge").is_none() {
        return;
    }
    Scenario::new("mpich-wdir").compare(
        r#"
        mkdir -p $D/w
        mpiexec.mpich -np 2 -genv SURGE_TEST_VALUE gvalue -wdir $D/w sh -c 'echo $SURGE_TEST_VALUE > rank-$PMI_RANK'
        "#,
    );
}

#[test]
fn a_c_program_writes_through_a_shared_mapping_and_another_process_reads_it_mapped() {
    let prog = workload("mmap_rw");
    Scenario::new("mmap-c").compare_in(
        &Mode::FUSE,
        &format!(
            r#"
        mkdir -p $D
        {p} write $D/mapped.bin 3M
        {p} read $D/mapped.bin > $O/read
        "#,
            p = prog.display()
        ),
    );
}

/// A profiler listed in LD_PRELOAD before `surge run` (as Darshan's
/// libdarshan.so is) still sees the job's writes on Surge in every mode:
/// `surge run` puts the interposer after it, and the interposer is reached
/// through the profiler's calls. workloads/io_counter.c stands in for
/// Darshan, which Debian does not package.
#[test]
fn a_profiler_preloaded_before_surge_run_sees_the_jobs_surge_io() {
    let s = Scenario::new("profiler");
    let counter = workload("libio_counter.so");
    let writer = "import os, sys\nfd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)\nfor i in range(25):\n    os.write(fd, b'%04d' % i * 1024)\nos.close(fd)\n";
    for mode in Mode::ALL {
        if !mode.available("a_profiler_preloaded_before_surge_run_sees_the_jobs_surge_io") {
            continue;
        }
        let tag = format!("{mode:?}-");
        let log = s.path(&format!("{tag}counted"));
        let mount = mode.mount(&s);
        let out = s.surge_run_in(
            mode,
            &tag,
            &[
                ("LD_PRELOAD", counter.to_str().unwrap()),
                ("IO_COUNTER_PREFIX", &mount),
                ("IO_COUNTER_LOG", log.to_str().unwrap()),
            ],
            &["python3", "-c", writer, &format!("{mount}/counted.dat")],
        );
        assert!(out.status.success(), "{mode:?}: {}", text(&out));
        let counted = fs::read_to_string(&log).unwrap_or_default();
        assert!(
            counted.lines().any(|l| l == "python3 opens=1 writes=25 bytes=102400"),
            "{mode:?}: the profiler saw the writes: {counted:?}"
        );
        let staged = fs::read(s.path(&format!("{tag}pfs/counted.dat"))).unwrap();
        assert_eq!(staged.len(), 102400, "{mode:?}: the bytes reached Surge through the profiler");
    }
}

/// In preload-only mode a write that glibc makes internally (stdio on a
/// redirected standard stream) reaches the placeholder, not the
/// interposer: the program gets an error and says so, never exit 0 with
/// an empty file.
#[test]
fn in_preload_only_mode_writes_the_interposer_cannot_see_fail_with_an_error() {
    // Programs without the interposer on a redirected descriptor: the placeholder refuses them.
    let s = Scenario::new("placeholder");
    let out = s.surge_run(
        &[],
        &[
            "sh",
            "-c",
            "env -u LD_PRELOAD seq 1 1000 > /surge/seq; echo seq=$?; env -u LD_PRELOAD date > /surge/date; echo date=$?; \
             env -u LD_PRELOAD bash -c 'echo hi' > /surge/bash; echo bash=$?",
        ],
    );
    let all = text(&out);
    for (program, says) in [("seq", "seq: write error"), ("date", "date: write error"), ("bash", "write error")] {
        assert!(all.contains(&format!("{program}=1")), "{program} must fail: {all}");
        assert!(all.contains(says), "{program} must say why: {all}");
    }
    assert!(all.contains("Operation not permitted"), "the placeholder refuses the write (EPERM): {all}");
}

/// A `surge run` a test started: one the test leaves running (it failed
/// half way) gets SIGTERM, so it stops its job, mount and daemons.
struct RunningJob(Option<std::process::Child>);

impl RunningJob {
    fn id(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    /// Waits at most `limit`; kills it and fails past that.
    fn finish_within(mut self, limit: Duration) -> Output {
        let mut child = self.0.take().expect("running");
        let deadline = Instant::now() + limit;
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("surge run did not end within {limit:?}: {}", text(&child.wait_with_output().unwrap()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            // SAFETY: signalling the surge run this test started.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

/// Starts `surge run` (FUSE with the interposer) on `script`, which touches
/// $MARK once it has written to $M, and waits for the mark.
fn start_marked_job(s: &Scenario, tag: &str, script: &str) -> RunningJob {
    let mode = Mode::FuseWithPreload;
    let mark = s.path(&format!("{tag}mark"));
    let mount = mode.mount(s);
    let child = s
        .surge_run_command(
            mode,
            tag,
            &[("M", &mount), ("MARK", mark.to_str().unwrap()), ("GO", s.path(&format!("{tag}go")).to_str().unwrap())],
            &["sh", "-c", script],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut job = RunningJob(Some(child));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !mark.exists() {
        if let Some(status) = job.0.as_mut().unwrap().try_wait().unwrap() {
            let out = job.0.take().unwrap().wait_with_output().unwrap();
            panic!("surge run ended ({status}) before its job got going: {}", text(&out));
        }
        assert!(Instant::now() < deadline, "the job never touched $MARK");
        std::thread::sleep(Duration::from_millis(20));
    }
    job
}

fn mount_state(s: &Scenario) -> surge_fuse::mountpoint::State {
    surge_fuse::mountpoint::state(Path::new(&Mode::FuseWithPreload.mount(s))).unwrap()
}

fn server_pid(s: &Scenario) -> i32 {
    match mount_state(s) {
        surge_fuse::mountpoint::State::Live { pid, .. } => pid as i32,
        other => panic!("the job's mount is not live: {other:?}"),
    }
}

/// A job that notes its shell's pid (its process group) in $MARK.pid, marks and waits.
const MARK_AND_WAIT: &str = "echo $$ > $MARK.pid; touch $MARK; sleep 120";

/// The process group of a job started with `MARK_AND_WAIT`.
fn job_group(s: &Scenario, tag: &str) -> i32 {
    fs::read_to_string(s.path(&format!("{tag}mark.pid"))).unwrap().trim().parse().unwrap()
}

/// Stops the daemons of a killed `surge run`: they outlive it.
fn stop_cluster_of_killed_run(s: &Scenario, tag: &str) -> Output {
    let cluster_file = s.path(&format!("{tag}buffer/cluster.toml"));
    Command::new(build_dir().join("surge")).arg("--cluster").arg(cluster_file).arg("stop").output().unwrap()
}

fn fuse_ready(test: &str) -> Option<()> {
    let ready = surge_fuse::mountpoint::unavailable().map_or(Ok(()), |why| Err(format!("FUSE is unavailable ({why})")));
    surge_testkit::skip_unless_ready(test, ready)
}

#[test]
fn surge_run_unmounts_when_signalled_and_when_killed_outright() {
    if fuse_ready("surge_run_unmounts_when_signalled_and_when_killed_outright").is_none() {
        return;
    }
    let s = Scenario::new("unmounts");
    let child = start_marked_job(&s, "term-", "echo kept > $M/kept; touch $MARK; sleep 120");
    assert!(matches!(mount_state(&s), surge_fuse::mountpoint::State::Live { .. }));
    // SAFETY: signalling the surge run this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.finish_within(Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{}", text(&out));
    assert_eq!(mount_state(&s), surge_fuse::mountpoint::State::Unmounted, "SIGTERM left the mount");
    assert_eq!(fs::read_to_string(s.path("term-pfs/kept")).unwrap(), "kept\n");

    // Killed outright, surge run cannot unmount: its mount server, told by
    // the kernel that its parent died, unmounts itself.
    let child = start_marked_job(&s, "kill-", MARK_AND_WAIT);
    let job = job_group(&s, "kill-");
    // SAFETY: killing the surge run and job shell this test started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
        libc::kill(-job, libc::SIGKILL);
    }
    child.finish_within(Duration::from_secs(10));
    surge_testkit::eventually("the mount of a killed surge run goes", Duration::from_secs(10), || {
        mount_state(&s) == surge_fuse::mountpoint::State::Unmounted
    });
    let stop = stop_cluster_of_killed_run(&s, "kill-");
    assert!(stop.status.success(), "the killed run's daemons stay until stopped: {}", text(&stop));
}

#[test]
fn a_killed_mount_server_fails_the_jobs_io_with_enotconn_and_leaves_no_stale_mount() {
    if fuse_ready("a_killed_mount_server_fails_the_jobs_io_with_enotconn_and_leaves_no_stale_mount").is_none() {
        return;
    }
    let s = Scenario::new("server-killed");
    let script = "echo kept > $M/kept; touch $MARK; while [ ! -e $GO ]; do sleep 0.05; done; cat $M/kept";
    let child = start_marked_job(&s, "", script);
    // SAFETY: killing the mount server of the surge run this test started.
    unsafe { libc::kill(server_pid(&s), libc::SIGKILL) };
    // (It stays a zombie of surge run's until the job ends, so the mount
    // table still names a live pid; the kernel has cut the mount off.)
    let kept = format!("{}/kept", Mode::FuseWithPreload.mount(&s));
    surge_testkit::eventually("the mount gives ENOTCONN", Duration::from_secs(10), || {
        fs::metadata(&kept).is_err_and(|e| e.raw_os_error() == Some(libc::ENOTCONN))
    });
    fs::write(s.path("go"), b"").unwrap();
    let started = Instant::now();
    let out = child.finish_within(Duration::from_secs(60));
    assert!(started.elapsed() < Duration::from_secs(30), "no hang: {:?}", started.elapsed());
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "the job's read fails: {all}");
    assert!(all.contains("Transport endpoint is not connected"), "ENOTCONN reaches the program: {all}");
    assert_eq!(mount_state(&s), surge_fuse::mountpoint::State::Unmounted, "surge run removes the stale mount");
    assert_eq!(fs::read_to_string(s.path("pfs/kept")).unwrap(), "kept\n", "the data was on the daemons");
}

#[test]
fn a_stale_mount_left_by_a_crash_is_repaired_by_the_next_surge_run() {
    if fuse_ready("a_stale_mount_left_by_a_crash_is_repaired_by_the_next_surge_run").is_none() {
        return;
    }
    let s = Scenario::new("stale");
    let child = start_marked_job(&s, "crash-", MARK_AND_WAIT);
    let job = job_group(&s, "crash-");
    // The whole node side crashes at once: nobody is left to unmount.
    // SAFETY: killing processes this test started.
    unsafe {
        libc::kill(server_pid(&s), libc::SIGKILL);
        libc::kill(child.id() as i32, libc::SIGKILL);
        libc::kill(-job, libc::SIGKILL);
    }
    child.finish_within(Duration::from_secs(10));
    surge_testkit::eventually("the mount turns stale", Duration::from_secs(10), || {
        mount_state(&s) == surge_fuse::mountpoint::State::Stale
    });
    stop_cluster_of_killed_run(&s, "crash-");

    let m = Mode::FuseWithPreload.mount(&s);
    let out = s.surge_run_in(Mode::FuseWithPreload, "", &[("M", &m)], &["sh", "-c", "echo again > $M/again"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("removed the stale Surge mount"), "{}", text(&out));
    assert_eq!(fs::read_to_string(s.path("pfs/again")).unwrap(), "again\n");
}

/// A process the job left running (in a session of its own, so the job's
/// end does not take it along) keeps writing while `surge run` stages out:
/// the file has no current PFS copy, so the buffer stays and the run says so.
#[test]
fn surge_run_keeps_the_buffer_when_a_process_the_job_left_writes_after_the_stage_out() {
    let s = Scenario::new("late-writer");
    let pid_file = s.path("writer.pid");
    let writer = "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\nfd = os.open('/surge/late', os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)\nend = time.time() + 8\nwhile time.time() < end:\n    os.write(fd, b'x' * 4096)\n    time.sleep(0.005)\n";
    let script = format!(
        "setsid python3 -c \"$WRITER\" {} < /dev/null > /dev/null 2>&1 & while [ ! -s {} ]; do sleep 0.05; done; sleep 0.3",
        pid_file.display(),
        pid_file.display()
    );
    let out = s.surge_run(&[("WRITER", writer)], &["sh", "-c", &script]);
    if let Ok(pid) = fs::read_to_string(&pid_file).unwrap_or_default().trim().parse::<i32>() {
        // SAFETY: ending the writer this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let all = text(&out);
    assert_eq!(out.status.code(), Some(75), "a file without a current PFS copy is a failed stage-out: {all}");
    assert!(
        all.contains("no current PFS copy") || all.contains("changed during stage-out"),
        "the run names the file that changed: {all}"
    );
    assert!(s.path("buffer").exists(), "the buffer holding the only current copy was removed");
}

/// Open MPI's mpirun changes into `-wdir` in the child it forks, then
/// execs the rank: in preload-only mode the ranks' relative paths land in
/// Surge. Between fork and exec Open MPI closes every descriptor, the
/// interposer's connections to the daemons too: the forked child leaves
/// those numbers alone (they may name other files by then) and the rank
/// connects again, in a debug build as in a release build.
#[test]
fn in_preload_only_mode_mpirun_wdir_ranks_write_relative_paths_in_surge() {
    Scenario::new("mpirun-wdir-preload").compare_in(
        &[Mode::PreloadOnly],
        r#"
        mkdir -p $O/host && cd $O/host
        mkdir -p $D/w
        mpirun --oversubscribe -np 2 -x SURGE_TEST_VALUE=xvalue -wdir $D/w sh -c 'touch rank-$OMPI_COMM_WORLD_RANK-$SURGE_TEST_VALUE; pwd' > $O/mpirun
        ls $D/w > $O/ls
        "#,
    );
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

/// Preload-only mode: shell redirections, here-docs and `exec >` give the
/// programs standard streams over their Surge files, served by the
/// interposer: nothing fails, nothing is suspect, every byte arrives.
#[test]
fn in_preload_only_mode_shell_redirections_and_stdio_on_standard_streams_reach_surge() {
    let s = Scenario::new("stdio-streams");
    let out = s.surge_run(
        &[],
        &[
            "bash",
            "-c",
            "seq 1 1000 > /surge/seq; bash -c 'echo hi > /surge/bash'; cat /etc/services > /surge/cat; \
             md5sum < /surge/cat; wc -c < /surge/cat; grep -c tcp /surge/cat > /surge/grep; \
             printf 'dash builtin\\n' > /surge/builtin; dash -c 'echo dash > /surge/dash'; \
             python3 -c 'import sys; print(\"out\"); print(\"err\", file=sys.stderr)' > /surge/py 2> /surge/pyerr; \
             cat > /surge/heredoc <<'EOF'\nline one\nline two\nEOF\n\
             exec 4>&1; exec > /surge/log 2>&1; echo logged; seq 1 3; exec 1>&4 4>&-; echo back",
        ],
    );
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(!all.contains("suspect"), "no stream failed: {all}");
    let pfs = |name: &str| fs::read(s.path(&format!("pfs/{name}"))).unwrap();
    let seq: String = (1..=1000).map(|n| format!("{n}\n")).collect();
    assert_eq!(pfs("seq"), seq.as_bytes());
    let services = fs::read("/etc/services").unwrap();
    assert_eq!(pfs("cat"), services, "cat writes with write(2)");
    let md5 = Command::new("md5sum").arg("/etc/services").output().unwrap();
    let md5 = String::from_utf8_lossy(&md5.stdout).split_whitespace().next().unwrap().to_string();
    assert!(all.contains(&format!("{md5}  -")) && all.contains(&format!("{}\n", services.len())), "{all}");
    let tcp = services.split(|b| *b == b'\n').filter(|l| l.windows(3).any(|w| w == b"tcp")).count();
    assert_eq!(pfs("grep"), format!("{tcp}\n").as_bytes());
    for (name, content) in [
        ("bash", "hi\n"),
        ("builtin", "dash builtin\n"),
        ("dash", "dash\n"),
        ("py", "out\n"),
        ("pyerr", "err\n"),
        ("heredoc", "line one\nline two\n"),
        ("log", "logged\n1\n2\n3\n"),
    ] {
        assert_eq!(String::from_utf8_lossy(&pfs(name)), content, "{name}");
    }
    assert!(all.contains("back"), "{all}");
}

/// An object file changed behind its daemon (here: stray bytes appended to
/// daemon 1's object while the job runs) is refused by every read path, in
/// every mode: the program's read fails with EIO, never returning bytes that
/// were not written, and the file is not staged out, so `surge run` fails
/// naming it.
#[test]
fn an_object_extended_behind_its_daemon_is_eio_to_programs_in_every_mode() {
    let s = Scenario::new("tampered");
    for mode in Mode::ALL {
        if !mode.available(s.name) {
            continue;
        }
        let tag = format!("{mode:?}-");
        let mount = mode.mount(&s);
        let objects = s.path(&format!("{tag}buffer/daemon-1/objects")).display().to_string();
        let script = format!(
            "head -c 2097152 /dev/urandom > {mount}/f; cat {mount}/f > /dev/null; \
             obj=$(find {objects} -type f -size 1024k ! -name '*.sum'); printf stray >> \"$obj\"; \
             if cat {mount}/f > /dev/null 2> {err}; then echo served; else echo refused; fi",
            err = s.path(&format!("{tag}cat.err")).display()
        );
        let out = s.surge_run_in(mode, &tag, &[], &["sh", "-c", &script]);
        let all = text(&out);
        let said = |word: &str| all.lines().any(|line| line == word);
        assert!(said("refused") && !said("served"), "{mode:?}: {all}");
        let err = fs::read_to_string(s.path(&format!("{tag}cat.err"))).unwrap();
        assert!(err.contains("Input/output error"), "{mode:?}: {err}");
        assert!(!out.status.success() && all.contains("/f"), "{mode:?}: surge run must fail naming the file: {all}");
        assert!(!s.path(&format!("{tag}pfs/f")).exists(), "{mode:?}: a tampered file was staged out");
    }
}
