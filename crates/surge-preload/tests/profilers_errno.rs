//! What programs see beyond their bytes: errno after calls that succeeded
//! (netCDF reads it after a short read), netCDF's own tools on its three
//! file formats, and profilers preloaded beside the interposer (Darshan)
//! that must see every byte the program moved on Surge and none of
//! Surge's own files. Each runs on a plain directory and under `surge run`
//! in every mode, through the harness in `common`.

mod common;

use common::{build_dir, text, workload, Mode, Scenario};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// workloads/errno_kept.c sets errno to a sentinel before each call the
/// shim wraps and prints whether the call kept it: the output on Surge
/// must be the plain directory's, where libc keeps it.
#[test]
fn every_wrapped_call_that_succeeds_leaves_errno_as_it_was_in_every_mode() {
    let prog = workload("errno_kept");
    Scenario::new("errno").compare(&format!("mkdir -p $D && {} $D > $O/errno", prog.display()));
}

/// netCDF's tools (Debian's netcdf-bin), or why not.
fn netcdf_ready(test: &str) -> Option<()> {
    let ready = match Command::new("ncdump").output() {
        // ncdump without arguments prints its usage and exits 1.
        Ok(out) if text(&out).contains("ncdump") => Ok(()),
        Ok(out) => Err(format!("ncdump does not run: {}", text(&out))),
        Err(e) => Err(format!("netCDF's tools are not installed (scripts/setup.sh installs netcdf-bin): {e}")),
    };
    surge_testkit::skip_unless_ready(test, ready)
}

/// netCDF, the file format of most climate and weather codes, on its
/// three formats: classic and 64-bit offset (netCDF's own posixio, which
/// takes a short read with errno set for an error) and netCDF-4 (HDF5).
#[test]
fn netcdf_ncgen_ncdump_and_nccopy_on_classic_64_bit_offset_and_netcdf_4_files_in_every_mode() {
    if netcdf_ready("netcdf_ncgen_ncdump_and_nccopy_on_classic_64_bit_offset_and_netcdf_4_files_in_every_mode")
        .is_none()
    {
        return;
    }
    Scenario::new("netcdf").compare(
        r#"
        mkdir -p $D
        cat > $D/climate.cdl <<'CDL'
netcdf climate {
dimensions:
    time = UNLIMITED ;
    lat = 4 ;
    lon = 5 ;
variables:
    double time(time) ;
        time:units = "days since 2000-01-01" ;
    float lat(lat) ;
    float lon(lon) ;
    float tas(time, lat, lon) ;
        tas:long_name = "near-surface air temperature" ;
        tas:units = "K" ;
    int flag(lat) ;
        :title = "Surge netCDF scenario" ;
data:
    time = 0, 1, 2 ;
    lat = -45, -15, 15, 45 ;
    lon = 0, 72, 144, 216, 288 ;
    tas = 270.5, 271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 289,
          270.5, 271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 289,
          270.5, 271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 289 ;
    flag = 1, 2, 3, 4 ;
}
CDL
        cd $D
        ncgen -k classic -o classic.nc climate.cdl
        ncgen -k 64-bit-offset -o offset64.nc climate.cdl
        ncgen -k netCDF-4 -o nc4.nc climate.cdl
        for f in classic offset64 nc4; do
            ncdump -k $f.nc > $O/$f.kind
            ncdump $f.nc > $O/$f.cdl
            ncdump -v tas -f c $f.nc > $O/$f.tas
        done
        nccopy -k netCDF-4 classic.nc classic-to-nc4.nc
        nccopy -k classic classic-to-nc4.nc back-to-classic.nc
        nccopy -k 64-bit-offset nc4.nc nc4-to-offset64.nc
        ncdump classic-to-nc4.nc > $O/classic-to-nc4.cdl
        ncdump nc4-to-offset64.nc > $O/nc4-to-offset64.cdl
        cmp classic.nc back-to-classic.nc && echo "the round trip gives the classic file back" > $O/round-trip
        "#,
    );
}

