/* POSIX file calls: open, descriptor I/O, metadata, links, mmap.
 *
 * Wraps: openat, open, open64, openat64, __open_2, __open64_2, __openat_2,
 * __openat64_2, creat, creat64, close, close_range, read, __read_chk, write,
 * pread, pread64, __pread_chk, __pread64_chk, pwrite, pwrite64, readv,
 * writev, preadv, preadv64, pwritev, pwritev64, preadv2, preadv64v2,
 * pwritev2, pwritev64v2, lseek, lseek64, fsync, fdatasync, ftruncate,
 * ftruncate64, truncate, truncate64, fallocate, fallocate64,
 * posix_fallocate, posix_fallocate64, copy_file_range, sendfile, sendfile64,
 * mmap, mmap64, dup, dup3, dup2, fcntl, flock, lockf, lockf64, fcntl64,
 * fstat, fstat64, fstatat, fstatat64, stat, stat64, lstat, lstat64, __xstat,
 * __xstat64, __lxstat, __lxstat64, __fxstat, __fxstat64, __fxstatat,
 * __fxstatat64, statx, statfs, statfs64, fstatfs, fstatfs64, statvfs,
 * statvfs64, fstatvfs, fstatvfs64, faccessat, access, euidaccess, eaccess,
 * fchmodat, chmod, fchmod, fchownat, chown, lchown, fchown, futimens,
 * utimensat, utimes, futimes, utime, unlinkat, unlink, rmdir, mkdirat,
 * mkdir, renameat2, renameat, rename, linkat, link, symlinkat, symlink,
 * readlinkat, readlink, getxattr, lgetxattr, fgetxattr, setxattr, lsetxattr,
 * fsetxattr, removexattr, lremovexattr, fremovexattr, listxattr, llistxattr,
 * flistxattr.
 */
#include "route.h"

#include <stdarg.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <utime.h>

_Static_assert(sizeof(struct stat) == sizeof(struct stat64), "stat and stat64 agree (x86_64, aarch64)");
_Static_assert(sizeof(off_t) == sizeof(off64_t), "64-bit off_t");

static unsigned open_mode(int flags, va_list ap) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, unsigned) : 0;
}

/* ---- open and close ---- */

int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    unsigned mode = open_mode(flags, ap);
    va_end(ap);
    if (surge_fuse && !surge_in_handler) {
        double start = surge_monotonic();
        int fd = REAL(openat)(dirfd, path, flags, mode);
        surge_fuse_opened(fd, path, surge_monotonic() - start);
        return fd;
    }
    int held = surge_named_descriptor(path);
    if (held >= 0) return surge_reopen_fd(held, flags);
    ROUTE(dirfd, path, -1, REAL(openat)(dfd, p, flags, mode), surge_open_path(sp, flags, mode));
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    unsigned mode = open_mode(flags, ap);
    va_end(ap);
    return openat(AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    unsigned mode = open_mode(flags, ap);
    va_end(ap);
    return openat(AT_FDCWD, path, flags | O_LARGEFILE, mode);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    unsigned mode = open_mode(flags, ap);
    va_end(ap);
    return openat(dirfd, path, flags | O_LARGEFILE, mode);
}

/* _FORTIFY_SOURCE entry points (open without O_CREAT). */
int __open_2(const char *path, int flags) { return openat(AT_FDCWD, path, flags); }
int __open64_2(const char *path, int flags) { return openat(AT_FDCWD, path, flags | O_LARGEFILE); }
int __openat_2(int dirfd, const char *path, int flags) { return openat(dirfd, path, flags); }
int __openat64_2(int dirfd, const char *path, int flags) { return openat(dirfd, path, flags | O_LARGEFILE); }

int creat(const char *path, mode_t mode) { return openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char *path, mode_t mode) { return creat(path, mode); }

int close(int fd) {
    surge_fuse_closed(fd);
    if (!surge_fd(fd)) return REAL(close)(fd);
    return surge_close_fd(fd);
}

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

int close_range(unsigned first, unsigned last, int flags) {
    if (!(flags & CLOSE_RANGE_CLOEXEC)) {
        const struct surge_handler *c = NULL;
        for (unsigned fd = first; fd <= last && fd < SURGE_MAX_FDS; fd++) {
            surge_fuse_closed((int)fd);
            if (!surge_fd((int)fd)) continue;
            surge_flush_standard_stream((int)fd);
            if (c || (c = surge_handler())) HANDLER_CALL(c, close, (int)fd);
            surge_mark((int)fd, false);
        }
    }
    return REAL(close_range)(first, last, flags);
}

