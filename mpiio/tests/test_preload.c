/* An ordinary MPI-IO program, not linked with libsurge_mpiio. Run under
 * LD_PRELOAD it must be intercepted (surge hints appear in get_info) and
 * still write and read correctly. Usage: test_preload FILE EXPECT(0|1) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, nprocs, n = 1 << 16;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 3)
        MPI_Abort(MPI_COMM_WORLD, 2);
    int expect = atoi(argv[2]);
    MPI_File fh;
    MPI_Info info;
    MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    MPI_File_get_info(fh, &info);
    char v[MPI_MAX_INFO_VAL + 1];
    int intercepted;
    MPI_Info_get(info, "surge_algorithm", MPI_MAX_INFO_VAL, v, &intercepted);
    MPI_Info_free(&info);
    int *out = malloc(sizeof(int) * (size_t)n), *in = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        out[i] = rank * n + i;
    MPI_File_write_at_all(fh, (MPI_Offset)rank * n * 4, out, n, MPI_INT, MPI_STATUS_IGNORE);
    MPI_File_read_at_all(fh, (MPI_Offset)((rank + 1) % nprocs) * n * 4, in, n, MPI_INT,
                         MPI_STATUS_IGNORE);
    int ok = (intercepted != 0) == (expect != 0), all;
    for (int i = 0; i < n; i++)
        ok &= in[i] == ((rank + 1) % nprocs) * n + i;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s test_preload: intercepted=%d expected=%d\n", all ? "ok  " : "FAIL",
               intercepted != 0, expect);
    MPI_File_close(&fh);
    free(out);
    free(in);
    MPI_Finalize();
    return all ? 0 : 1;
}
