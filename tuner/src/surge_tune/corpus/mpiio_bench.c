/* MPI-IO workload for the Surge tuner corpus: every rank writes COUNT blocks of XFER bytes, to one shared
 * file (blocks interleaved across ranks: offset = (i * nprocs + rank) * xfer, the pattern where collective
 * buffering matters) or to one file per rank (sequential). Independent (write_at) or collective
 * (write_at_all). Each rank reports its own open / write / close times; rank 0 prints one JSON line per
 * rank on stdout.
 *
 * usage: mpiio_bench PATH XFER COUNT shared|fpp indep|coll [HINT=VALUE ...]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nprocs;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 6) {
        if (rank == 0) fprintf(stderr, "usage: %s PATH XFER COUNT shared|fpp indep|coll [HINT=VALUE ...]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *path = argv[1];
    long long xfer = atoll(argv[2]), count = atoll(argv[3]);
    int shared = strcmp(argv[4], "shared") == 0, coll = strcmp(argv[5], "coll") == 0;

    MPI_Info info;
    MPI_Info_create(&info);
    for (int i = 6; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq) { *eq = '\0'; MPI_Info_set(info, argv[i], eq + 1); }
    }
    char name[4096];
    if (shared) snprintf(name, sizeof name, "%s", path);
    else snprintf(name, sizeof name, "%s.%d", path, rank);
    char *buf = malloc(xfer);
    memset(buf, 'a' + rank % 26, xfer);

    MPI_File fh;
    MPI_Comm comm = shared ? MPI_COMM_WORLD : MPI_COMM_SELF;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (MPI_File_open(comm, name, MPI_MODE_CREATE | MPI_MODE_WRONLY, info, &fh) != MPI_SUCCESS) {
        fprintf(stderr, "rank %d: cannot open %s\n", rank, name);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double t1 = MPI_Wtime();
    for (long long i = 0; i < count; i++) {
        MPI_Offset off = shared ? (MPI_Offset)((i * nprocs + rank) * xfer) : (MPI_Offset)(i * xfer);
        int rc = coll ? MPI_File_write_at_all(fh, off, buf, (int)xfer, MPI_BYTE, MPI_STATUS_IGNORE)
                      : MPI_File_write_at(fh, off, buf, (int)xfer, MPI_BYTE, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_File_sync(fh);
    double t2 = MPI_Wtime();
    MPI_File_close(&fh);
    double t3 = MPI_Wtime();

    double mine[4] = {t1 - t0, t2 - t1, t3 - t2, t0};
    double *all = rank == 0 ? malloc(sizeof mine * nprocs) : NULL;
    MPI_Gather(mine, 4, MPI_DOUBLE, all, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 0; r < nprocs; r++)
            printf("{\"rank\": %d, \"open_s\": %.9f, \"write_s\": %.9f, \"close_s\": %.9f, \"start_s\": %.9f, "
                   "\"ops\": %lld, \"bytes\": %lld}\n",
                   r, all[4 * r], all[4 * r + 1], all[4 * r + 2], all[4 * r + 3] - all[3], count, count * xfer);
        free(all);
    }
    free(buf);
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}
