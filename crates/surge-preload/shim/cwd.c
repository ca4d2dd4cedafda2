/* The working directory in preload-only mode. A chdir into the prefix
 * cannot move the kernel's working directory (nothing is mounted there),
 * so the directory is kept here and in the handler, and two things keep
 * relative paths right after exec, when a new program image starts:
 *
 * - The kernel's working directory becomes a *guard*: an empty directory
 *   made under TMPDIR (or /tmp, /dev/shm) and removed at once. Every name
 *   looked up or created in a removed directory fails with ENOENT, for
 *   root too, so a program that reaches the kernel with a relative path (a
 *   static binary, a cleared environment, a raw system call) fails loudly
 *   instead of writing to the host.
 * - SURGE_CWD="<dev>:<inode>:<directory>" names the guard and the
 *   directory under the prefix. It is kept in the environment (for
 *   system(), popen() and execl, which exec past the shim) and put into the
 *   environment of every execve, execvpe and posix_spawn the shim sees. A
 *   new image adopts the directory when its kernel working directory is
 *   that guard, which it stays until a chdir elsewhere.
 *
 * Wraps: chdir, fchdir, getcwd, __getcwd_chk, get_current_dir_name,
 * posix_spawn, posix_spawnp.
 */
#include "route.h"

#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define CWD_VAR "SURGE_CWD"

/* "SURGE_CWD=<dev>:<ino>:<directory>": an environment entry. */
typedef char cwd_record[sizeof CWD_VAR "=" + 2 * 21 + PATH_MAX];

/* This process's record while its working directory is under the prefix
 * (putenv keeps a pointer to it, so it is updated in place). */
static cwd_record record;
static struct guard {
    dev_t dev;
    ino_t ino;
} guard;
/* Adopted at start, handed to the handler when it loads. */
static char adopted[PATH_MAX];

/* A vfork child shares this memory with its parent: a chdir there goes to
 * its own record, used only by its own exec. */
static pid_t vfork_child;
static bool vfork_inside;
static cwd_record vfork_record;

