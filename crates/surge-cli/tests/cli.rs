//! End-to-end tests of the `surge` command driving real `surged` daemons.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use surge_testkit::cluster::{surge_bin, Cluster};
use surge_testkit::device::SmallDevice;
use surge_testkit::pattern;

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| !s.contains(") Z")).unwrap_or(false)
}

#[test]
fn files_of_many_sizes_and_layouts_round_trip_through_cp_cat_and_stage_out() {
    let c = Cluster::start(3, &[]);
    c.ok(&["mkdir", "-p", "/a/one", "/a/wide"]);
    c.ok(&["setstripe", "-c", "1", "-S", "64K", "/a/one"]);
    c.ok(&["setstripe", "-c", "-1", "-S", "128K", "-i", "2", "/a/wide"]);
    let sizes = [0usize, 1, 4095, 65536, (1 << 20) - 1, (1 << 20) + 1, (5 << 20) + 13];
    for dir in ["one", "wide"] {
        for (i, &size) in sizes.iter().enumerate() {
            let local = c.local(&format!("{dir}-{size}"));
            fs::write(&local, pattern(i as u64, size)).unwrap();
            c.ok(&["cp", local.to_str().unwrap(), &format!("/surge/a/{dir}/f{size}")]);
        }
    }
    // Every byte back, through cat and through cp to a local file.
    for dir in ["one", "wide"] {
        for (i, &size) in sizes.iter().enumerate() {
            let out = c.surge_with(&["cat", &format!("/a/{dir}/f{size}")]);
            assert!(out.status.success());
            assert_eq!(out.stdout, pattern(i as u64, size), "cat /a/{dir}/f{size}");
            let back = c.local(&format!("back-{dir}-{size}"));
            c.ok(&["cp", &format!("surge:/a/{dir}/f{size}"), back.to_str().unwrap()]);
            assert_eq!(fs::read(&back).unwrap(), pattern(i as u64, size));
        }
    }
    let stripe = c.ok(&["getstripe", "/a/wide/f1048577"]);
    assert!(
        stripe.contains("stripe_count 3") && stripe.contains("stripe_size 131072") && stripe.contains("first 2"),
        "{stripe}"
    );
    let stripe = c.ok(&["getstripe", "/a/one/f0"]);
    assert!(stripe.contains("stripe_count 1") && stripe.contains("stripe_size 65536"), "{stripe}");
    let listing = c.ok(&["ls", "-l", "/a/wide"]);
    assert!(listing.contains("5242893") && listing.contains("buffer"), "{listing}");

    c.ok(&["stage-out", "--all", "--quiet"]);
    for dir in ["one", "wide"] {
        for (i, &size) in sizes.iter().enumerate() {
            let staged = c.pfs().join(format!("a/{dir}/f{size}"));
            assert_eq!(fs::read(&staged).unwrap(), pattern(i as u64, size), "{}", staged.display());
        }
    }
    assert!(c.ok(&["ls", "-l", "/a/wide"]).contains("staged"));
    // Nothing left to stage; a forced run copies again.
    assert!(c.ok(&["stage-out", "--all", "--quiet"]).contains("staged out 0 file(s)"));
    assert!(c.ok(&["stage-out", "--force", "--quiet", "/a/one"]).contains("staged out 7 file(s)"));

    let status = c.ok(&["status"]);
    assert!(status.contains("3/3 daemons up"), "{status}");
    assert!(status.contains("removed files awaiting deletion: 0 (0 kept open by a client); orphan objects since daemon 0 started: 0 found, 0 deleted"), "{status}");
    c.ok(&["rm", "-r", "/a"]);
    assert!(c.ok(&["ls", "/"]).trim().is_empty());
    assert!(!c.pfs().join("a").exists(), "removing a staged file removes its PFS copy too");
}

