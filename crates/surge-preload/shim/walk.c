/* Directory walks on Surge paths: glob, scandir, ftw and nftw. glibc's walk
 * directories with its internal opendir, readdir and stat, past the
 * interposer, so under a prefix that is not a mount a C program's glob
 * matched nothing and its ftw visited nothing. glob takes the interposed
 * calls through GLOB_ALTDIRFUNC; scandir reads the directory here with
 * the interposed calls; ftw and nftw are walked here, depth
 * first, with the interposed opendir, readdir and lstat (a Surge path holds
 * no symbolic links, so FTW_PHYS changes nothing; FTW_CHDIR and
 * FTW_ACTIONRETVAL are refused with ENOTSUP). Other paths, and every path
 * in FUSE mode, go to libc.
 *
 * Wraps: glob, glob64, scandir, scandir64, nftw, nftw64, ftw, ftw64.
 */
#include "route.h"

#include <ftw.h>
#include <glob.h>
#include <stdlib.h>
#include <sys/stat.h>

/* ---- glob ---- */

static void *walk_opendir(const char *path) { return opendir(path); }
static struct dirent *walk_readdir(void *dir) { return readdir(dir); }
static struct dirent64 *walk_readdir64(void *dir) { return readdir64(dir); }
static void walk_closedir(void *dir) { closedir(dir); }

int glob(const char *pattern, int flags, int (*errfunc)(const char *, int), glob_t *g) {
    if (!surge_serves_path(pattern)) return REAL(glob)(pattern, flags, errfunc, g);
    g->gl_opendir = walk_opendir;
    g->gl_readdir = walk_readdir;
    g->gl_closedir = walk_closedir;
    g->gl_stat = stat;
    g->gl_lstat = lstat;
    return REAL(glob)(pattern, flags | GLOB_ALTDIRFUNC, errfunc, g);
}

int glob64(const char *pattern, int flags, int (*errfunc)(const char *, int), glob64_t *g) {
    if (!surge_serves_path(pattern)) return REAL(glob64)(pattern, flags, errfunc, g);
    g->gl_opendir = walk_opendir;
    g->gl_readdir = walk_readdir64;
    g->gl_closedir = walk_closedir;
    g->gl_stat = stat64;
    g->gl_lstat = lstat64;
    return REAL(glob64)(pattern, flags | GLOB_ALTDIRFUNC, errfunc, g);
}

/* ---- scandir ---- */

typedef int (*scandir_filter)(const struct dirent *);
typedef int (*scandir_compare)(const struct dirent **, const struct dirent **);

static int by_compare(const void *a, const void *b, void *compare) {
    return ((scandir_compare)compare)((const struct dirent **)a, (const struct dirent **)b);
}

/* The entries `filter` keeps, sorted with `compare`, each a malloc'd copy in
 * a malloc'd array (as scandir gives them), or -1 with errno. */
static int scan(const char *path, struct dirent ***out, scandir_filter filter, scandir_compare compare) {
    DIR *dir = opendir(path);
    if (!dir) return -1;
    struct dirent **list = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int err = 0;
    errno = 0;
    while ((e = readdir(dir))) {
        if (filter && !filter(e)) continue;
        if (n == cap) {
            struct dirent **grown = realloc(list, (cap = cap ? 2 * cap : 16) * sizeof *list);
            if (!grown) {
                err = ENOMEM;
                break;
            }
            list = grown;
        }
        if (!(list[n] = malloc(e->d_reclen))) {
            err = ENOMEM;
            break;
        }
        memcpy(list[n++], e, e->d_reclen);
        errno = 0;
    }
    if (!err) err = errno;
    closedir(dir);
    if (err) {
        while (n) free(list[--n]);
        free(list);
        errno = err;
        return -1;
    }
    if (compare) qsort_r(list, n, sizeof *list, by_compare, (void *)compare);
    *out = list;
    return (int)n;
}

int scandir(const char *path, struct dirent ***out, scandir_filter filter, scandir_compare compare) {
    if (!surge_serves_path(path)) return REAL(scandir)(path, out, filter, compare);
    return scan(path, out, filter, compare);
}

