/* Temporary files and directories on Surge paths: the mkstemp family and
 * mkdtemp. glibc's make their file or directory with its internal open and
 * mkdir, past the interposer, so under a prefix that is not a mount they
 * failed (sort -T, or a program's own mkstemp). On a Surge path the name is
 * made here, as glibc makes it (the template's six X replaced by letters
 * and digits), and the file or directory is created with the interposed
 * open (O_CREAT | O_EXCL, mode 0600) or mkdir (0700), trying new names
 * while one exists. Other paths, and every path in FUSE mode, go to libc.
 *
 * Wraps: mkostemps, mkostemps64, mkstemps, mkstemps64, mkostemp, mkostemp64,
 * mkstemp, mkstemp64, mkdtemp.
 */
#include "route.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>

#define SUFFIX_X 6
/* As glibc's TMP_MAX: names tried before EEXIST. */
#define TRIES 238328

static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/* The X run of `template` before a suffix of `suffixlen` bytes, or NULL (EINVAL). */
static char *x_run(char *template, int suffixlen) {
    size_t len = strlen(template);
    if (suffixlen < 0 || len < SUFFIX_X + (size_t)suffixlen) {
        errno = EINVAL;
        return NULL;
    }
    char *x = template + len - suffixlen - SUFFIX_X;
    if (strspn(x, "X") < SUFFIX_X) {
        errno = EINVAL;
        return NULL;
    }
    return x;
}

static void fill(char *x) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != sizeof v) v = (uint64_t)random() << 17 ^ (uint64_t)getpid();
    for (int i = 0; i < SUFFIX_X; i++, v /= sizeof letters - 1) x[i] = letters[v % (sizeof letters - 1)];
}

/* Makes a name from `template` and creates it with `make`, which returns
 * its result (>= 0) or -1 with errno; tries again while the name exists. */
static int make_unique(char *template, int suffixlen, int (*make)(const char *, int), int flags) {
    char *x = x_run(template, suffixlen);
    if (!x) return -1;
    for (int i = 0; i < TRIES; i++) {
        fill(x);
        int r = make(template, flags);
        if (r >= 0 || errno != EEXIST) return r;
    }
    errno = EEXIST;
    return -1;
}

static int create_file(const char *path, int flags) {
    return open(path, (flags & ~O_ACCMODE) | O_RDWR | O_CREAT | O_EXCL, 0600);
}

static int create_dir(const char *path, int flags) {
    (void)flags;
    return mkdir(path, 0700);
}

int mkostemps(char *template, int suffixlen, int flags) {
    if (!surge_serves_path(template)) return REAL(mkostemps)(template, suffixlen, flags);
    return make_unique(template, suffixlen, create_file, flags);
}
int mkostemps64(char *template, int suffixlen, int flags) { return mkostemps(template, suffixlen, flags); }
int mkstemps(char *template, int suffixlen) { return mkostemps(template, suffixlen, 0); }
int mkstemps64(char *template, int suffixlen) { return mkostemps(template, suffixlen, 0); }
int mkostemp(char *template, int flags) { return mkostemps(template, 0, flags); }
int mkostemp64(char *template, int flags) { return mkostemps(template, 0, flags); }
int mkstemp(char *template) { return mkostemps(template, 0, 0); }
int mkstemp64(char *template) { return mkostemps(template, 0, 0); }

char *mkdtemp(char *template) {
    if (!surge_serves_path(template)) return REAL(mkdtemp)(template);
    return make_unique(template, 0, create_dir, 0) < 0 ? NULL : template;
}