#[test]
fn recursive_copy_rename_free_tree_and_errors_are_errno_faithful() {
    let c = Cluster::start(2, &[]);
    let tree = c.local("tree");
    fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    fs::write(tree.join("top.txt"), b"top").unwrap();
    fs::write(tree.join("sub/deeper/x.bin"), pattern(3, 300_000)).unwrap();
    c.ok(&["cp", "-r", tree.to_str().unwrap(), "/surge/"]);
    assert_eq!(c.surge_with(&["cat", "/tree/sub/deeper/x.bin"]).stdout, pattern(3, 300_000));
    let out = c.local("out");
    c.ok(&["cp", "-r", "surge:/tree", out.to_str().unwrap()]);
    assert_eq!(fs::read(out.join("sub/deeper/x.bin")).unwrap(), pattern(3, 300_000));
    assert_eq!(fs::read(out.join("top.txt")).unwrap(), b"top");

    assert!(c.fails(&["cat", "/nope"]).contains("No such file or directory"));
    assert!(c.fails(&["mkdir", "/tree"]).contains("File exists"));
    assert!(c.fails(&["mkdir", "/tree/top.txt/x"]).contains("Not a directory"));
    assert!(c.fails(&["rm", "/tree"]).contains("is a directory"));
    assert!(c.fails(&["cp", tree.to_str().unwrap(), "/surge/t2"]).contains("use -r"));
    assert!(c.fails(&["setstripe", "-c", "9", "/tree"]).contains("exceeds"));
    assert!(c.fails(&["setstripe", "-c", "1", "/tree/top.txt"]).contains("fixed when it is created"));
    assert!(c.fails(&["setstripe", "-c", "-5", "/tree"]).contains("use -1 (every daemon)"));
    assert!(c.fails(&["setstripe", "-i", "-7", "/tree"]).contains("use -1 (automatic)"));
    assert!(c.fails(&["setstripe", "-S", "100K", "/tree"]).contains("multiple of 64 KiB"));
    assert!(c.fails(&["start", "--daemons", "0"]).contains("at least 1"));
    assert!(c.fails(&["start", "--listen", "eth0"]).contains("give an IP address"));
    c.ok(&["rm", "-f", "/not-there"]);
}

#[test]
fn a_pfs_link_is_listed_as_a_link_and_rm_removes_the_link_alone() {
    let c = Cluster::start(2, &[]);
    fs::create_dir_all(c.pfs().join("tables")).unwrap();
    fs::write(c.pfs().join("tables/RRTM_DATA"), b"table").unwrap();
    std::os::unix::fs::symlink("tables/RRTM_DATA", c.pfs().join("RRTM_DATA")).unwrap();
    let listing = c.ok(&["ls", "-l", "/"]);
    assert!(listing.lines().any(|l| l.starts_with("lrwxrwxrwx") && l.contains("RRTM_DATA")), "{listing}");
    c.ok(&["rm", "/RRTM_DATA"]);
    assert!(!c.pfs().join("RRTM_DATA").is_symlink());
    assert_eq!(fs::read(c.pfs().join("tables/RRTM_DATA")).unwrap(), b"table");
}

#[test]
fn a_file_only_on_the_pfs_is_listed_and_read_from_there() {
    let c = Cluster::start(2, &[]);
    fs::create_dir_all(c.pfs().join("inputs")).unwrap();
    fs::write(c.pfs().join("inputs/mesh.dat"), pattern(9, 200_000)).unwrap();
    assert!(c.ok(&["ls", "/"]).contains("inputs"));
    let listing = c.ok(&["ls", "-l", "/inputs"]);
    assert!(listing.contains("mesh.dat") && listing.contains("pfs") && listing.contains("200000"), "{listing}");
    let out = c.surge_with(&["cat", "/inputs/mesh.dat"]);
    assert_eq!(out.stdout, pattern(9, 200_000));
}

#[test]
fn a_full_buffer_gives_enospc_and_keeps_what_was_written() {
    let c = Cluster::start(1, &["--capacity", "4M"]);
    let small = c.local("small");
    fs::write(&small, pattern(1, 1 << 20)).unwrap();
    c.ok(&["cp", small.to_str().unwrap(), "/surge/kept"]);
    let big = c.local("big");
    fs::write(&big, pattern(2, 8 << 20)).unwrap();
    let err = c.fails(&["cp", big.to_str().unwrap(), "/surge/too-big"]);
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(c.surge_with(&["cat", "/kept"]).stdout, pattern(1, 1 << 20));
}

