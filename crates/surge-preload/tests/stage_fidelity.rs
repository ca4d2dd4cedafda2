//! Stage-out keeps what programs set besides the bytes: the modes of files
//! and directories (a private 0700 directory stays private), the times of
//! files, directories (set after their contents) and links, and `user.*`
//! extended attributes. Each scenario runs on a plain directory and under
//! `surge run` (tests/common), and the staged tree's metadata is compared
//! with the plain directory's.

mod common;

use common::{Metadata, Scenario};

/// Modes and times set in the job itself: a `mktemp -d` (0700) holding a
/// file, nested 0750/0711/0700 directories, a link with its own time.
/// `touch -d` sets atime and mtime alike, and nothing reads them after:
/// the atimes are compared too.
#[test]
fn a_private_directory_stays_private_and_times_and_modes_survive_stage_out_in_every_mode() {
    Scenario::new("modes-times").with_metadata(Metadata { atimes: true }).compare(
        r#"
        mkdir -p "$D"
        t=$(mktemp -d -p "$D")
        stat -c 'mktemp -d: %a' "$t" > "$O/stat"
        echo 'checkpoint 1' > "$t/ckpt"
        mv "$t" "$D/scratch"
        mkdir -m 0750 "$D/group"
        mkdir -m 0711 "$D/group/pass"
        mkdir -m 0700 "$D/group/pass/private"
        echo data > "$D/group/pass/private/file"
        chmod 0640 "$D/group/pass/private/file"
        ln -s private/file "$D/group/pass/link"
        touch -h -d '2001-02-03 04:05:06.123456789' "$D/group/pass/link"
        touch -d '2002-03-04 05:06:07.5' "$D/scratch/ckpt" "$D/group/pass/private/file"
        touch -d '2003-01-01 00:00:00' "$D/group/pass/private" "$D/group/pass" "$D/group" "$D/scratch"
        # stat reads no directory: listing one would move its atime on.
        cd "$D" && stat -c '%n %F %a %y' scratch scratch/ckpt group group/pass group/pass/private \
            group/pass/private/file >> "$O/stat" && stat -c '%n %F %y' group/pass/link >> "$O/stat"
        "#,
    );
}

/// Trees copied in with `cp -a`, `rsync -a` and `tar x` from a host
/// directory with old times, private directories, a link and `user.*`
/// attributes (which `cp -a` copies) keep them through the stage-out; `tar
/// --xattrs` archives the attributes from Surge (extracted on the host:
/// GNU tar's extraction makes each file with mknod, which the namespace
/// conformance work brings).
#[test]
fn trees_copied_in_with_cp_a_rsync_a_and_tar_keep_their_times_modes_and_xattrs_on_the_pfs_in_every_mode() {
    Scenario::new("copied-trees").with_metadata(Metadata { atimes: false }).compare(
        r#"
        src="$TMPDIR/src-$$"
        rm -rf "$src" && mkdir -p "$src/tree/sub/deep"
        echo a > "$src/tree/a"
        echo b > "$src/tree/sub/b"
        echo c > "$src/tree/sub/deep/c"
        chmod 0600 "$src/tree/sub/deep/c"
        chmod 0700 "$src/tree/sub/deep"
        chmod 0750 "$src/tree/sub"
        chmod 0711 "$src/tree"
        ln -s sub/b "$src/tree/lb"
        setfattr -n user.kind -v input "$src/tree/a"
        setfattr -n user.kind -v dir "$src/tree/sub"
        touch -h -d '1999-12-31 23:59:59.25' "$src/tree/lb"
        touch -d '2000-06-01 12:00:00.75' "$src/tree/a" "$src/tree/sub/b" "$src/tree/sub/deep/c"
        touch -d '2000-01-01' "$src/tree/sub/deep" "$src/tree/sub" "$src/tree"
        tar -C "$src" -cf "$src.tar" tree
        mkdir -p "$D"
        cp -a "$src/tree" "$D/cp"
        rsync -a "$src/tree/" "$D/rsync/"
        mkdir "$D/tar"
        tar -C "$D/tar" -xf "$src.tar"
        touch -d '2004-01-01' "$D/tar"
        tar --xattrs -C "$D" -cf "$src-x.tar" cp
        mkdir "$src/untar"
        tar --xattrs --xattrs-include='user.*' -C "$src/untar" -xf "$src-x.tar"
        (cd "$D" && getfattr -d -m '^user\.' cp/a cp/sub cp/sub/b) > "$O/in-surge"
        (cd "$src/untar" && getfattr -d -m '^user\.' cp/a cp/sub cp/sub/b) > "$O/untarred"
        rm -rf "$src" "$src.tar" "$src-x.tar"
        cd "$D" && find . -mindepth 1 -printf '%p %y %m %T@\n' | sort > "$O/find"
        "#,
    );
}

/// `user.*` extended attributes set with `setfattr` and Python's
/// `os.setxattr`, with the errors Linux gives for XATTR_CREATE,
/// XATTR_REPLACE and a missing name, are read back in the job and kept by
/// the stage-out, on files and directories.
#[test]
fn user_xattrs_set_with_setfattr_and_python_round_trip_and_are_staged_out_in_every_mode() {
    Scenario::new("xattrs").with_metadata(Metadata { atimes: false }).compare(
        r#"
        mkdir -p "$D/dir"
        echo data > "$D/file"
        setfattr -n user.origin -v "run 7" "$D/file"
        setfattr -n user.empty "$D/file"
        setfattr -n user.bin -v 0x00ff10 "$D/file"
        setfattr -n user.project -v climate "$D/dir"
        setfattr -n user.gone -v x "$D/dir"
        setfattr -x user.gone "$D/dir"
        cd "$D"
        getfattr -d -e hex -m '^user\.' file dir > "$O/getfattr" 2>&1
        getfattr -n user.none file >> "$O/getfattr" 2>&1 || echo "exit $?" >> "$O/getfattr"
        python3 - > "$O/python" <<'EOF'
import errno, os
p = os.path.join(os.environ['D'], 'py')
with open(p, 'w') as f:
    f.write('x')
os.setxattr(p, 'user.a', b'1')
os.setxattr(p, 'user.a', b'\x002', os.XATTR_REPLACE)
for flags, name in ((os.XATTR_CREATE, 'user.a'), (os.XATTR_REPLACE, 'user.b')):
    try:
        os.setxattr(p, name, b'v', flags)
    except OSError as e:
        print('set', name, errno.errorcode[e.errno])
print(sorted(os.listxattr(p)), os.getxattr(p, 'user.a'))
try:
    os.getxattr(p, 'user.none')
except OSError as e:
    print('get', errno.errorcode[e.errno])
os.setxattr(p, 'user.b', b'kept')
os.removexattr(p, 'user.a')
print(os.listxattr(p))
EOF
        touch -d '2005-05-05' file py dir
        "#,
    );
}
