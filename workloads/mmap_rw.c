/*
 * mmap_rw.c - a file written through a shared mapping and read back through
 * mappings by another process (no MPI).
 *
 * Exercises what a kernel-visible file system must get right about mmap:
 *   write FILE SIZE   creates FILE, sizes it with ftruncate, fills it with the
 *                     deterministic pattern through a MAP_SHARED mapping,
 *                     then msync, munmap, close; nothing is written with write(2)
 *   read FILE         (run as a separate process) maps FILE MAP_SHARED read-only
 *                     and verifies every byte; maps it MAP_PRIVATE, overwrites
 *                     the private copy (copy-on-write), and checks with pread(2)
 *                     that the file itself still holds the pattern
 * and prints one line: "mmap_rw: FILE size=N crc32=X shared=ok private=ok".
 *
 * Usage: mmap_rw write FILE SIZE | mmap_rw read FILE
 * Exit status: 0 success, 1 error or mismatch, 2 usage.
 */
#include "common.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEED_KIND 0x3a

static void usage(FILE *f)
{
    fprintf(f, "usage: mmap_rw write FILE SIZE   (SIZE with K/M/G suffixes, > 0)\n"
               "       mmap_rw read FILE\n");
}

static uint64_t seed(void) { return pattern_seed(SEED_KIND, 0, 0); }

static int write_mapped(const char *path, uint64_t size)
{
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) {
        syserr("open", path);
        return 1;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        syserr("ftruncate", path);
        close(fd);
        return 1;
    }
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        syserr("mmap MAP_SHARED", path);
        close(fd);
        return 1;
    }
    pattern_fill(map, size, seed(), 0);
    int failed = 0;
    if (msync(map, size, MS_SYNC) != 0) {
        syserr("msync", path);
        failed = 1;
    }
    if (munmap(map, size) != 0) {
        syserr("munmap", path);
        failed = 1;
    }
    if (close(fd) != 0) {
        syserr("close", path);
        failed = 1;
    }
    return failed;
}

/* The pattern's mismatches in `len` bytes at `buf`, reported as `how`. */
static int verify(const void *buf, uint64_t len, const char *path, const char *how)
{
    uint64_t first_bad = 0;
    uint64_t bad = pattern_check(buf, len, seed(), 0, &first_bad);
    if (bad != 0)
        errmsg("%s %s: %" PRIu64 " byte(s) differ, the first at offset %" PRIu64, how, path, bad, first_bad);
    return bad != 0;
}

static int read_mapped(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        syserr("open", path);
        return 1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
        errmsg("fstat %s: no size to map", path);
        close(fd);
        return 1;
    }
    uint64_t size = (uint64_t)st.st_size;
    void *shared = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (shared == MAP_FAILED) {
        syserr("mmap MAP_SHARED", path);
        close(fd);
        return 1;
    }
    int failed = verify(shared, size, path, "shared mapping of");
    uint32_t crc = crc32_update(0, shared, size);
    munmap(shared, size);

    void *private = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (private == MAP_FAILED) {
        syserr("mmap MAP_PRIVATE", path);
        close(fd);
        return 1;
    }
    failed |= verify(private, size, path, "private mapping of");
    memset(private, 0xee, size < 4096 ? size : 4096);
    munmap(private, size);
    char *back = malloc(size);
    if (back == NULL || pread_full(fd, back, size, 0, path) != (ssize_t)size) {
        errmsg("pread %s: cannot read the file back whole", path);
        failed = 1;
    } else {
        failed |= verify(back, size, path, "after writing a private mapping,");
    }
    free(back);
    close(fd);
    if (!failed)
        printf("mmap_rw: %s size=%" PRIu64 " crc32=%08x shared=ok private=ok\n", path, size, crc);
    return failed;
}

int main(int argc, char **argv)
{
    prog_init(argv[0], -1);
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    uint64_t size = 0;
    if (argc == 4 && !strcmp(argv[1], "write")) {
        if (parse_size(argv[3], &size) != 0 || size == 0) {
            errmsg("invalid value '%s' for SIZE", argv[3]);
            usage(stderr);
            return 2;
        }
        return write_mapped(argv[2], size);
    }
    if (argc == 3 && !strcmp(argv[1], "read"))
        return read_mapped(argv[2]);
    usage(stderr);
    return 2;
}
