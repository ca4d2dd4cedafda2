/* Streams over Surge descriptors, and the descriptors' last close: glibc's
 * own FILE machinery over a cookie whose read, write, seek and close are
 * the handler's (stdio.c opens them for fopen and fdopen), and the
 * standard streams over placeholders, which follow the descriptor marks.
 * Below the path calls: closing a descriptor first delivers the standard
 * stream over it, and a stream's close closes its descriptor.
 *
 * Wraps: none.
 */
#include "shim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>

struct surge_stream {
    int fd;
    FILE *fp;
    struct surge_stream *next;
};

/* Open Surge streams, for fileno (a cookie stream has no descriptor of its own). */
static struct surge_stream *streams;
static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;

static ssize_t stream_read(void *cookie, char *buf, size_t size) {
    struct surge_stream *s = cookie;
    return HANDLER_CALL(surge_handler(), read, s->fd, buf, size, -1);
}

/* Cookie writes report failure as 0 bytes (errno set). */
static ssize_t stream_write(void *cookie, const char *buf, size_t size) {
    struct surge_stream *s = cookie;
    ssize_t n = HANDLER_CALL(surge_handler(), write, s->fd, buf, size, -1);
    return n < 0 ? 0 : n;
}

static int stream_seek(void *cookie, off64_t *offset, int whence) {
    struct surge_stream *s = cookie;
    int64_t at = HANDLER_CALL(surge_handler(), lseek, s->fd, *offset, whence);
    if (at < 0) return -1;
    *offset = at;
    return 0;
}

/* The standard streams this image replaced, and their replacements over
 * placeholders (see "standard streams on placeholders" below). */
static FILE *replaced[3];
static FILE *adopted[3];

static int stream_close(void *cookie) {
    struct surge_stream *s = cookie;
    for (int fd = 0; fd <= 2; fd++) {
        if (adopted[fd] == s->fp) adopted[fd] = NULL; /* the program closed its standard stream */
    }
    pthread_mutex_lock(&streams_lock);
    for (struct surge_stream **at = &streams; *at; at = &(*at)->next) {
        if (*at == s) {
            *at = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&streams_lock);
    /* A retired standard stream leaves its descriptor to the program. */
    int r = s->fd >= 0 ? surge_close_fd(s->fd) : 0;
    free(s);
    return r;
}

FILE *surge_stream_over(int fd, const char *mode) {
    struct surge_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->fd = fd;
    cookie_io_functions_t io = {stream_read, stream_write, stream_seek, stream_close};
    /* glibc's cookie streams take "a" to mean seek to the end first; the
     * descriptor's O_APPEND already puts every write there. */
    char plain[8] = {mode[0] == 'a' ? 'w' : mode[0], strchr(mode, '+') ? '+' : '\0', '\0'};
    s->fp = fopencookie(s, plain, io);
    if (!s->fp) {
        free(s);
        return NULL;
    }
    pthread_mutex_lock(&streams_lock);
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&streams_lock);
    return s->fp;
}

int surge_stream_fd(FILE *fp) {
    if (!__atomic_load_n(&streams, __ATOMIC_ACQUIRE)) return -1;
    int fd = -1;
    pthread_mutex_lock(&streams_lock);
    for (struct surge_stream *s = streams; s; s = s->next) {
        if (s->fp == fp) {
            fd = s->fd;
            break;
        }
    }
    pthread_mutex_unlock(&streams_lock);
    return fd;
}

/* ---- standard streams on placeholders ---- */

/* stdio moves the bytes of stdin, stdout and stderr with glibc's internal
 * read and write, past the interposer, so on a placeholder (a shell
 * redirection to a Surge file in preload-only mode, inherited across exec
 * or made by the shell's own dup2 for a builtin) they would fail. While
 * descriptor 0, 1 or 2 is a placeholder, the standard stream is therefore
 * a cookie stream over it (glibc lets a program assign stdin, stdout and
 * stderr); the original comes back when the descriptor stops being
 * Surge's. Its bytes are delivered before the descriptor changes (dup2,
 * close) and when the image ends. */
/* The variable of standard stream fd (0-2): stdin, stdout or stderr. */
static FILE **standard_stream(int fd) { return fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr; }

void surge_follow_standard_stream(int fd) {
    if (surge_fuse || !surge_is_owner()) return;
    FILE **standard = standard_stream(fd);
    bool placeholder = surge_mark_of(fd) == SURGE_PLACEHOLDER;
    if (placeholder && !adopted[fd]) {
        FILE *fp = surge_stream_over(fd, fd == 0 ? "r" : "w");
        if (!fp) return; /* the original stays: its I/O fails, and is reported */
        if (fd == 2) setvbuf(fp, NULL, _IONBF, 0);
        replaced[fd] = *standard;
        adopted[fd] = fp;
        *standard = fp;
    } else if (!placeholder && adopted[fd]) {
        FILE *fp = adopted[fd];
        adopted[fd] = NULL;
        if (*standard == fp) *standard = replaced[fd];
        pthread_mutex_lock(&streams_lock);
        for (struct surge_stream *s = streams; s; s = s->next) {
            if (s->fp == fp) s->fd = -1;
        }
        pthread_mutex_unlock(&streams_lock);
        REAL(fclose)(fp); /* flushed already: surge_flush_standard_stream */
    }
}

void surge_flush_standard_stream(int fd) {
    if (fd >= 0 && fd <= 2 && adopted[fd]) REAL(fflush)(adopted[fd]);
}

void surge_check_standard_stream(FILE *fp) {
    if (!fp || surge_fuse || surge_in_handler) return;
    int fd = -1;
    for (int i = 0; i <= 2; i++) {
        if (fp == replaced[i] || (!adopted[i] && fp == *standard_stream(i))) fd = i;
    }
    if (fd < 0) return;
    int saved = errno;
    bool tried_to_read = fd == 0 && fp->_IO_buf_base;
    if (surge_fd(REAL(fileno)(fp)) && (__fpending(fp) > 0 || ferror(fp) || tried_to_read)) {
        const struct surge_handler *c = surge_handler();
        if (c) HANDLER_CALL_VOID(c, note_stream, fd);
    }
    errno = saved;
}

void surge_check_standard_streams(void) {
    for (int fd = 0; fd <= 2; fd++) {
        surge_flush_standard_stream(fd);
        surge_check_standard_stream(replaced[fd] ? replaced[fd] : *standard_stream(fd));
    }
}

int surge_close_fd(int fd) {
    surge_flush_standard_stream(fd);
    const struct surge_handler *c = surge_handler();
    if (c) HANDLER_CALL(c, close, fd);
    surge_mark(fd, false);
    return REAL(close)(fd);
}
