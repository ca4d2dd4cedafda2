/* Shared by the shim's files: the real libc functions, the Surge
 * descriptor marks, path classification and the lazily loaded handler. The
 * shared variables declared here are defined in state.c alone. */
#ifndef SURGE_SHIM_H
#define SURGE_SHIM_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdbool.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "handler.h"

/* The next definition of `fn` after this library's: libc's, resolved once
 * per call site. */
#define REAL(fn)                                                \
    ({                                                          \
        static __typeof__(&fn) real_;                           \
        if (!real_) real_ = (__typeof__(&fn))dlsym(RTLD_NEXT, #fn); \
        real_;                                                  \
    })

/* Descriptors at or above this are never Surge's (open fails with EMFILE). */
#define SURGE_MAX_FDS 65536

struct surge_handler {
#define SURGE_CORE_POINTER(ret, name, params) ret(*name) params;
    SURGE_HANDLER_FUNCTIONS(SURGE_CORE_POINTER)
#undef SURGE_CORE_POINTER
};

/* The handler, loaded on first need: NULL with errno set when it cannot be. */
const struct surge_handler *surge_handler(void);

/* The handler if it is loaded already, else NULL (never loads it). */
const struct surge_handler *surge_handler_if_loaded(void);

/* `hook` is called with the handler once it has loaded (handler.c). */
void surge_on_handler_loaded(void (*hook)(const struct surge_handler *));
/* The handler's own fork handlers, its last profile flush, and its part
 * before an exec (lock files), each only if it is loaded. */
void surge_handler_atfork_prepare(void);
void surge_handler_atfork_parent(void);
void surge_handler_atfork_child(void);
void surge_handler_flush_profile(void);
void surge_handler_before_exec(void);

/* Set while this thread runs inside the handler: its own file calls go to libc. */
extern __thread int surge_in_handler;

#define HANDLER_CALL(handler, name, ...)                  \
    ({                                              \
        surge_in_handler++;                            \
        __typeof__((handler)->name(__VA_ARGS__)) r_ = (handler)->name(__VA_ARGS__); \
        surge_in_handler--;                            \
        r_;                                         \
    })
/* A call that cannot fail (it returns nothing) leaves errno as it was:
 * the handler's work inside is not the program's. Calls that return a
 * value keep errno on success in the handler (surge_client's guarded). */
#define HANDLER_CALL_VOID(handler, name, ...) \
    do {                                \
        int errno_ = errno;                \
        surge_in_handler++;                \
        (handler)->name(__VA_ARGS__);      \
        surge_in_handler--;                \
        errno = errno_;                    \
    } while (0)

/* The mount prefix, without a trailing slash; length 0 disables the shim. */
extern char surge_mount[PATH_MAX];
extern size_t surge_mount_len;
/* Is the working directory inside the mount (after a chdir there)? */
extern int surge_cwd_inside;

/* FUSE mode: the mount prefix is a live Surge FUSE mount. Paths then go
 * to the kernel, and the shim is only the fast path for reads and writes
 * on the mount's descriptors (see fast.c). */
extern bool surge_fuse;
/* The process that owns the marks: a vfork child (sharing them) never
 * changes them, and does everything through the kernel. */
extern pid_t surge_owner;

/* The process's file mode creation mask, tracked by the umask wrapper
 * (start.c) so that a create needs no system call to learn it. */
extern unsigned surge_umask_bits;
/* `mode` as a new file or directory gets it: without the umask's bits. */
static inline unsigned surge_created_mode(unsigned mode) {
    return mode & ~__atomic_load_n(&surge_umask_bits, __ATOMIC_RELAXED);
}

/* Descriptor marks: a placeholder of preload-only mode, or a real
 * descriptor on the FUSE mount that the fast path may serve. */
enum { SURGE_UNMARKED = 0, SURGE_PLACEHOLDER = 1, SURGE_ON_MOUNT = 2 };
extern unsigned char surge_fd_marks[SURGE_MAX_FDS];

static inline unsigned char surge_mark_of(int fd) {
    return fd >= 0 && fd < SURGE_MAX_FDS ? __atomic_load_n(&surge_fd_marks[fd], __ATOMIC_ACQUIRE) : SURGE_UNMARKED;
}

/* Is this the process that owns the marks and the handler's descriptor
 * table (not a vfork child sharing its parent's memory)? */
static inline bool surge_is_owner(void) { return getpid() == surge_owner; }

/* A placeholder descriptor (preload-only mode). A vfork child's
 * descriptors go to the kernel: its dup2, close and close_range (what
 * Python's subprocess does before exec) change its own descriptor table
 * only, never the parent's Surge descriptors in the memory they share. An
 * exec'd program finds the placeholders it inherits by their records. */
static inline bool surge_fd(int fd) {
    return !surge_in_handler && surge_mark_of(fd) == SURGE_PLACEHOLDER && surge_is_owner();
}

static inline void surge_set_mark(int fd, unsigned char mark) {
    if (fd >= 0 && fd < SURGE_MAX_FDS) __atomic_store_n(&surge_fd_marks[fd], mark, __ATOMIC_RELEASE);
}

/* After descriptor 0, 1 or 2 became or stopped being a placeholder: the
 * standard stream follows (streams.c). */
void surge_follow_standard_stream(int fd);
/* Before descriptor fd (0-2) changes: delivers what the standard stream
 * over its placeholder holds. */
void surge_flush_standard_stream(int fd);

static inline void surge_mark(int fd, bool on) {
    surge_set_mark(fd, on ? SURGE_PLACEHOLDER : SURGE_UNMARKED);
    if (fd >= 0 && fd <= 2) surge_follow_standard_stream(fd);
}

/* Whether (dirfd, path) may lead into the mount (false: the host's for
 * sure), decided without the handler. */
bool surge_may_reach(int dirfd, const char *path);

/* Where (dirfd, path) leads: SURGE_HOST, SURGE_PATH or SURGE_HOST_PATH
 * (with the path in out, PATH_MAX bytes), or -1 with errno set. Paths
 * outside the mount are decided here without calling the handler. */
int surge_where(int dirfd, const char *path, char *out);

/* A new Surge descriptor for `path`: marked, or -1 with errno. */
int surge_open_path(const char *path, int flags, unsigned mode);

/* The Surge descriptor absolute `path` names (/dev/fd/N, /dev/stdin,
 * /dev/stdout, /dev/stderr, /proc/self/fd/N, /proc/thread-self/fd/N or
 * /proc/<this pid>/fd/N), or -1. The kernel would reach its placeholder. */
int surge_named_descriptor(const char *path);

/* A new Surge descriptor on the file Surge descriptor `held` has open
 * (opened through one of its names): marked, or -1 with errno. */
int surge_reopen_fd(int held, int flags);

/* Forgets and closes Surge descriptor fd (streams.c: the standard stream
 * over it is delivered first). */
int surge_close_fd(int fd);

/* A stream over Surge descriptor fd (which it then owns), or NULL (streams.c). */
FILE *surge_stream_over(int fd, const char *mode);
/* The Surge descriptor under stream fp, or -1 when fp is not Surge's. */
int surge_stream_fd(FILE *fp);

/* Delivers what the standard streams over placeholders hold, then notes
 * for `surge run` a stream a program kept from before (its I/O reached the
 * placeholder and failed) that failed or holds bytes (streams.c; fclose and
 * fflush check too). Called when the program image ends. */
void surge_check_standard_streams(void);
/* One such check of fp: a program that took a standard stream before it
 * was replaced (C++'s std::cout may) reaches the placeholder through it,
 * and fails; the note names the file once the stream has failed (ferror),
 * holds bytes that no flush can deliver, or (stdin) has tried to read:
 * stdio makes a stream's buffer on its first read. */
void surge_check_standard_stream(FILE *fp);

/* Runs the program again with the shim last in LD_PRELOAD when a library
 * after it wraps the same calls (order.c); returns when nothing is to do. */
void surge_preload_in_order(char **argv);

/* The working directory across exec (cwd.c): adopted from SURGE_CWD at
 * start, handed to the handler when it loads, and passed on by exec. */
void surge_cwd_init(void);
void surge_cwd_handler_loaded(const struct surge_handler *c);
/* envp with this process's SURGE_CWD record (allocated), or envp itself;
 * surge_exec_env_free frees what it allocated, keeping errno. */
char **surge_exec_env(char *const envp[]);
void surge_exec_env_free(char **env, char *const envp[]);
/* CALL (an exec or spawn over `env`) with envp passed on as surge_exec_env makes it. */
#define WITH_EXEC_ENV(envp, CALL)                      \
    ({                                                 \
        char **env = surge_exec_env(envp);             \
        __typeof__(CALL) r_ = CALL;                    \
        surge_exec_env_free(env, envp);                \
        r_;                                            \
    })

/* execve and execvpe, also of programs stored in Surge (exec.c); each
 * passes on the working directory under the prefix (cwd.c). */
int surge_execve(const char *path, char *const argv[], char *const envp[]);
int surge_execvpe(const char *file, char *const argv[], char *const envp[]);
/* At start: the argv[0] a vfork child's exec passed on through env(1). */
void surge_exec_init(void);

/* Around posix_spawn: the lock files of the placeholders the child
 * inherits go with them (handler.c, src/locks.rs). */
void surge_before_spawn(void);
void surge_after_spawn(void);

/* FUSE mode: a descriptor on the mount this process may serve itself. */
bool surge_fast_fd(int fd);
/* FUSE mode: notes a descriptor the kernel just opened (at `path`, NULL if
 * unknown), in `seconds`, which the profile counts. */
void surge_fuse_opened(int fd, const char *path, double seconds);
/* FUSE mode: the kernel's fsync or fdatasync of a mount descriptor, timed
 * and counted in the profile. */
int surge_fuse_synced(int fd, int (*sync)(int));
/* Seconds on the monotonic clock. */
double surge_monotonic(void);
/* FUSE mode: `fd` is closed, or `copy` became a duplicate of `fd`. */
void surge_fuse_closed(int fd);
void surge_fuse_duplicated(int fd, int copy);
/* FUSE mode: before a call that reads the kernel's cached size of a file
 * (stat, lseek SEEK_END, mmap, copy_file_range, fsync), the sizes that
 * fast-path writes outgrew are fetched again. */
void surge_fuse_sync_sizes(void);
void surge_fuse_init(void);
void surge_fuse_handler_loaded(const struct surge_handler *c);
void surge_fuse_after_fork_child(void);

/* FUSE mode's metadata fast path (meta.c): the mount's source and
 * super options, as mountinfo gives them, when it is found. */
void surge_meta_mount_found(const char *source, const char *options);
/* Where (dirfd, path) leads for a metadata call in FUSE mode: SURGE_PATH
 * (into out) when the handler takes it, else SURGE_HOST; -1 with errno. */
int surge_meta_where(int dirfd, const char *path, char *out);

/* Serves a data call on a descriptor of the FUSE mount through the handler
 * (`CALL` over `c`), unless the handler hands it back to the kernel. */
#define FAST_DATA(fd, CALL)                                        \
    do {                                                           \
        if (surge_fast_fd(fd)) {                                   \
            const struct surge_handler *c = surge_handler();             \
            if (c) {                                               \
                ssize_t r_ = CALL;                                 \
                if (r_ != SURGE_FALLBACK) return r_;               \
            }                                                      \
        }                                                          \
    } while (0)

/* Turns a failed call into the libc convention: -1 (errno already set). */
#define SURGE_FAIL (-1)

#endif
