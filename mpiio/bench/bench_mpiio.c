/* IOR-, Tile-IO- and FLASH-IO-like collective kernels and the Build-IO
 * individual kernel, each variant measured from open to close.
 *
 * Usage: bench_mpiio PATTERN FILE MIB_PER_RANK REPS VARIANT...
 *   PATTERN  ior     one contiguous block per rank (transfer = block, segment 1)
 *            tile    2-D tiles of 256-byte elements on a sqrt-ish process grid
 *            flash   3-D blocks (16^3 cells, 2 guard cells) of 24 double
 *                    variables, variable-major in the file, cell-interleaved
 *                    in memory
 *            blocks:B  B-byte blocks of the ranks interleaved round-robin
 *                    (where two-phase and direct access cross over)
 *            buildio:E  individual MPI_File_write_at of a strided buffer:
 *                    E-byte elements each followed by a 4-byte gap, into a
 *                    contiguous view (the Build-IO micro-benchmark of [Feki22, ch. 4])
 *   VARIANT  LABEL[:KEY=VALUE,...]  MPI_Info hints given at open; the label
 *            is only printed. "surge_mpiio=disable" measures the MPI library's
 *            own MPI-IO in the same process.
 *
 * Every repetition runs every variant once, in turn, so that variants see the
 * same machine conditions (the machine is shared and noisy); the caller pairs
 * them. Rank 0 prints "<label> <pattern> <write|read> <seconds> <bytes>". */
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
    int individual; /* 1: MPI_File_write_at/read_at instead of the collective calls */
    MPI_Offset offset;
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

static void blocks(layout *l, long bytes, int block)
{
    MPI_Datatype one;
    MPI_Type_contiguous(block, MPI_BYTE, &one);
    MPI_Type_create_resized(one, 0, (MPI_Aint)block * nprocs, &l->filetype);
    MPI_Type_commit(&l->filetype);
    MPI_Type_free(&one);
    l->disp = (MPI_Offset)rank * block;
    l->memtype = MPI_BYTE;
    l->count = (int)bytes;
    l->mem_bytes = (size_t)bytes;
    l->data_bytes = bytes;
}

/* Build-IO: the buffer holds esz-byte elements each followed by a 4-byte
 * gap (count n of an esz-byte type resized to esz + 4, the same layout as
 * MPI_Type_vector(n, esz, esz + 4, MPI_BYTE)), so the io array has one entry
 * per element; the file side is one block. */
static void buildio(layout *l, long bytes, int esz)
{
    long n = bytes / esz;
    MPI_Datatype elem;
    MPI_Type_contiguous(esz, MPI_BYTE, &elem);
    MPI_Type_create_resized(elem, 0, esz + 4, &l->memtype);
    MPI_Type_commit(&l->memtype);
    MPI_Type_free(&elem);
    l->filetype = MPI_BYTE;
    l->disp = 0;
    l->offset = (MPI_Offset)rank * n * esz;
    l->count = (int)n;
    l->mem_bytes = (size_t)n * (size_t)(esz + 4);
    l->data_bytes = n * esz;
    l->individual = 1;
}

/* "label:k=v,k=v" -> label (in place) and an MPI_Info with the hints. */
static MPI_Info parse_variant(char *spec)
{
    MPI_Info info;
    MPI_Info_create(&info);
    char *hints = strchr(spec, ':');
    if (!hints)
        return info;
    *hints++ = '\0';
    for (char *kv = strtok(hints, ","); kv; kv = strtok(NULL, ",")) {
        char *eq = strchr(kv, '=');
        if (eq) {
            *eq = '\0';
            MPI_Info_set(info, kv, eq + 1);
        }
    }
    return info;
}

static int access_data(MPI_File fh, const layout *l, char *buf, int write)
{
    if (l->individual)
        return write ? MPI_File_write_at(fh, l->offset, buf, l->count, l->memtype,
                                         MPI_STATUS_IGNORE)
                     : MPI_File_read_at(fh, l->offset, buf, l->count, l->memtype,
                                        MPI_STATUS_IGNORE);
    return write ? MPI_File_write_all(fh, buf, l->count, l->memtype, MPI_STATUS_IGNORE)
                 : MPI_File_read_all(fh, buf, l->count, l->memtype, MPI_STATUS_IGNORE);
}

/* Slowest rank's open-excluded time of access + close. */
static double measure(const char *path, MPI_Info info, const layout *l, char *buf, int write)
{
    MPI_File fh;
    if (write && rank == 0)
        MPI_File_delete(path, MPI_INFO_NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_open(MPI_COMM_WORLD, path, write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY,
                  info, &fh);
    MPI_File_set_view(fh, l->disp, MPI_BYTE, l->filetype, "native", MPI_INFO_NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    int rc = access_data(fh, l, buf, write);
    MPI_File_close(&fh); /* part of the measured time, as in IOR */
    double mine = MPI_Wtime() - t, slowest;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 3);
    return slowest;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 6) {
        if (rank == 0)
            fprintf(stderr, "usage: %s ior|tile|flash|blocks:B|buildio:E FILE MIB_PER_RANK REPS "
                            "LABEL[:KEY=VALUE,...]...\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *pattern = argv[1], *path = argv[2];
    long bytes = atol(argv[3]) << 20;
    int reps = atoi(argv[4]), nvariants = argc - 5;
    char **labels = argv + 5;
    MPI_Info *infos = malloc(sizeof(MPI_Info) * (size_t)nvariants);
    for (int v = 0; v < nvariants; v++)
        infos[v] = parse_variant(labels[v]);
    layout l;
    memset(&l, 0, sizeof l);
    if (!strcmp(pattern, "ior"))
        ior(&l, bytes);
    else if (!strcmp(pattern, "tile"))
        tile(&l, bytes);
    else if (!strcmp(pattern, "flash"))
        flash(&l, bytes);
    else if (!strncmp(pattern, "blocks:", 7))
        blocks(&l, bytes, atoi(pattern + 7));
    else if (!strncmp(pattern, "buildio:", 8))
        buildio(&l, bytes, atoi(pattern + 8));
    else
        MPI_Abort(MPI_COMM_WORLD, 2);
    char *buf = malloc(l.mem_bytes);
    for (size_t i = 0; i < l.mem_bytes; i++)
        buf[i] = (char)(i * 7 + rank);
    long total;
    MPI_Allreduce(&l.data_bytes, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    /* Repetition -1 warms up (first touch of the buffer, components loaded on
     * first use) and is not printed; odd repetitions run the variants in
     * reverse, so that no variant always follows the same one. */
    for (int r = -1; r < reps; r++)
        for (int i = 0; i < nvariants; i++) {
            int v = r % 2 ? nvariants - 1 - i : i;
            for (int write = 1; write >= 0; write--) {
                double t = measure(path, infos[v], &l, buf, write);
                if (rank == 0 && r >= 0)
                    printf("%s %s %s %.6f %ld\n", labels[v], pattern,
                           write ? "write" : "read", t, total);
            }
        }
    if (rank == 0)
        MPI_File_delete(path, MPI_INFO_NULL);
    for (int v = 0; v < nvariants; v++)
        MPI_Info_free(&infos[v]);
    free(infos);
    free(buf);
    MPI_Finalize();
    return 0;
}
