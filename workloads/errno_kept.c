/*
 * errno_kept.c - errno after every successful call the Surge interposer wraps.
 *
 * POSIX lets a successful call leave errno alone or change it, but C
 * programs rely on libc leaving it alone: netCDF's posixio, for one, takes
 * "a short read and errno set" for an error. This program sets errno to a
 * sentinel before each call and prints, after each, whether the call kept
 * it:
 *     <call>: kept            the call succeeded and errno is the sentinel
 *     <call>: errno N (text)  the call succeeded and changed errno
 *     <call>: FAILED: text    the call failed (exit status 1 at the end)
 * Run on a plain directory and on a Surge one, the two outputs must be
 * the same. The calls are those the C files of crates/surge-preload/shim
 * wrap, on files, streams and directories under DIR, less those Surge
 * refuses by design with the interposer alone (link, mknod, mmap, freopen;
 * tested in compat.rs), copy_file_range (EXDEV by design across Surge
 * files) and the extended-attribute calls (the FUSE mount has none yet).
 *
 * Usage: errno_kept DIR   (DIR must exist and be empty)
 * Exit status: 0 when every call succeeded, 1 otherwise, 2 usage.
 */
#define _GNU_SOURCE
#include <aio.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

extern char **environ;

/* No call sets errno to this: any other value after a success was the call's. */
#define SENTINEL 4242

static int failures;

static void report(const char *call, int ok, int err) {
    if (!ok) {
        printf("%s: FAILED: %s\n", call, strerror(err));
        failures++;
    } else if (err == SENTINEL) {
        printf("%s: kept\n", call);
    } else {
        printf("%s: errno %d (%s)\n", call, err, strerror(err));
    }
    fflush(stdout);
}

/* Runs `expr` with errno at the sentinel; `ok` (over `r`, its value) says
 * whether it succeeded. */
#define CHECK(call, expr, ok)             \
    do {                                  \
        errno = SENTINEL;                 \
        __auto_type r = (expr);           \
        int err_ = errno;                 \
        report(call, (ok), err_);         \
        (void)r;                          \
    } while (0)
#define CHECK_INT(call, expr) CHECK(call, expr, r >= 0)
#define CHECK_PTR(call, expr) CHECK(call, expr, r != NULL)

static char dir[PATH_MAX / 2];

/* DIR/name (static buffer per slot, so two may be used in one call). */
static const char *at(int slot, const char *name) {
    static char paths[4][PATH_MAX];
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", dir, name);
    return paths[slot];
}

static int walked(const char *path, const struct stat *st, int flag) {
    (void)path, (void)st, (void)flag;
    return 0;
}

static int walked_nftw(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)path, (void)st, (void)flag, (void)ftw;
    return 0;
}