#[test]
fn a_dead_daemon_is_reported_and_never_hangs_a_client() {
    let c = Cluster::start(2, &[]);
    let f = c.local("f");
    fs::write(&f, pattern(5, 4 << 20)).unwrap();
    c.ok(&["cp", f.to_str().unwrap(), "/surge/f"]);
    kill_and_reap(c.pids()[1]);
    let started = Instant::now();
    let err = c.fails(&["cat", "/f"]);
    assert!(started.elapsed() < Duration::from_secs(10), "cat of a file on a dead daemon took {:?}", started.elapsed());
    assert!(err.contains("EIO") && err.contains("daemon 1"), "{err}");
    let status = c.surge_with(&["status"]);
    assert_eq!(status.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&status.stdout).contains("DOWN"));
}

fn kill_and_reap(pid: u32) {
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    while alive(pid) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_daemon_that_died_is_restarted_in_place_and_serves_its_files_again() {
    let c = Cluster::start(3, &[]);
    let f = c.local("f");
    let data = pattern(9, 5 << 20);
    fs::write(&f, &data).unwrap();
    c.ok(&["cp", f.to_str().unwrap(), "/surge/f"]);
    let before = c.pids();
    let err = c.fails(&["start", "--daemon", "1"]);
    assert!(err.contains("is running"), "{err}");
    let err = c.fails(&["start", "--daemon", "7"]);
    assert!(err.contains("no daemon 7"), "{err}");

    // A data daemon and the metadata daemon die; the others keep running.
    kill_and_reap(before[1]);
    kill_and_reap(before[0]);
    c.fails(&["cat", "/f"]);
    assert!(c.ok(&["start", "--daemon", "1"]).contains("daemon 1 is back"));
    assert!(c.ok(&["start", "--daemon", "0"]).contains("daemon 0 is back"));
    let after = c.pids();
    assert_eq!(after[2], before[2], "the daemon that did not die was restarted");
    assert!(after[0] != before[0] && after[1] != before[1] && alive(after[0]) && alive(after[1]));

    let back = c.local("back");
    c.ok(&["cp", "/surge/f", back.to_str().unwrap()]);
    assert!(fs::read(&back).unwrap() == data, "the restarted daemons lost bytes");
    c.ok(&["cp", f.to_str().unwrap(), "/surge/g"]);
    c.ok(&["status"]);
    c.ok(&["stop"]);
    assert!(!alive(after[0]) && !alive(after[1]), "stop left a restarted daemon running");
}

#[test]
fn a_daemon_whose_directory_was_wiped_makes_its_directory_and_log_again_and_comes_back_once_the_loss_is_accepted() {
    let c = Cluster::start(2, &[]);
    let dir = c.buffer().join("daemon-1");
    kill_and_reap(c.pids()[1]);
    fs::remove_dir_all(&dir).unwrap();
    // The daemon says what it lost (in the log made again), and comes back once that is accepted.
    let err = c.fails(&["start", "--daemon", "1"]);
    assert!(err.contains("daemon 1 lost its store"), "{err}");
    assert_eq!(mode_of(&dir), 0o700);
    assert_eq!(mode_of(&dir.join("surged.log")), 0o600);
    assert!(c.ok(&["start", "--daemon", "1", "--accept-loss"]).contains("daemon 1 is back"));
    c.ok(&["stop"]);
}

#[test]
fn the_orphan_collectors_period_and_grace_given_to_surge_start_reach_the_daemons() {
    let c = Cluster::start(2, &["--collect-every", "1", "--orphan-grace", "0"]);
    let f = c.local("f");
    fs::write(&f, pattern(1, 12_345)).unwrap();
    c.ok(&["cp", f.to_str().unwrap(), "/surge/f"]);
    let [object] = &object_files_of_len(&c, 12_345)[..] else { panic!("one object of 12345 bytes expected") };
    // An object no file owns: its inode with a high bit flipped (the incarnation bits are random,
    // so setting one could leave it unchanged), in the same shard directory.
    let ino = u64::from_str_radix(&object.file_name().unwrap().to_string_lossy(), 16).unwrap();
    let orphan = object.with_file_name(format!("{:016x}", ino ^ 1 << 60));
    fs::copy(object, &orphan).unwrap();
    surge_testkit::eventually("the orphan is collected", Duration::from_secs(30), || !orphan.exists());
    assert_eq!(c.surge_with(&["cat", "/f"]).stdout, pattern(1, 12_345), "the collector took a live file's object");
}

/// Without a terminal (and with -q) each file that failed to stage is named
/// with its reason on stderr; `ls -l` fails when entries could not be listed.
#[test]
fn failures_to_stage_or_list_are_named_with_their_reason_without_a_terminal() {
    let c = Cluster::start(2, &[]);
    let f = c.local("f");
    fs::write(&f, pattern(7, 4 << 20)).unwrap();
    c.ok(&["mkdir", "/d"]);
    c.ok(&["cp", f.to_str().unwrap(), "/surge/d/f"]);
    // A directory in the way on the PFS: the copy cannot be put in place.
    fs::create_dir_all(c.pfs().join("d/f/in-the-way")).unwrap();
    for quiet in [&["--quiet"][..], &[]] {
        let mut args = vec!["stage-out", "/d"];
        args.extend_from_slice(quiet);
        let err = c.fails(&args);
        assert!(err.contains("stage-out of /d/f failed") && err.contains("directory"), "{args:?}: {err}");
    }
    kill_and_reap(c.pids()[1]);
    let err = c.fails(&["ls", "-l", "/d"]);
    assert!(err.contains("/d/f") && err.contains("EIO") && err.contains("1 entry could not be listed"), "{err}");
}

#[test]
fn a_daemon_that_stops_during_start_up_is_named_with_the_end_of_its_log() {
    let c = Cluster::start(1, &[]);
    // A second cluster (another cluster file) on the first one's buffer:
    // its daemon finds the buffer locked and exits.
    let other = Cluster::unstarted();
    let err = other.fails(&[
        "start",
        "--daemons",
        "1",
        "--buffer",
        c.buffer().to_str().unwrap(),
        "--pfs",
        c.pfs().to_str().unwrap(),
    ]);
    assert!(err.contains("daemon 0 exited during start-up"), "{err}");
    assert!(err.contains("daemon-0/surged.log says:") && err.contains("in use by another surged"), "{err}");
    c.ok(&["status"]);
}

#[test]
fn start_refuses_a_second_cluster_and_stop_ends_every_daemon() {
    let c = Cluster::start(2, &[]);
    let err = c.fails(&["start", "--buffer", c.buffer().to_str().unwrap(), "--pfs", c.pfs().to_str().unwrap()]);
    assert!(err.contains("already running") && err.contains("surge stop"), "{err}");
    let pids = c.pids();
    c.ok(&["stop"]);
    assert!(pids.iter().all(|&p| !alive(p)), "daemons still alive after stop");
    assert!(!c.cluster_file().exists());
}

#[test]
fn a_missing_or_wrong_cluster_file_or_secret_says_what_to_do() {
    let c = Cluster::unstarted();
    let err = c.fails(&["ls", "/"]);
    assert!(err.contains("surge start") && err.contains("SURGE_CLUSTER"), "{err}");
    fs::write(c.cluster_file(), "this is not toml [").unwrap();
    let err = c.fails(&["ls", "/"]);
    assert!(err.contains("not a valid Surge cluster file"), "{err}");

    let running = Cluster::start(1, &[]);
    let secret = running.cluster_file().with_extension("secret");
    fs::write(&secret, "00".repeat(32)).unwrap();
    let err = running.fails(&["ls", "/"]);
    assert!(err.contains("Permission denied") || err.contains("secret"), "{err}");
}

/// The cluster-wide connection defaults reach the cluster file and `surge
/// status`; the rate cap reaches every daemon; bad values are refused
/// before anything starts, and a client's bad SURGE_CONNS names itself.
#[test]
fn connection_settings_are_checked_written_and_reported() {
    let c = Cluster::unstarted();
    for (flag, value, says) in [
        ("--conns", "0", "1 to 16, or auto"),
        ("--conn-policy", "fastest", "ttos, ttom or auto"),
        ("--conn-rate", "0", "at least 1 byte/s"),
        ("--conn-rate", "fast", "not a rate"),
    ] {
        let err = c.fails(&[
            "start",
            "--buffer",
            c.buffer().to_str().unwrap(),
            "--pfs",
            c.pfs().to_str().unwrap(),
            flag,
            value,
        ]);
        assert!(err.contains(says), "{flag} {value}: {err}");
        assert!(!c.cluster_file().exists());
    }
    let c = Cluster::start(2, &["--conns", "4", "--conn-policy", "ttos", "--conn-rate", "200M"]);
    let file = fs::read_to_string(c.cluster_file()).unwrap();
    assert!(
        file.contains("[connections]") && file.contains("count = \"4\"") && file.contains("policy = \"ttos\""),
        "{file}"
    );
    let status = c.ok(&["status"]);
    assert!(
        status.contains("client connections per daemon: 4 (ttos policy") && status.contains("capped at 200 MB/s"),
        "{status}"
    );
    let toml_status = c.ok(&["status", "--toml"]);
    assert_eq!(toml_status.matches("conn_rate = 200000000").count(), 2, "{toml_status}");
    // Data moved through the daemons shows in their store meters.
    let src = c.local("m");
    fs::write(&src, pattern(9, 3 << 20)).unwrap();
    c.ok(&["cp", src.to_str().unwrap(), "surge:/m"]);
    let toml_status = c.ok(&["status", "--toml"]);
    let stored: u64 =
        toml_status.lines().filter_map(|l| l.strip_prefix("store_bytes = ")).map(|v| v.parse::<u64>().unwrap()).sum();
    assert_eq!(stored, 3 << 20, "{toml_status}");
    // ... and in the per-job load of their scheduling points.
    let served: u64 =
        toml_status.lines().filter_map(|l| l.strip_prefix("served_bytes = ")).map(|v| v.parse::<u64>().unwrap()).sum();
    assert_eq!(served, 3 << 20, "{toml_status}");
    assert!(c.ok(&["status"]).contains("jobs at each daemon's scheduling point:"));
    // A benchmark with impossible settings says so before bringing up a test bed.
    for bad in [["--threads", "0"], ["--bytes", "512K"]] {
        let err = c.fails(&["bench", "conns", bad[0], bad[1]]);
        assert!(err.contains("--bytes at least --xfer"), "{bad:?}: {err}");
    }
    let out = Command::new(surge_bin())
        .arg("--cluster")
        .arg(c.cluster_file())
        .args(["ls", "/"])
        .env("SURGE_CONNS", "many")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("SURGE_CONNS") && err.contains("1 to 16, or auto"), "{err}");
}

