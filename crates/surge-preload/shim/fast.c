/* FUSE mode: the mount prefix is a live Surge FUSE mount, so every path
 * call is the kernel's and every descriptor on /surge is real. The shim is
 * then only a fast path: it marks the descriptors it sees opened on the
 * mount, and their reads and writes go to the handler, which sends them
 * straight to the daemons (the model is DAOS's libioil over dfuse). A call
 * the handler hands back, and every call the shim does not see, goes to the
 * kernel, which is always right.
 *
 * Wraps: none.
 */
#include "shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

static dev_t mount_dev;

bool surge_fast_fd(int fd) {
    return surge_fuse && !surge_in_handler && surge_mark_of(fd) == SURGE_ON_MOUNT && surge_is_owner();
}

/* Is the top mount at the prefix a Surge FUSE mount (source "surge:...")? */
static bool find_mount(dev_t *dev) {
    FILE *(*real_fopen)(const char *, const char *) = REAL(fopen);
    FILE *f = real_fopen ? real_fopen("/proc/self/mountinfo", "re") : NULL;
    if (!f) return false;
    char line[4096];
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        unsigned major, minor;
        char point[PATH_MAX], *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*u %*u %u:%u %*s %4095s", &major, &minor, point) != 3) continue;
        /* The mount prefix holds no escaped characters (space, tab, newline, backslash) to compare. */
        if (strcmp(point, surge_mount) != 0) continue;
        char fstype[64], source[256], options[512];
        if (sscanf(dash + 3, "%63s %255s %511s", fstype, source, options) != 3) continue;
        found = strncmp(fstype, "fuse", 4) == 0 && strncmp(source, "surge:", 6) == 0;
        *dev = makedev(major, minor);
        if (found) surge_meta_mount_found(source, options);
    }
    fclose(f);
    return found;
}

static bool on_mount(int fd) {
    struct statx stx;
    int (*real_statx)(int, const char *, int, unsigned, struct statx *) = REAL(statx);
    if (real_statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE, &stx) != 0) return false;
    return S_ISREG(stx.stx_mode) && makedev(stx.stx_dev_major, stx.stx_dev_minor) == mount_dev;
}

double surge_monotonic(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The kernel served `call` on mount descriptor fd in `seconds`: the profile
 * counts it, as the handler counts the calls it serves itself (the reads
 * and writes of the fast path). errno is the kernel call's. */
static void noted(int fd, int call, double seconds) {
    int saved = errno;
    const struct surge_handler *c = surge_handler();
    if (c) HANDLER_CALL_VOID(c, fast_noted, fd, call, seconds);
    errno = saved;
}

void surge_fuse_opened(int fd, const char *path, double seconds) {
    if (fd < 0 || fd >= SURGE_MAX_FDS || !surge_is_owner()) return;
    bool outside = path && path[0] == '/' &&
                   (strncmp(path, surge_mount, surge_mount_len) != 0 ||
                    (path[surge_mount_len] != '/' && path[surge_mount_len] != '\0'));
    bool mine = !outside && on_mount(fd);
    surge_set_mark(fd, mine ? SURGE_ON_MOUNT : SURGE_UNMARKED);
    if (mine) noted(fd, SURGE_NOTED_OPEN, seconds);
}

int surge_fuse_synced(int fd, int (*sync)(int)) {
    double start = surge_monotonic();
    int r = sync(fd);
    if (r == 0) noted(fd, SURGE_NOTED_FSYNC, surge_monotonic() - start);
    return r;
}

void surge_fuse_closed(int fd) {
    if (surge_mark_of(fd) != SURGE_ON_MOUNT || !surge_is_owner()) return;
    surge_set_mark(fd, SURGE_UNMARKED);
    const struct surge_handler *c = surge_handler();
    if (c) HANDLER_CALL_VOID(c, fast_forget, fd);
}

void surge_fuse_sync_sizes(void) {
    if (!surge_fuse || surge_in_handler || !surge_is_owner()) return;
    const struct surge_handler *c = surge_handler_if_loaded();
    if (c) HANDLER_CALL_VOID(c, fast_sync_sizes);
}

void surge_fuse_duplicated(int fd, int copy) {
    if (copy < 0 || !surge_is_owner()) return;
    surge_fuse_closed(copy);
    if (surge_mark_of(fd) == SURGE_ON_MOUNT) surge_set_mark(copy, SURGE_ON_MOUNT);
}

/* Called by the constructor: FUSE mode when the prefix is a Surge mount,
 * with the descriptors an earlier program image left open on it marked. */
void surge_fuse_init(void) {
    surge_owner = getpid();
    if (!find_mount(&mount_dev)) return;
    surge_fuse = true;
    DIR *(*real_opendir)(const char *) = REAL(opendir);
    struct dirent *(*real_readdir)(DIR *) = REAL(readdir);
    DIR *fds = real_opendir ? real_opendir("/proc/self/fd") : NULL;
    if (!fds) return;
    struct dirent *e;
    while ((e = real_readdir(fds))) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd != REAL(dirfd)(fds) && on_mount(fd)) surge_set_mark(fd, SURGE_ON_MOUNT);
    }
    REAL(closedir)(fds);
}

/* The handler learns the mount's device when it loads. */
void surge_fuse_handler_loaded(const struct surge_handler *c) {
    if (surge_fuse) c->fuse_mode((uint64_t)mount_dev);
}

void surge_fuse_after_fork_child(void) { surge_owner = getpid(); }