/// A library appended to LD_PRELOAD after the interposer inside the job
/// (workloads/io_counter.c, wrapping the calls as Darshan does) counts the
/// writes on Surge files in every mode: the interposer runs the program
/// again with itself last. A program started through the dynamic loader
/// (`ld.so PROGRAM`), which cannot be run again so, still runs.
#[test]
fn a_profiler_appended_after_the_interposer_counts_the_writes_and_loader_started_programs_still_run() {
    let test = "a_profiler_appended_after_the_interposer_counts_the_writes_and_loader_started_programs_still_run";
    let s = Scenario::new("profiler-after");
    let counter = workload("libio_counter.so");
    let script = r#"
        export LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$COUNTER"
        python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
for i in range(25):
    os.write(fd, b"%04d" % i * 1024)
os.close(fd)' $M/counted.dat
        loader=$(ls /lib64/ld-linux-*.so.* /lib/ld-linux-*.so.* 2>/dev/null | head -n 1)
        "$loader" /bin/sh -c 'echo started through the loader'
    "#;
    for mode in Mode::ALL {
        if !mode.available(test) {
            continue;
        }
        let tag = format!("{mode:?}-");
        let log = s.path(&format!("{tag}counted"));
        let mount = mode.mount(&s);
        let env = [
            ("COUNTER", counter.to_str().unwrap()),
            ("M", &mount),
            ("IO_COUNTER_PREFIX", &mount),
            ("IO_COUNTER_LOG", log.to_str().unwrap()),
        ];
        let out = s.surge_run_in(mode, &tag, &env, &["sh", "-ec", script]);
        assert!(out.status.success(), "{mode:?}: {}", text(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "started through the loader\n", "{mode:?}");
        // The one process that opened a file under the mount: python3.
        let counted = fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(counted, "python3 opens=1 writes=25 bytes=102400\n", "{mode:?}: what the profiler saw");
        let written: String = (0..25).map(|i| format!("{i:04}").repeat(1024)).collect();
        let staged = fs::read_to_string(s.path(&format!("{tag}pfs/counted.dat"))).unwrap();
        assert!(staged == written, "{mode:?}: the bytes reached Surge through the profiler");
    }
}

/// What Darshan's logs of the programs named `exe` in `logs` say: the
/// counters of `COUNTED` for each file under `data` (relative name,
/// counter: summed over the logs), and every other file they name.
fn darshan_logs(prefix: &Path, logs: &Path, exe: &str, data: &str) -> (BTreeMap<(String, String), i64>, Vec<String>) {
    const COUNTED: [&str; 7] = [
        "POSIX_OPENS",
        "POSIX_READS",
        "POSIX_WRITES",
        "POSIX_SEEKS",
        "POSIX_STATS",
        "POSIX_BYTES_READ",
        "POSIX_BYTES_WRITTEN",
    ];
    let (mut counters, mut others) = (BTreeMap::new(), Vec::new());
    let mut found = 0;
    for log in fs::read_dir(logs).unwrap_or_else(|e| panic!("{}: {e}", logs.display())) {
        let log = log.unwrap().path();
        if !log.file_name().unwrap().to_string_lossy().contains(&format!("_{exe}_id")) {
            continue;
        }
        found += 1;
        let out = Command::new(prefix.join("bin/darshan-parser")).arg(&log).output().unwrap();
        assert!(out.status.success(), "darshan-parser {}: {}", log.display(), text(&out));
        // module, rank, record id, counter, value, file name, mount point, file system
        for line in String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.starts_with('#')) {
            let fields: Vec<&str> = line.split('\t').collect();
            let [_, _, _, counter, value, file, ..] = fields[..] else { continue };
            if let Some(name) = file.strip_prefix(data).and_then(|f| f.strip_prefix('/')) {
                if COUNTED.contains(&counter) {
                    *counters.entry((name.to_string(), counter.to_string())).or_insert(0) +=
                        value.parse::<i64>().unwrap();
                }
            } else if !file.starts_with("<STD") && !file.starts_with("heatmap:") && !others.iter().any(|o| o == file) {
                others.push(file.to_string());
            }
        }
    }
    assert!(found > 0, "no Darshan log of {exe} in {}", logs.display());
    (counters, others)
}