/* ---- data ---- */

ssize_t read(int fd, void *buf, size_t n) {
    FAST_DATA(fd, HANDLER_CALL(c, fast_read, fd, buf, n, -1));
    FD_ROUTE(fd, -1, REAL(read)(fd, buf, n), HANDLER_CALL(c, read, fd, buf, n, -1));
}

ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen) {
    (void)buflen;
    return read(fd, buf, n);
}

ssize_t write(int fd, const void *buf, size_t n) {
    FAST_DATA(fd, HANDLER_CALL(c, fast_write, fd, buf, n, -1));
    FD_ROUTE(fd, -1, REAL(write)(fd, buf, n), HANDLER_CALL(c, write, fd, buf, n, -1));
}

static bool bad_offset(off_t off) {
    if (off >= 0) return false;
    errno = EINVAL;
    return true;
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    if (off >= 0) FAST_DATA(fd, HANDLER_CALL(c, fast_read, fd, buf, n, off));
    FD_ROUTE(fd, -1, REAL(pread)(fd, buf, n, off), bad_offset(off) ? -1 : HANDLER_CALL(c, read, fd, buf, n, off));
}
ssize_t pread64(int fd, void *buf, size_t n, off64_t off) { return pread(fd, buf, n, off); }
ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen) {
    (void)buflen;
    return pread(fd, buf, n, off);
}
ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen) {
    (void)buflen;
    return pread(fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    if (off >= 0) FAST_DATA(fd, HANDLER_CALL(c, fast_write, fd, buf, n, off));
    FD_ROUTE(fd, -1, REAL(pwrite)(fd, buf, n, off), bad_offset(off) ? -1 : HANDLER_CALL(c, write, fd, buf, n, off));
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) { return pwrite(fd, buf, n, off); }

ssize_t readv(int fd, const struct iovec *iov, int count) {
    FAST_DATA(fd, HANDLER_CALL(c, fast_readv, fd, iov, count, -1));
    FD_ROUTE(fd, -1, REAL(readv)(fd, iov, count), HANDLER_CALL(c, readv, fd, iov, count, -1));
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    FAST_DATA(fd, HANDLER_CALL(c, fast_writev, fd, iov, count, -1));
    FD_ROUTE(fd, -1, REAL(writev)(fd, iov, count), HANDLER_CALL(c, writev, fd, iov, count, -1));
}

ssize_t preadv(int fd, const struct iovec *iov, int count, off_t off) {
    if (off >= 0) FAST_DATA(fd, HANDLER_CALL(c, fast_readv, fd, iov, count, off));
    FD_ROUTE(fd, -1, REAL(preadv)(fd, iov, count, off),
             bad_offset(off) ? -1 : HANDLER_CALL(c, readv, fd, iov, count, off));
}
ssize_t preadv64(int fd, const struct iovec *iov, int count, off64_t off) { return preadv(fd, iov, count, off); }

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t off) {
    if (off >= 0) FAST_DATA(fd, HANDLER_CALL(c, fast_writev, fd, iov, count, off));
    FD_ROUTE(fd, -1, REAL(pwritev)(fd, iov, count, off),
             bad_offset(off) ? -1 : HANDLER_CALL(c, writev, fd, iov, count, off));
}
ssize_t pwritev64(int fd, const struct iovec *iov, int count, off64_t off) { return pwritev(fd, iov, count, off); }

/* preadv2/pwritev2: offset -1 is the descriptor's position; RWF_ hints are advisory. */
ssize_t preadv2(int fd, const struct iovec *iov, int count, off_t off, int flags) {
    if (off >= -1) FAST_DATA(fd, HANDLER_CALL(c, fast_readv, fd, iov, count, off));
    FD_ROUTE(fd, -1, REAL(preadv2)(fd, iov, count, off, flags), HANDLER_CALL(c, readv, fd, iov, count, off));
}
ssize_t preadv64v2(int fd, const struct iovec *iov, int count, off64_t off, int flags) {
    return preadv2(fd, iov, count, off, flags);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int count, off_t off, int flags) {
    /* RWF_APPEND appends wherever the offset says: the kernel's. */
    if (off >= -1 && !(flags & RWF_APPEND)) FAST_DATA(fd, HANDLER_CALL(c, fast_writev, fd, iov, count, off));
    FD_ROUTE(fd, -1, REAL(pwritev2)(fd, iov, count, off, flags), HANDLER_CALL(c, writev, fd, iov, count, off));
}
ssize_t pwritev64v2(int fd, const struct iovec *iov, int count, off64_t off, int flags) {
    return pwritev2(fd, iov, count, off, flags);
}