#[test]
fn help_is_available_for_every_command() {
    let c = Cluster::unstarted();
    for cmd in [
        "start",
        "stop",
        "status",
        "ls",
        "cat",
        "cp",
        "rm",
        "mkdir",
        "setstripe",
        "getstripe",
        "stage-out",
        "scrub",
        "fsck",
        "bench",
        "testbed",
    ] {
        let out = c.ok(&[cmd, "--help"]);
        assert!(out.contains("Usage"), "surge {cmd} --help: {out}");
    }
    let out = Command::new(surge_bin().with_file_name("surged")).arg("--help").output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Usage"));
}

#[test]
fn one_start_per_host_under_a_launcher_builds_one_cluster() {
    // What `mpirun --map-by ppr:1:node surge start` does on two hosts: two
    // ranks with the launcher's environment and a shared cluster file.
    let c = Cluster::unstarted();
    let launch = format!("test-{}", std::process::id());
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            Command::new(surge_bin())
                .arg("--cluster")
                .arg(c.cluster_file())
                .args(["start", "--daemons", "2", "--timeout", "20", "--buffer"])
                .arg(c.buffer())
                .arg("--pfs")
                .arg(c.pfs())
                .env("OMPI_COMM_WORLD_RANK", rank.to_string())
                .env("OMPI_COMM_WORLD_SIZE", "2")
                .env("OMPI_MCA_ess_base_jobid", &launch)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let ranks: Vec<Output> = ranks.into_iter().map(|r| r.wait_with_output().unwrap()).collect();
    for (rank, out) in ranks.iter().enumerate() {
        assert!(out.status.success(), "rank {rank}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(c.pids().len(), 4);
    let f = c.local("wide");
    fs::write(&f, pattern(4, 9 << 20)).unwrap();
    c.ok(&["cp", f.to_str().unwrap(), "/surge/wide"]);
    assert!(c.ok(&["getstripe", "/wide"]).contains("stripe_count 4"));
    assert_eq!(c.surge_with(&["cat", "/wide"]).stdout, pattern(4, 9 << 20));
    assert!(c.ok(&["status"]).contains("4/4 daemons up"));
}

#[test]
fn a_restarted_cluster_recovers_its_files_and_refuses_another_size() {
    let c = Cluster::start(2, &[]);
    let f = c.local("ckpt");
    fs::write(&f, pattern(8, 3 << 20)).unwrap();
    c.ok(&["mkdir", "/run1"]);
    c.ok(&["cp", f.to_str().unwrap(), "/surge/run1/ckpt"]);
    c.ok(&["stop"]);
    let (buffer, pfs) = (c.buffer(), c.pfs());
    let err =
        c.fails(&["start", "--daemons", "3", "--buffer", buffer.to_str().unwrap(), "--pfs", pfs.to_str().unwrap()]);
    assert!(err.contains("made for a cluster of 2 daemons"), "{err}");
    c.ok(&["start", "--daemons", "2", "--buffer", buffer.to_str().unwrap(), "--pfs", pfs.to_str().unwrap()]);
    assert_eq!(c.surge_with(&["cat", "/run1/ckpt"]).stdout, pattern(8, 3 << 20));
}

#[test]
fn a_full_buffer_device_keeps_the_namespace_working_and_rm_frees_space() {
    let c = Cluster::unstarted();
    let Some(device) =
        SmallDevice::mount("a_full_buffer_device_keeps_the_namespace_working_and_rm_frees_space", &c.buffer(), "32m")
    else {
        return;
    };
    let (buffer, pfs) = (c.buffer(), c.pfs());
    c.ok(&["start", "--daemons", "2", "--buffer", buffer.to_str().unwrap(), "--pfs", pfs.to_str().unwrap()]);
    let pids = c.pids();
    // The device is counted once: each daemon gets half of it.
    let status = c.ok(&["status", "--toml"]);
    assert_eq!(status.matches("capacity = 16777216").count(), 2, "{status}");
    // A directory big enough that renaming it rewrites more of the database than it has free.
    let client = surge_client::Client::connect(&c.cluster_file()).unwrap();
    client.mkdir("/many", 0o755).unwrap();
    for i in 0..2000 {
        client.create(&format!("/many/file-with-a-long-name-{i:05}"), 0o644, surge_client::Layout::INHERIT).unwrap();
    }

    // Data fills the buffer until ENOSPC.
    let data = pattern(7, 3 << 20);
    let source = c.local("data");
    fs::write(&source, &data).unwrap();
    let mut files = 0;
    let error = loop {
        let out = c.surge_with(&["cp", source.to_str().unwrap(), &format!("/surge/f{files}")]);
        if !out.status.success() {
            break String::from_utf8_lossy(&out.stderr).into_owned();
        }
        files += 1;
        assert!(files < 12, "32 MiB took {files} files of 3 MiB");
    };
    assert!(error.contains("No space left on device"), "{error}");
    // The failed copy holds what landed, with no holes.
    let partial = c.surge_with(&["cat", &format!("/f{files}")]).stdout;
    assert_eq!(partial, &data[..partial.len()]);

    // The namespace still works, even once something else takes the last byte.
    c.ok(&["mkdir", "/d"]);
    let filler = device.fill();
    client.rename("/f0", "/d/f0").unwrap();
    assert!(c.ok(&["ls", "-l", "/d"]).contains("f0"));
    let refused = c.fails(&["mkdir", "/e"]);
    assert!(refused.contains("full") && refused.contains("surge rm"), "{refused}");
    // The database itself runs out of space, and says so.
    let error = client.rename("/many", "/d/many").unwrap_err();
    assert_eq!(error.errno(), libc::ENOSPC, "{error}");
    fs::remove_file(filler).unwrap();
    client.rename("/many", "/d/many").unwrap();

    // rm frees space for a new file; the namespace changes again.
    c.ok(&["rm", "/d/f0", &format!("/f{files}")]);
    c.ok(&["cp", source.to_str().unwrap(), "/surge/new"]);
    assert_eq!(c.surge_with(&["cat", "/new"]).stdout, data);
    c.ok(&["mkdir", "/e"]);
    client.rename("/new", "/e/new").unwrap();
    assert!(c.ok(&["ls", "-l", "/e"]).contains("new"));
    // No daemon died, and their logs were not cut short by a panic.
    assert!(pids.iter().all(|&pid| alive(pid)), "a daemon died");
    for index in 0..2 {
        let log = fs::read_to_string(buffer.join(format!("daemon-{index}/surged.log"))).unwrap();
        assert!(!log.contains("panicked"), "{log}");
    }

    // A full device does not keep the cluster from starting again.
    drop(client);
    c.ok(&["stop"]);
    let filler = device.fill();
    let out = c.surge_with(&[
        "start",
        "--daemons",
        "2",
        "--buffer",
        buffer.to_str().unwrap(),
        "--pfs",
        pfs.to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() || said.contains("full"), "exit {:?}: {said}", out.status.code());
    assert_ne!(out.status.code(), Some(101), "{said}");
    fs::remove_file(filler).unwrap();
    if out.status.success() {
        c.ok(&["rm", "/e/new"]);
        assert!(c.ok(&["ls", "/"]).contains("e"));
    }
    drop(c);
    drop(device);
}

/// The object files of every daemon of `c` that are `len` bytes long.
fn object_files_of_len(c: &Cluster, len: u64) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![c.buffer()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                dirs.push(path);
            } else if meta.len() == len
                && path.parent().is_some_and(|p| p.parent().is_some_and(|o| o.ends_with("objects")))
            {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn scrub_names_a_flipped_byte_that_cat_and_stage_out_refuse_and_a_clean_tree_scrubs_clean() {
    let c = Cluster::start(2, &[]);
    c.ok(&["mkdir", "-p", "/t/good", "/t/bad"]);
    c.ok(&["setstripe", "-c", "1", "-S", "1M", "/t/bad"]);
    let (bad, good) = (c.local("bad"), c.local("good"));
    fs::write(&bad, pattern(1, 200_000)).unwrap();
    fs::write(&good, pattern(2, 50_000)).unwrap();
    c.ok(&["cp", bad.to_str().unwrap(), "/surge/t/bad/f"]);
    c.ok(&["cp", good.to_str().unwrap(), "/surge/t/good/g"]);
    let objects = object_files_of_len(&c, 200_000);
    assert_eq!(objects.len(), 1, "{objects:?}");
    surge_testkit::flip_byte(&objects[0], 130_000);

    let err = c.fails(&["cat", "/t/bad/f"]);
    assert!(err.contains("/t/bad/f") && err.contains("damaged") && err.contains("EIO"), "{err}");
    let err = c.fails(&["stage-out", "--quiet", "/t"]);
    assert!(err.contains("/t/bad/f"), "{err}");
    assert!(!c.pfs().join("t/bad/f").exists(), "a damaged file is never staged out");
    assert_eq!(fs::read(c.pfs().join("t/good/g")).unwrap(), pattern(2, 50_000));

    let out = c.surge_with(&["scrub", "/t"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Byte 130000 is in the 4 KiB block that starts at 126976.
    assert!(stdout.contains("/t/bad/f: damaged block at offset 126976 on daemon "), "{stdout}");
    assert!(stdout.contains("scrubbed 2 file(s)"), "{stdout}");
    assert!(c.ok(&["scrub", "/t/good", "/surge/t/good/g"]).contains("scrubbed 2 file(s)"));
}

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(path).unwrap().mode() & 0o777
}

#[test]
fn surge_start_refuses_a_buffer_directory_another_user_owns_or_others_may_write_to() {
    use std::os::unix::fs::PermissionsExt;
    let c = Cluster::unstarted();
    let (buffer, pfs) = (c.buffer(), c.pfs());
    let start = ["start", "--daemons", "1", "--buffer", buffer.to_str().unwrap(), "--pfs", pfs.to_str().unwrap()];
    fs::create_dir(&buffer).unwrap();
    fs::set_permissions(&buffer, fs::Permissions::from_mode(0o777)).unwrap();
    let err = c.fails(&start);
    assert!(err.contains(&format!("buffer directory {}", buffer.display())) && err.contains("mode 777"), "{err}");
    assert!(err.contains("chmod 700"), "{err}");
    assert!(!buffer.join("daemon-0").exists(), "surge start used the directory anyway");
    if unsafe { libc::geteuid() } == 0 {
        fs::set_permissions(&buffer, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&buffer, Some(65534), None).unwrap();
        let err = c.fails(&start);
        assert!(err.contains("owner uid 65534") && err.contains("another user owns it"), "{err}");
        assert!(!buffer.join("daemon-0").exists(), "surge start used the directory anyway");
    }
}

#[test]
fn surge_start_does_not_follow_a_symlinked_daemon_log() {
    let c = Cluster::unstarted();
    let (buffer, pfs) = (c.buffer(), c.pfs());
    fs::create_dir_all(buffer.join("daemon-0")).unwrap();
    let victim = c.local("victim.pth");
    fs::write(&victim, "import os\n").unwrap();
    std::os::unix::fs::symlink(&victim, buffer.join("daemon-0/surged.log")).unwrap();
    let err =
        c.fails(&["start", "--daemons", "1", "--buffer", buffer.to_str().unwrap(), "--pfs", pfs.to_str().unwrap()]);
    assert!(err.contains("surged.log") && err.contains("symbolic link"), "{err}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "import os\n");
}

#[test]
fn surge_start_creates_its_directories_0700_and_its_files_0600() {
    let c = Cluster::start(2, &[]);
    let buffer = c.buffer();
    for dir in [buffer.clone(), buffer.join("daemon-0"), buffer.join("daemon-1"), c.dir.path().join("cluster.toml.d")] {
        assert_eq!(mode_of(&dir), 0o700, "{}", dir.display());
    }
    let files = [
        c.cluster_file(),
        c.dir.path().join("cluster.secret"),
        buffer.join("daemon-0/surged.log"),
        buffer.join("daemon-1/surged.log"),
        buffer.join("daemon-0/namespace.redb"),
    ];
    for file in files {
        assert_eq!(mode_of(&file), 0o600, "{}", file.display());
    }
}

#[test]
fn surge_start_refuses_a_cluster_file_directly_in_a_shared_sticky_directory() {
    use std::os::unix::fs::PermissionsExt;
    // The shape of /tmp and /dev/shm, in a directory of the test's own.
    let c = Cluster::unstarted();
    fs::set_permissions(c.dir.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    let (buffer, pfs) = (c.local("buffer"), c.local("pfs"));
    let err =
        c.fails(&["start", "--daemons", "1", "--buffer", buffer.to_str().unwrap(), "--pfs", pfs.to_str().unwrap()]);
    assert!(err.contains("cluster file directory") && err.contains("shared directory"), "{err}");
    for left in ["cluster.toml", "cluster.secret", "cluster.toml.d"] {
        assert!(!c.dir.path().join(left).exists(), "surge start made {left} anyway");
    }
}

#[test]
fn a_command_whose_reader_went_away_ends_quietly_by_sigpipe_as_coreutils_do() {
    use std::os::unix::process::ExitStatusExt;
    let c = Cluster::start(1, &[]);
    c.ok(&["mkdir", "/d"]);
    let f = c.local("f");
    fs::write(&f, pattern(3, 300 << 10)).unwrap();
    c.ok(&["cp", f.to_str().unwrap(), "/surge/d/f"]);
    for args in [&["ls", "-l", "/d"][..], &["cat", "/d/f"], &["status"], &["getstripe", "/d/f"]] {
        // `| head -3` once head has gone: every write meets EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = c.command(args).stdout(writer).output().unwrap();
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "surge {args:?}: {}", out.status);
        assert!(out.stderr.is_empty(), "surge {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
