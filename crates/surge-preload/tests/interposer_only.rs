//! Compared scenarios of what used to differ with the interposer alone:
//! locks owned by the open file description across fork and exec, special
//! files under the mount path, programs stored in Surge, and `surge run` of
//! a script without `#!`. Each runs on a plain directory and under `surge
//! run` in every mode (common/mod.rs), as a user would.

mod common;

use common::{text, Mode, Scenario};

#[test]
fn surge_run_of_an_executable_without_a_shebang_runs_it_with_bin_sh_in_every_mode() {
    let s = Scenario::new("noshebang");
    let script = s.path("job");
    std::fs::write(&script, "echo \"ran by sh with $# arguments: $*\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for mode in Mode::ALL {
        if !mode.available(s.name) {
            continue;
        }
        let tag = format!("{mode:?}-");
        let out = s.surge_run_in(mode, &tag, &[], &[script.to_str().unwrap(), "a", "b c"]);
        assert!(out.status.success(), "{mode:?}: {}", text(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ran by sh with 2 arguments: a b c\n", "{mode:?}");
        // Named without a slash, found on PATH, as execvp finds it.
        let path = format!("{}:{}", s.dir.path().display(), std::env::var("PATH").unwrap());
        let out = s.surge_run_in(mode, &format!("{tag}path-"), &[("PATH", &path)], &["job"]);
        assert!(out.status.success(), "{mode:?} on PATH: {}", text(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ran by sh with 0 arguments: \n", "{mode:?}");
    }
}

#[test]
fn twenty_parallel_updaters_under_the_flock_man_page_idioms_lose_no_update_in_every_mode() {
    // flock(1)'s idioms: the lock is taken by an exec'd `flock` on a
    // descriptor the shell opened, and must hold until the last descriptor
    // of that open file description closes, not when `flock` exits.
    Scenario::new("flockidioms").compare(
        r#"
        mkdir -p $D
        cd $D
        echo 0 > c
        for i in $(seq 20); do ( flock 9; n=$(cat c); sleep 0.01; echo $((n+1)) > c ) 9>lock & done; wait
        echo "subshell with 9>lock: $(cat c)" >> $O/counts
        echo 0 > c
        for i in $(seq 20); do flock lockfile sh -c 'n=$(cat c); sleep 0.01; echo $((n+1)) > c' & done; wait
        echo "flock lockfile cmd: $(cat c)" >> $O/counts
        echo 0 > c
        for i in $(seq 20); do flock lockfile -c 'n=$(cat c); sleep 0.01; echo $((n+1)) > c' & done; wait
        echo "flock -c: $(cat c)" >> $O/counts
        # Shared holders admit each other and keep an exclusive one out.
        exec 8>shared
        flock -s 8
        ( flock -s -n 9 && echo "second shared lock: taken" || echo "second shared lock: refused" ) 9>shared >> $O/counts
        ( flock -x -n 9 && echo "exclusive while shared: taken" || echo "exclusive while shared: refused" ) 9>shared >> $O/counts
        # -n fails at once while another process holds the lock, and -w gives up.
        flock -x 8
        ( flock -n 9 && echo "-n while held: taken" || echo "-n while held: refused, status $?" ) 9>shared >> $O/counts
        ( flock -E 7 -w 0.2 9 && echo "-w while held: taken" || echo "-w while held: gave up, status $?" ) 9>shared >> $O/counts
        flock -u 8
        ( flock -n 9 && echo "-n once released: taken" ) 9>shared >> $O/counts
        # The lock held by an exec'd flock on an inherited descriptor stays
        # while the shell keeps the descriptor, and goes with its last close.
        exec 7>held
        flock 7
        sh -c 'flock -n 7 && echo "dup in a child: shares the lock"' >> $O/counts
        ( flock -n 9 && echo "other open while held: taken" || echo "other open while held: refused" ) 9>held >> $O/counts
        exec 7>&-
        ( flock -n 9 && echo "other open after the last close: taken" ) 9>held >> $O/counts
        # An OFD lock a forked child takes on the description it shares
        # stays with the parent's descriptor after the child exits.
        python3 -c '
import fcntl, os, struct
F_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", 37)
whole_file = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
shared = open("ofd", "w")
child = os.fork()
if child == 0:
    fcntl.fcntl(shared, F_OFD_SETLK, whole_file)
    os._exit(0)
os.waitpid(child, 0)
other = open("ofd", "w")
try: fcntl.fcntl(other, F_OFD_SETLK, whole_file); print("OFD lock after the child exits: free")
except OSError: print("OFD lock after the child exits: held")
shared.close()
fcntl.fcntl(other, F_OFD_SETLK, whole_file); print("OFD lock after the last close: taken")
' >> $O/counts
        "#,
    );
}

#[test]
fn with_the_interposer_alone_fifos_sockets_and_devices_under_the_mount_fail_clearly_and_never_reach_the_host() {
    let s = Scenario::new("specialfiles");
    let script = r#"
        mkdir -p /surge/specialfiles/d; cd /surge/specialfiles
        mkfifo d/fifo 2>> $O/errors || echo "mkfifo: status $?"
        mknod d/pipe p 2>> $O/errors || echo "mknod p: status $?"
        python3 -c '
import os, socket, stat
for kind, mode in (("fifo", stat.S_IFIFO), ("char device", stat.S_IFCHR), ("socket node", stat.S_IFSOCK)):
    try: os.mknod("d/node", mode | 0o600, os.makedev(1, 3)); print("mknod", kind, "made")
    except OSError as e: print("mknod", kind, e.strerror)
for op in ("bind", "connect"):
    for path in ("/surge/specialfiles/d/sock", "d/sock"):
        s = socket.socket(socket.AF_UNIX)
        try: getattr(s, op)(path); print(op, path, "worked")
        except OSError as e: print(op, path, e.strerror)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try: s.sendto(b"x", "d/sock"); print("sendto worked")
except OSError as e: print("sendto", e.strerror)
# A regular file by mknod is created, as the kernel creates it.
os.mknod("d/regular", 0o640 | stat.S_IFREG); print("mknod regular", oct(os.stat("d/regular").st_mode))
try: os.mknod("d/regular", 0o640)
except OSError as e: print("mknod regular again", e.strerror)
'
        ls d
        "#;
    let out_dir = s.path("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = s.surge_run(&[("O", out_dir.to_str().unwrap())], &["sh", "-ec", script]);
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let not_supported = "Operation not supported";
    assert_eq!(
        printed,
        format!(
            "mkfifo: status 1\nmknod p: status 1\nmknod fifo {n}\nmknod char device {n}\nmknod socket node {n}\n\
             bind /surge/specialfiles/d/sock {n}\nbind d/sock {n}\nconnect /surge/specialfiles/d/sock {n}\n\
             connect d/sock {n}\nsendto {n}\nmknod regular 0o100640\nmknod regular again File exists\nregular\n",
            n = not_supported
        )
    );
    let errors = std::fs::read_to_string(out_dir.join("errors")).unwrap();
    assert!(
        errors.contains("surge: a FIFO at /surge/specialfiles/d/fifo is not supported with the interposer alone"),
        "{errors}"
    );
    assert!(errors.contains("need the FUSE mount"), "{errors}");
    // One line per process names the limit; python3's five refusals print it once.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("not supported with the interposer alone").count(), 1, "{stderr}");
    assert!(!std::path::Path::new("/surge/specialfiles").exists(), "something landed on the host");
    let staged = common::tree(&s.path("pfs").join("specialfiles"));
    assert_eq!(staged.keys().collect::<Vec<_>>(), ["d/regular"], "only the regular file is Surge's");
}

#[test]
fn programs_and_scripts_stored_in_surge_run_and_python_makes_a_venv_there_in_every_mode() {
    // With the interposer alone nothing is mounted, so the kernel's exec
    // cannot open these: the interposer runs them (a binary from a memfd, a
    // script by its interpreter), from shells, PATH searches and Python's
    // subprocess (a vfork child) alike.
    Scenario::new("programs").compare(
        r#"
        mkdir -p $D/bin
        cd $D
        printf '#include <stdio.h>\nint main(int argc, char **argv) { printf("%%s ran with %%d arguments\\n", argv[0], argc); return 3; }\n' > hello.c
        cc -o bin/app hello.c
        status=0; ./bin/app a b >> $O/out || status=$?; echo "status $status" >> $O/out
        printf '#!/bin/sh\necho "script $0: $*"\n' > bin/script; chmod +x bin/script
        printf '#!/usr/bin/env python3\nimport sys; print("python script", sys.argv[1:])\n' > bin/py; chmod +x bin/py
        printf 'echo "no shebang: $*"\n' > bin/plain; chmod +x bin/plain
        printf 'echo never\n' > bin/not-executable
        ./bin/script 1 2 >> $O/out; bin/py x >> $O/out; ./bin/plain p >> $O/out
        ./bin/not-executable 2>/dev/null || echo "not executable: status $?" >> $O/out
        PATH=$D/bin:$PATH
        app 1 >> $O/out || true; script s >> $O/out; plain q >> $O/out; uname -s >> $O/out
        python3 -c '
import subprocess
for args in (["app", "z"], ["bin/script", "sub"], ["bin/py", "sub"], ["uname", "-s"], ["missing"]):
    try:
        r = subprocess.run(args, stdout=subprocess.PIPE, text=True)
        print(r.returncode, r.stdout.strip())
    except OSError as e: print(args[0], e.strerror)
' >> $O/out
        python3 -m venv venv
        . venv/bin/activate
        python -c 'import sys; print(sys.prefix, sys.prefix != sys.base_prefix)' >> $O/out
        pip --version | cut -d" " -f1,2 >> $O/out
        pip list --format freeze 2>/dev/null | cut -d= -f1 | sort >> $O/out
        # Its files name the directory they were made in, which differs between runs.
        deactivate; rm -rf venv
        "#,
    );
}
