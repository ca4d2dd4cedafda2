/*
 * common.h - helpers shared by the Surge workload programs.
 *
 * Exercises nothing by itself.  Provides:
 *   - error reporting with a program/rank prefix ("prog[rank N]: ...");
 *   - full-length read/write loops around read(2)/write(2)/pwrite(2)/pread(2);
 *   - a deterministic data pattern: the byte at offset `off` of a stream
 *     identified by `seed` is a pure function of (seed, off), so a reader can
 *     verify data without keeping a copy (64-bit splitmix mix per 8 bytes,
 *     stored little-endian so files are identical on any host);
 *   - CRC-32 (IEEE 802.3, same as zlib's crc32) for whole-file fingerprints;
 *   - size parsing with K/M/G suffixes and a monotonic clock.
 */
#ifndef SURGE_WORKLOADS_COMMON_H
#define SURGE_WORKLOADS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- error reporting ---------------------------------------------------- */

/* Set the prefix used by errmsg()/syserr(): "name: " or "name[rank R]: "
 * (rank < 0 means no rank).  `argv0` may be a path; only its basename is kept. */
void prog_init(const char *argv0, int rank);
const char *prog_name(void);

/* Print "prefix: <formatted message>\n" to stderr. */
void errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print "prefix: OP PATH: strerror(errno)\n" to stderr (errno is preserved). */
void syserr(const char *op, const char *path);

/* ---- full-length I/O ----------------------------------------------------- */

/* Write all `len` bytes with write(2) (uses and advances the fd offset).
 * Returns 0, or -1 after reporting (path is only used in the message). */
int write_full(int fd, const void *buf, size_t len, const char *path);

/* Write all `len` bytes at `off` with pwrite(2).  Returns 0 or -1 (reported). */
int pwrite_full(int fd, const void *buf, size_t len, off_t off, const char *path);

/* Read up to `len` bytes with read(2), looping over short reads, stopping at
 * EOF.  Returns the number of bytes read, or -1 after reporting. */
ssize_t read_full(int fd, void *buf, size_t len, const char *path);

/* Same with pread(2) at `off`. */
ssize_t pread_full(int fd, void *buf, size_t len, off_t off, const char *path);

/* ---- deterministic pattern ---------------------------------------------- */

/* splitmix64 finaliser: a good 64-bit -> 64-bit mixing function. */
uint64_t mix64(uint64_t x);

/* Seed for a stream identified by up to three small integers
 * (e.g. step, rank, kind).  Distinct tuples give unrelated streams. */
uint64_t pattern_seed(uint64_t a, uint64_t b, uint64_t c);

/* The 64-bit word covering stream offsets [8*idx, 8*idx+8). */
uint64_t pattern_word(uint64_t seed, uint64_t idx);

/* Fill buf[0..len) with the stream bytes at offsets [off, off+len). */
void pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t off);

/* Compare buf[0..len) with the stream bytes at [off, off+len).  Returns the
 * number of mismatching bytes; if any and first_bad != NULL, stores the stream
 * offset of the first one there. */
uint64_t pattern_check(const void *buf, size_t len, uint64_t seed, uint64_t off,
                       uint64_t *first_bad);

/* ---- misc ---------------------------------------------------------------- */

/* CRC-32 (zlib-compatible).  Start with crc = 0, feed chunks in order. */
uint32_t crc32_update(uint32_t crc, const void *buf, size_t len);

/* Parse a non-negative integer with optional binary suffix K, M, G
 * (case-insensitive, optional trailing 'B' or 'iB': 4K, 1MiB, 2g).
 * Returns 0 on success, -1 on syntax error or overflow. */
int parse_size(const char *s, uint64_t *out);

/* Seconds from a monotonic clock. */
double now_sec(void);

#define MIB (1024.0 * 1024.0)

#endif
