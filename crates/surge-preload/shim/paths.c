/* Path classification and the descriptors the handler opens: whether a
 * (dirfd, path) may lead into the mount and where it leads, and new Surge
 * descriptors on a path, on another's open file, or named /dev/fd/N.
 *
 * Wraps: none.
 */
#include "shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Whether the prefix has a component `name` (of length n). */
static bool names_prefix_component(const char *name, size_t n) {
    for (const char *c = surge_mount + 1; *c;) {
        const char *end = strchrnul(c, '/');
        if ((size_t)(end - c) == n && memcmp(c, name, n) == 0) return true;
        c = *end ? end + 1 : end;
    }
    return false;
}

/* Whether relative `path`, from a host directory, may lead into the mount:
 * only by naming a component of the prefix first ("bb/x" from "/scratch"
 * for the prefix "/scratch/bb", as coreutils' `mkdir -p` walks) or by
 * climbing with "..". Any other path stays on the host wherever the
 * directory is, with no call into the handler. */
static bool may_reach_mount(const char *path) {
    bool first = true;
    for (const char *p = path; *p;) {
        while (*p == '/') p++;
        const char *end = strchrnul(p, '/');
        size_t n = (size_t)(end - p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return true;
        if (n > 0 && !(n == 1 && p[0] == '.')) {
            if (first && names_prefix_component(p, n)) return true;
            first = false;
        }
        p = end;
    }
    return false;
}

bool surge_may_reach(int dirfd, const char *path) {
    /* In FUSE mode the kernel resolves every path. */
    if (!path || surge_in_handler || !surge_mount_len || surge_fuse) return false;
    if (path[0] == '/') {
        if (strncmp(path, surge_mount, surge_mount_len) != 0) return false;
        char next = path[surge_mount_len];
        return next == '/' || next == '\0';
    }
    return (dirfd == AT_FDCWD ? surge_cwd_inside : surge_fd(dirfd)) || may_reach_mount(path);
}

int surge_where(int dirfd, const char *path, char *out) {
    if (!surge_may_reach(dirfd, path)) return SURGE_HOST;
    const struct surge_handler *c = surge_handler();
    if (!c) return -1;
    return HANDLER_CALL(c, resolve, dirfd, path, out, PATH_MAX);
}

/* Marks descriptor fd, which the handler just opened (-1: it failed). */
static int adopt_opened(int fd) {
    if (fd < 0) return -1;
    if (fd >= SURGE_MAX_FDS) {
        surge_close_fd(fd);
        errno = EMFILE;
        return -1;
    }
    surge_mark(fd, true);
    return fd;
}

/* The handler to open a new descriptor with, or NULL with errno. */
static const struct surge_handler *opener(void) {
    /* A vfork child would put its descriptor into the table it shares with
     * its parent, where the parent would take it for one of its own. */
    if (!surge_is_owner()) {
        errno = EPERM;
        return NULL;
    }
    return surge_handler();
}

int surge_open_path(const char *path, int flags, unsigned mode) {
    const struct surge_handler *c = opener();
    if (flags & O_CREAT) mode = surge_created_mode(mode);
    return c ? adopt_opened(HANDLER_CALL(c, open, path, flags, mode)) : -1;
}

int surge_reopen_fd(int held, int flags) {
    const struct surge_handler *c = opener();
    return c ? adopt_opened(HANDLER_CALL(c, reopen, held, flags)) : -1;
}

/* The descriptor number `digits` spells in full, or -1. */
static int descriptor_number(const char *digits) {
    long n = 0;
    if (!*digits) return -1;
    for (const char *d = digits; *d; d++) {
        if (*d < '0' || *d > '9' || n >= SURGE_MAX_FDS) return -1;
        n = n * 10 + (*d - '0');
    }
    return n < SURGE_MAX_FDS ? (int)n : -1;
}

int surge_named_descriptor(const char *path) {
    if (!path || path[0] != '/' || surge_in_handler || !surge_mount_len || surge_fuse) return -1;
    static const char *const standard[] = {"/dev/stdin", "/dev/stdout", "/dev/stderr"};
    int fd = -1;
    for (int i = 0; i < 3; i++) {
        if (strcmp(path, standard[i]) == 0) fd = i;
    }
    if (strncmp(path, "/dev/fd/", 8) == 0) fd = descriptor_number(path + 8);
    if (strncmp(path, "/proc/", 6) == 0) {
        const char *owner = path + 6;
        const char *fds = strstr(owner, "/fd/");
        if (fds) {
            char pid[24];
            snprintf(pid, sizeof pid, "%d", (int)getpid());
            size_t n = (size_t)(fds - owner);
            bool own = (n == 4 && memcmp(owner, "self", 4) == 0) ||
                       (n == 11 && memcmp(owner, "thread-self", 11) == 0) ||
                       (n == strlen(pid) && memcmp(owner, pid, n) == 0);
            if (own) fd = descriptor_number(fds + 4);
        }
    }
    return fd >= 0 && surge_fd(fd) ? fd : -1;
}
