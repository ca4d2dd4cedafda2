//! Sparse files in every mode, compared with a plain directory: what
//! `stat`/`du` say of holes (as "sparse" or "dense": the object layout and
//! the host file system may allocate a little differently), the offsets
//! SEEK_DATA/SEEK_HOLE find, fallocate's modes, `tar --sparse` and `cp`
//! out; the stage-out copy keeps the holes, and a punched hole keeps its
//! integrity check.

mod common;

use common::{text, Mode, Scenario};
use std::os::unix::fs::MetadataExt;

/// Shell helpers the scripts share: `sparse FILE` prints whether FILE's
/// blocks hold less than half its size; `offsets FILE` prints what
/// SEEK_DATA and SEEK_HOLE find from a few offsets (ENXIO as such).
const HELPERS: &str = r#"
sparse() {
    b=$(stat -c %b "$1"); s=$(stat -c %s "$1")
    if [ $((b * 512)) -lt $((s / 2)) ]; then echo "$1 sparse"; else echo "$1 dense"; fi
}
offsets() {
    python3 - "$1" <<'PY'
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
for start in sorted({0, 4096, 8192, 1 << 20, size // 2, max(size - 1, 0), size}):
    for name, whence in (("data", os.SEEK_DATA), ("hole", os.SEEK_HOLE)):
        try:
            found = os.lseek(fd, start, whence)
        except OSError as e:
            found = errno.errorcode[e.errno]
        print(os.path.basename(sys.argv[1]), name, start, found)
PY
}
"#;

#[test]
fn a_sparse_file_stays_sparse_in_every_mode_and_after_stage_out() {
    let s = Scenario::new("sparse");
    s.compare(&format!(
        r#"{HELPERS}
        mkdir -p $D/s
        truncate -s 100M $D/s/big
        head -c 8192 /etc/services | dd of=$D/s/seeked bs=4096 seek=256 status=none
        head -c 3000 /etc/services | dd of=$D/s/twice bs=1 seek=5000000 status=none
        head -c 100 /etc/services | dd of=$D/s/twice bs=1 seek=70000 conv=notrunc status=none
        for f in big seeked twice; do sparse $D/s/$f; offsets $D/s/$f; done > $O/holes
        du -k $D/s/big | awk '{{ print ($1 < 1024) ? "du small" : "du large" }}' > $O/du
        cmp -n 1048576 $D/s/big /dev/zero
        md5sum < $D/s/twice > $O/md5
        tar --sparse -C $D -cf $TMPDIR/s.tar s
        stat -c %s $TMPDIR/s.tar | awk '{{ print ($1 < 1048576) ? "tar small" : "tar large" }}' > $O/tar
        mkdir -p $D/x && tar -C $D/x -xf $TMPDIR/s.tar && rm $TMPDIR/s.tar
        for f in big seeked twice; do sparse $D/x/s/$f; cmp $D/s/$f $D/x/s/$f; done > $O/untarred
        cp $D/s/big $TMPDIR/cp-auto && sparse $TMPDIR/cp-auto | sed "s,$TMPDIR/,," > $O/cp
        cp --sparse=always $D/s/seeked $TMPDIR/cp-always && sparse $TMPDIR/cp-always | sed "s,$TMPDIR/,," >> $O/cp
        cmp $D/s/seeked $TMPDIR/cp-always && rm $TMPDIR/cp-auto $TMPDIR/cp-always
        "#
    ));
    // The stage-out copies (compared byte for byte above) keep the holes.
    for mode in Mode::ALL {
        let staged = s.path(&format!("{mode:?}-pfs")).join("sparse/s/big");
        let Ok(meta) = staged.metadata() else { continue }; // a mode this machine lacks
        assert_eq!(meta.len(), 100 << 20);
        assert!(meta.blocks() * 512 < 1 << 20, "{mode:?}: the staged copy takes {} blocks", meta.blocks());
        let twice = s.path(&format!("{mode:?}-pfs")).join("sparse/s/twice").metadata().unwrap();
        assert!(twice.blocks() * 512 < 64 << 10, "{mode:?}: the staged copy takes {} blocks", twice.blocks());
    }
}

#[test]
fn fallocate_punches_preallocates_and_zeroes_as_on_a_plain_directory() {
    Scenario::new("fallocate").compare(&format!(
        r#"{HELPERS}
        mkdir -p $D
        seq 1 100000 > $D/p
        fallocate -p -o 8192 -l 65536 $D/p
        fallocate -p -o 100 -l 50 $D/p
        fallocate -p -o 2000000 -l 4096 $D/p
        md5sum < $D/p > $O/p
        offsets $D/p >> $O/p
        fallocate -l 1M $D/l
        : > $D/k && fallocate -n -l 1M $D/k
        seq 1 100000 > $D/z
        fallocate -z -o 5000 -l 20000 $D/z
        fallocate -z -n -o 580000 -l 100000 $D/z
        fallocate -z -o 580000 -l 100000 $D/z
        md5sum < $D/z > $O/z
        cmp $D/l /dev/zero -n 1048576
        for f in p l z; do stat -c "$f %s" $D/$f; sparse $D/$f | sed "s,$D/,,"; done > $O/stat
        stat -c "k %s %b" $D/k >> $O/stat
        python3 - $D/py > $O/py <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.posix_fallocate(fd, 4096, 8192)
os.write(fd, b"head")
print(os.fstat(fd).st_size)
PY
        "#
    ));
}

/// Runs `script` under `surge run` in every mode this machine has, with
/// $D the scenario's directory in Surge and $BUF the run's buffer
/// directory; it must print `want`.
fn prints_in_every_mode(s: &Scenario, script: &str, want: &str) {
    for mode in Mode::ALL {
        if !mode.available(s.name) {
            continue;
        }
        let tag = format!("{mode:?}-");
        let (data, buffer) = (format!("{}/{}", mode.mount(s), s.name), s.path(&format!("{tag}buffer")));
        let env = [("D", data.as_str()), ("BUF", buffer.to_str().unwrap())];
        let out = s.surge_run_in(mode, &tag, &env, &["sh", "-c", script]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{mode:?}: {}", text(&out));
    }
}

#[test]
fn fallocate_modes_that_shift_ranges_fail_with_eopnotsupp_in_every_mode() {
    let script = r#"
        mkdir -p $D
        seq 1 100000 > $D/f
        for flag in -c -i; do
            fallocate $flag -o 0 -l 4096 $D/f 2>&1 | grep -q "Operation not supported" && echo "$flag refused"
        done
        fallocate -p -o 0 -l 4096 $D/f && echo "punch allowed"
        "#;
    prints_in_every_mode(&Scenario::new("shift"), script, "-c refused\n-i refused\npunch allowed\n");
}

#[test]
fn a_byte_flipped_inside_a_punched_hole_is_eio_in_every_mode() {
    // The hole's object file is found by the file's inode number; the
    // byte goes in the middle of the hole, read by nothing before.
    let script = r#"
        mkdir -p $D
        seq 1 100000 > $D/f
        fallocate -p -o 8192 -l 65536 $D/f
        obj=$(find "$BUF" -path '*objects/*' -name "$(printf %016x "$(stat -c %i $D/f)")" -size +0)
        printf X | dd of="$obj" bs=1 seek=40000 conv=notrunc status=none
        dd if=$D/f of=/dev/null bs=4096 skip=9 count=1 status=none 2>&1 | grep -q "Input/output error" && echo EIO
        rm $D/f
        "#;
    prints_in_every_mode(&Scenario::new("flipped"), script, "EIO\n");
}
