/* IOR-, Tile-IO- and FLASH-IO-like collective I/O kernels. Prints one line
 * per repetition: "<pattern> <write|read> <seconds> <bytes>" (rank 0).
 * Usage: bench_mpiio PATTERN FILE MIB_PER_RANK REPS
 *   ior   : one contiguous block per rank (transfer = block, segment 1)
 *   tile  : 2-D tiles of 256-byte elements on a sqrt-ish process grid
 *   flash : 3-D blocks (16^3 cells, 2 guard cells) of 24 double variables,
 *           variable-major in the file, cell-interleaved in memory */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    MPI_Offset disp;
    MPI_Datatype filetype, memtype;
    int count;
    size_t mem_bytes;
    long data_bytes;
} layout;

static int rank, nprocs;

static void ior(layout *l, long bytes)
{
    l->disp = (MPI_Offset)rank * bytes;
    l->filetype = MPI_BYTE;
    l->memtype = MPI_BYTE;
    l->count = (int)bytes;
    l->mem_bytes = (size_t)bytes;
    l->data_bytes = bytes;
}

static void tile(layout *l, long bytes)
{
    const int esz = 256;
    int dims[2] = {0, 0};
    MPI_Dims_create(nprocs, 2, dims);
    int ty = 1;
    while ((long)(ty * 2) * (ty * 2) * esz <= bytes)
        ty *= 2;
    int tx = (int)(bytes / esz / ty); /* tile of ty rows x tx elements */
    int sizes[2] = {dims[0] * ty, dims[1] * tx}, sub[2] = {ty, tx};
    int start[2] = {(rank / dims[1]) * ty, (rank % dims[1]) * tx};
    MPI_Datatype elem;
    MPI_Type_contiguous(esz, MPI_BYTE, &elem);
    MPI_Type_create_subarray(2, sizes, sub, start, MPI_ORDER_C, elem, &l->filetype);
    MPI_Type_commit(&l->filetype);
    MPI_Type_free(&elem);
    l->disp = 0;
    l->memtype = MPI_BYTE;
    l->count = tx * ty * esz;
    l->mem_bytes = (size_t)l->count;
    l->data_bytes = l->count;
}

static void flash(layout *l, long bytes)
{
    enum { NVAR = 24, NXB = 16, NG = 2 };
    const int cells = NXB * NXB * NXB, full = NXB + 2 * NG;
    int nb = (int)(bytes / ((long)cells * NVAR * 8));
    if (nb < 1)
        nb = 1;
    /* memory: unk(NVAR, full, full, full, nb) in Fortran order */
    int sizes[5] = {NVAR, full, full, full, nb}, sub[5] = {1, NXB, NXB, NXB, nb};
    MPI_Datatype vars[NVAR], fblocks;
    int ones[NVAR];
    MPI_Aint zeros[NVAR], fdisp[NVAR];
    for (int v = 0; v < NVAR; v++) {
        int start[5] = {v, NG, NG, NG, 0};
        MPI_Type_create_subarray(5, sizes, sub, start, MPI_ORDER_FORTRAN, MPI_DOUBLE, &vars[v]);
        ones[v] = cells * nb;
        zeros[v] = 0;
        /* file: one dataset per variable, blocks of all ranks in rank order */
        fdisp[v] = ((MPI_Aint)v * nprocs + rank) * cells * nb * 8;
    }
    int one[NVAR];
    for (int v = 0; v < NVAR; v++)
        one[v] = 1;
    MPI_Type_create_struct(NVAR, one, zeros, vars, &l->memtype);
    MPI_Type_commit(&l->memtype);
    for (int v = 0; v < NVAR; v++)
        MPI_Type_free(&vars[v]);
    MPI_Type_create_hindexed(NVAR, ones, fdisp, MPI_DOUBLE, &fblocks);
    MPI_Type_create_resized(fblocks, 0, (MPI_Aint)NVAR * nprocs * cells * nb * 8, &l->filetype);
    MPI_Type_commit(&l->filetype);
    MPI_Type_free(&fblocks);
    l->disp = 0;
    l->count = 1;
    l->mem_bytes = (size_t)NVAR * full * full * full * nb * 8;
    l->data_bytes = (long)NVAR * cells * nb * 8;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 5) {
        if (rank == 0)
            fprintf(stderr, "usage: %s ior|tile|flash FILE MIB_PER_RANK REPS\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *pattern = argv[1], *path = argv[2];
    long bytes = atol(argv[3]) << 20;
    int reps = atoi(argv[4]);
    layout l;
    if (!strcmp(pattern, "ior"))
        ior(&l, bytes);
    else if (!strcmp(pattern, "tile"))
        tile(&l, bytes);
    else
        flash(&l, bytes);
    char *buf = malloc(l.mem_bytes);
    for (size_t i = 0; i < l.mem_bytes; i++)
        buf[i] = (char)(i * 7 + rank);
    long total;
    MPI_Allreduce(&l.data_bytes, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int r = 0; r < reps; r++) {
        for (int write = 1; write >= 0; write--) {
            MPI_File fh;
            if (write && rank == 0)
                MPI_File_delete(path, MPI_INFO_NULL);
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_File_open(MPI_COMM_WORLD, path,
                          write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY,
                          MPI_INFO_NULL, &fh);
            MPI_File_set_view(fh, l.disp, MPI_BYTE, l.filetype, "native", MPI_INFO_NULL);
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            int rc = write ? MPI_File_write_all(fh, buf, l.count, l.memtype, MPI_STATUS_IGNORE)
                           : MPI_File_read_all(fh, buf, l.count, l.memtype, MPI_STATUS_IGNORE);
            MPI_File_close(&fh); /* part of the measured time, as in IOR */
            double mine = MPI_Wtime() - t, slowest;
            MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rc != MPI_SUCCESS)
                MPI_Abort(MPI_COMM_WORLD, 3);
            if (rank == 0)
                printf("%s %s %.6f %ld\n", pattern, write ? "write" : "read", slowest, total);
        }
    }
    if (rank == 0)
        MPI_File_delete(path, MPI_INFO_NULL);
    free(buf);
    MPI_Finalize();
    return 0;
}
