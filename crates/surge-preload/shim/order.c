/* The order of the preloaded libraries. A library that wraps the calls the
 * shim wraps (a profiler such as Darshan, preloaded to count a program's
 * I/O) must come before the shim in LD_PRELOAD: its wrappers then see the
 * program's calls and hand them on to the shim, which serves Surge's
 * files. After the shim, it would see only what the shim hands to libc,
 * and the shim serves Surge's descriptors itself: the profiler would find
 * the files but none of their bytes (Darshan: 0 reads, 0 writes). So a
 * process whose LD_PRELOAD names such a library after the shim runs its
 * program again at once, with the shim moved to the end of LD_PRELOAD: an
 * exec in the constructor, before the program's own code runs; the
 * process keeps its pid, arguments and environment.
 *
 * Wraps: none.
 */
#include "shim.h"

#include <gnu/libc-version.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>

/* The calls profilers wrap (Darshan's POSIX and STDIO modules among them). */
static const char *const profiled_calls[] = {"open", "open64", "openat", "read", "write", "pread", "pwrite",
                                             "pread64", "pwrite64", "close", "fopen", "fread", "fwrite"};

/* Does a library between the shim and libc define one of those calls?
 * (libpthread does too before glibc 2.34: libc's own.) */
static bool wrapped_after_shim(void) {
    Dl_info libc_info, info;
    if (!dladdr((void *)gnu_get_libc_version, &libc_info)) return false;
    for (size_t i = 0; i < sizeof profiled_calls / sizeof *profiled_calls; i++) {
        void *next = dlsym(RTLD_NEXT, profiled_calls[i]);
        if (!next || !dladdr(next, &info) || info.dli_fbase == libc_info.dli_fbase) continue;
        const char *slash = info.dli_fname ? strrchr(info.dli_fname, '/') : NULL;
        const char *name = slash ? slash + 1 : info.dli_fname;
        if (!name || strncmp(name, "libpthread.so", 13) != 0) return true;
    }
    return false;
}

/* Is the program the kernel's executable, as /proc/self/exe names it? Not
 * when it was started through the dynamic loader (ld.so PROGRAM), where
 * running /proc/self/exe again would run the loader with other arguments:
 * the kernel then loaded no interpreter (AT_BASE 0; the loader rewrites
 * the auxiliary vector's program entries, not this one). */
static bool program_is_the_executable(void) { return getauxval(AT_BASE) != 0; }

/* Is `entry` (one name of LD_PRELOAD, `n` bytes) this shim? */
static bool names_the_shim(const char *entry, size_t n, const char *shim_base) {
    const char *base = entry;
    for (size_t i = 0; i < n; i++) {
        if (entry[i] == '/') base = entry + i + 1;
    }
    size_t len = n - (size_t)(base - entry);
    return len == strlen(shim_base) && memcmp(base, shim_base, len) == 0;
}

/* LD_PRELOAD with the shim moved to its end, in `out`; false when it is
 * there already (or cannot be found, or does not fit). */
static bool shim_last(const char *preload, char *out, size_t cap) {
    Dl_info self;
    if (!dladdr((void *)shim_last, &self) || !self.dli_fname) return false;
    const char *slash = strrchr(self.dli_fname, '/');
    const char *shim_base = slash ? slash + 1 : self.dli_fname;
    size_t used = 0;
    const char *shim = NULL, *last = NULL;
    size_t shim_len = 0;
    /* ld.so takes spaces and colons between the names. */
    for (const char *p = preload; *p;) {
        p += strspn(p, ": ");
        size_t n = strcspn(p, ": ");
        if (n == 0) break;
        last = p;
        if (!shim && names_the_shim(p, n, shim_base)) {
            shim = p;
            shim_len = n;
        } else {
            if (used + n + 2 > cap) return false;
            if (used) out[used++] = ':';
            memcpy(out + used, p, n);
            used += n;
        }
        p += n;
    }
    if (!shim || shim == last || used + shim_len + 2 > cap) return false;
    out[used++] = ':';
    memcpy(out + used, shim, shim_len);
    out[used + shim_len] = '\0';
    return true;
}

void surge_preload_in_order(char **argv) {
    const char *preload = getenv("LD_PRELOAD");
    char reordered[8192];
    if (!preload || !argv || !wrapped_after_shim() || !program_is_the_executable()) return;
    if (!shim_last(preload, reordered, sizeof reordered)) return;
    if (setenv("LD_PRELOAD", reordered, 1) != 0) return;
    REAL(execve)("/proc/self/exe", argv, environ);
    /* The program runs on as it is; its children get the order. */
    fprintf(stderr, "surge: cannot run %s again with LD_PRELOAD=%s (%s): a profiler preloaded after "
                    "the interposer sees no bytes of Surge's files in this process\n",
            argv[0], reordered, strerror(errno));
}
