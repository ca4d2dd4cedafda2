/* Special files under the mount path with the interposer alone: FIFOs,
 * device nodes and Unix sockets. Surge holds regular files, directories
 * and symbolic links; a FIFO or socket made or reached on the host under
 * the same name would be invisible in Surge and never staged out, so each
 * fails with EOPNOTSUPP (one `surge:` line names the limit) and never
 * touches the host. mknod of a regular file creates it, as the kernel's
 * does. In FUSE mode the kernel serves the mount and these go to libc.
 *
 * Wraps: mknodat, mknod, mkfifoat, mkfifo, __xmknodat, __xmknod, bind,
 * connect, sendto.
 */
#include "route.h"

#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

static int refuse_special(const char *kind, const char *sp) {
    const struct surge_handler *c = surge_handler();
    if (c) return HANDLER_CALL(c, special_file, kind, sp);
    errno = EOPNOTSUPP;
    return -1;
}

/* mknod on Surge path sp: a regular file is created; other kinds refused
 * with the kernel's errno for a type it does not know (EINVAL) or Surge's
 * limit (EOPNOTSUPP). */
static int surge_mknod(const char *sp, mode_t mode) {
    switch (mode & S_IFMT) {
    case 0:
    case S_IFREG: {
        int fd = surge_open_path(sp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777);
        return fd < 0 ? -1 : (surge_close_fd(fd), 0);
    }
    case S_IFIFO: return refuse_special("a FIFO", sp);
    case S_IFSOCK: return refuse_special("a socket", sp);
    case S_IFCHR:
    case S_IFBLK: return refuse_special("a device node", sp);
    default: errno = EINVAL; return -1;
    }
}

int mknodat(int dirfd, const char *path, mode_t mode, dev_t dev) {
    ROUTE(dirfd, path, -1, REAL(mknodat)(dfd, p, mode, dev), surge_mknod(sp, mode));
}
int mknod(const char *path, mode_t mode, dev_t dev) { return mknodat(AT_FDCWD, path, mode, dev); }

/* glibc's mkfifo calls its internal mknodat, which the shim does not see. */
int mkfifoat(int dirfd, const char *path, mode_t mode) {
    ROUTE(dirfd, path, -1, REAL(mkfifoat)(dfd, p, mode), refuse_special("a FIFO", sp));
}
int mkfifo(const char *path, mode_t mode) { return mkfifoat(AT_FDCWD, path, mode); }

/* Programs built before glibc 2.33 call these for mknod. */
int __xmknodat(int ver, int dirfd, const char *path, mode_t mode, dev_t *dev) {
    (void)ver;
    return mknodat(dirfd, path, mode, dev ? *dev : 0);
}
int __xmknod(int ver, const char *path, mode_t mode, dev_t *dev) { return __xmknodat(ver, AT_FDCWD, path, mode, dev); }

/* A Unix socket address naming a path: SURGE_HOST to pass it on as it is,
 * SURGE_HOST_PATH with the host path a link led to written into `out`,
 * or -1 with errno (a Surge path, refused). Abstract and unnamed
 * addresses, and other families, are not paths. */
static int unix_address(const struct sockaddr *addr, socklen_t len, struct sockaddr_un *out) {
    if (!addr || len <= offsetof(struct sockaddr_un, sun_path) || addr->sa_family != AF_UNIX) return SURGE_HOST;
    const struct sockaddr_un *un = (const struct sockaddr_un *)addr;
    size_t n = len - offsetof(struct sockaddr_un, sun_path);
    if (n > sizeof un->sun_path || un->sun_path[0] == '\0') return SURGE_HOST;
    char path[sizeof un->sun_path + 1];
    memcpy(path, un->sun_path, n);
    path[n] = '\0';
    char sp[PATH_MAX];
    int errno_ = errno; /* the caller's, kept when the address goes on */
    int where = surge_where(AT_FDCWD, path, sp);
    if (where == SURGE_PATH) return refuse_special("a Unix socket", sp);
    if (where < 0) return where;
    errno = errno_;
    if (where != SURGE_HOST_PATH) return where;
    if (strlen(sp) >= sizeof out->sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->sun_family = AF_UNIX;
    strcpy(out->sun_path, sp);
    return SURGE_HOST_PATH;
}

/* CALL over (a, l), the address to pass on: the program's, or the host
 * path a link in Surge led to. */
#define WITH_UNIX_ADDRESS(addr, len, CALL)                                 \
    do {                                                                   \
        struct sockaddr_un resolved_;                                      \
        int where_ = unix_address((addr), (len), &resolved_);              \
        if (where_ < 0) return -1;                                         \
        const struct sockaddr *a = where_ == SURGE_HOST_PATH ? (const struct sockaddr *)&resolved_ : (addr); \
        socklen_t l = where_ == SURGE_HOST_PATH ? (socklen_t)sizeof resolved_ : (len); \
        return CALL;                                                       \
    } while (0)

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    WITH_UNIX_ADDRESS(addr, len, REAL(bind)(fd, a, l));
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    WITH_UNIX_ADDRESS(addr, len, REAL(connect)(fd, a, l));
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr, socklen_t len) {
    WITH_UNIX_ADDRESS(addr, len, REAL(sendto)(fd, buf, n, flags, a, l));
}