/// A profiler preloaded before `surge run` (the order Darshan's
/// documentation gives) or appended after the interposer inside the job
/// counts every byte the program moves on Surge, as on a plain directory,
/// in every mode; and Surge's own files (cluster file, secret, job
/// profile, writers journal, lock files), which the interposer reads and
/// writes inside the program, appear in no log of the program's.
#[test]
fn darshan_before_or_after_the_interposer_counts_the_bytes_of_surge_files_and_none_of_surges_own() {
    let test = "darshan_before_or_after_the_interposer_counts_the_bytes_of_surge_files_and_none_of_surges_own";
    let Some(prefix) = darshan(test) else { return };
    let library = prefix.join("lib/libdarshan.so").display().to_string();
    let s = Scenario::new("darshan");
    // $PROFILER is appended to LD_PRELOAD inside the job when set.
    let script = r#"
        [ -z "$PROFILER" ] || export LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$PROFILER"
        mkdir -p $D
        dd if=/dev/zero of=$D/data bs=4096 count=25 status=none
        dd if=$D/data of=$D/copy bs=1000 status=none
        dd if=$D/copy of=/dev/null bs=65536 status=none
    "#;
    let run_logs = |name: &str| {
        let logs = s.path(name);
        fs::create_dir_all(&logs).unwrap();
        logs
    };
    let plain_data = s.path("plain");
    let logs = run_logs("plain-logs");
    let plain = Command::new("sh")
        .args(["-ec", script])
        .env("D", &plain_data)
        .env("LD_PRELOAD", &library)
        .env("DARSHAN_ENABLE_NONMPI", "1")
        .env("DARSHAN_LOGPATH", &logs)
        .output()
        .unwrap();
    assert!(plain.status.success(), "on a plain directory: {}", text(&plain));
    let (want, others) = darshan_logs(&prefix, &logs, "dd", plain_data.to_str().unwrap());
    assert_eq!(want[&("data".to_string(), "POSIX_BYTES_WRITTEN".to_string())], 102400, "{want:?}");
    assert!(others.is_empty(), "the plain run's logs name only its files: {others:?}");
    for mode in Mode::ALL {
        if !mode.available(test) {
            continue;
        }
        for before in [true, false] {
            let tag = format!("{mode:?}-{}-", if before { "before" } else { "after" });
            let logs = run_logs(&format!("{tag}logs"));
            let data = format!("{}/darshan", mode.mount(&s));
            let mut env =
                vec![("D", data.as_str()), ("DARSHAN_ENABLE_NONMPI", "1"), ("DARSHAN_LOGPATH", logs.to_str().unwrap())];
            env.push(if before { ("LD_PRELOAD", library.as_str()) } else { ("PROFILER", library.as_str()) });
            let out = s.surge_run_in(mode, &tag, &env, &["sh", "-ec", script]);
            assert!(out.status.success(), "{tag}: {}", text(&out));
            let (got, others) = darshan_logs(&prefix, &logs, "dd", &data);
            assert_eq!(got, want, "{tag}: Darshan's counters of the Surge files differ from a plain directory's");
            assert!(others.is_empty(), "{tag}: the program's logs name files that are not its own: {others:?}");
        }
    }
}

/// Darshan's runtime and parser, built once from the archive in
/// ../shared/third_party into target/darshan-3.5.0 (kept for later runs):
/// its install prefix, or why not.
fn darshan(test: &str) -> Option<PathBuf> {
    let target = build_dir().parent().unwrap().to_path_buf();
    let prefix = target.join("darshan-3.5.0");
    let built = || prefix.join("lib/libdarshan.so").exists() && prefix.join("bin/darshan-parser").exists();
    let archive = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/third_party/darshan-3.5.0.tar.gz");
    let have = |tool: &str| {
        Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
    };
    let ready = if built() {
        Ok(prefix.clone())
    } else if !archive.exists() {
        Err(format!("the Darshan sources {} are missing", archive.display()))
    } else if let Some(tool) = ["autoreconf", "libtoolize", "make", "cc"].into_iter().find(|t| !have(t)) {
        Err(format!("{tool} is needed to build Darshan (scripts/setup.sh installs autoconf, automake and libtool)"))
    } else {
        build_darshan(&archive, &target, &prefix).map(|()| prefix.clone())
    };
    surge_testkit::skip_unless_ready(test, ready)
}

/// Darshan 3.5.0 without MPI (it then instruments every program when
/// DARSHAN_ENABLE_NONMPI is set), logs in $DARSHAN_LOGPATH; built in a
/// scratch directory and installed there (DESTDIR), then moved into
/// `prefix` whole, so that a build cut short leaves nothing half made.
fn build_darshan(archive: &Path, target: &Path, prefix: &Path) -> Result<(), String> {
    let scratch = tempfile::tempdir_in(target).map_err(|e| e.to_string())?;
    let src = scratch.path().join("darshan-3.5.0");
    let stage = scratch.path().join("stage");
    let configure = format!(
        "../configure --prefix={} --without-mpi --with-log-path-by-env=DARSHAN_LOGPATH --with-jobid-env=NONE CC=cc",
        prefix.display()
    );
    let steps: [(String, PathBuf); 5] = [
        (format!("tar xzf {}", archive.display()), scratch.path().to_path_buf()),
        ("./prepare.sh".into(), src.clone()),
        (format!("mkdir -p build && cd build && {configure}"), src.clone()),
        ("make -j2".into(), src.join("build")),
        (format!("make install DESTDIR={}", stage.display()), src.join("build")),
    ];
    for (step, dir) in &steps {
        let out =
            Command::new("sh").args(["-c", step]).current_dir(dir).output().map_err(|e| format!("{step}: {e}"))?;
        if !out.status.success() {
            let all = text(&out);
            return Err(format!("building Darshan failed at `{step}`: {}", &all[all.len().saturating_sub(2000)..]));
        }
    }
    let staged = stage.join(prefix.strip_prefix("/").unwrap());
    match fs::rename(&staged, prefix) {
        Ok(()) => Ok(()),
        Err(_) if prefix.join("lib/libdarshan.so").exists() => Ok(()), // another run put it there first
        Err(e) => Err(format!("cannot move Darshan to {}: {e}", prefix.display())),
    }
}
