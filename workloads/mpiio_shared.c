/*
 * mpiio_shared.c - shared-file MPI-IO with a strided file view (MPI, 4+ ranks).
 *
 * Exercises, on one shared file FILE:
 *   1. rank 0 MPI_File_delete (stale file), collective MPI_File_open(CREATE|RDWR);
 *   2. MPI_File_set_view with a strided filetype, MPI_Type_vector(N, B, P*B):
 *      rank r owns blocks r, r+P, r+2P, ... (round-robin, B bytes each);
 *      one collective MPI_File_write_all writes all N of a rank's blocks;
 *   3. MPI_File_sync + MPI_Barrier + MPI_File_sync (MPI consistency rule), then
 *      MPI_File_read_all of the rank's own blocks, and of its neighbour's
 *      blocks (rank r+1) through a second strided view - data written by
 *      another process must be visible;
 *   4. back to a flat byte view: independent MPI_File_read_at of a contiguous
 *      1/P slice that crosses every writer boundary; MPI_File_get_size;
 *   5. MPI_File_close, then rank 0 re-reads the whole file with POSIX
 *      open/fstat/read and prints its size and CRC-32.
 *
 * The file content is a pure function of the file offset (no timestamps,
 * pids, or rank-count dependence), so files written under different MPI-IO
 * implementations (ompio, romio321) or on different file systems (plain
 * directory vs Surge) can be compared byte for byte.
 *
 * Usage: mpiio_shared FILE [--blocks N] [--block-size B]
 * Exit status: 0 success; 1 I/O error or mismatch; 2 usage; abort on setup error.
 */
#include "common.h"
#include "common_mpi.h"

#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_SEED 0x5375726765ULL /* content = pattern(FILE_SEED, file offset) */

static int g_rank, g_nprocs;
static const char *g_path;
static unsigned long long g_errors, g_mismatches;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np P mpiio_shared FILE [--blocks N] [--block-size B]\n"
            "  FILE              shared file to create (overwritten)\n"
            "  --blocks N        blocks written by each rank (default 16)\n"
            "  --block-size B    bytes per block, K/M suffix ok (default 64K)\n"
            "  -h, --help        this message\n"
            "File size is N * P * B; intended for P >= 4 ranks.\n");
}

static int parse_args(int argc, char **argv, uint64_t *blocks, uint64_t *bsize)
{
    static const struct option opts[2] = {{"blocks", required_argument, 0, 'n'},
                                          {"block-size", required_argument, 0, 'b'}};
    *blocks = 16;
    *bsize = 64 * 1024;
    int rc = mpi_parse_path_and_sizes(argc, argv, opts, (uint64_t *[2]){blocks, bsize}, INT_MAX, usage, &g_path);
    if (rc)
        return rc;
    if (*blocks * *bsize > INT_MAX) { /* one MPI call moves all of a rank's data */
        if (g_rank == 0) errmsg("--blocks x --block-size must be < 2 GiB per rank");
        return 2;
    }
    return 0;
}

static void check(int rc, const char *op)
{
    if (mpi_check(rc, op, g_path))
        g_errors++;
}

/* Strided filetype selecting blocks r, r+P, ... once the view displacement
 * is r*B. */
static MPI_Datatype strided_type(int blocks, int bsize)
{
    MPI_Datatype t;
    mpi_check_setup(MPI_Type_vector(blocks, bsize, bsize * g_nprocs, MPI_BYTE, &t),
                    "MPI_Type_vector", g_path);
    mpi_check_setup(MPI_Type_commit(&t), "MPI_Type_commit", g_path);
    return t;
}

/* File offset of byte i of the data owned by `owner` under the strided view. */
static uint64_t strided_off(int owner, uint64_t i, uint64_t bsize)
{
    return ((i / bsize) * (uint64_t)g_nprocs + (uint64_t)owner) * bsize + i % bsize;
}

static void fill_owned(unsigned char *buf, int owner, uint64_t blocks, uint64_t bsize)
{
    for (uint64_t k = 0; k < blocks; k++)
        pattern_fill(buf + k * bsize, bsize, FILE_SEED, strided_off(owner, k * bsize, bsize));
}

static void verify_owned(const unsigned char *buf, int owner, uint64_t blocks, uint64_t bsize,
                         const char *what)
{
    uint64_t bad = 0, first = 0;
    for (uint64_t k = 0; k < blocks; k++) {
        uint64_t f = 0, off = strided_off(owner, k * bsize, bsize);
        uint64_t b = pattern_check(buf + k * bsize, bsize, FILE_SEED, off, &f);
        if (b && !bad)
            first = f;
        bad += b;
    }
    if (bad)
        errmsg("%s: %s of rank %d's blocks: %" PRIu64 " bad bytes, first at file offset %" PRIu64,
               g_path, what, owner, bad, first);
    g_mismatches += bad;
}

static void expect_count(MPI_Status *s, uint64_t want, const char *what)
{
    int n = -1;
    MPI_Get_count(s, MPI_BYTE, &n);
    if ((uint64_t)n != want) {
        errmsg("%s: %s moved %d bytes, expected %" PRIu64, g_path, what, n, want);
        g_errors++;
    }
}