/* The host name of Surge path sp: the prefix and the path. */
static int host_name(const char *sp, char *out) {
    int n = snprintf(out, PATH_MAX, "%s%s", surge_mount, strcmp(sp, "/") == 0 ? "" : sp);
    if (n < 0 || n >= PATH_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

static void write_record(char *out, struct guard g, const char *dir) {
    snprintf(out, sizeof(cwd_record), CWD_VAR "=%" PRIu64 ":%" PRIu64 ":%s", (uint64_t)g.dev, (uint64_t)g.ino, dir);
}

/* Moves the kernel's working directory to a new guard. */
static int enter_guard(struct guard *g) {
    const char *tmpdir = getenv("TMPDIR");
    const char *bases[] = {tmpdir && *tmpdir ? tmpdir : "/tmp", "/tmp", "/dev/shm"};
    int err = EACCES;
    for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/surge-cwd-XXXXXX", bases[i]);
        if (!mkdtemp(dir)) {
            err = errno;
            continue;
        }
        int fd = REAL(openat)(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat st;
        bool removed = REAL(rmdir)(dir) == 0;
        err = errno;
        bool entered = fd >= 0 && removed && REAL(fstat)(fd, &st) == 0 && REAL(fchdir)(fd) == 0;
        if (!entered) err = errno;
        if (fd >= 0) REAL(close)(fd);
        if (entered) {
            *g = (struct guard){st.st_dev, st.st_ino};
            return 0;
        }
    }
    fprintf(stderr,
            "surge: cannot enter a directory under %s: no empty directory could be made and removed under "
            "TMPDIR, /tmp or /dev/shm (%s), and without one programs started there would write to the host's "
            "working directory\n",
            surge_mount, strerror(err));
    errno = err;
    return -1;
}

/* A chdir into the prefix in a vfork child: checked, the guard entered,
 * and noted for this child's exec alone. */
static int enter_in_vfork_child(const struct surge_handler *c, const char *sp, const char *dir) {
    struct stat st;
    if (HANDLER_CALL(c, stat, sp, &st) < 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    struct guard g;
    if (enter_guard(&g) < 0) return -1;
    write_record(vfork_record, g, dir);
    vfork_child = getpid();
    vfork_inside = true;
    return 0;
}

static int enter(const struct surge_handler *c, const char *sp) {
    char dir[PATH_MAX];
    if (host_name(sp, dir) < 0) return -1;
    if (!surge_is_owner()) return enter_in_vfork_child(c, sp, dir);
    if (HANDLER_CALL(c, chdir, sp) < 0) return -1;
    /* Already inside: the kernel's working directory is a guard already. */
    if (!surge_cwd_inside && enter_guard(&guard) < 0) {
        HANDLER_CALL_VOID(c, leave_cwd);
        return -1;
    }
    surge_cwd_inside = 1;
    write_record(record, guard, dir);
    putenv(record);
    return 0;
}

static int leave(int host_result) {
    if (host_result != 0) return host_result;
    if (!surge_is_owner()) {
        vfork_child = getpid();
        vfork_inside = false;
    } else if (surge_cwd_inside) {
        surge_cwd_inside = 0;
        snprintf(record, sizeof record, CWD_VAR "=");
        const struct surge_handler *c = surge_handler();
        if (c) HANDLER_CALL_VOID(c, leave_cwd);
    }
    return host_result;
}

int chdir(const char *path) { ROUTE(AT_FDCWD, path, -1, leave(REAL(chdir)(p)), enter(c, sp)); }

int fchdir(int fd) {
    if (!surge_fd(fd)) return leave(REAL(fchdir)(fd));
    const struct surge_handler *c = surge_handler();
    if (!c) return -1;
    FD_PATH(c, fd, sp, -1);
    return enter(c, sp);
}

char *getcwd(char *buf, size_t size) {
    if (!surge_cwd_inside || surge_in_handler) return REAL(getcwd)(buf, size);
    const struct surge_handler *c = surge_handler();
    if (!c) return NULL;
    char name[PATH_MAX];
    if (HANDLER_CALL(c, host_name, NULL, name, sizeof name) < 0) return NULL;
    size_t need = strlen(name) + 1;
    if (!buf) return strdup(name); /* glibc's extension: allocate (size ignored) */
    if (size < need) {
        errno = ERANGE;
        return NULL;
    }
    return memcpy(buf, name, need);
}

char *__getcwd_chk(char *buf, size_t size, size_t buflen) {
    (void)buflen;
    return getcwd(buf, size);
}

char *get_current_dir_name(void) {
    if (!surge_cwd_inside) return REAL(get_current_dir_name)();
    return getcwd(NULL, 0);
}

/* ---- across exec ---- */

void surge_cwd_init(void) {
    const char *value = getenv(CWD_VAR);
    uint64_t dev, ino;
    int at = 0;
    if (!value || sscanf(value, "%" SCNu64 ":%" SCNu64 ":%n", &dev, &ino, &at) != 2 || at == 0) return;
    const char *dir = value + at;
    if (strncmp(dir, surge_mount, surge_mount_len) != 0 || (dir[surge_mount_len] != '/' && dir[surge_mount_len])) return;
    /* Only where the earlier image left it: in its guard, still removed. */
    struct stat st;
    if (REAL(stat)(".", &st) != 0 || st.st_dev != dev || st.st_ino != ino || st.st_nlink != 0) return;
    if (snprintf(adopted, sizeof adopted, "%s", dir) >= (int)sizeof adopted) return;
    guard = (struct guard){st.st_dev, st.st_ino};
    write_record(record, guard, dir);
    surge_cwd_inside = 1;
}

void surge_cwd_handler_loaded(const struct surge_handler *c) {
    if (adopted[0]) c->adopt_cwd(adopted);
}

/* The record an exec of this process passes on, or NULL. */
static const char *record_for_exec(void) {
    if (!surge_is_owner() && vfork_child == getpid()) return vfork_inside ? vfork_record : NULL;
    return surge_cwd_inside ? record : NULL;
}

char **surge_exec_env(char *const envp[]) {
    const char *mine = record_for_exec();
    if (!mine) return (char **)envp;
    size_t n = 0;
    while (envp && envp[n]) n++;
    char **env = malloc((n + 2) * sizeof *env);
    if (!env) return (char **)envp; /* the guard still fails relative paths loudly */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(envp[i], CWD_VAR "=", sizeof CWD_VAR) != 0) env[k++] = envp[i];
    }
    env[k++] = (char *)mine;
    env[k] = NULL;
    return env;
}

void surge_exec_env_free(char **env, char *const envp[]) {
    if (env == (char **)envp) return;
    int err = errno;
    free(env);
    errno = err;
}

int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
                const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    surge_before_spawn();
    int r = WITH_EXEC_ENV(envp, REAL(posix_spawn)(pid, path, actions, attr, argv, env));
    surge_after_spawn();
    return r;
}

int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
                 const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    surge_before_spawn();
    int r = WITH_EXEC_ENV(envp, REAL(posix_spawnp)(pid, file, actions, attr, argv, env));
    surge_after_spawn();
    return r;
}
