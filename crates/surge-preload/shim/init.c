/* Start-up, the lazily loaded handler, fork and exec.
 *
 * Wraps: _exit, _Exit, vfork, execve, execv, execvp, execvpe.
 */
#include "shim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static struct surge_handler handler;
static int handler_state; /* 0 not tried, 1 loaded, -1 failed */
static pthread_mutex_t handler_lock = PTHREAD_MUTEX_INITIALIZER;

/* The handler lives next to the shim unless SURGE_PRELOAD_HANDLER names it. */
static int load_handler(void) {
    char path[PATH_MAX];
    const char *named = getenv("SURGE_PRELOAD_HANDLER");
    if (named && *named) {
        snprintf(path, sizeof path, "%s", named);
    } else {
        Dl_info self;
        if (!dladdr((void *)load_handler, &self) || !self.dli_fname) return -1;
        snprintf(path, sizeof path, "%s", self.dli_fname);
        char *slash = strrchr(path, '/');
        size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
        snprintf(path + dir_len, sizeof path - dir_len, "libsurge_preload_handler.so");
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "surge: cannot load the interposer handler %s: %s\n", path, dlerror());
        return -1;
    }
#define SURGE_CORE_LOOKUP(ret, name, params)                                          \
    handler.name = (ret(*) params)dlsym(lib, "surge_px_" #name);                          \
    if (!handler.name) {                                                                 \
        fprintf(stderr, "surge: %s lacks surge_px_%s: rebuild Surge\n", path, #name); \
        return -1;                                                                    \
    }
    SURGE_HANDLER_FUNCTIONS(SURGE_CORE_LOOKUP)
#undef SURGE_CORE_LOOKUP
    return 1;
}

const struct surge_handler *surge_handler_if_loaded(void) {
    return __atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) == 1 ? &handler : NULL;
}

const struct surge_handler *surge_handler(void) {
    int state = __atomic_load_n(&handler_state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        pthread_mutex_lock(&handler_lock);
        if (handler_state == 0) {
            /* Loading (dlopen's search, the handler's start) is not the program's call: its errno is not either. */
            int saved = errno;
            surge_in_handler++;
            int loaded = load_handler();
            if (loaded == 1) {
                surge_fuse_handler_loaded(&handler);
                surge_cwd_handler_loaded(&handler);
            }
            surge_in_handler--;
            errno = saved;
            __atomic_store_n(&handler_state, loaded, __ATOMIC_RELEASE);
        }
        state = handler_state;
        pthread_mutex_unlock(&handler_lock);
    }
    if (state != 1) {
        errno = ENOTCONN;
        return NULL;
    }
    return &handler;
}

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

int surge_close_fd(int fd) {
    surge_flush_standard_stream(fd);
    const struct surge_handler *c = surge_handler();
    if (c) HANDLER_CALL(c, close, fd);
    surge_mark(fd, false);
    return REAL(close)(fd);
}

static void before_fork(void) {
    /* The handler opens lock files before a fork (src/locks.rs): its own calls go to libc. */
    if (__atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) == 1) HANDLER_CALL_VOID(&handler, atfork_prepare);
}

static void after_fork_parent(void) {
    if (__atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) == 1) HANDLER_CALL_VOID(&handler, atfork_parent);
}

static void after_fork_child(void) {
    surge_fuse_after_fork_child();
    if (__atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) == 1) HANDLER_CALL_VOID(&handler, atfork_child);
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

/* glibc passes the program's arguments to the constructors. */
__attribute__((constructor)) static void surge_shim_init(int argc, char **argv) {
    (void)argc;
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
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    surge_fuse_init();
    if (surge_fuse) return;
    surge_cwd_init();
    surge_exec_init();
    find_inherited_descriptors();
}

__attribute__((destructor)) static void surge_shim_fini(void) {
    surge_check_standard_streams();
    if (__atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) == 1) HANDLER_CALL_VOID(&handler, flush_profile);
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

/* Calls the handler's `hook` if it is loaded, keeping errno. */
static void handler_hook(void (*const *hook)(void)) {
    if (__atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) != 1) return;
    int err = errno;
    surge_in_handler++;
    (*hook)();
    surge_in_handler--;
    errno = err;
}

/* Lock files go along with the placeholders an exec or spawn passes on
 * (src/locks.rs), so a lock the new program takes outlives it as long as
 * the open file description does. */
void surge_before_spawn(void) {
    handler_hook(&handler.share_lock_files);
    handler_hook(&handler.before_exec);
}
void surge_after_spawn(void) { handler_hook(&handler.after_spawn); }

/* vfork (dash runs its commands so, Python's subprocess too) shares the
 * placeholders with a child as fork does, without fork's handlers: the
 * lock files are opened here in the parent first, then libc's vfork is
 * entered by a jump. No frame of the shim's may stay on the stack, which
 * the child shares and overwrites before the parent returns through it. */
__attribute__((visibility("hidden"))) pid_t (*surge_real_vfork)(void);
__attribute__((visibility("hidden"), used)) void surge_before_vfork(void) {
    if (!surge_real_vfork) surge_real_vfork = (pid_t(*)(void))dlsym(RTLD_NEXT, "vfork");
    handler_hook(&handler.share_lock_files);
}
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl vfork\n"
        ".type vfork, @function\n"
        "vfork:\n"
        "    sub $8, %rsp\n" /* the call below needs the stack 16-byte aligned */
        "    call surge_before_vfork\n"
        "    add $8, %rsp\n"
        "    jmp *surge_real_vfork(%rip)\n"
        ".size vfork, . - vfork\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl vfork\n"
        ".type vfork, %function\n"
        "vfork:\n"
        "    stp x29, x30, [sp, #-16]!\n"
        "    bl surge_before_vfork\n"
        "    ldp x29, x30, [sp], #16\n"
        "    adrp x16, surge_real_vfork\n"
        "    ldr x16, [x16, :lo12:surge_real_vfork]\n"
        "    br x16\n"
        ".size vfork, . - vfork\n");
#endif

/* Each passes on the working directory under the prefix (cwd.c). */
int execve(const char *path, char *const argv[], char *const envp[]) {
    flush_before_exec();
    handler_hook(&handler.before_exec);
    return surge_execve(path, argv, envp);
}

int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }

int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

int execvpe(const char *file, char *const argv[], char *const envp[]) {
    flush_before_exec();
    handler_hook(&handler.before_exec);
    return surge_execvpe(file, argv, envp);
}
