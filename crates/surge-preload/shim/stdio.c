/* stdio on Surge files: the calls that open a stream or name its
 * descriptor. The streams are glibc's own FILEs over Surge's cookie
 * (streams.c), so fread, fwrite, fprintf, fgets, fputs, fseek, ftell,
 * fflush, feof and ferror all work unchanged on them.
 *
 * Wraps: fopen, fopen64, fdopen, fileno, fileno_unlocked, freopen,
 * freopen64, fflush, fclose.
 */
#include "route.h"

#include <stdio.h>
#include <stdlib.h>

/* The open(2) flags of an fopen mode, or -1 (EINVAL). */
static int mode_flags(const char *mode) {
    int flags;
    switch (mode ? mode[0] : 0) {
    case 'r': flags = O_RDONLY; break;
    case 'w': flags = O_WRONLY | O_CREAT | O_TRUNC; break;
    case 'a': flags = O_WRONLY | O_CREAT | O_APPEND; break;
    default: errno = EINVAL; return -1;
    }
    for (const char *m = mode + 1; *m && *m != ','; m++) {
        if (*m == '+') flags = (flags & ~O_ACCMODE) | O_RDWR;
        else if (*m == 'x') flags |= O_EXCL;
        else if (*m == 'e') flags |= O_CLOEXEC;
    }
    return flags;
}

/* A stream over Surge file `sp`, or over what Surge descriptor `held`
 * (when not -1) has open. */
static FILE *open_stream(const char *sp, int held, const char *mode) {
    int flags = mode_flags(mode);
    if (flags < 0) return NULL;
    int fd = held >= 0 ? surge_reopen_fd(held, flags) : surge_open_path(sp, flags, 0666);
    if (fd < 0) return NULL;
    FILE *fp = surge_stream_over(fd, mode);
    if (!fp) {
        int err = errno;
        surge_close_fd(fd);
        errno = err;
    }
    return fp;
}

FILE *fopen(const char *path, const char *mode) {
    int held = surge_named_descriptor(path);
    if (held >= 0) return open_stream(NULL, held, mode);
    ROUTE(AT_FDCWD, path, NULL, REAL(fopen)(p, mode), open_stream(sp, -1, mode));
}
FILE *fopen64(const char *path, const char *mode) { return fopen(path, mode); }

FILE *fdopen(int fd, const char *mode) {
    FD_ROUTE(fd, NULL, REAL(fdopen)(fd, mode), mode_flags(mode) < 0 ? NULL : surge_stream_over(fd, mode));
}

int fileno(FILE *fp) {
    int fd = surge_stream_fd(fp);
    return fd >= 0 ? fd : REAL(fileno)(fp);
}

int fileno_unlocked(FILE *fp) { return fileno(fp); }

/* freopen keeps the caller's FILE, which a Surge stream cannot take over:
 * refused with a message rather than writing somewhere unexpected. */
static FILE *refuse_freopen(const char *sp, FILE *stream) {
    const struct surge_handler *c = surge_handler();
    if (c) HANDLER_CALL(c, unsupported, "freopen", stream ? fileno(stream) : -1, sp, ENOTSUP);
    return NULL;
}

FILE *freopen(const char *path, const char *mode, FILE *stream) {
    if (surge_stream_fd(stream) >= 0) return refuse_freopen(NULL, stream);
    ROUTE(AT_FDCWD, path, NULL, REAL(freopen)(p, mode, stream), refuse_freopen(sp, stream));
}
FILE *freopen64(const char *path, const char *mode, FILE *stream) { return freopen(path, mode, stream); }

int fflush(FILE *fp) {
    if (fp) surge_check_standard_stream(fp);
    else surge_check_standard_streams();
    return REAL(fflush)(fp);
}

int fclose(FILE *fp) {
    surge_check_standard_stream(fp);
    return REAL(fclose)(fp);
}
