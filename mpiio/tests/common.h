/* Shared helpers for the libsurge_mpiio test programs. */
#ifndef SURGE_TEST_COMMON_H
#define SURGE_TEST_COMMON_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng_state;

static inline void rng_seed(uint64_t s) { rng_state = s * 0x9E3779B97F4A7C15ull + 1; }

static inline uint64_t rng_next(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static inline int rnd(int lo, int hi) { return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1)); }

/* MPI_Init, or MPI_Init_thread(MPI_THREAD_MULTIPLE) when TEST_THREAD_MULTIPLE
 * is set: nonblocking and split calls then run in the library's progress
 * thread instead of eagerly. */
static inline void test_init(int *argc, char ***argv)
{
    if (!getenv("TEST_THREAD_MULTIPLE")) {
        MPI_Init(argc, argv);
        return;
    }
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "MPI_THREAD_MULTIPLE not provided\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* Reads a whole file; *len receives its size. */
static inline char *slurp(const char *path, long *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        *len = -1;
        return NULL;
    }
    fseek(fp, 0, SEEK_END);
    *len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)*len + 1);
    if (fread(b, 1, (size_t)*len, fp) != (size_t)*len)
        *len = -1;
    fclose(fp);
    return b;
}

/* Rank 0 compares two files byte by byte; the verdict is broadcast. */
static inline int files_equal(const char *a, const char *b, MPI_Comm comm, char *why, size_t n)
{
    int rank, same = 1;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0) {
        long la, lb;
        char *x = slurp(a, &la), *y = slurp(b, &lb);
        if (la != lb) {
            snprintf(why, n, "sizes differ: %ld vs %ld", la, lb);
            same = 0;
        } else {
            for (long i = 0; i < la; i++)
                if (x[i] != y[i]) {
                    snprintf(why, n, "first difference at byte %ld of %ld", i, la);
                    same = 0;
                    break;
                }
        }
        free(x);
        free(y);
    }
    MPI_Bcast(&same, 1, MPI_INT, 0, comm);
    return same;
}

/* Rank 0 recreates the file holding `size` bytes of a background pattern.
 * Tests write into such files because holes in a view must keep the old
 * bytes; on a fresh file, ROMIO and OMPIO's data sieving leave stale buffer
 * contents in holes past end of file, which is not a defined result. */
static inline void prepare_file(const char *path, long size, MPI_Comm comm)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0) {
        unlink(path);
        FILE *fp = fopen(path, "wb");
        for (long i = 0; i < size; i++)
            fputc((int)((i * 13 + 5) & 0xff), fp);
        fclose(fp);
    }
    MPI_Barrier(comm);
}

#endif
