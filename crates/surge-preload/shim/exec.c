/* exec of a program stored in Surge, with the interposer alone: the
 * kernel's exec cannot open a Surge path, so the handler hands over the
 * program (src/exec.rs). A binary comes as a sealed memfd, run with
 * execveat(AT_EMPTY_PATH) (fexecve) with the program's argv and
 * environment; a `#!` script is run by its interpreter with the script's
 * path as the kernel does, and the interpreter (which has the interposer)
 * reads the script through it. The interpreter may be in Surge too, or a
 * link there may lead to a host program (`python3 -m venv`'s bin/python3).
 * PATH searches (execvp, execvpe) try Surge directories on PATH too.
 *
 * Wraps: none.
 */
#include "route.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>

/* Interpreters one exec follows (the kernel's limit); then ELOOP. */
#define MAX_INTERPRETERS 4

static int exec_path(const char *path, char *const argv[], char *const envp[], int depth);

/* Entries in a NULL-terminated list (argv, envp). */
static size_t count(char *const list[]) {
    size_t n = 0;
    while (list && list[n]) n++;
    return n;
}

/* Runs the interpreter line of script `path` (as the program named it). */
static int exec_script(const char *path, const char *interp, const char *arg, char *const argv[], char *const envp[],
                       int depth) {
    if (depth >= MAX_INTERPRETERS) {
        errno = ELOOP;
        return -1;
    }
    size_t n = count(argv);
    /* interp [arg] path argv[1..] NULL */
    char *args[n + 4];
    size_t k = 0;
    args[k++] = (char *)interp;
    if (*arg) args[k++] = (char *)arg;
    args[k++] = (char *)path;
    for (size_t i = 1; i < n; i++) args[k++] = argv[i];
    args[k] = NULL;
    return exec_path(interp, args, envp, depth + 1);
}

/* Runs `path`, a file the kernel cannot run (ENOEXEC), with /bin/sh, as
 * execvp and shells do: /bin/sh path argv[1..]. */
static int exec_with_shell(const char *path, char *const argv[], char *const envp[]) {
    size_t n = count(argv);
    char *args[n + 3];
    args[0] = (char *)"/bin/sh";
    args[1] = (char *)path;
    for (size_t i = 1; i < n; i++) args[i + 1] = argv[i];
    args[n > 0 ? n + 1 : 2] = NULL;
    return exec_path("/bin/sh", args, envp, 0);
}

/* exec of Surge path sp, which the program named `path`. */
static int exec_surge(const struct surge_handler *c, const char *sp, const char *path, char *const argv[],
                      char *const envp[], int depth) {
    char interp[PATH_MAX], arg[PATH_MAX];
    int fd = HANDLER_CALL(c, program, sp, interp, arg, sizeof interp);
    if (fd == SURGE_SCRIPT) return exec_script(path, interp, arg, argv, envp, depth);
    if (fd < 0) return -1;
    WITH_EXEC_ENV(envp, syscall(SYS_execveat, fd, "", argv, env, AT_EMPTY_PATH));
    int err = errno;
    REAL(close)(fd);
    errno = err;
    return -1;
}

static int exec_path(const char *path, char *const argv[], char *const envp[], int depth) {
    ROUTE(AT_FDCWD, path, -1, WITH_EXEC_ENV(envp, REAL(execve)(p, argv, env)),
          exec_surge(c, sp, path, argv, envp, depth));
}

/* The argv[0] a vfork child asked env(1) to exec with (below). */
#define ARGV0_VAR "SURGE_EXEC_ARGV0"
static char pending_argv0[PATH_MAX];

void surge_exec_init(void) {
    const char *argv0 = getenv(ARGV0_VAR);
    if (!argv0) return;
    snprintf(pending_argv0, sizeof pending_argv0, "%s", argv0);
    unsetenv(ARGV0_VAR);
}

/* A vfork child shares its parent's memory, the handler's connections
 * too, which it may have closed in its own descriptor table (Python's
 * subprocess closes every descriptor before exec): the handler only checks
 * that the program exists and may be run (so that a caller trying PATH's
 * directories in turn goes on to the next), through connections of its
 * own. The program is then exec'd through env(1), a program image of its
 * own whose interposer runs it, with the program's argv[0] passed in the
 * environment (env would make it the path). */
