//! The C ABI: a C program built against include/surge.h and the shared
//! library, run against a real cluster.

mod common;

use common::TestCluster;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAM: &str = r#"
#define _POSIX_C_SOURCE 200809L
#include "surge.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "line %d: %s failed; errno %d (%s); last error: %s\n",  \
                    __LINE__, #cond, errno, strerror(errno), surge_last_error());   \
            return 1;                                                               \
        }                                                                           \
    } while (0)

static char buf[200000], back[200000];

int main(int argc, char **argv) {
    struct stat st;
    unsigned count, first;
    unsigned long long size;
    char name[64];
    int is_dir;
    size_t i;

    CHECK(argc == 2);
    CHECK(surge_init("/nonexistent/cluster.toml") == -1 && errno == ENOTCONN);
    CHECK(strstr(surge_last_error(), "surge start") != NULL);
    CHECK(surge_init(argv[1]) == 0);
    CHECK(surge_init(NULL) == 0);
    CHECK(surge_mkdir("/c", 0755) == 0);
    CHECK(surge_setstripe("/c", 2, 65536, -1) == 0);

    int fd = surge_open("/c/data", O_CREAT | O_EXCL | O_RDWR, 0640);
    CHECK(fd >= 0);
    for (i = 0; i < sizeof buf; i++) buf[i] = (char)(i * 7 + i / 4096);
    CHECK(surge_write(fd, buf, sizeof buf) == (ssize_t)sizeof buf);
    CHECK(surge_lseek(fd, 0, SEEK_CUR) == (off_t)sizeof buf);
    CHECK(surge_pread(fd, back, sizeof back, 0) == (ssize_t)sizeof back);
    CHECK(memcmp(buf, back, sizeof buf) == 0);
    CHECK(surge_lseek(fd, 10, SEEK_SET) == 10);
    CHECK(surge_read(fd, back, 5) == 5 && memcmp(back, buf + 10, 5) == 0);
    CHECK(surge_lseek(fd, 0, 42) == -1 && errno == EINVAL);

    CHECK(surge_fstat(fd, &st) == 0);
    CHECK(S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0640);
    CHECK(st.st_size == (off_t)sizeof buf && st.st_blksize == 65536 && st.st_nlink == 1);
    CHECK(st.st_blocks == (blkcnt_t)((sizeof buf + 4095) / 4096 * 8) && st.st_uid == getuid());
    /* Times reach C as seconds and nanoseconds: a file written just now
     * has an mtime within a minute of the clock, nanoseconds below 1e9. */
    CHECK(st.st_mtim.tv_nsec >= 0 && st.st_mtim.tv_nsec < 1000000000);
    CHECK(st.st_mtime > time(NULL) - 60 && st.st_mtime <= time(NULL) + 60);
    CHECK(st.st_ctim.tv_nsec >= 0 && st.st_ctim.tv_nsec < 1000000000);
    CHECK(surge_ftruncate(fd, 1000) == 0);
    CHECK(surge_stat("/c/data", &st) == 0 && st.st_size == 1000);
    CHECK(surge_truncate("/c/data", 70000) == 0);
    CHECK(surge_stat("/c/data", &st) == 0 && st.st_size == 70000);
    CHECK(surge_pread(fd, back, 10, 60000) == 10 && back[0] == 0 && back[9] == 0);
    CHECK(surge_fsync(fd) == 0);
    CHECK(surge_pwrite(fd, "xyz", 3, 5) == 3);

    int ro = surge_open("/c/data", O_RDONLY, 0);
    CHECK(ro == fd + 1);
    CHECK(surge_write(ro, buf, 1) == -1 && errno == EBADF);
    CHECK(surge_close(fd) == 0);
    CHECK(surge_close(fd) == -1 && errno == EBADF);
    CHECK(surge_open("/c/data", O_RDONLY, 0) == fd); /* the lowest free descriptor */
    CHECK(surge_open("/missing", O_RDONLY, 0) == -1 && errno == ENOENT);
    CHECK(strlen(surge_last_error()) > 0);
    CHECK(surge_stat("/c", &st) == 0 && S_ISDIR(st.st_mode) && st.st_nlink == 1);

    CHECK(surge_getstripe("/c/data", &count, &size, &first) == 0 && count == 2 && size == 65536);
    CHECK(surge_setstripe("/c/wide", 3, 1048576, 0) == 0);
    CHECK(surge_getstripe("/c/wide", &count, &size, &first) == 0);
    CHECK(count == 3 && size == 1048576 && first == 0);
    CHECK(surge_setstripe("/c/data", 1, 0, -1) == -1 && errno == EINVAL);

    surge_dir *d = surge_opendir("/c");
    CHECK(d != NULL);
    CHECK(surge_readdir(d, name, 3, &is_dir) == -1 && errno == ERANGE);
    CHECK(surge_readdir(d, name, sizeof name, &is_dir) == 1 && strcmp(name, "data") == 0 && !is_dir);
    CHECK(surge_readdir(d, name, sizeof name, NULL) == 1 && strcmp(name, "wide") == 0);
    CHECK(surge_readdir(d, name, sizeof name, &is_dir) == 0);
    CHECK(surge_closedir(d) == 0);
    CHECK(surge_opendir("/c/data") == NULL && errno == ENOTDIR);

    CHECK(surge_rename("/c/data", "/c/moved") == 0);
    CHECK(surge_unlink("/c/moved") == 0 && surge_unlink("/c/wide") == 0);
    CHECK(surge_rmdir("/c") == 0);
    CHECK(surge_stat("/c", &st) == -1 && errno == ENOENT);
    return 0;
}
"#;

/// The directory holding the libsurge_client.so built with this test: the
/// test's own `deps` directory (cargo copies it up a level only on `cargo build`).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().to_path_buf()
}

#[test]
fn a_c_program_uses_the_header_and_the_shared_library() {
    let cluster = TestCluster::start(3);
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let libs = library_dir();
    assert!(libs.join("libsurge_client.so").exists(), "no libsurge_client.so in {}", libs.display());
    let src = cluster.dir.path().join("prog.c");
    let exe = cluster.dir.path().join("prog");
    std::fs::write(&src, PROGRAM).unwrap();
    let cc = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(&include)
        .arg(&src)
        .arg("-L")
        .arg(&libs)
        .arg(format!("-Wl,-rpath,{}", libs.display()))
        .args(["-lsurge_client", "-o"])
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(cc.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&cc.stderr));
    // cargo's LD_LIBRARY_PATH may name an older copy of the library first.
    let run = Command::new(&exe).arg(&cluster.cluster_file).env("LD_LIBRARY_PATH", &libs).output().unwrap();
    assert!(
        run.status.success(),
        "C program failed ({}):\n{}{}",
        run.status,
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}