static void descriptors(void) {
    char buf[64] = {0};
    const char text[] = "0123456789";
    CHECK_INT("open O_CREAT", open(at(0, "f"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    int fd = open(at(0, "f"), O_RDWR);
    CHECK_INT("open existing", fd);
    CHECK_INT("openat", openat(AT_FDCWD, at(0, "f"), O_RDONLY));
    CHECK_INT("open64", open64(at(0, "f"), O_RDONLY));
    CHECK_INT("creat", creat(at(0, "c"), 0644));
    CHECK_INT("write", write(fd, text, 10));
    CHECK_INT("pwrite", pwrite(fd, text, 10, 10));
    struct iovec iov[2] = {{(void *)text, 5}, {(void *)(text + 5), 5}};
    CHECK_INT("writev", writev(fd, iov, 2));
    CHECK_INT("pwritev", pwritev(fd, iov, 2, 30));
    CHECK_INT("pwritev2", pwritev2(fd, iov, 2, 40, 0));
    CHECK_INT("lseek SEEK_SET", lseek(fd, 0, SEEK_SET));
    CHECK_INT("lseek SEEK_END", lseek(fd, 0, SEEK_END));
    CHECK_INT("lseek SEEK_CUR", lseek(fd, -45, SEEK_CUR));
    CHECK_INT("read", read(fd, buf, 10));
    CHECK_INT("read short", read(fd, buf, sizeof buf));
    CHECK_INT("read at end", read(fd, buf, sizeof buf));
    CHECK_INT("pread", pread(fd, buf, 10, 0));
    CHECK_INT("pread short", pread(fd, buf, sizeof buf, 45));
    CHECK_INT("pread past end", pread(fd, buf, sizeof buf, 100));
    struct iovec in[2] = {{buf, 8}, {buf + 8, 60}};
    lseek(fd, 40, SEEK_SET);
    CHECK_INT("readv short", readv(fd, in, 2));
    CHECK_INT("preadv short", preadv(fd, in, 2, 44));
    CHECK_INT("preadv2", preadv2(fd, in, 2, 0, 0));
    CHECK_INT("fsync", fsync(fd));
    CHECK_INT("fdatasync", fdatasync(fd));
    struct stat st;
    CHECK_INT("fstat", fstat(fd, &st));
    CHECK_INT("fstatat", fstatat(AT_FDCWD, at(0, "f"), &st, 0));
    CHECK_INT("fstatat AT_EMPTY_PATH", fstatat(fd, "", &st, AT_EMPTY_PATH));
    CHECK_INT("stat", stat(at(0, "f"), &st));
    CHECK_INT("lstat", lstat(at(0, "f"), &st));
    struct statx stx;
    CHECK_INT("statx", statx(AT_FDCWD, at(0, "f"), 0, STATX_BASIC_STATS, &stx));
    CHECK_INT("statx AT_EMPTY_PATH", statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &stx));
    struct statfs sf;
    struct statvfs sv;
    CHECK_INT("statfs", statfs(at(0, "f"), &sf));
    CHECK_INT("fstatfs", fstatfs(fd, &sf));
    CHECK_INT("statvfs", statvfs(at(0, "f"), &sv));
    CHECK_INT("fstatvfs", fstatvfs(fd, &sv));
    CHECK_INT("ftruncate", ftruncate(fd, 100));
    CHECK_INT("truncate", truncate(at(0, "f"), 50));
    CHECK_INT("fallocate", fallocate(fd, 0, 0, 60));
    CHECK("posix_fallocate", posix_fallocate(fd, 0, 70), r == 0);
    CHECK_INT("fcntl F_GETFL", fcntl(fd, F_GETFL));
    CHECK_INT("fcntl F_SETFL", fcntl(fd, F_SETFL, O_APPEND));
    CHECK_INT("fcntl F_GETFD", fcntl(fd, F_GETFD));
    CHECK_INT("fcntl F_SETFD", fcntl(fd, F_SETFD, FD_CLOEXEC));
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    CHECK_INT("fcntl F_SETLK", fcntl(fd, F_SETLK, &lk));
    lk.l_type = F_WRLCK;
    CHECK_INT("fcntl F_GETLK", fcntl(fd, F_GETLK, &lk));
    lk = (struct flock){.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    CHECK_INT("fcntl F_SETLK unlock", fcntl(fd, F_SETLK, &lk));
    lk = (struct flock){.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    CHECK_INT("fcntl F_OFD_SETLK", fcntl(fd, F_OFD_SETLK, &lk));
    lk.l_type = F_UNLCK;
    CHECK_INT("fcntl F_OFD_SETLK unlock", fcntl(fd, F_OFD_SETLK, &lk));
    CHECK_INT("flock LOCK_EX", flock(fd, LOCK_EX));
    CHECK_INT("flock LOCK_UN", flock(fd, LOCK_UN));
    CHECK_INT("lockf F_TLOCK", lockf(fd, F_TLOCK, 0));
    CHECK_INT("lockf F_ULOCK", lockf(fd, F_ULOCK, 0));
    int copy = dup(fd);
    CHECK_INT("dup", copy);
    CHECK_INT("fcntl F_DUPFD", fcntl(fd, F_DUPFD, 200));
    CHECK_INT("dup2", dup2(fd, 201));
    CHECK_INT("dup3", dup3(fd, 202, O_CLOEXEC));
    CHECK_INT("close", close(copy));
    CHECK_INT("close_range", close_range(200, 202, 0));
    CHECK_INT("fchmod", fchmod(fd, 0640));
    CHECK_INT("fchown", fchown(fd, getuid(), getgid()));
    struct timespec ts[2] = {{1000000000, 0}, {1000000000, 0}};
    struct timeval tv[2] = {{1000000000, 0}, {1000000000, 0}};
    CHECK_INT("futimens", futimens(fd, ts));
    CHECK_INT("futimes", futimes(fd, tv));
    int out = open(at(0, "sent"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    off_t from = 0;
    CHECK_INT("sendfile", sendfile(out, fd, &from, 30));
    close(out);
    CHECK_INT("close of the last descriptor", close(fd));
}

static void paths(void) {
    struct stat st;
    struct timespec ts[2] = {{1000000000, 0}, {1000000000, 0}};
    struct timeval tv[2] = {{1000000000, 0}, {1000000000, 0}};
    struct utimbuf ut = {1000000000, 1000000000};
    char buf[PATH_MAX];
    CHECK_INT("access", access(at(0, "f"), R_OK | W_OK));
    CHECK_INT("faccessat", faccessat(AT_FDCWD, at(0, "f"), R_OK, 0));
    CHECK_INT("euidaccess", euidaccess(at(0, "f"), R_OK));
    CHECK_INT("eaccess", eaccess(at(0, "f"), R_OK));
    CHECK_INT("chmod", chmod(at(0, "f"), 0644));
    CHECK_INT("fchmodat", fchmodat(AT_FDCWD, at(0, "f"), 0644, 0));
    CHECK_INT("chown", chown(at(0, "f"), getuid(), getgid()));
    CHECK_INT("lchown", lchown(at(0, "f"), getuid(), getgid()));
    CHECK_INT("fchownat", fchownat(AT_FDCWD, at(0, "f"), getuid(), getgid(), 0));
    CHECK_INT("utimensat", utimensat(AT_FDCWD, at(0, "f"), ts, 0));
    CHECK_INT("utimes", utimes(at(0, "f"), tv));
    CHECK_INT("utime", utime(at(0, "f"), &ut));
    CHECK_INT("symlink", symlink("f", at(0, "link")));
    CHECK_INT("symlinkat", symlinkat("f", AT_FDCWD, at(0, "link2")));
    CHECK_INT("readlink", readlink(at(0, "link"), buf, sizeof buf));
    CHECK_INT("readlinkat", readlinkat(AT_FDCWD, at(0, "link2"), buf, sizeof buf));
    CHECK_INT("stat through a link", stat(at(0, "link"), &st));
    CHECK_INT("lstat of a link", lstat(at(0, "link"), &st));
    /* glibc's realpath leaves the EINVAL of readlink on each component that is no link. */
    errno = SENTINEL;
    report("realpath (errno not compared: glibc sets it)", realpath(at(0, "link"), buf) != NULL, SENTINEL);
    char *canonical = canonicalize_file_name(at(0, "f"));
    CHECK_PTR("canonicalize_file_name", canonical);
    free(canonical);
    CHECK_INT("symlink to a directory", symlink(".", at(0, "here")));
    CHECK_INT("open through a linked directory", open(at(0, "here/f"), O_RDONLY));
    CHECK_INT("rename through a linked directory", rename(at(0, "here/c"), at(1, "here/c1")));
    CHECK_INT("unlink through a linked directory", unlink(at(0, "here/c1")));
    CHECK_INT("creat again", creat(at(0, "c"), 0644));
    CHECK_INT("rename", rename(at(0, "c"), at(1, "c2")));
    CHECK_INT("renameat", renameat(AT_FDCWD, at(0, "c2"), AT_FDCWD, at(1, "c3")));
    CHECK_INT("renameat2", renameat2(AT_FDCWD, at(0, "c3"), AT_FDCWD, at(1, "c"), RENAME_NOREPLACE));
    CHECK_INT("unlink", unlink(at(0, "link2")));
    CHECK_INT("unlinkat", unlinkat(AT_FDCWD, at(0, "link"), 0));
    CHECK_INT("mkdir", mkdir(at(0, "d"), 0755));
    CHECK_INT("mkdirat", mkdirat(AT_FDCWD, at(0, "d/e"), 0755));
    CHECK_INT("rmdir", rmdir(at(0, "d/e")));
    CHECK_INT("unlinkat AT_REMOVEDIR", unlinkat(AT_FDCWD, at(0, "d"), AT_REMOVEDIR));
    char templ[PATH_MAX];
    snprintf(templ, sizeof templ, "%s/tmpXXXXXX", dir);
    int fd = mkstemp(templ);
    CHECK_INT("mkstemp", fd);
    close(fd);
    unlink(templ); /* its name is random: no file to compare */
    snprintf(templ, sizeof templ, "%s/tmpXXXXXX.s", dir);
    fd = mkostemps(templ, 2, O_CLOEXEC);
    CHECK_INT("mkostemps", fd);
    close(fd);
    unlink(templ);
    snprintf(templ, sizeof templ, "%s/tdXXXXXX", dir);
    CHECK_PTR("mkdtemp", mkdtemp(templ));
    rmdir(templ);
}

static void working_directory(void) {
    char here[PATH_MAX], buf[PATH_MAX];
    if (!getcwd(here, sizeof here)) return;
    CHECK_INT("chdir", chdir(dir));
    CHECK_PTR("getcwd", getcwd(buf, sizeof buf));
    char *name = get_current_dir_name();
    CHECK_PTR("get_current_dir_name", name);
    free(name);
    CHECK_INT("open relative", open("f", O_RDONLY));
    int fd = open(".", O_RDONLY | O_DIRECTORY);
    CHECK_INT("chdir back", chdir(here));
    CHECK_INT("fchdir", fchdir(fd));
    CHECK_INT("chdir back again", chdir(here));
    close(fd);
}

static void streams(void) {
    char line[64];
    FILE *fp = fopen(at(0, "s"), "w+");
    CHECK_PTR("fopen", fp);
    if (!fp) return;
    CHECK_INT("fwrite", fwrite("line one\nline two\n", 1, 18, fp) == 18 ? 0 : -1);
    CHECK_INT("fputs", fputs("line three\n", fp));
    CHECK_INT("fprintf", fprintf(fp, "line %d\n", 4));
    CHECK_INT("fflush", fflush(fp));
    CHECK_INT("fseek", fseek(fp, 0, SEEK_SET));
    CHECK_INT("ftell", ftell(fp));
    CHECK_PTR("fgets", fgets(line, sizeof line, fp));
    CHECK_INT("fgetc", fgetc(fp));
    CHECK_INT("fread short", fread(line, 1, sizeof line, fp) > 0 ? 0 : -1);
    CHECK_INT("feof", feof(fp) ? 0 : -1);
    rewind(fp);
    CHECK_INT("fileno", fileno(fp));
    CHECK_INT("fclose", fclose(fp));
    fp = fopen64(at(0, "s"), "r");
    CHECK_PTR("fopen64", fp);
    if (fp) {
        CHECK_PTR("fgets after fopen64", fgets(line, sizeof line, fp));
        CHECK_INT("fclose after reading", fclose(fp));
    }
    int fd = open(at(0, "s"), O_RDONLY);
    fp = fdopen(fd, "r");
    CHECK_PTR("fdopen", fp);
    if (fp) {
        CHECK_INT("fread after fdopen", fread(line, 1, 4, fp) == 4 ? 0 : -1);
        CHECK_INT("fclose after fdopen", fclose(fp));
    }
}

static void directories(void) {
    DIR *d = opendir(dir);
    CHECK_PTR("opendir", d);
    if (!d) return;
    CHECK_INT("dirfd", dirfd(d));
    CHECK_PTR("readdir", readdir(d));
    CHECK_INT("telldir", telldir(d));
    rewinddir(d);
    report("rewinddir", 1, errno);
    errno = SENTINEL;
    struct dirent *e;
    while ((e = readdir(d))) errno = SENTINEL;
    report("readdir to the end", 1, errno);
    errno = SENTINEL;
    seekdir(d, 0);
    report("seekdir", 1, errno);
    CHECK_PTR("readdir64", readdir64(d));
    CHECK_INT("closedir", closedir(d));
    d = fdopendir(open(dir, O_RDONLY | O_DIRECTORY));
    CHECK_PTR("fdopendir", d);
    if (d) closedir(d);
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    CHECK_INT("scandir", n);
    for (int i = 0; i < n; i++) free(list[i]);
    if (n >= 0) free(list);
    glob_t g;
    char pattern[PATH_MAX];
    snprintf(pattern, sizeof pattern, "%s/*", dir);
    CHECK("glob", glob(pattern, 0, NULL, &g), r == 0);
    globfree(&g);
    CHECK_INT("ftw", ftw(dir, walked, 8));
    CHECK_INT("nftw", nftw(dir, walked_nftw, 8, FTW_PHYS));
}

static void asynchronous(void) {
    int fd = open(at(0, "aio"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    char data[32] = "asynchronous bytes";
    struct aiocb cb = {.aio_fildes = fd, .aio_buf = data, .aio_nbytes = sizeof data};
    CHECK_INT("aio_write", aio_write(&cb));
    const struct aiocb *list[1] = {&cb};
    while (aio_error(&cb) == EINPROGRESS) aio_suspend(list, 1, NULL);
    CHECK("aio_error", aio_error(&cb), r == 0);
    CHECK_INT("aio_return", aio_return(&cb));
    struct aiocb sync = {.aio_fildes = fd};
    CHECK_INT("aio_fsync", aio_fsync(O_SYNC, &sync));
    const struct aiocb *syncs[1] = {&sync};
    while (aio_error(&sync) == EINPROGRESS) aio_suspend(syncs, 1, NULL);
    char back[32];
    struct aiocb rd = {.aio_fildes = fd, .aio_buf = back, .aio_nbytes = sizeof back, .aio_lio_opcode = LIO_READ};
    struct aiocb *reads[1] = {&rd};
    CHECK_INT("lio_listio", lio_listio(LIO_WAIT, reads, 1, NULL));
    CHECK_INT("aio_return of the read", aio_return(&rd));
    close(fd);
}

static void processes(void) {
    int fd = open(at(0, "f"), O_RDONLY);
    errno = SENTINEL;
    pid_t child = fork();
    if (child == 0) _exit(0);
    report("fork", child > 0, errno);
    waitpid(child, NULL, 0);
    char *argv[] = {"true", NULL};
    CHECK("posix_spawn", posix_spawn(&child, "/bin/true", NULL, NULL, argv, environ), r == 0);
    waitpid(child, NULL, 0);
    close(fd);
}

int main(int argc, char **argv) {
    if (argc != 2 || strlen(argv[1]) >= sizeof dir) {
        fprintf(stderr, "usage: errno_kept DIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    descriptors();
    paths();
    working_directory();
    streams();
    directories();
    asynchronous();
    processes();
    return failures ? 1 : 0;
}