/* Rank 0: size and CRC-32 of the finished file via plain POSIX calls. */
static void posix_crc(uint64_t expect_size)
{
    int fd = open(g_path, O_RDONLY);
    if (fd < 0) {
        syserr("open", g_path);
        g_errors++;
        return;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        syserr("fstat", g_path);
        g_errors++;
    } else if ((uint64_t)sb.st_size != expect_size) {
        errmsg("%s: size %lld, expected %" PRIu64, g_path, (long long)sb.st_size, expect_size);
        g_errors++;
    }
    static unsigned char buf[1 << 16];
    uint32_t crc = 0;
    uint64_t total = 0, first = 0, bad = 0;
    ssize_t n;
    while ((n = read_full(fd, buf, sizeof buf, g_path)) > 0) {
        uint64_t f = 0, b = pattern_check(buf, (size_t)n, FILE_SEED, total, &f);
        if (b && !bad)
            first = f;
        bad += b;
        crc = crc32_update(crc, buf, (size_t)n);
        total += (uint64_t)n;
    }
    if (n < 0)
        g_errors++;
    if (bad)
        errmsg("%s: POSIX re-read: %" PRIu64 " bad bytes, first at offset %" PRIu64, g_path,
               bad, first);
    g_mismatches += bad;
    close(fd);
    printf("mpiio_shared: %s ranks=%d size=%" PRIu64 " crc32=%08x\n", g_path, g_nprocs, total,
           crc);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nprocs);
    prog_init(argv[0], g_rank);

    uint64_t blocks, bsize;
    int prc = parse_args(argc, argv, &blocks, &bsize);
    if (prc) {
        MPI_Finalize();
        return prc == 1 ? 0 : 2;
    }
    if (g_nprocs < 4 && g_rank == 0)
        errmsg("warning: running with %d ranks; the test is meant for 4 or more", g_nprocs);

    const uint64_t mine = blocks * bsize;              /* bytes per rank */
    const uint64_t fsize = mine * (uint64_t)g_nprocs;  /* whole file */
    const int nb = (int)blocks, bs = (int)bsize, len = (int)mine;
    unsigned char *buf = malloc(mine), *in = malloc(mine);
    if (!buf || !in)
        mpi_setup_fail("cannot allocate 2 x %" PRIu64 " bytes", mine);
    MPI_Datatype ftype = strided_type(nb, bs);
    MPI_File fh;
    MPI_Status s;

    /* 1. fresh file */
    if (g_rank == 0)
        MPI_File_delete(g_path, MPI_INFO_NULL); /* may not exist */
    MPI_Barrier(MPI_COMM_WORLD);
    mpi_check_setup(MPI_File_open(MPI_COMM_WORLD, g_path, MPI_MODE_CREATE | MPI_MODE_RDWR,
                                  MPI_INFO_NULL, &fh),
                    "MPI_File_open", g_path);

    /* 2. strided collective write */
    check(MPI_File_set_view(fh, (MPI_Offset)g_rank * bs, MPI_BYTE, ftype, "native",
                            MPI_INFO_NULL),
          "MPI_File_set_view(strided)");
    fill_owned(buf, g_rank, blocks, bsize);
    check(MPI_File_write_all(fh, buf, len, MPI_BYTE, &s), "MPI_File_write_all");
    expect_count(&s, mine, "MPI_File_write_all");

    /* 3. sync-barrier-sync, then collective read-back of own and neighbour's blocks */
    check(MPI_File_sync(fh), "MPI_File_sync");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_sync(fh), "MPI_File_sync");

    memset(in, 0, mine);
    check(MPI_File_read_at_all(fh, 0, in, len, MPI_BYTE, &s), "MPI_File_read_at_all(own)");
    expect_count(&s, mine, "MPI_File_read_at_all(own)");
    verify_owned(in, g_rank, blocks, bsize, "collective read-back");

    int next = (g_rank + 1) % g_nprocs;
    check(MPI_File_set_view(fh, (MPI_Offset)next * bs, MPI_BYTE, ftype, "native",
                            MPI_INFO_NULL),
          "MPI_File_set_view(neighbour)");
    memset(in, 0, mine);
    check(MPI_File_read_all(fh, in, len, MPI_BYTE, &s), "MPI_File_read_all(neighbour)");
    expect_count(&s, mine, "MPI_File_read_all(neighbour)");
    verify_owned(in, next, blocks, bsize, "collective read");

    /* 4. flat view, independent contiguous reads across writer boundaries */
    check(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL),
          "MPI_File_set_view(flat)");
    MPI_Offset fs = -1;
    check(MPI_File_get_size(fh, &fs), "MPI_File_get_size");
    if ((uint64_t)fs != fsize) {
        errmsg("%s: MPI_File_get_size = %lld, expected %" PRIu64, g_path, (long long)fs, fsize);
        g_errors++;
    }
    uint64_t slice_off = (uint64_t)g_rank * mine + bsize / 2; /* unaligned start */
    uint64_t slice_len = slice_off + mine <= fsize ? mine : fsize - slice_off;
    memset(in, 0, mine);
    check(MPI_File_read_at(fh, (MPI_Offset)slice_off, in, (int)slice_len, MPI_BYTE, &s),
          "MPI_File_read_at");
    expect_count(&s, slice_len, "MPI_File_read_at");
    uint64_t first = 0, bad = pattern_check(in, slice_len, FILE_SEED, slice_off, &first);
    if (bad)
        errmsg("%s: independent read at %" PRIu64 ": %" PRIu64 " bad bytes, first at %" PRIu64,
               g_path, slice_off, bad, first);
    g_mismatches += bad;

    check(MPI_File_close(&fh), "MPI_File_close");
    MPI_Type_free(&ftype);

    /* 5. whole-file fingerprint with POSIX calls */
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0)
        posix_crc(fsize);

    unsigned long long errs = mpi_sum_u64(g_errors), mism = mpi_sum_u64(g_mismatches);
    if (g_rank == 0)
        printf("mpiio_shared: ranks=%d blocks=%" PRIu64 " block_size=%" PRIu64
               " mismatches=%llu errors=%llu %s\n",
               g_nprocs, blocks, bsize, mism, errs, errs || mism ? "FAILED" : "OK");
    free(buf);
    free(in);
    MPI_Finalize();
    return errs || mism ? 1 : 0;
}