off_t lseek(int fd, off_t off, int whence) {
    if (whence != SEEK_SET && whence != SEEK_CUR) surge_fuse_sync_sizes();
    FD_ROUTE(fd, -1, REAL(lseek)(fd, off, whence), HANDLER_CALL(c, lseek, fd, off, whence));
}
off64_t lseek64(int fd, off64_t off, int whence) { return lseek(fd, off, whence); }

int fsync(int fd) {
    surge_fuse_sync_sizes();
    if (surge_fast_fd(fd)) return surge_fuse_synced(fd, REAL(fsync));
    FD_ROUTE(fd, -1, REAL(fsync)(fd), HANDLER_CALL(c, fsync, fd));
}
int fdatasync(int fd) {
    surge_fuse_sync_sizes();
    if (surge_fast_fd(fd)) return surge_fuse_synced(fd, REAL(fdatasync));
    FD_ROUTE(fd, -1, REAL(fdatasync)(fd), HANDLER_CALL(c, fsync, fd));
}

int ftruncate(int fd, off_t len) { FD_ROUTE(fd, -1, REAL(ftruncate)(fd, len), HANDLER_CALL(c, ftruncate, fd, len)); }
int ftruncate64(int fd, off64_t len) { return ftruncate(fd, len); }

int truncate(const char *path, off_t len) {
    ROUTE(AT_FDCWD, path, -1, REAL(truncate)(p, len), HANDLER_CALL(c, truncate, sp, len));
}
int truncate64(const char *path, off64_t len) { return truncate(path, len); }

int fallocate(int fd, int mode, off_t off, off_t len) {
    FD_ROUTE(fd, -1, REAL(fallocate)(fd, mode, off, len), HANDLER_CALL(c, fallocate, fd, mode, off, len));
}
int fallocate64(int fd, int mode, off64_t off, off64_t len) { return fallocate(fd, mode, off, len); }

/* posix_fallocate returns the error instead of setting errno. */
int posix_fallocate(int fd, off_t off, off_t len) {
    if (!surge_fd(fd)) return REAL(posix_fallocate)(fd, off, len);
    int saved = errno;
    int r = fallocate(fd, 0, off, len) == 0 ? 0 : errno;
    errno = saved;
    return r;
}
int posix_fallocate64(int fd, off64_t off, off64_t len) { return posix_fallocate(fd, off, len); }

/* copy_file_range between a Surge file and another descriptor cannot move
 * the data in the kernel: EXDEV, as across file systems, and callers (cp,
 * Python's shutil) fall back to read and write. */
ssize_t copy_file_range(int in, off64_t *in_off, int out, off64_t *out_off, size_t len, unsigned flags) {
    if (surge_fd(in) || surge_fd(out)) {
        errno = EXDEV;
        return -1;
    }
    surge_fuse_sync_sizes();
    return REAL(copy_file_range)(in, in_off, out, out_off, len, flags);
}

/* sendfile with a Surge descriptor on either side moves the bytes through
 * the interposed read and write, as the kernel would: from `*off` (left
 * unmoved on `in`, and advanced) or from `in`'s position (advanced), to
 * `out`'s position. Bytes read but not written are given back to `in`. */
static ssize_t send_through_interposer(int out, int in, off_t *off, size_t count) {
    char buf[1 << 16];
    size_t total = 0;
    while (total < count) {
        size_t want = count - total < sizeof buf ? count - total : sizeof buf;
        ssize_t n = off ? pread(in, buf, want, *off) : read(in, buf, want);
        if (n <= 0) {
            if (n < 0 && total == 0) return -1;
            break;
        }
        ssize_t sent = 0;
        while (sent < n) {
            ssize_t w = write(out, buf + sent, (size_t)(n - sent));
            if (w < 0) break;
            sent += w;
        }
        if (off) *off += sent;
        else if (sent < n) lseek(in, sent - n, SEEK_CUR);
        total += (size_t)sent;
        if (sent < n) {
            if (total == 0) return -1;
            break;
        }
    }
    return (ssize_t)total;
}

