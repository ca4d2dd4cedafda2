/* The accuracy benchmark's workload: one MPI program, a clean I/O phase by default, and one flag per
 * injected pathology (surge_tune/accuracy/suite.py compiles it with mpicc and runs it through
 * `surge run`).
 *
 *   pathologies DIR [--MIB N] [--shared | --interleaved | FLAG]
 *
 * Clean shapes (controls):
 *   (none)         each rank writes DIR/rank.<r>, N MiB in 1 MiB sequential writes
 *   --shared       every rank writes its own contiguous N MiB of DIR/shared in 1 MiB writes
 *   --interleaved  ranks write 64 KiB blocks of DIR/shared interleaved, collectively (MPI_File_write_at_all)
 * Pathologies:
 *   --tiny         file per rank in 1 KiB writes (N/8 MiB, so the run stays short)
 *   --fsync        file per rank in 128 KiB writes, each followed by fsync
 *   --one-rank     the ranks send their data to rank 0, which writes all of it to DIR/gathered
 *   --random       file per rank in 128 KiB writes at shuffled offsets
 *   --many-files   each rank creates N*8 files of 128 KiB in DIR
 *   --independent  the --interleaved pattern with independent MPI_File_write_at
 *   --unaligned    file per rank, 2N MiB in 192 KiB writes shifted by one byte: none starts on a stripe
 * The one-stripe pathology is --shared on a directory whose layout has one stripe (set by the suite).
 */
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KIB 1024L
#define MIB (1024L * 1024L)

static void die(const char *what, const char *path) {
    fprintf(stderr, "pathologies: %s %s\n", what, path);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int open_for_writing(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("cannot create", path);
    return fd;
}

static void put(int fd, const char *buf, long len, long offset, const char *path) {
    if (pwrite(fd, buf, (size_t)len, (off_t)offset) != len) die("short write to", path);
}

/* A file of `bytes` in `xfer` writes; offsets shuffled when `shuffle`, shifted by `shift` bytes, and an
 * fsync after each write when `sync_each`. */
static void write_file(const char *path, const char *buf, long bytes, long xfer, long shift, int shuffle,
                       int sync_each, unsigned seed) {
    long n = bytes / xfer;
    long *order = malloc(sizeof(long) * (size_t)n);
    for (long i = 0; i < n; i++) order[i] = i;
    srand(seed);
    for (long i = n - 1; shuffle && i > 0; i--) {
        long j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int fd = open_for_writing(path);
    for (long i = 0; i < n; i++) {
        put(fd, buf, xfer, order[i] * xfer + shift, path);
        if (sync_each && fsync(fd) != 0) die("fsync failed on", path);
    }
    close(fd);
    free(order);
}

static void interleaved(const char *dir, const char *buf, long bytes, int rank, int nprocs, int collective) {
    char path[4096];
    snprintf(path, sizeof path, "%s/shared", dir);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_WRONLY | MPI_MODE_CREATE, MPI_INFO_NULL, &fh))
        die("MPI_File_open failed on", path);
    long block = 64 * KIB;
    for (long i = 0; i < bytes / block; i++) {
        MPI_Offset at = (MPI_Offset)((i * nprocs + rank) * block);
        int err = collective ? MPI_File_write_at_all(fh, at, buf, (int)block, MPI_BYTE, MPI_STATUS_IGNORE)
                             : MPI_File_write_at(fh, at, buf, (int)block, MPI_BYTE, MPI_STATUS_IGNORE);
        if (err) die("MPI-IO write failed on", path);
    }
    MPI_File_close(&fh);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nprocs;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2) die("usage: pathologies DIR [--MIB N] [--shared|--interleaved|FLAG]", "");
    const char *dir = argv[1], *mode = "";
    long mib = 16;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--MIB") && i + 1 < argc)
            mib = atol(argv[++i]);
        else
            mode = argv[i];
    }
    long bytes = mib * MIB;
    char *buf = malloc((size_t)bytes + 2 * MIB);
    memset(buf, 'a' + rank % 26, (size_t)bytes + 2 * MIB);
    char path[4096];
    snprintf(path, sizeof path, "%s/rank.%d", dir, rank);
    double t0 = MPI_Wtime();

    if (!strcmp(mode, "")) {
        write_file(path, buf, bytes, MIB, 0, 0, 0, 0);
    } else if (!strcmp(mode, "--shared")) {
        snprintf(path, sizeof path, "%s/shared", dir);
        int fd = open(path, O_WRONLY | O_CREAT, 0644);
        if (fd < 0) die("cannot open", path);
        for (long off = 0; off < bytes; off += MIB) put(fd, buf, MIB, rank * bytes + off, path);
        close(fd);
    } else if (!strcmp(mode, "--interleaved") || !strcmp(mode, "--independent")) {
        interleaved(dir, buf, bytes, rank, nprocs, !strcmp(mode, "--interleaved"));
    } else if (!strcmp(mode, "--tiny")) {
        write_file(path, buf, bytes / 8, KIB, 0, 0, 0, 0);
    } else if (!strcmp(mode, "--fsync")) {
        write_file(path, buf, bytes, 128 * KIB, 0, 0, 1, 0);
    } else if (!strcmp(mode, "--random")) {
        write_file(path, buf, bytes, 128 * KIB, 0, 1, 0, (unsigned)rank + 1);
    } else if (!strcmp(mode, "--unaligned")) {
        write_file(path, buf, 2 * bytes, 192 * KIB, 1, 0, 0, 0);
    } else if (!strcmp(mode, "--many-files")) {
        for (long i = 0; i < mib * 8; i++) {
            snprintf(path, sizeof path, "%s/small.%d.%ld", dir, rank, i);
            write_file(path, buf, 128 * KIB, 128 * KIB, 0, 0, 0, 0);
        }
    } else if (!strcmp(mode, "--one-rank")) {
        char *all = rank == 0 ? malloc((size_t)(bytes * nprocs)) : NULL;
        MPI_Gather(buf, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            snprintf(path, sizeof path, "%s/gathered", dir);
            write_file(path, all, bytes * nprocs, MIB, 0, 0, 0, 0);
            free(all);
        }
    } else {
        die("unknown flag", mode);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("%s %s: %.3f s\n", argv[0], mode[0] ? mode : "(clean)", MPI_Wtime() - t0);
    free(buf);
    MPI_Finalize();
    return 0;
}
