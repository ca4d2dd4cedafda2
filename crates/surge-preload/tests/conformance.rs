//! What the namespace's inodes give programs through the mount: hard
//! links, FIFOs, sockets and device nodes, regular files made by mknod,
//! owners and access times. Each scenario runs on a plain directory and
//! under `surge run` in the FUSE modes, hard links in every mode (the
//! interposer alone has its own handling of the rest, docs/interposer.md),
//! and the outputs and staged-out
//! files are compared (the harness is in `common`). pjdfstest's measure of
//! the same is `crates/surge-fuse/tests/conformance.rs`.

mod common;

use common::{Mode, Scenario};

#[test]
fn a_regular_file_made_by_mknod_through_the_mount_is_written_read_and_staged_out() {
    Scenario::new("mknod-regular").compare_in(
        &Mode::FUSE,
        r#"
        mkdir -p $D
        python3 -c 'import os, stat, sys; os.mknod(sys.argv[1], 0o640 | stat.S_IFREG)' $D/made
        stat -c '%s %F %a' $D/made > $O/stat
        printf 'written after mknod\n' >> $D/made
        cat $D/made > $O/contents
        python3 -c 'import os, stat, sys; os.mknod(sys.argv[1], 0o600 | stat.S_IFREG)' $D/made 2> $O/again || echo "exists: $?" >> $O/again
        "#,
    );
}

#[test]
fn hard_links_are_one_inode_under_several_names_and_every_name_is_staged_out_in_every_mode() {
    Scenario::new("hard-links").compare_in(
        &Mode::ALL,
        r#"
        mkdir -p $D
        mkdir $D/d
        printf 'one\n' > $D/a
        ln $D/a $D/d/b
        printf 'two\n' >> $D/d/b
        cat $D/a > $O/through-a
        [ "$(stat -c %i $D/a)" = "$(stat -c %i $D/d/b)" ] && echo same inode > $O/inode
        stat -c '%h' $D/a $D/d/b > $O/nlink
        chmod 600 $D/d/b
        stat -c '%a' $D/a >> $O/nlink
        python3 -c 'import os, sys; os.link(sys.argv[1], sys.argv[2])' $D/a $D/c
        stat -c '%h' $D/c >> $O/nlink
        ln $D/a $D/c 2> /dev/null || echo "ln over an existing name fails" >> $O/nlink
        ln $D/d $D/e 2> /dev/null || echo "ln of a directory fails" >> $O/nlink
        rm $D/a
        stat -c '%h' $D/c >> $O/nlink
        cat $D/c > $O/after-rm
        python3 -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' $D/d/b $D/c
        stat -c '%h' $D/c $D/d/b >> $O/nlink
        cp -a $D/d $D/copy
        ln -s c $D/s
        ln $D/s $D/hs
        stat -c '%F %h' $D/hs >> $O/nlink
        "#,
    );
}

#[test]
fn owners_groups_set_group_id_directories_and_access_times_apart_from_modification_times() {
    Scenario::new("owners-times").compare_in(
        &Mode::FUSE,
        r#"
        mkdir -p $D
        printf 'data\n' > $D/f
        ln -s f $D/l
        chown 65534:65534 $D/f
        chown -h 1:1 $D/l
        touch -a -d @1000000000 $D/f
        touch -m -d @1200000000 $D/f
        stat -c '%u:%g %X %Y' $D/f > $O/stat
        stat -c '%u:%g' $D/l >> $O/stat
        chmod 4755 $D/f
        chown 65534 $D/f
        stat -c '%a' $D/f >> $O/stat
        touch -a -d @1300000000 $D/f
        stat -c '%X %Y' $D/f >> $O/stat
        mkdir $D/shared
        chown :65534 $D/shared
        chmod 2775 $D/shared
        touch $D/shared/f
        mkdir $D/shared/sub
        mkfifo $D/shared/pipe
        stat -c '%n %g %a' $D/shared/f $D/shared/sub $D/shared/pipe | sed "s|$D/||" >> $O/stat
        rm $D/shared/pipe
        "#,
    );
}

#[test]
fn fifos_sockets_and_device_nodes_are_made_used_and_listed_through_the_mount() {
    Scenario::new("special-nodes").compare_in(
        &Mode::FUSE,
        r#"
        mkdir -p $D
        mkfifo -m 640 $D/pipe
        (printf 'through the pipe\n' > $D/pipe) &
        cat $D/pipe > $O/pipe
        wait
        mknod $D/null c 1 3
        mknod $D/disk b 7 0
        python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); print("bound")' $D/sock > $O/socket
        stat -c '%n %F %a %t:%T' $D/pipe $D/null $D/disk $D/sock | sed "s|$D/||" > $O/kinds
        ls -l $D | tail -n +2 | awk '{print substr($1, 1, 1), $NF}' > $O/ls
        mkfifo $D/pipe 2> /dev/null || echo "mkfifo over an existing name fails" >> $O/kinds
        mv $D/pipe $D/renamed
        rm $D/renamed $D/null $D/disk $D/sock
        ls $D > $O/left
        "#,
    );
}
