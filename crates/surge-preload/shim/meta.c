/* FUSE mode's metadata fast path (the model is DAOS's libpil4dfs beside
 * dfuse): stat, lstat, fstatat, statx, access and mkdir on absolute paths
 * under the mount go to the handler, which
 * serves them through the client library instead of crossing the kernel
 * and the FUSE server. The handler tells the mount's server of every
 * change it makes before the call returns (src/fast.rs,
 * surge_client::mount_link), and the server drops the kernel's entries,
 * so other processes going through the kernel see it at once.
 *
 * Taken only when the mount's server can be told (else the kernel keeps
 * every call), when this process runs as the mount's user (the kernel
 * reports files as the server's; the handler as this process's), never in
 * a vfork child, and only with SURGE_META_FAST=1 (off by default until
 * hard links through the mount keep working beside it: docs/interposer.md).
 * Descriptors stay the
 * kernel's: opens, and paths relative to a directory, go to the kernel.
 * posix.c routes the calls taken with META_ROUTE (route.h).
 *
 * Wraps: none.
 */
#include "route.h"

#include <stdlib.h>

static uint32_t server_pid;
static long mount_uid = -1;
/* 0: not decided yet; 1: taken; -1: the kernel's. */
static int taken;

void surge_meta_mount_found(const char *source, const char *options) {
    const char *pid = strrchr(source, ':');
    server_pid = pid ? (uint32_t)strtoul(pid + 1, NULL, 10) : 0;
    const char *uid = strstr(options, "user_id=");
    mount_uid = uid ? strtol(uid + 8, NULL, 10) : -1;
}

/* Decided on the first call on a mount path: it loads the handler. */
static bool takes_metadata(void) {
    int decided = __atomic_load_n(&taken, __ATOMIC_ACQUIRE);
    if (decided) return decided > 0;
    const char *setting = getenv("SURGE_META_FAST");
    bool on = server_pid != 0 && mount_uid == (long)getuid() && setting && strcmp(setting, "1") == 0;
    if (on) {
        int errno_ = errno;
        const struct surge_handler *c = surge_handler();
        on = c && HANDLER_CALL(c, meta_fast, server_pid) == 1;
        errno = errno_;
    }
    __atomic_store_n(&taken, on ? 1 : -1, __ATOMIC_RELEASE);
    return on;
}

int surge_meta_where(int dirfd, const char *path, char *out) {
    (void)dirfd; /* only absolute paths are taken */
    if (!path || path[0] != '/' || surge_in_handler || !surge_mount_len) return SURGE_HOST;
    if (strncmp(path, surge_mount, surge_mount_len) != 0) return SURGE_HOST;
    char next = path[surge_mount_len];
    if ((next != '/' && next != '\0') || !surge_is_owner() || !takes_metadata()) return SURGE_HOST;
    const struct surge_handler *c = surge_handler();
    if (!c) return SURGE_HOST;
    return HANDLER_CALL(c, resolve, AT_FDCWD, path, out, PATH_MAX);
}