static int exec_from_vfork_child(const char *path, char *const argv[], char *const envp[]) {
    size_t n = count(argv), vars = count(envp);
    char *args[n + 4];
    args[0] = (char *)"env";
    args[1] = (char *)"--";
    args[2] = (char *)path;
    for (size_t i = 1; i < n; i++) args[i + 2] = argv[i];
    args[n > 0 ? n + 2 : 3] = NULL;
    char argv0[sizeof ARGV0_VAR + PATH_MAX];
    snprintf(argv0, sizeof argv0, ARGV0_VAR "=%s", n > 0 ? argv[0] : path);
    char *vars_with_argv0[vars + 2];
    memcpy(vars_with_argv0, envp, vars * sizeof *envp);
    vars_with_argv0[vars] = argv0;
    vars_with_argv0[vars + 1] = NULL;
    return WITH_EXEC_ENV(vars_with_argv0, REAL(execve)("/usr/bin/env", args, env));
}

/* argv (n entries) with the argv[0] passed on through env(1), copied into
 * `out` (n + 1 slots), once; else argv itself. */
static char *const *with_pending_argv0(char *const argv[], size_t n, char **out) {
    if (!pending_argv0[0] || n == 0) return argv;
    memcpy(out, argv, (n + 1) * sizeof *argv);
    out[0] = pending_argv0;
    return out;
}

/* Surge path sp, named `path`, from a vfork child. A file the kernel would
 * refuse with ENOEXEC runs with /bin/sh here: dash, which runs its
 * commands in vfork children, would open it to check it first, which a
 * vfork child cannot do on Surge (Python's subprocess would report ENOEXEC
 * instead). */
static int exec_surge_from_vfork_child(const struct surge_handler *c, const char *sp, const char *path,
                                       char *const argv[], char *const envp[]) {
    if (HANDLER_CALL(c, probe_program, sp) == 0) return exec_from_vfork_child(path, argv, envp);
    return errno == ENOEXEC ? exec_with_shell(path, argv, envp) : -1;
}

static int exec_path_from_vfork_child(const char *path, char *const argv[], char *const envp[]) {
    ROUTE(AT_FDCWD, path, -1, WITH_EXEC_ENV(envp, REAL(execve)(p, argv, env)),
          exec_surge_from_vfork_child(c, sp, path, argv, envp));
}

int surge_execve(const char *path, char *const argv[], char *const envp[]) {
    if (!surge_is_owner()) return exec_path_from_vfork_child(path, argv, envp);
    size_t n = count(argv);
    char *args[n + 1];
    int r = exec_path(path, with_pending_argv0(argv, n, args), envp, 0);
    pending_argv0[0] = '\0';
    return r;
}

/* Whether a directory of PATH `dirs` may be Surge's. */
static bool path_reaches_surge(const char *dirs) {
    char dir[PATH_MAX];
    for (const char *d = dirs;;) {
        const char *end = strchrnul(d, ':');
        size_t n = (size_t)(end - d);
        if (n < sizeof dir) {
            memcpy(dir, d, n);
            strcpy(dir + n, n ? "/x" : "x"); /* an empty entry is the working directory */
            if (surge_may_reach(AT_FDCWD, dir)) return true;
        }
        if (!*end) return false;
        d = end + 1;
    }
}

/* execvpe's search, as glibc makes it, with each candidate exec'd through
 * exec_path: a file the kernel cannot run (ENOEXEC) is run by /bin/sh. */
static int search_and_exec(const char *file, const char *dirs, char *const argv[], char *const envp[]) {
    bool denied = false;
    char candidate[PATH_MAX];
    for (const char *d = dirs;;) {
        const char *end = strchrnul(d, ':');
        size_t len = (size_t)(end - d);
        if (snprintf(candidate, sizeof candidate, "%.*s%s%s", (int)len, d, len ? "/" : "", file) < (int)sizeof candidate) {
            exec_path(candidate, argv, envp, 0);
            if (errno == ENOEXEC) return exec_with_shell(candidate, argv, envp);
            if (errno == EACCES) denied = true;
            else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV && errno != ETIMEDOUT)
                return -1;
        }
        if (!*end) break;
        d = end + 1;
    }
    errno = denied ? EACCES : ENOENT;
    return -1;
}

int surge_execvpe(const char *file, char *const argv[], char *const envp[]) {
    if (strchr(file, '/')) {
        if (surge_execve(file, argv, envp) < 0 && errno == ENOEXEC) return exec_with_shell(file, argv, envp);
        return -1;
    }
    const char *dirs = getenv("PATH");
    if (!dirs) dirs = "/bin:/usr/bin";
    if (!*file || !path_reaches_surge(dirs)) return WITH_EXEC_ENV(envp, REAL(execvpe)(file, argv, env));
    if (!surge_is_owner()) return exec_from_vfork_child(file, argv, envp); /* env searches PATH */
    size_t n = count(argv);
    char *args[n + 1];
    int r = search_and_exec(file, dirs, with_pending_argv0(argv, n, args), envp);
    pending_argv0[0] = '\0';
    return r;
}
