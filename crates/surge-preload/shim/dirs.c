/* Directory streams and path canonicalization (the working directory is cwd.c).
 *
 * Wraps: fdopendir, opendir, readdir, readdir64, closedir, dirfd, rewinddir,
 * telldir, seekdir, realpath, __realpath_chk, canonicalize_file_name.
 */
#include "route.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static bool surge_stream(void *dir) {
    return dir && !surge_in_handler && *(const uint64_t *)dir == SURGE_DIR_MAGIC;
}

/* A Surge stream over Surge descriptor fd, which it then owns. */
static DIR *stream_over(const struct surge_handler *c, int fd) {
    void *dir = HANDLER_CALL(c, opendir, fd);
    return (DIR *)dir;
}

DIR *fdopendir(int fd) {
    FD_ROUTE(fd, NULL, REAL(fdopendir)(fd), stream_over(c, fd));
}

static DIR *open_stream(const char *sp) {
    int fd = surge_open_path(sp, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0) return NULL;
    DIR *dir = stream_over(surge_handler(), fd);
    if (!dir) {
        int err = errno;
        surge_close_fd(fd);
        errno = err;
    }
    return dir;
}

DIR *opendir(const char *path) { ROUTE(AT_FDCWD, path, NULL, REAL(opendir)(p), open_stream(sp)); }

struct dirent *readdir(DIR *dir) {
    if (!surge_stream(dir)) return REAL(readdir)(dir);
    /* struct dirent and dirent64 share one layout on 64-bit Linux. */
    return (struct dirent *)HANDLER_CALL(surge_handler(), readdir, dir);
}

struct dirent64 *readdir64(DIR *dir) {
    if (!surge_stream(dir)) return REAL(readdir64)(dir);
    return HANDLER_CALL(surge_handler(), readdir, dir);
}

int closedir(DIR *dir) {
    if (!surge_stream(dir)) return REAL(closedir)(dir);
    int fd = HANDLER_CALL(surge_handler(), dirfd, dir);
    int forgotten = HANDLER_CALL(surge_handler(), closedir, dir);
    surge_mark(fd, false);
    int closed = REAL(close)(fd);
    return forgotten < 0 ? forgotten : closed;
}

int dirfd(DIR *dir) {
    if (!surge_stream(dir)) return REAL(dirfd)(dir);
    return HANDLER_CALL(surge_handler(), dirfd, dir);
}

void rewinddir(DIR *dir) {
    if (!surge_stream(dir)) return REAL(rewinddir)(dir);
    HANDLER_CALL_VOID(surge_handler(), seekdir, dir, 0);
}

long telldir(DIR *dir) {
    if (!surge_stream(dir)) return REAL(telldir)(dir);
    return HANDLER_CALL(surge_handler(), telldir, dir);
}

void seekdir(DIR *dir, long position) {
    if (!surge_stream(dir)) return REAL(seekdir)(dir, position);
    HANDLER_CALL_VOID(surge_handler(), seekdir, dir, position);
}

/* ---- canonical names ---- */

static char *surge_realpath(const struct surge_handler *c, const char *sp, char *resolved) {
    char name[PATH_MAX];
    if (HANDLER_CALL(c, host_name, sp, name, sizeof name) < 0) return NULL;
    return resolved ? strcpy(resolved, name) : strdup(name);
}

char *realpath(const char *path, char *resolved) {
    ROUTE(AT_FDCWD, path, NULL, REAL(realpath)(p, resolved), surge_realpath(c, sp, resolved));
}

char *__realpath_chk(const char *path, char *resolved, size_t resolvedlen) {
    (void)resolvedlen;
    return realpath(path, resolved);
}

char *canonicalize_file_name(const char *path) { return realpath(path, NULL); }
