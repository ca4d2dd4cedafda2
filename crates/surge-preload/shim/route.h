/* Routing of intercepted calls: to libc, or to the handler. */
#ifndef SURGE_ROUTE_H
#define SURGE_ROUTE_H

#include "shim.h"

/* For a call naming (dirfd, path): returns HOST (an expression over `dfd`
 * and `p`, the arguments libc gets) or SURGE (over `c`, the handler, and `sp`,
 * the Surge path); FAIL when the path cannot be resolved. A SURGE call that
 * fails with SURGE_ELINK met a symbolic link: the handler's follow rewrites
 * the path (a Surge path, or a host path for libc) and the call is made
 * again, as the kernel would go on past the link. */
#define ROUTE(dirfd, path, FAIL, HOST, SURGE) ROUTE_BY(surge_where, dirfd, path, FAIL, HOST, SURGE)

/* ROUTE for a metadata call the handler also takes in FUSE mode, on the
 * mount's paths (meta.c: DAOS's libpil4dfs beside dfuse); the kernel
 * still resolves every other path. */
#define META_ROUTE(dirfd, path, FAIL, HOST, SURGE) \
    ROUTE_BY(surge_fuse ? surge_meta_where : surge_where, dirfd, path, FAIL, HOST, SURGE)

/* ROUTE with `where` (surge_where's signature) deciding where the path leads. */
#define ROUTE_BY(where, dirfd, path, FAIL, HOST, SURGE)                        \
    do {                                                                       \
        char sp_[PATH_MAX];                                                    \
        int errno_ = errno; /* the caller's, kept on success past links met */ \
        int where_ = (where)((dirfd), (path), sp_);                            \
        for (int links_ = 0;; links_++) {                                      \
            if (where_ == SURGE_HOST || where_ == SURGE_HOST_PATH) {           \
                int dfd = where_ == SURGE_HOST ? (dirfd) : AT_FDCWD;           \
                const char *p = where_ == SURGE_HOST ? (path) : sp_;           \
                (void)dfd;                                                     \
                errno = errno_;                                                \
                return HOST;                                                   \
            }                                                                  \
            if (where_ < 0) return FAIL;                                       \
            const struct surge_handler *c = surge_handler();                   \
            const char *sp = sp_;                                              \
            (void)c;                                                           \
            errno = 0;                                                         \
            __typeof__(SURGE) r_ = SURGE;                                      \
            if (errno != SURGE_ELINK) {                                        \
                if (errno == 0) errno = errno_;                                \
                return r_;                                                     \
            }                                                                  \
            where_ = HANDLER_CALL(c, follow, sp_, links_);                     \
        }                                                                      \
    } while (0)

/* For a call on descriptor fd: HOST, or SURGE over the handler `c`. */
#define FD_ROUTE(fd, FAIL, HOST, SURGE)                  \
    do {                                                 \
        if (!surge_fd(fd)) return HOST;                  \
        const struct surge_handler *c = surge_handler();       \
        if (!c) return FAIL;                             \
        return SURGE;                                    \
    } while (0)

/* Does `path` name a Surge path the shim serves (never in FUSE mode,
 * where the kernel serves the mount)? */
static inline bool surge_serves_path(const char *path) {
    char sp[PATH_MAX];
    return surge_where(AT_FDCWD, path, sp) == SURGE_PATH;
}

/* The Surge path of descriptor fd into sp (PATH_MAX), or FAIL. */
#define FD_PATH(c, fd, sp, FAIL)                                          \
    char sp[PATH_MAX];                                                    \
    if (HANDLER_CALL(c, fd_path, fd, sp, sizeof sp) < 0) return FAIL

#endif
