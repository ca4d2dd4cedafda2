/*
 * common.c - implementation of the shared helpers declared in common.h
 * (error reporting, full-length I/O loops, deterministic pattern, CRC-32,
 * size parsing, clock).  Pure POSIX: linked into MPI and non-MPI programs.
 */
#include "common.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- error reporting ---------------------------------------------------- */

static char g_name[64] = "workload";
static char g_prefix[96] = "workload";

void prog_init(const char *argv0, int rank)
{
    const char *base = argv0 ? strrchr(argv0, '/') : NULL;
    base = base ? base + 1 : (argv0 ? argv0 : "workload");
    snprintf(g_name, sizeof g_name, "%s", base);
    if (rank >= 0)
        snprintf(g_prefix, sizeof g_prefix, "%s[rank %d]", g_name, rank);
    else
        snprintf(g_prefix, sizeof g_prefix, "%s", g_name);
}

const char *prog_name(void) { return g_name; }

void errmsg(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One fprintf so lines from different ranks do not interleave mid-line. */
    fprintf(stderr, "%s: %s\n", g_prefix, msg);
}

void syserr(const char *op, const char *path)
{
    int e = errno;
    errmsg("%s %s: %s", op, path ? path : "(null)", strerror(e));
    errno = e;
}

/* ---- full-length I/O ----------------------------------------------------- */

int write_full(int fd, const void *buf, size_t len, const char *path)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            syserr("write", path);
            return -1;
        }
        if (n == 0) {
            errmsg("write %s: wrote 0 bytes", path);
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int pwrite_full(int fd, const void *buf, size_t len, off_t off, const char *path)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            syserr("pwrite", path);
            return -1;
        }
        if (n == 0) {
            errmsg("pwrite %s: wrote 0 bytes at offset %lld", path, (long long)off);
            return -1;
        }
        p += n;
        off += n;
        len -= (size_t)n;
    }
    return 0;
}

ssize_t read_full(int fd, void *buf, size_t len, const char *path)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, p + got, len - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            syserr("read", path);
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

ssize_t pread_full(int fd, void *buf, size_t len, off_t off, const char *path)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, p + got, len - got, off + (off_t)got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            syserr("pread", path);
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* ---- deterministic pattern ---------------------------------------------- */

#define GOLDEN 0x9e3779b97f4a7c15ULL

uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t pattern_seed(uint64_t a, uint64_t b, uint64_t c)
{
    return mix64(mix64(mix64(a + GOLDEN) ^ (b + 2 * GOLDEN)) ^ (c + 3 * GOLDEN));
}

uint64_t pattern_word(uint64_t seed, uint64_t idx)
{
    return mix64(seed + (idx + 1) * GOLDEN);
}

static inline uint8_t pattern_byte(uint64_t seed, uint64_t off)
{
    return (uint8_t)(pattern_word(seed, off >> 3) >> (8 * (off & 7)));
}

static inline void store_le64(unsigned char *p, uint64_t w)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(w >> (8 * i));
}

void pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t off)
{
    unsigned char *p = buf;
    size_t i = 0;
    /* unaligned head, whole words, tail */
    while (i < len && ((off + i) & 7) != 0) {
        p[i] = pattern_byte(seed, off + i);
        i++;
    }
    for (; i + 8 <= len; i += 8)
        store_le64(p + i, pattern_word(seed, (off + i) >> 3));
    for (; i < len; i++)
        p[i] = pattern_byte(seed, off + i);
}

uint64_t pattern_check(const void *buf, size_t len, uint64_t seed, uint64_t off,
                       uint64_t *first_bad)
{
    const unsigned char *p = buf;
    uint64_t bad = 0;
    for (size_t i = 0; i < len;) {
        /* compare a word at a time when aligned, byte at a time otherwise */
        if (((off + i) & 7) == 0 && i + 8 <= len) {
            unsigned char w[8];
            store_le64(w, pattern_word(seed, (off + i) >> 3));
            if (memcmp(w, p + i, 8) == 0) {
                i += 8;
                continue;
            }
        }
        if (p[i] != pattern_byte(seed, off + i)) {
            if (bad == 0 && first_bad)
                *first_bad = off + i;
            bad++;
        }
        i++;
    }
    return bad;
}

/* ---- misc ---------------------------------------------------------------- */

uint32_t crc32_update(uint32_t crc, const void *buf, size_t len)
{
    static uint32_t table[256];
    static int ready;
    if (!ready) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++)
                c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[n] = c;
        }
        ready = 1;
    }
    const unsigned char *p = buf;
    crc = ~crc;
    while (len--)
        crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

int parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return -1;
    unsigned shift = 0;
    switch (tolower((unsigned char)*end)) {
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    default: break;
    }
    if (shift && tolower((unsigned char)*end) == 'i')
        end++;
    if (shift && tolower((unsigned char)*end) == 'b')
        end++;
    if (*end != '\0')
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