ssize_t sendfile(int out, int in, off_t *off, size_t count) {
    if (surge_fd(in) || surge_fd(out)) return send_through_interposer(out, in, off, count);
    surge_fuse_sync_sizes();
    return REAL(sendfile)(out, in, off, count);
}
ssize_t sendfile64(int out, int in, off64_t *off, size_t count) { return sendfile(out, in, off, count); }

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    /* A page past the kernel's cached size is SIGBUS. */
    if (!(flags & MAP_ANONYMOUS)) surge_fuse_sync_sizes();
    if (!(flags & MAP_ANONYMOUS) && surge_fd(fd)) {
        const struct surge_handler *c = surge_handler();
        if (c) HANDLER_CALL(c, unsupported, "mmap", fd, NULL, ENODEV);
        return MAP_FAILED;
    }
    return REAL(mmap)(addr, len, prot, flags, fd, off);
}
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off) {
    return mmap(addr, len, prot, flags, fd, off);
}

/* ---- descriptors ---- */

/* After the kernel made `copy` a duplicate of Surge descriptor `fd`. */
static int share(const struct surge_handler *c, int fd, int copy) {
    if (copy < 0) return copy;
    if (HANDLER_CALL(c, dup, fd, copy) < 0) {
        int err = errno;
        REAL(close)(copy);
        errno = err;
        return -1;
    }
    surge_mark(copy, true);
    return copy;
}

int dup(int fd) {
    if (surge_fuse) {
        int copy = REAL(dup)(fd);
        surge_fuse_duplicated(fd, copy);
        return copy;
    }
    FD_ROUTE(fd, -1, REAL(dup)(fd), share(c, fd, REAL(dup)(fd)));
}

int dup3(int fd, int target, int flags) {
    if (surge_fuse) {
        int copy = REAL(dup3)(fd, target, flags);
        surge_fuse_duplicated(fd, copy);
        return copy;
    }
    if (fd != target) surge_flush_standard_stream(target);
    if (fd != target && surge_fd(target)) {
        const struct surge_handler *c = surge_handler();
        if (c) HANDLER_CALL(c, close, target); /* the kernel closes it as part of the dup */
        surge_mark(target, false);
    }
    FD_ROUTE(fd, -1, REAL(dup3)(fd, target, flags), share(c, fd, REAL(dup3)(fd, target, flags)));
}

int dup2(int fd, int target) {
    if (fd == target) return REAL(dup2)(fd, target);
    return dup3(fd, target, 0);
}

int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (surge_fuse && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) {
        int copy = REAL(fcntl)(fd, cmd, arg);
        surge_fuse_duplicated(fd, copy);
        return copy;
    }
    if (!surge_fd(fd)) return REAL(fcntl)(fd, cmd, arg);
    const struct surge_handler *c = surge_handler();
    if (!c) return -1;
    switch (cmd) {
    case F_GETFL:
        return HANDLER_CALL(c, getfl, fd);
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
        return share(c, fd, REAL(fcntl)(fd, cmd, arg));
    case F_SETLK:
    case F_SETLKW:
    case F_GETLK:
    case F_OFD_SETLK:
    case F_OFD_SETLKW:
    case F_OFD_GETLK:
        /* On the file's node-wide lock file: a lock on the placeholder would exclude nobody. */
        return HANDLER_CALL(c, lock, fd, cmd, (struct flock *)arg);
    default:
        /* Descriptor and status flags live on the placeholder. */
        return REAL(fcntl)(fd, cmd, arg);
    }
}

int flock(int fd, int operation) { FD_ROUTE(fd, -1, REAL(flock)(fd, operation), HANDLER_CALL(c, flock, fd, operation)); }

/* glibc's lockf calls its internal fcntl, which the shim does not see:
 * the same locks, taken through the shim's. */
int lockf(int fd, int cmd, off_t len) {
    if (!surge_fd(fd)) return REAL(lockf)(fd, cmd, len);
    const struct surge_handler *c = surge_handler();
    if (!c) return -1;
    struct flock lk = {.l_whence = SEEK_CUR, .l_start = 0, .l_len = len, .l_type = F_WRLCK};
    switch (cmd) {
    case F_TEST:
        lk.l_type = F_RDLCK;
        if (HANDLER_CALL(c, lock, fd, F_GETLK, &lk) < 0) return -1;
        if (lk.l_type == F_UNLCK || lk.l_pid == getpid()) return 0;
        errno = EACCES;
        return -1;
    case F_ULOCK:
        lk.l_type = F_UNLCK;
        return HANDLER_CALL(c, lock, fd, F_SETLK, &lk);
    case F_LOCK:
        return HANDLER_CALL(c, lock, fd, F_SETLKW, &lk);
    case F_TLOCK:
        return HANDLER_CALL(c, lock, fd, F_SETLK, &lk);
    default:
        errno = EINVAL;
        return -1;
    }
}
int lockf64(int fd, int cmd, off64_t len) { return lockf(fd, cmd, len); }

int fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl(fd, cmd, arg);
}

/* ---- attributes ---- */

int fstat(int fd, struct stat *st) {
    surge_fuse_sync_sizes();
    FD_ROUTE(fd, -1, REAL(fstat)(fd, st), HANDLER_CALL(c, fstat, fd, st));
}
int fstat64(int fd, struct stat64 *st) { return fstat(fd, (struct stat *)st); }

int fstatat(int dirfd, const char *path, struct stat *st, int flags) {
    if ((flags & AT_EMPTY_PATH) && path && !*path) return fstat(dirfd, st);
    int held = flags & AT_SYMLINK_NOFOLLOW ? -1 : surge_named_descriptor(path);
    if (held >= 0) return fstat(held, st);
    surge_fuse_sync_sizes();
    META_ROUTE(dirfd, path, -1, REAL(fstatat)(dfd, p, st, flags),
          flags & AT_SYMLINK_NOFOLLOW ? HANDLER_CALL(c, lstat, sp, st) : HANDLER_CALL(c, stat, sp, st));
}
int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags) {
    return fstatat(dirfd, path, (struct stat *)st, flags);
}

int stat(const char *path, struct stat *st) { return fstatat(AT_FDCWD, path, st, 0); }
int stat64(const char *path, struct stat64 *st) { return fstatat(AT_FDCWD, path, (struct stat *)st, 0); }
int lstat(const char *path, struct stat *st) { return fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW); }
int lstat64(const char *path, struct stat64 *st) {
    return fstatat(AT_FDCWD, path, (struct stat *)st, AT_SYMLINK_NOFOLLOW);
}

/* The versioned entry points of programs built against glibc before 2.33. */
int __xstat(int ver, const char *path, struct stat *st) {
    (void)ver;
    return stat(path, st);
}
int __xstat64(int ver, const char *path, struct stat64 *st) { return __xstat(ver, path, (struct stat *)st); }
int __lxstat(int ver, const char *path, struct stat *st) {
    (void)ver;
    return lstat(path, st);
}
int __lxstat64(int ver, const char *path, struct stat64 *st) { return __lxstat(ver, path, (struct stat *)st); }
int __fxstat(int ver, int fd, struct stat *st) {
    (void)ver;
    return fstat(fd, st);
}
int __fxstat64(int ver, int fd, struct stat64 *st) { return __fxstat(ver, fd, (struct stat *)st); }
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags) {
    (void)ver;
    return fstatat(dirfd, path, st, flags);
}
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags) {
    return __fxstatat(ver, dirfd, path, (struct stat *)st, flags);
}

int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *stx) {
    surge_fuse_sync_sizes();
    if ((flags & AT_EMPTY_PATH) && path && !*path) {
        FD_ROUTE(dirfd, -1, REAL(statx)(dirfd, path, flags, mask, stx), HANDLER_CALL(c, fstatx, dirfd, stx));
    }
    int held = flags & AT_SYMLINK_NOFOLLOW ? -1 : surge_named_descriptor(path);
    if (held >= 0) return statx(held, "", flags | AT_EMPTY_PATH, mask, stx);
    META_ROUTE(dirfd, path, -1, REAL(statx)(dfd, p, flags, mask, stx),
          flags & AT_SYMLINK_NOFOLLOW ? HANDLER_CALL(c, lstatx, sp, stx) : HANDLER_CALL(c, statx, sp, stx));
}

int statfs(const char *path, struct statfs *sf) {
    ROUTE(AT_FDCWD, path, -1, REAL(statfs)(p, sf), HANDLER_CALL(c, stat, sp, &(struct stat){0}) < 0 ? -1 : HANDLER_CALL(c, statfs, sf));
}
int statfs64(const char *path, struct statfs64 *sf) { return statfs(path, (struct statfs *)sf); }
int fstatfs(int fd, struct statfs *sf) { FD_ROUTE(fd, -1, REAL(fstatfs)(fd, sf), HANDLER_CALL(c, statfs, sf)); }
int fstatfs64(int fd, struct statfs64 *sf) { return fstatfs(fd, (struct statfs *)sf); }

static void statvfs_of(const struct statfs *f, struct statvfs *v) {
    memset(v, 0, sizeof *v);
    v->f_bsize = f->f_bsize;
    v->f_frsize = f->f_frsize;
    v->f_blocks = f->f_blocks;
    v->f_bfree = f->f_bfree;
    v->f_bavail = f->f_bavail;
    v->f_files = f->f_files;
    v->f_ffree = f->f_ffree;
    v->f_favail = f->f_ffree;
    v->f_namemax = f->f_namelen;
}

