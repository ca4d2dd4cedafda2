/* Start-up and the end of a program image: the constructor (mount prefix,
 * library order, FUSE mode, working directory, inherited placeholders),
 * the destructor, and the calls that end an image without it (exec,
 * _exit). The top of the shim: it calls the other files, none calls it.
 *
 * Wraps: _exit, _Exit, execve, execv, execvp, execvpe, umask.
 */
#include "shim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void after_fork_child(void) {
    surge_fuse_after_fork_child();
    surge_handler_atfork_child();
}

/* Marks the placeholders an earlier program image left open across exec;
 * the handler adopts each on first use. Like all the constructor runs, it
 * calls libc's functions (REAL), not the shim's own interposed ones. */
static void find_inherited_descriptors(void) {
    DIR *(*real_opendir)(const char *) = REAL(opendir);
    struct dirent *(*real_readdir)(DIR *) = REAL(readdir);
    DIR *fds = real_opendir ? real_opendir("/proc/self/fd") : NULL;
    if (!fds) return;
    static const char placeholder[] = "/memfd:surge-fd";
    struct dirent *e;
    while ((e = real_readdir(fds))) {
        char link[64], target[sizeof placeholder + 16];
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == REAL(dirfd)(fds)) continue;
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = REAL(readlink)(link, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        if (strncmp(target, placeholder, sizeof placeholder - 1) == 0) surge_mark(fd, true);
    }
    REAL(closedir)(fds);
}


/* The mask is read once, here (umask(2) can only be read by setting
 * it: done before the program's threads exist), then followed. */
static void track_umask(void) {
    mode_t (*real_umask)(mode_t) = REAL(umask);
    mode_t mask = real_umask(022);
    real_umask(mask);
    __atomic_store_n(&surge_umask_bits, (unsigned)mask, __ATOMIC_RELAXED);
}

mode_t umask(mode_t mask) {
    mode_t old = REAL(umask)(mask);
    /* A vfork child's mask is its own; the memory it shares is the parent's. */
    if (surge_is_owner()) __atomic_store_n(&surge_umask_bits, (unsigned)(mask & 0777), __ATOMIC_RELAXED);
    return old;
}

/* glibc passes the program's arguments to the constructors. */
__attribute__((constructor)) static void surge_shim_init(int argc, char **argv) {
    (void)argc;
    track_umask();
    surge_on_handler_loaded(surge_fuse_handler_loaded);
    surge_on_handler_loaded(surge_cwd_handler_loaded);
    const char *mount = getenv("SURGE_MOUNT");
    if (!mount || !*mount) mount = "/surge";
    size_t len = strlen(mount);
    while (len > 1 && mount[len - 1] == '/') len--;
    if (mount[0] != '/' || len <= 1 || len >= sizeof surge_mount) {
        fprintf(stderr, "surge: SURGE_MOUNT=%s must be an absolute path other than /; Surge is off\n", mount);
        return;
    }
    memcpy(surge_mount, mount, len);
    surge_mount[len] = '\0';
    surge_mount_len = len;
    surge_preload_in_order(argv);
    pthread_atfork(surge_handler_atfork_prepare, surge_handler_atfork_parent, after_fork_child);
    surge_fuse_init();
    if (surge_fuse) return;
    surge_cwd_init();
    surge_exec_init();
    find_inherited_descriptors();
}

__attribute__((destructor)) static void surge_shim_fini(void) {
    surge_check_standard_streams();
    surge_handler_flush_profile();
}

/* exec and _exit end the image without running destructors (shells
 * such as dash leave with _exit): flush first. */
static void flush_before_exec(void) {
    surge_shim_fini();
}

void _exit(int status) {
    flush_before_exec();
    REAL(_exit)(status);
    __builtin_unreachable();
}

void _Exit(int status) {
    flush_before_exec();
    REAL(_Exit)(status);
    __builtin_unreachable();
}


/* Each passes on the working directory under the prefix (cwd.c). */
int execve(const char *path, char *const argv[], char *const envp[]) {
    flush_before_exec();
    surge_handler_before_exec();
    return surge_execve(path, argv, envp);
}

int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }

int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

int execvpe(const char *file, char *const argv[], char *const envp[]) {
    flush_before_exec();
    surge_handler_before_exec();
    return surge_execvpe(file, argv, envp);
}

