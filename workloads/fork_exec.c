/*
 * fork_exec.c - file descriptors across fork() and exec(), and threads (no MPI).
 *
 * Exercises what an LD_PRELOAD interposer must get right about process state:
 *   fork/exec phase, files DIR/fork_exec.in (prepared here) and DIR/fork_exec.out:
 *     parent   write(A) to out; then fork()
 *     child    write(B) through the SAME inherited fd - the file offset is
 *              shared with the parent, so B must land right after A;
 *              read() the first part of the inherited input fd; checks that
 *              the O_CLOEXEC fd is still open (fork keeps it); then execv()s
 *              /proc/self/exe --exec-stage WFD RFD CFD DIR
 *     exec'd   checks the inherited fds survived exec with their offsets
 *              (lseek SEEK_CUR, fstat size/inode), that the O_CLOEXEC fd is gone
 *              (fcntl F_GETFD fails with EBADF), write(C), and read()s the rest
 *              of the input from the shared read offset up to EOF
 *     parent   waitpid, checks both offsets moved, write(D), close, reopen,
 *              verifies the file is exactly A|B|C|D (stat size + content)
 *   thread phase, file DIR/threads.dat: 8 pthreads share one fd, each
 *     pwrite()s its own 1 MiB region (in 4 pieces, last piece first), barrier,
 *     then each pread()s its own and its neighbour's region and verifies.
 *
 * All data comes from the deterministic pattern keyed by the file offset
 * (and part), so misplaced bytes are detected.  The O_CLOEXEC fd is moved to
 * fd >= 100 so that descriptors opened by a preload library in the exec'd
 * image cannot be mistaken for it.
 *
 * Usage: fork_exec DIR   (DIR is created if missing)
 * Exit status: 0 success, 1 error or mismatch, 2 usage.
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Odd sizes on purpose: offsets must be exact, not block-rounded. */
enum { PART_A = 70001, PART_B = 50003, PART_C = 30011, PART_D = 20021 };
enum { IN_SIZE = 65543, IN_HEAD = 10007 }; /* child reads IN_HEAD, exec'd the rest */
enum { NTHREADS = 8, REGION = 1 << 20, PIECES = 4 };
#define CLOEXEC_MIN_FD 100

static const uint64_t part_len[4] = {PART_A, PART_B, PART_C, PART_D};

static uint64_t part_off(int p)
{
    uint64_t off = 0;
    for (int i = 0; i < p; i++)
        off += part_len[i];
    return off;
}

static uint64_t part_seed(int p) { return pattern_seed(0xf0, (uint64_t)p, 0); }
static uint64_t input_seed(void) { return pattern_seed(0xf1, 0, 0); }

static void usage(FILE *f)
{
    fprintf(f, "usage: fork_exec DIR\n"
               "  Writes DIR/fork_exec.in, DIR/fork_exec.out and DIR/threads.dat and\n"
               "  verifies fd sharing across fork/exec and concurrent pwrite/pread.\n"
               "  (--exec-stage WFD RFD CFD DIR is used internally by the exec'd image.)\n");
}