int statvfs(const char *path, struct statvfs *v) {
    struct statfs f;
    ROUTE(AT_FDCWD, path, -1, REAL(statvfs)(p, v),
          HANDLER_CALL(c, stat, sp, &(struct stat){0}) < 0 || HANDLER_CALL(c, statfs, &f) < 0 ? -1 : (statvfs_of(&f, v), 0));
}
int statvfs64(const char *path, struct statvfs64 *v) { return statvfs(path, (struct statvfs *)v); }
int fstatvfs(int fd, struct statvfs *v) {
    struct statfs f;
    FD_ROUTE(fd, -1, REAL(fstatvfs)(fd, v), HANDLER_CALL(c, statfs, &f) < 0 ? -1 : (statvfs_of(&f, v), 0));
}
int fstatvfs64(int fd, struct statvfs64 *v) { return fstatvfs(fd, (struct statvfs *)v); }

int faccessat(int dirfd, const char *path, int amode, int flags) {
    META_ROUTE(dirfd, path, -1, REAL(faccessat)(dfd, p, amode, flags), HANDLER_CALL(c, access, sp, amode));
}
int access(const char *path, int amode) { return faccessat(AT_FDCWD, path, amode, 0); }
int euidaccess(const char *path, int amode) { return faccessat(AT_FDCWD, path, amode, AT_EACCESS); }
int eaccess(const char *path, int amode) { return euidaccess(path, amode); }

int fchmodat(int dirfd, const char *path, mode_t mode, int flags) {
    ROUTE(dirfd, path, -1, REAL(fchmodat)(dfd, p, mode, flags),
          HANDLER_CALL(c, chmod, sp, mode, (flags & AT_SYMLINK_NOFOLLOW) != 0));
}
int chmod(const char *path, mode_t mode) { return fchmodat(AT_FDCWD, path, mode, 0); }
int fchmod(int fd, mode_t mode) {
    if (!surge_fd(fd)) return REAL(fchmod)(fd, mode);
    const struct surge_handler *c = surge_handler();
    if (!c) return -1;
    FD_PATH(c, fd, sp, -1);
    return HANDLER_CALL(c, chmod, sp, mode, 1);
}

int fchownat(int dirfd, const char *path, uid_t uid, gid_t gid, int flags) {
    if ((flags & AT_EMPTY_PATH) && path && !*path && surge_fd(dirfd)) return fchown(dirfd, uid, gid);
    ROUTE(dirfd, path, -1, REAL(fchownat)(dfd, p, uid, gid, flags), HANDLER_CALL(c, chown, sp, uid, gid));
}
int chown(const char *path, uid_t uid, gid_t gid) { return fchownat(AT_FDCWD, path, uid, gid, 0); }
int lchown(const char *path, uid_t uid, gid_t gid) { return fchownat(AT_FDCWD, path, uid, gid, AT_SYMLINK_NOFOLLOW); }
int fchown(int fd, uid_t uid, gid_t gid) {
    if (!surge_fd(fd)) return REAL(fchown)(fd, uid, gid);
    const struct surge_handler *c = surge_handler();
    if (!c) return -1;
    FD_PATH(c, fd, sp, -1);
    return HANDLER_CALL(c, chown, sp, uid, gid);
}

int futimens(int fd, const struct timespec times[2]) {
    if (!surge_fd(fd)) return REAL(futimens)(fd, times);
    const struct surge_handler *c = surge_handler();
    if (!c) return -1;
    FD_PATH(c, fd, sp, -1);
    return HANDLER_CALL(c, utimens, sp, times, 1);
}

int utimensat(int dirfd, const char *path, const struct timespec times[2], int flags) {
    if (!path) return futimens(dirfd, times); /* Linux: NULL path means dirfd itself */
    ROUTE(dirfd, path, -1, REAL(utimensat)(dfd, p, times, flags),
          HANDLER_CALL(c, utimens, sp, times, (flags & AT_SYMLINK_NOFOLLOW) != 0));
}

static const struct timespec *timespecs(const struct timeval tv[2], struct timespec ts[2]) {
    if (!tv) return NULL;
    for (int i = 0; i < 2; i++) ts[i] = (struct timespec){tv[i].tv_sec, tv[i].tv_usec * 1000};
    return ts;
}

int utimes(const char *path, const struct timeval tv[2]) {
    struct timespec ts[2];
    ROUTE(AT_FDCWD, path, -1, REAL(utimes)(p, tv), HANDLER_CALL(c, utimens, sp, timespecs(tv, ts), 0));
}