/* struct dirent64 is struct dirent on 64-bit Linux. */
int scandir64(const char *path, struct dirent64 ***out, int (*filter)(const struct dirent64 *),
              int (*compare)(const struct dirent64 **, const struct dirent64 **)) {
    if (!surge_serves_path(path)) return REAL(scandir64)(path, out, filter, compare);
    return scan(path, (struct dirent ***)out, (scandir_filter)(void (*)(void))filter,
                (scandir_compare)(void (*)(void))compare);
}

/* ---- ftw and nftw ---- */

typedef int (*nftw_fn)(const char *, const struct stat *, int, struct FTW *);

/* Visits `path` (its name starting at `base`, at `level`) and, for a
 * directory, what it holds; the callback's first nonzero answer, or -1
 * with errno when the starting point cannot be examined. */
static int walk(char *path, size_t len, int base, int level, nftw_fn fn, int flags) {
    struct stat st;
    struct FTW ftw = {.base = base, .level = level};
    if (lstat(path, &st) < 0) return level > 0 ? fn(path, &st, FTW_NS, &ftw) : -1;
    if (!S_ISDIR(st.st_mode)) return fn(path, &st, FTW_F, &ftw);
    DIR *dir = opendir(path);
    if (!dir) return fn(path, &st, FTW_DNR, &ftw);
    int r = flags & FTW_DEPTH ? 0 : fn(path, &st, FTW_D, &ftw);
    struct dirent *e;
    while (!r && (e = readdir(dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        size_t name = strlen(e->d_name);
        if (len + 1 + name >= PATH_MAX) {
            errno = ENAMETOOLONG;
            r = -1;
            break;
        }
        path[len] = '/';
        memcpy(path + len + 1, e->d_name, name + 1);
        r = walk(path, len + 1 + name, (int)len + 1, level + 1, fn, flags);
        path[len] = '\0';
    }
    int err = errno;
    closedir(dir);
    errno = err;
    if (!r && flags & FTW_DEPTH) r = fn(path, &st, FTW_DP, &ftw);
    return r;
}

int nftw(const char *dirpath, nftw_fn fn, int nopenfd, int flags) {
    if (!surge_serves_path(dirpath)) return REAL(nftw)(dirpath, fn, nopenfd, flags);
    /* FTW_CHDIR would move the kernel's working directory into Surge; the
     * callback's FTW_ACTIONRETVAL answers are not walked here: refused. */
    if (flags & (FTW_CHDIR | FTW_ACTIONRETVAL)) {
        errno = ENOTSUP;
        return -1;
    }
    char path[PATH_MAX];
    size_t len = strlen(dirpath);
    if (len >= PATH_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(path, dirpath, len + 1);
    while (len > 1 && path[len - 1] == '/') path[--len] = '\0';
    const char *slash = strrchr(path, '/');
    return walk(path, len, slash && slash[1] ? (int)(slash - path) + 1 : 0, 0, fn, flags);
}
/* struct stat64 is struct stat on 64-bit Linux: the same walk (through void (*)(void), which any function type converts to). */
int nftw64(const char *dirpath, __nftw64_func_t fn, int nopenfd, int flags) {
    return nftw(dirpath, (nftw_fn)(void (*)(void))fn, nopenfd, flags);
}

/* ftw's callback has no struct FTW and knows no FTW_DP/FTW_SL: called through nftw's. */
static __thread __ftw_func_t ftw_callback;

static int ftw_adapter(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)ftw;
    return ftw_callback(path, st, type);
}

int ftw(const char *dirpath, __ftw_func_t fn, int nopenfd) {
    if (!surge_serves_path(dirpath)) return REAL(ftw)(dirpath, fn, nopenfd);
    __ftw_func_t outer = ftw_callback;
    ftw_callback = fn;
    int r = nftw(dirpath, ftw_adapter, nopenfd, 0);
    ftw_callback = outer;
    return r;
}
int ftw64(const char *dirpath, __ftw64_func_t fn, int nopenfd) {
    return ftw(dirpath, (__ftw_func_t)(void (*)(void))fn, nopenfd);
}