static void join(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

/* Write one part of the output through fd with write(2) (shared offset). */
static int write_part(int fd, int p, const char *path)
{
    unsigned char *buf = malloc(part_len[p]);
    if (!buf) {
        errmsg("out of memory");
        return -1;
    }
    pattern_fill(buf, part_len[p], part_seed(p), part_off(p));
    int rc = write_full(fd, buf, part_len[p], path);
    free(buf);
    return rc;
}

/* Check the current offset of fd; returns 0 or -1 (reported). */
static int expect_offset(int fd, uint64_t want, const char *path, const char *when)
{
    off_t cur = lseek(fd, 0, SEEK_CUR);
    if (cur < 0) {
        syserr("lseek", path);
        return -1;
    }
    if ((uint64_t)cur != want) {
        errmsg("%s: offset %lld %s, expected %" PRIu64, path, (long long)cur, when, want);
        return -1;
    }
    return 0;
}

/* read() len bytes of the input at its current (shared) offset `off`, verify. */
static int read_input(int fd, uint64_t off, size_t len, const char *path)
{
    unsigned char buf[IN_SIZE];
    ssize_t n = read_full(fd, buf, len, path);
    if (n < 0)
        return -1;
    if ((size_t)n != len) {
        errmsg("%s: read %zd bytes at offset %" PRIu64 ", expected %zu", path, n, off, len);
        return -1;
    }
    uint64_t first = 0, bad = pattern_check(buf, len, input_seed(), off, &first);
    if (bad) {
        errmsg("%s: %" PRIu64 " bad bytes read at offset %" PRIu64 ", first at %" PRIu64
               " (wrong shared read offset?)",
               path, bad, off, first);
        return -1;
    }
    return 0;
}

/* FD_CLOEXEC state of fd: 1 set, 0 clear, -1 fd not open (errno set). */
static int cloexec_state(int fd)
{
    int fl = fcntl(fd, F_GETFD);
    return fl < 0 ? -1 : (fl & FD_CLOEXEC) != 0;
}

/* ---- the exec'd image ------------------------------------------------------ */

static int exec_stage(int wfd, int rfd, int cfd, const char *dir)
{
    char out[PATH_MAX], in[PATH_MAX];
    int err = 0;
    join(out, sizeof out, dir, "fork_exec.out");
    join(in, sizeof in, dir, "fork_exec.in");

    errno = 0;
    if (cloexec_state(cfd) != -1 || errno != EBADF) {
        errmsg("fd %d (%s opened with O_CLOEXEC) is still open after exec", cfd, out);
        err = 1;
    }
    if (cloexec_state(wfd) != 0 || cloexec_state(rfd) != 0) {
        errmsg("inherited fds %d (%s) / %d (%s) not open without FD_CLOEXEC after exec", wfd,
               out, rfd, in);
        return 1;
    }
    struct stat fs, ps;
    if (fstat(wfd, &fs) != 0) {
        syserr("fstat", out);
        return 1;
    }
    if (stat(out, &ps) != 0) {
        syserr("stat", out);
        return 1;
    }
    if (fs.st_ino != ps.st_ino || fs.st_dev != ps.st_dev) {
        errmsg("inherited fd %d does not refer to %s (inode %llu vs %llu)", wfd, out,
               (unsigned long long)fs.st_ino, (unsigned long long)ps.st_ino);
        err = 1;
    }
    if ((uint64_t)fs.st_size != part_off(2)) {
        errmsg("%s: size %lld after parts A and B, expected %" PRIu64, out,
               (long long)fs.st_size, part_off(2));
        err = 1;
    }
    if (expect_offset(wfd, part_off(2), out, "in exec'd image before part C") ||
        write_part(wfd, 2, out))
        return 1;
    if (expect_offset(rfd, IN_HEAD, in, "in exec'd image") ||
        read_input(rfd, IN_HEAD, IN_SIZE - IN_HEAD, in))
        return 1;
    char extra;
    ssize_t n = read(rfd, &extra, 1);
    if (n != 0) {
        if (n < 0)
            syserr("read", in);
        else
            errmsg("%s: data beyond expected EOF at %d", in, IN_SIZE);
        return 1;
    }
    return err;
}

/* ---- the forked child (before exec) ---------------------------------------- */

static void child(int wfd, int rfd, int cfd, const char *dir, const char *out, const char *in)
{
    prog_init("fork_exec(child)", -1);
    if (write_part(wfd, 1, out) || read_input(rfd, 0, IN_HEAD, in))
        _exit(1);
    if (cloexec_state(cfd) != 1) {
        errmsg("O_CLOEXEC fd %d on %s not open with FD_CLOEXEC after fork", cfd, out);
        _exit(1);
    }
    char w[16], r[16], c[16];
    snprintf(w, sizeof w, "%d", wfd);
    snprintf(r, sizeof r, "%d", rfd);
    snprintf(c, sizeof c, "%d", cfd);
    char *args[] = {"fork_exec", "--exec-stage", w, r, c, (char *)dir, NULL};
    execv("/proc/self/exe", args);
    syserr("execv", "/proc/self/exe");
    _exit(1);
}

/* ---- fork/exec phase (parent side) ------------------------------------------ */

static int prepare_input(const char *in)
{
    unsigned char buf[IN_SIZE];
    pattern_fill(buf, sizeof buf, input_seed(), 0);
    int fd = open(in, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        syserr("open", in);
        return -1;
    }
    int rc = write_full(fd, buf, sizeof buf, in);
    if (close(fd) != 0) {
        syserr("close", in);
        rc = -1;
    }
    return rc;
}

static int verify_output(const char *out)
{
    uint64_t total = part_off(4);
    struct stat sb;
    if (stat(out, &sb) != 0) {
        syserr("stat", out);
        return -1;
    }
    if ((uint64_t)sb.st_size != total) {
        errmsg("%s: size %lld, expected %" PRIu64 " (A|B|C|D)", out, (long long)sb.st_size, total);
        return -1;
    }
    int fd = open(out, O_RDONLY);
    if (fd < 0) {
        syserr("open", out);
        return -1;
    }
    unsigned char *buf = malloc(total + 1);
    ssize_t n = buf ? read_full(fd, buf, total + 1, out) : -1;
    close(fd);
    int rc = 0;
    if (n != (ssize_t)total) {
        if (n >= 0)
            errmsg("%s: read %zd bytes, expected %" PRIu64, out, n, total);
        rc = -1;
    }
    for (int p = 0; p < 4 && rc == 0; p++) {
        uint64_t first = 0;
        uint64_t bad = pattern_check(buf + part_off(p), part_len[p], part_seed(p), part_off(p),
                                     &first);
        if (bad) {
            errmsg("%s: part %c (offset %" PRIu64 ", %" PRIu64 " bytes): %" PRIu64
                   " bad bytes, first at %" PRIu64,
                   out, 'A' + p, part_off(p), part_len[p], bad, first);
            rc = -1;
        }
    }
    free(buf);
    return rc;
}

static int fork_exec_phase(const char *dir)
{
    char out[PATH_MAX], in[PATH_MAX];
    join(out, sizeof out, dir, "fork_exec.out");
    join(in, sizeof in, dir, "fork_exec.in");
    if (prepare_input(in))
        return -1;

    int wfd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (wfd < 0) {
        syserr("open", out);
        return -1;
    }
    int rfd = open(in, O_RDONLY);
    if (rfd < 0) {
        syserr("open", in);
        return -1;
    }
    int tmp = open(out, O_RDONLY | O_CLOEXEC);
    if (tmp < 0) {
        syserr("open(O_CLOEXEC)", out);
        return -1;
    }
    int cfd = fcntl(tmp, F_DUPFD_CLOEXEC, CLOEXEC_MIN_FD);
    if (cfd < 0) {
        syserr("fcntl(F_DUPFD_CLOEXEC)", out);
        return -1;
    }
    close(tmp);

    if (write_part(wfd, 0, out))
        return -1;
    fflush(NULL); /* nothing buffered may be written twice */
    pid_t pid = fork();
    if (pid < 0) {
        syserr("fork", out);
        return -1;
    }
    if (pid == 0)
        child(wfd, rfd, cfd, dir, out, in);

    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            syserr("waitpid", out);
            return -1;
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        errmsg("child/exec'd process failed (%s %d)",
               WIFEXITED(status) ? "exit status" : "signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        return -1;
    }
    if (expect_offset(wfd, part_off(3), out, "in parent after child wrote B and C") ||
        expect_offset(rfd, IN_SIZE, in, "in parent after child read the input") ||
        write_part(wfd, 3, out))
        return -1;
    int rc = 0;
    if (close(wfd) != 0) {
        syserr("close", out);
        rc = -1;
    }
    if (close(rfd) != 0 || close(cfd) != 0) {
        syserr("close", in);
        rc = -1;
    }
    if (rc == 0)
        rc = verify_output(out);
    if (rc == 0)
        printf("fork_exec: %s = A|B|C|D (%" PRIu64 " bytes) OK\n", out, part_off(4));
    return rc;
}

/* ---- thread phase ------------------------------------------------------------- */

struct tctx {
    int id, fd;
    const char *path;
    pthread_barrier_t *bar;
    int failed;
};

#define THREAD_SEED pattern_seed(0xf2, 0, 0)

static int check_region(struct tctx *t, unsigned char *buf, int owner)
{
    off_t off = (off_t)owner * REGION;
    ssize_t n = pread_full(t->fd, buf, REGION, off, t->path);
    if (n != REGION) {
        if (n >= 0)
            errmsg("%s: thread %d: pread of region %d returned %zd bytes", t->path, t->id,
                   owner, n);
        return -1;
    }
    uint64_t first = 0, bad = pattern_check(buf, REGION, THREAD_SEED, (uint64_t)off, &first);
    if (bad) {
        errmsg("%s: thread %d: region %d has %" PRIu64 " bad bytes, first at %" PRIu64, t->path,
               t->id, owner, bad, first);
        return -1;
    }
    return 0;
}

static void *thread_main(void *arg)
{
    struct tctx *t = arg;
    unsigned char *buf = malloc(REGION);
    if (!buf) {
        errmsg("thread %d: out of memory", t->id);
        t->failed = 1;
    } else {
        /* last piece first, so the file grows through holes */
        for (int p = PIECES - 1; p >= 0 && !t->failed; p--) {
            uint64_t off = (uint64_t)t->id * REGION + (uint64_t)p * (REGION / PIECES);
            pattern_fill(buf, REGION / PIECES, THREAD_SEED, off);
            if (pwrite_full(t->fd, buf, REGION / PIECES, (off_t)off, t->path))
                t->failed = 1;
        }
    }
    pthread_barrier_wait(t->bar); /* every thread waits, even after a failure */
    if (!t->failed &&
        (check_region(t, buf, t->id) || check_region(t, buf, (t->id + 1) % NTHREADS)))
        t->failed = 1;
    free(buf);
    return NULL;
}

static int thread_phase(const char *dir)
{
    char path[PATH_MAX];
    join(path, sizeof path, dir, "threads.dat");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        syserr("open", path);
        return -1;
    }
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, NTHREADS);
    pthread_t tid[NTHREADS];
    struct tctx ctx[NTHREADS];
    int rc = 0, started = 0;
    for (int i = 0; i < NTHREADS; i++) {
        ctx[i] = (struct tctx){.id = i, .fd = fd, .path = path, .bar = &bar};
        int e = pthread_create(&tid[i], NULL, thread_main, &ctx[i]);
        if (e) {
            errno = e;
            syserr("pthread_create for", path);
            /* the barrier would never open: cannot continue safely */
            exit(1);
        }
        started++;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
        rc |= ctx[i].failed ? -1 : 0;
    }
    pthread_barrier_destroy(&bar);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        syserr("fstat", path);
        rc = -1;
    } else if (sb.st_size != (off_t)NTHREADS * REGION) {
        errmsg("%s: size %lld, expected %lld", path, (long long)sb.st_size,
               (long long)NTHREADS * REGION);
        rc = -1;
    }
    if (close(fd) != 0) {
        syserr("close", path);
        rc = -1;
    }
    if (rc == 0)
        printf("fork_exec: %s: %d threads x %d MiB pwrite/pread OK\n", path, NTHREADS,
               REGION >> 20);
    return rc;
}

static int parse_fd(const char *s, int *fd)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 0 || v > INT_MAX)
        return -1;
    *fd = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    prog_init(argv[0], -1);
    if (argc == 6 && strcmp(argv[1], "--exec-stage") == 0) {
        int w, r, c;
        prog_init("fork_exec(exec'd)", -1);
        if (parse_fd(argv[2], &w) || parse_fd(argv[3], &r) || parse_fd(argv[4], &c)) {
            errmsg("bad fd numbers for --exec-stage");
            return 2;
        }
        return exec_stage(w, r, c, argv[5]) ? 1 : 0;
    }
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        usage(stderr);
        return 2;
    }
    const char *dir = argv[1];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        syserr("mkdir", dir);
        return 1;
    }
    int rc = fork_exec_phase(dir);
    if (thread_phase(dir))
        rc = -1;
    return rc ? 1 : 0;
}