int futimes(int fd, const struct timeval tv[2]) {
    struct timespec ts[2];
    if (!surge_fd(fd)) return REAL(futimes)(fd, tv);
    return futimens(fd, timespecs(tv, ts));
}

int utime(const char *path, const struct utimbuf *times) {
    struct timespec ts[2];
    const struct timespec *t = NULL;
    if (times) {
        ts[0] = (struct timespec){times->actime, 0};
        ts[1] = (struct timespec){times->modtime, 0};
        t = ts;
    }
    ROUTE(AT_FDCWD, path, -1, REAL(utime)(p, times), HANDLER_CALL(c, utimens, sp, t, 0));
}

/* ---- namespace ---- */

int unlinkat(int dirfd, const char *path, int flags) {
    ROUTE(dirfd, path, -1, REAL(unlinkat)(dfd, p, flags),
          flags & AT_REMOVEDIR ? HANDLER_CALL(c, rmdir, sp) : HANDLER_CALL(c, unlink, sp));
}
int unlink(const char *path) { return unlinkat(AT_FDCWD, path, 0); }
int rmdir(const char *path) { return unlinkat(AT_FDCWD, path, AT_REMOVEDIR); }

int mkdirat(int dirfd, const char *path, mode_t mode) {
    META_ROUTE(dirfd, path, -1, REAL(mkdirat)(dfd, p, mode), HANDLER_CALL(c, mkdir, sp, surge_created_mode(mode)));
}
int mkdir(const char *path, mode_t mode) { return mkdirat(AT_FDCWD, path, mode); }

/* A call on two paths (rename, link): on the host when neither is in Surge,
 * EXDEV when one only is (callers copy instead), else the handler's `op`,
 * again after each link met on the way. */
enum two_paths_op { TWO_PATHS_RENAME, TWO_PATHS_LINK };
int renameat2(int olddir, const char *from, int newdir, const char *to, unsigned flags);

static int two_paths(enum two_paths_op op, int olddir, const char *from, int newdir, const char *to, unsigned flags) {
    char from_sp[PATH_MAX], to_sp[PATH_MAX];
    int a = surge_where(olddir, from, from_sp), b = surge_where(newdir, to, to_sp);
    if (a < 0 || b < 0) return -1;
    if (a != SURGE_PATH && b != SURGE_PATH) {
        int fd_a = a == SURGE_HOST ? olddir : AT_FDCWD, fd_b = b == SURGE_HOST ? newdir : AT_FDCWD;
        const char *p_a = a == SURGE_HOST ? from : from_sp, *p_b = b == SURGE_HOST ? to : to_sp;
        return op == TWO_PATHS_RENAME ? REAL(renameat2)(fd_a, p_a, fd_b, p_b, flags)
                                      : REAL(linkat)(fd_a, p_a, fd_b, p_b, (int)flags);
    }
    if (a != b) {
        errno = EXDEV;
        return -1;
    }
    const struct surge_handler *c = surge_handler();
    if (!c) return -1;
    int caller_errno = errno;
    for (int links = 0;; links++) {
        int r = op == TWO_PATHS_RENAME ? HANDLER_CALL(c, rename, from_sp, to_sp, flags)
                                       : HANDLER_CALL(c, link, from_sp, to_sp, (flags & AT_SYMLINK_FOLLOW) != 0);
        if (r == 0) errno = caller_errno; /* not a link met on the way */
        if (r == 0 || errno != SURGE_ELINK) return r;
        /* The link met is on one of the two paths; follow leaves the other alone (0). */
        int where = HANDLER_CALL(c, follow, from_sp, links);
        if (where == SURGE_HOST) where = HANDLER_CALL(c, follow, to_sp, links);
        if (where < 0) return -1;
        if (where != SURGE_PATH) {
            errno = EXDEV; /* out of Surge through a link */
            return -1;
        }
    }
}

int renameat2(int olddir, const char *from, int newdir, const char *to, unsigned flags) {
    return two_paths(TWO_PATHS_RENAME, olddir, from, newdir, to, flags);
}
int renameat(int olddir, const char *from, int newdir, const char *to) { return renameat2(olddir, from, newdir, to, 0); }
int rename(const char *from, const char *to) { return renameat2(AT_FDCWD, from, AT_FDCWD, to, 0); }

int linkat(int olddir, const char *from, int newdir, const char *to, int flags) {
    return two_paths(TWO_PATHS_LINK, olddir, from, newdir, to, (unsigned)flags);
}
int link(const char *from, const char *to) { return linkat(AT_FDCWD, from, AT_FDCWD, to, 0); }

