//! The interposer's metadata fast path beside the FUSE mount (`surge run`'s
//! default mode): stat, access and mkdir on the mount's paths are served
//! through the client library (docs/interposer.md,
//! "Metadata beside the mount"). The programs must see what a plain
//! directory shows, other processes of the node going through the kernel
//! must see every change at once, and each call must stay at the requests
//! counted for it.

mod common;

use common::{build_dir, text, Mode, Scenario};

#[test]
fn names_made_stated_and_removed_with_the_metadata_fast_path_on_match_a_plain_directory() {
    Scenario::new("meta-fast").compare_in(
        &[Mode::FuseWithPreload],
        r#"
        export SURGE_META_FAST=1
        python3 - "$D" > $O/calls <<'PY'
import os, stat, sys
d = sys.argv[1]
os.makedirs(d + "/a/b")
for i in range(20):
    os.close(os.open(f"{d}/a/f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640))
try:
    os.open(f"{d}/a/f3", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
except FileExistsError:
    print("f3 exists")
with open(f"{d}/a/f4", "w") as f:
    f.write("four")
for i in (0, 4, 7):
    st = os.stat(f"{d}/a/f{i}")
    print(i, stat.filemode(st.st_mode), st.st_size, st.st_nlink)
print("dir", stat.filemode(os.stat(f"{d}/a/b").st_mode), os.access(f"{d}/a/f1", os.R_OK), os.access(f"{d}/nope", os.F_OK))
os.rename(f"{d}/a/f4", f"{d}/a/b/four")
os.rename(f"{d}/a/f5", f"{d}/a/f6")
for i in range(7, 20):
    os.unlink(f"{d}/a/f{i}")
for name in ("f4", "f7", "b/four"):
    try:
        print(name, os.stat(f"{d}/a/{name}").st_size)
    except FileNotFoundError:
        print(name, "gone")
try:
    os.rmdir(f"{d}/a/b")
except OSError as e:
    print("rmdir", e.errno)
os.mkdir(f"{d}/a/c", 0o750)
os.rmdir(f"{d}/a/c")
os.symlink("b/four", f"{d}/a/link")
print("link", os.stat(f"{d}/a/link").st_size, stat.filemode(os.lstat(f"{d}/a/link").st_mode))
print(sorted(os.listdir(f"{d}/a")))
PY
        # A directory's link count is 1 on Surge ("not counted", as btrfs says).
        ls -l --time-style=+ $D/a $D/a/b | awk '{ $2 = ""; print }' > $O/ls
        stat -c '%n %F %a %s' $D/a/f0 $D/a/f6 $D/a/b/four | sed "s|$D|D|" > $O/stat
        "#,
    );
}

/// Runs `script` under `surge run` in the default mode, checked to
/// succeed, with $M the mount and $SURGE the `surge` command; its stdout.
fn run_default(s: &Scenario, script: &str) -> String {
    let mount = Mode::FuseWithPreload.mount(s);
    let surge = build_dir().join("surge").display().to_string();
    let out = s.surge_run_in(Mode::FuseWithPreload, "", &[("M", &mount), ("SURGE", &surge)], &["sh", "-ec", script]);
    assert!(out.status.success(), "under surge run: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_change_the_fast_path_makes_is_seen_at_once_by_processes_without_the_interposer() {
    let s = Scenario::new("meta-fast-coherence");
    if !Mode::FuseWithPreload.available(s.name) {
        return;
    }
    // Each step primes the kernel's caches through the mount (a name's
    // absence, an entry, a directory's attributes), makes the change with
    // the interposer, then looks without it: the entry timeout is the
    // cache's lifetime (10 s), so only the invalidation makes it show.
    let seen = run_default(
        &s,
        r#"
        export SURGE_META_FAST=1
        k() { env -u LD_PRELOAD "$@"; }
        mkdir $M/d
        for i in 1 2 3 4 5; do
            k stat $M/d/f$i >/dev/null 2>&1 && echo "f$i before its create"
            python3 -c "import os,sys; os.close(os.open(sys.argv[1], os.O_CREAT|os.O_EXCL|os.O_WRONLY, 0o600))" $M/d/f$i
            k stat -c "made %n" $M/d/f$i | sed "s|$M||"
            python3 -c "import os,sys; os.rename(sys.argv[1], sys.argv[2])" $M/d/f$i $M/d/g$i
            k stat $M/d/f$i >/dev/null 2>&1 && echo "f$i after its rename"
            k stat -c "renamed %n" $M/d/g$i | sed "s|$M||"
            python3 -c "import os,sys; os.unlink(sys.argv[1])" $M/d/g$i
            k stat $M/d/g$i >/dev/null 2>&1 && echo "g$i after its unlink"
            k ls $M/d | tr '\n' ' '; echo
            k stat $M/d/sub >/dev/null 2>&1 && echo "sub before its mkdir"
            python3 -c "import os,sys; os.mkdir(sys.argv[1])" $M/d/sub
            k stat -c "dir %F" $M/d/sub
            python3 -c "import os,sys; os.rmdir(sys.argv[1])" $M/d/sub
            k stat $M/d/sub >/dev/null 2>&1 && echo "sub after its rmdir"
        done
        # The kernel asked straight after each change, from the same process
        # (a raw system call the interposer does not see): sooner than the
        # change feed could bring it to the mount.
        python3 - $M/d <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
NEWFSTATAT = {"x86_64": 262, "aarch64": 79}[os.uname().machine]
def kernel_sees(path):
    return libc.syscall(NEWFSTATAT, -100, path.encode(), buf, 0) == 0  # AT_FDCWD
def kernel_mtime(path):  # st_mtime and its nanoseconds: bytes 88-104 on x86_64 and aarch64
    assert kernel_sees(path)
    return bytes(buf[88:104])
d = sys.argv[1]
for i in range(50):
    name = f"{d}/raw{i}"
    if kernel_sees(name): print("raw", i, "before its mkdir")
    before = kernel_mtime(d)
    os.mkdir(name)
    if not kernel_sees(name): print("raw", i, "unseen after its mkdir")
    if kernel_mtime(d) == before: print("raw", i, "the directory's old time after its mkdir")
    os.rename(name, name + "x")
    if kernel_sees(name) or not kernel_sees(name + "x"): print("raw", i, "stale after its rename")
    os.rmdir(name + "x")
    if kernel_sees(name + "x"): print("raw", i, "seen after its rmdir")
PY
        echo done
        "#,
    );
    let mut want = String::new();
    for i in 1..=5 {
        want += &format!("made /d/f{i}\nrenamed /d/g{i}\n\ndir directory\n");
    }
    want += "done\n";
    assert_eq!(seen, want, "what processes without the interposer saw");
}

#[test]
fn stats_on_the_mount_cost_the_daemons_no_more_requests_than_counted() {
    let s = Scenario::new("meta-fast-count");
    if !Mode::FuseWithPreload.available(s.name) {
        return;
    }
    // Requests all daemons served while 200 names are stat'ed by one
    // process; the same again with the fast path off, when the kernel
    // sends each call to the mount's server.
    let script = r#"
        # The daemons' own counts (each job's share under [[daemon.job]] again).
        requests() {
            "$SURGE" status --toml | awk -F' = ' '/^\[\[/ { job = /daemon\.job/ } $1 == "requests" && !job { n += $2 } END { print n }'
        }
        count() { # what, fast: requests per call of what
            mkdir -p $M/$1
            python3 -c "import os,sys; [os.close(os.open(f'{sys.argv[1]}/f{i}', os.O_CREAT|os.O_WRONLY, 0o600)) for i in range(200)]" $M/$1
            before=$(requests)
            SURGE_META_FAST=$2 python3 -c "import os,sys; [os.stat(f'{sys.argv[1]}/f{i}') for i in range(200)]" $M/$1
            after=$(requests)
            echo "$1 $(( (after - before) * 100 / 200 ))"
        }
        count fast 1
        count kernel 0
        "#;
    let counted = run_default(&s, script);
    // Hundredths of a request per stat: (what, stat).
    let per_call: Vec<(String, u64)> = counted
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].parse().unwrap())
        })
        .collect();
    let (fast, kernel) = (&per_call[0], &per_call[1]);
    eprintln!("requests per stat (hundredths): {per_call:?}");
    // A cold stat: daemon 0's `Stat` and one `ObjStat` per stripe (2
    // daemons), plus the count's own `Status` calls.
    assert!(fast.1 <= 320, "a stat through the fast path costs {} hundredths of a request", fast.1);
    assert!(fast.1 < kernel.1, "the fast path's stat ({}) costs less than the mount's ({})", fast.1, kernel.1);
}
