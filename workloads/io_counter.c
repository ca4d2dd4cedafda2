/*
 * io_counter.c - libio_counter.so, a minimal I/O profiler preloaded the way
 * Darshan's libdarshan.so is, to check that a profiler listed first in
 * LD_PRELOAD still sees the I/O of files under a prefix after another
 * interposer (Surge's) is added behind it.
 *
 * Like Darshan, it wraps the libc entry points, notes which descriptors were
 * opened on a path under IO_COUNTER_PREFIX, counts the writes on them and
 * passes every call on to the next library in the chain (dlsym RTLD_NEXT).
 * At exit a process that opened such a file appends one line to the file
 * IO_COUNTER_LOG:
 *     <program> opens=N writes=W bytes=B
 * Without both variables it counts nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_FD 4096

static unsigned char counted_fd[MAX_FD];
static unsigned long opens, writes, bytes;

static const char *prefix(void)
{
    const char *p = getenv("IO_COUNTER_PREFIX");
    return p && *p ? p : NULL;
}

static void *next(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        fprintf(stderr, "io_counter: no next %s in the chain\n", name);
        abort();
    }
    return f;
}

/* Notes `fd` as counted when `path` lies under the prefix. */
static int track(int fd, const char *path)
{
    const char *p = prefix();
    if (fd >= 0 && fd < MAX_FD && p && path && strncmp(path, p, strlen(p)) == 0) {
        __atomic_store_n(&counted_fd[fd], 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&opens, 1, __ATOMIC_RELAXED);
    }
    return fd;
}

static ssize_t count(int fd, ssize_t n)
{
    if (n > 0 && fd >= 0 && fd < MAX_FD && __atomic_load_n(&counted_fd[fd], __ATOMIC_RELAXED)) {
        __atomic_add_fetch(&writes, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&bytes, (unsigned long)n, __ATOMIC_RELAXED);
    }
    return n;
}

/* The mode argument of an open that creates. */
#define MODE_ARG(flags, last)                                                                                    \
    mode_t mode = 0;                                                                                             \
    if ((flags) & (O_CREAT | O_TMPFILE)) {                                                                       \
        va_list ap;                                                                                              \
        va_start(ap, last);                                                                                      \
        mode = va_arg(ap, mode_t);                                                                               \
        va_end(ap);                                                                                              \
    }

int open(const char *path, int flags, ...)
{
    MODE_ARG(flags, flags);
    int (*real)(const char *, int, ...) = next("open");
    return track(real(path, flags, mode), path);
}

int open64(const char *path, int flags, ...)
{
    MODE_ARG(flags, flags);
    int (*real)(const char *, int, ...) = next("open64");
    return track(real(path, flags, mode), path);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    MODE_ARG(flags, flags);
    int (*real)(int, const char *, int, ...) = next("openat");
    return track(real(dirfd, path, flags, mode), path);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    MODE_ARG(flags, flags);
    int (*real)(int, const char *, int, ...) = next("openat64");
    return track(real(dirfd, path, flags, mode), path);
}

ssize_t write(int fd, const void *buf, size_t len)
{
    ssize_t (*real)(int, const void *, size_t) = next("write");
    return count(fd, real(fd, buf, len));
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
    ssize_t (*real)(int, const void *, size_t, off_t) = next("pwrite");
    return count(fd, real(fd, buf, len, off));
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
{
    ssize_t (*real)(int, const void *, size_t, off_t) = next("pwrite64");
    return count(fd, real(fd, buf, len, off));
}

int close(int fd)
{
    int (*real)(int) = next("close");
    if (fd >= 0 && fd < MAX_FD)
        __atomic_store_n(&counted_fd[fd], 0, __ATOMIC_RELAXED);
    return real(fd);
}

__attribute__((destructor)) static void report(void)
{
    const char *log = getenv("IO_COUNTER_LOG");
    if (log == NULL || opens == 0)
        return;
    char line[512];
    int n = snprintf(line, sizeof line, "%s opens=%lu writes=%lu bytes=%lu\n", program_invocation_short_name, opens,
                     writes, bytes);
    int (*real_open)(const char *, int, ...) = next("open");
    int fd = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, (size_t)n) != n)
        fprintf(stderr, "io_counter: cannot append to %s\n", log);
    if (fd >= 0)
        close(fd);
}