int symlinkat(const char *target, int dirfd, const char *path) {
    ROUTE(dirfd, path, -1, REAL(symlinkat)(target, dfd, p), HANDLER_CALL(c, symlink, target, sp));
}
int symlink(const char *target, const char *path) { return symlinkat(target, AT_FDCWD, path); }


ssize_t readlinkat(int dirfd, const char *path, char *buf, size_t len) {
    /* /dev/stdin is a link to /proc/self/fd/0, which the kernel says itself. */
    int held = path && strncmp(path, "/dev/std", 8) != 0 ? surge_named_descriptor(path) : -1;
    if (held >= 0) {
        const struct surge_handler *c = surge_handler();
        return c ? HANDLER_CALL(c, fd_link, held, buf, len) : -1;
    }
    ROUTE(dirfd, path, -1, REAL(readlinkat)(dfd, p, buf, len), HANDLER_CALL(c, readlink, sp, buf, len));
}
ssize_t readlink(const char *path, char *buf, size_t len) { return readlinkat(AT_FDCWD, path, buf, len); }

/* ---- extended attributes: user.* kept by Surge (docs/interposer.md) ---- */

/* The body of an f*xattr call: `real` on a host descriptor, else `call`
 * on the open file's path (never a link). */
#define FD_XATTR(fd, real, call)                         \
    if (!surge_fd(fd)) return real;                      \
    const struct surge_handler *c = surge_handler();     \
    if (!c) return -1;                                   \
    FD_PATH(c, fd, sp, -1);                              \
    return call

ssize_t getxattr(const char *path, const char *name, void *value, size_t size) {
    ROUTE(AT_FDCWD, path, -1, REAL(getxattr)(p, name, value, size), HANDLER_CALL(c, getxattr, sp, name, value, size, 0));
}
ssize_t lgetxattr(const char *path, const char *name, void *value, size_t size) {
    ROUTE(AT_FDCWD, path, -1, REAL(lgetxattr)(p, name, value, size), HANDLER_CALL(c, getxattr, sp, name, value, size, 1));
}
ssize_t fgetxattr(int fd, const char *name, void *value, size_t size) {
    FD_XATTR(fd, REAL(fgetxattr)(fd, name, value, size), HANDLER_CALL(c, getxattr, sp, name, value, size, 1));
}
int setxattr(const char *path, const char *name, const void *value, size_t size, int flags) {
    ROUTE(AT_FDCWD, path, -1, REAL(setxattr)(p, name, value, size, flags),
          HANDLER_CALL(c, setxattr, sp, name, value, size, flags, 0));
}
int lsetxattr(const char *path, const char *name, const void *value, size_t size, int flags) {
    ROUTE(AT_FDCWD, path, -1, REAL(lsetxattr)(p, name, value, size, flags),
          HANDLER_CALL(c, setxattr, sp, name, value, size, flags, 1));
}
int fsetxattr(int fd, const char *name, const void *value, size_t size, int flags) {
    FD_XATTR(fd, REAL(fsetxattr)(fd, name, value, size, flags), HANDLER_CALL(c, setxattr, sp, name, value, size, flags, 1));
}
int removexattr(const char *path, const char *name) {
    ROUTE(AT_FDCWD, path, -1, REAL(removexattr)(p, name), HANDLER_CALL(c, removexattr, sp, name, 0));
}
int lremovexattr(const char *path, const char *name) {
    ROUTE(AT_FDCWD, path, -1, REAL(lremovexattr)(p, name), HANDLER_CALL(c, removexattr, sp, name, 1));
}
int fremovexattr(int fd, const char *name) {
    FD_XATTR(fd, REAL(fremovexattr)(fd, name), HANDLER_CALL(c, removexattr, sp, name, 1));
}
ssize_t listxattr(const char *path, char *list, size_t size) {
    ROUTE(AT_FDCWD, path, -1, REAL(listxattr)(p, list, size), HANDLER_CALL(c, listxattr, sp, list, size, 0));
}
ssize_t llistxattr(const char *path, char *list, size_t size) {
    ROUTE(AT_FDCWD, path, -1, REAL(llistxattr)(p, list, size), HANDLER_CALL(c, listxattr, sp, list, size, 1));
}
ssize_t flistxattr(int fd, char *list, size_t size) {
    FD_XATTR(fd, REAL(flistxattr)(fd, list, size), HANDLER_CALL(c, listxattr, sp, list, size, 1));
}
