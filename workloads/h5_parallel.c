/*
 * h5_parallel.c - parallel HDF5 through the MPI-IO VFD (MPI, build with h5pcc).
 *
 * Exercises:
 *   - H5Pset_fapl_mpio + H5Fcreate(H5F_ACC_TRUNC) of FILE by all ranks;
 *   - a 2-D dataset "/data" of doubles, P*R rows x C columns, contiguous
 *     layout, object time tracking disabled (H5Pset_obj_track_times 0 on the
 *     file's root group and on the dataset) so the file is byte-identical for
 *     identical arguments and rank count;
 *   - each rank writes its R rows as a hyperslab with a collective transfer
 *     (H5Pset_dxpl_mpio H5FD_MPIO_COLLECTIVE);
 *   - two attributes on the dataset (int[3] "decomposition", string "creator");
 *   - close, reopen H5F_ACC_RDONLY through the MPI-IO VFD, check dims and
 *     attributes, read back collectively the rank's own rows and its
 *     neighbour's rows (data written by another process) and verify.
 *
 * Values are a pure function of (row, col), so no copy is kept.
 * Usage: h5_parallel FILE [--rows-per-rank R] [--cols C]
 * Exit status: 0 success; 1 data mismatch; 2 usage.  A failing HDF5 call
 * prints the HDF5 error stack plus a line naming the call and FILE, then
 * MPI_Aborts (the collective calls that follow could not be matched safely).
 */
#include "common.h"
#include "common_mpi.h"

#include <getopt.h>
#include <hdf5.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DSET "data"
#define CREATOR "surge workloads h5_parallel v1"

static int g_rank, g_nprocs;
static const char *g_path;

/* HDF5 returns negative ids/herr_t on failure and has already printed its
 * error stack; add our context and abort. */
static hid_t h5chk(hid_t v, const char *expr, int line)
{
    if (v < 0)
        mpi_setup_fail("%s failed for %s (line %d; HDF5 error stack above)", expr, g_path, line);
    return v;
}
#define H5CHK(expr) h5chk((hid_t)(expr), #expr, __LINE__)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np P h5_parallel FILE [--rows-per-rank R] [--cols C]\n"
            "  FILE               HDF5 file to create (overwritten)\n"
            "  --rows-per-rank R  dataset rows written by each rank (default 64)\n"
            "  --cols C           dataset columns (default 512)\n"
            "  -h, --help         this message\n");
}

static int parse_args(int argc, char **argv, uint64_t *rows, uint64_t *cols)
{
    static const struct option opts[2] = {{"rows-per-rank", required_argument, 0, 'r'},
                                          {"cols", required_argument, 0, 'c'}};
    *rows = 64;
    *cols = 512;
    int rc = mpi_parse_path_and_sizes(argc, argv, opts, (uint64_t *[2]){rows, cols}, 1u << 24, usage, &g_path);
    if (rc)
        return rc;
    if (*rows * *cols * sizeof(double) > INT_MAX) {
        if (g_rank == 0) errmsg("--rows-per-rank x --cols x 8 must be < 2 GiB");
        return 2;
    }
    return 0;
}

/* Deterministic, finite value for element (row, col): row + a fraction in
 * [0,1) taken from the 53 top bits of a hash. */
static double value_at(uint64_t row, uint64_t col, uint64_t cols)
{
    uint64_t w = pattern_word(0x4835ULL, row * cols + col);
    return (double)row + (double)(w >> 11) * (1.0 / 9007199254740992.0);
}

static void fill_rows(double *buf, uint64_t row0, uint64_t rows, uint64_t cols)
{
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++)
            buf[r * cols + c] = value_at(row0 + r, c, cols);
}

static uint64_t check_rows(const double *buf, uint64_t row0, uint64_t rows, uint64_t cols,
                           const char *what)
{
    uint64_t bad = 0;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++) {
            double want = value_at(row0 + r, c, cols);
            if (memcmp(&buf[r * cols + c], &want, sizeof want) != 0 && bad++ == 0)
                errmsg("%s: %s: element [%" PRIu64 "][%" PRIu64 "] = %.17g, expected %.17g",
                       g_path, what, row0 + r, c, buf[r * cols + c], want);
        }
    if (bad)
        errmsg("%s: %s: %" PRIu64 " bad elements in rows %" PRIu64 "..%" PRIu64, g_path, what,
               bad, row0, row0 + rows - 1);
    return bad;
}

static hid_t mpio_fapl(void)
{
    hid_t fapl = H5CHK(H5Pcreate(H5P_FILE_ACCESS));
    H5CHK(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    return fapl;
}

static hid_t collective_dxpl(void)
{
    hid_t dxpl = H5CHK(H5Pcreate(H5P_DATASET_XFER));
    H5CHK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    return dxpl;
}

/* Select rows [row0, row0+rows) of the file dataspace of dset. */
static hid_t row_slab(hid_t dset, uint64_t row0, uint64_t rows, uint64_t cols)
{
    hid_t space = H5CHK(H5Dget_space(dset));
    hsize_t start[2] = {row0, 0}, count[2] = {rows, cols};
    H5CHK(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL));
    return space;
}

static void write_attrs(hid_t dset, uint64_t rows, uint64_t cols)
{
    /* attribute writes are collective metadata ops: every rank passes the same data */
    int decomp[3] = {g_nprocs, (int)rows, (int)cols};
    hsize_t three = 3;
    hid_t sp = H5CHK(H5Screate_simple(1, &three, NULL));
    hid_t a = H5CHK(H5Acreate2(dset, "decomposition", H5T_STD_I32LE, sp, H5P_DEFAULT,
                               H5P_DEFAULT));
    H5CHK(H5Awrite(a, H5T_NATIVE_INT, decomp));
    H5CHK(H5Aclose(a));
    H5CHK(H5Sclose(sp));

    hid_t st = H5CHK(H5Tcopy(H5T_C_S1));
    H5CHK(H5Tset_size(st, sizeof CREATOR));
    sp = H5CHK(H5Screate(H5S_SCALAR));
    a = H5CHK(H5Acreate2(dset, "creator", st, sp, H5P_DEFAULT, H5P_DEFAULT));
    H5CHK(H5Awrite(a, st, CREATOR));
    H5CHK(H5Aclose(a));
    H5CHK(H5Sclose(sp));
    H5CHK(H5Tclose(st));
}

static uint64_t check_attrs(hid_t dset, uint64_t rows, uint64_t cols)
{
    uint64_t bad = 0;
    int decomp[3] = {0, 0, 0};
    hid_t a = H5CHK(H5Aopen(dset, "decomposition", H5P_DEFAULT));
    H5CHK(H5Aread(a, H5T_NATIVE_INT, decomp));
    H5CHK(H5Aclose(a));
    if (decomp[0] != g_nprocs || (uint64_t)decomp[1] != rows || (uint64_t)decomp[2] != cols) {
        errmsg("%s: attribute decomposition = {%d,%d,%d}, expected {%d,%" PRIu64 ",%" PRIu64 "}",
               g_path, decomp[0], decomp[1], decomp[2], g_nprocs, rows, cols);
        bad++;
    }
    char s[sizeof CREATOR] = "";
    hid_t st = H5CHK(H5Tcopy(H5T_C_S1));
    H5CHK(H5Tset_size(st, sizeof CREATOR));
    a = H5CHK(H5Aopen(dset, "creator", H5P_DEFAULT));
    H5CHK(H5Aread(a, st, s));
    H5CHK(H5Aclose(a));
    H5CHK(H5Tclose(st));
    if (memcmp(s, CREATOR, sizeof CREATOR) != 0) {
        errmsg("%s: attribute creator = '%.*s', expected '%s'", g_path, (int)sizeof s, s, CREATOR);
        bad++;
    }
    return bad;
}

static void create_and_write(uint64_t rows, uint64_t cols, double *buf)
{
    hid_t fapl = mpio_fapl();
    hid_t fcpl = H5CHK(H5Pcreate(H5P_FILE_CREATE));
    H5CHK(H5Pset_obj_track_times(fcpl, 0)); /* root group: no timestamps */
    hid_t file = H5CHK(H5Fcreate(g_path, H5F_ACC_TRUNC, fcpl, fapl));

    hsize_t dims[2] = {rows * (uint64_t)g_nprocs, cols};
    hid_t fspace = H5CHK(H5Screate_simple(2, dims, NULL));
    hid_t dcpl = H5CHK(H5Pcreate(H5P_DATASET_CREATE));
    H5CHK(H5Pset_obj_track_times(dcpl, 0));
    hid_t dset = H5CHK(H5Dcreate2(file, DSET, H5T_IEEE_F64LE, fspace, H5P_DEFAULT, dcpl,
                                  H5P_DEFAULT));

    uint64_t row0 = (uint64_t)g_rank * rows;
    fill_rows(buf, row0, rows, cols);
    hsize_t mdims[2] = {rows, cols};
    hid_t mspace = H5CHK(H5Screate_simple(2, mdims, NULL));
    hid_t slab = row_slab(dset, row0, rows, cols);
    hid_t dxpl = collective_dxpl();
    H5CHK(H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, slab, dxpl, buf));
    write_attrs(dset, rows, cols);

    H5CHK(H5Pclose(dxpl));
    H5CHK(H5Sclose(slab));
    H5CHK(H5Sclose(mspace));
    H5CHK(H5Dclose(dset));
    H5CHK(H5Pclose(dcpl));
    H5CHK(H5Sclose(fspace));
    H5CHK(H5Fclose(file));
    H5CHK(H5Pclose(fcpl));
    H5CHK(H5Pclose(fapl));
}

static uint64_t reopen_and_verify(uint64_t rows, uint64_t cols, double *buf)
{
    uint64_t bad = 0;
    hid_t fapl = mpio_fapl();
    hid_t file = H5CHK(H5Fopen(g_path, H5F_ACC_RDONLY, fapl));
    hid_t dset = H5CHK(H5Dopen2(file, DSET, H5P_DEFAULT));

    hid_t fspace = H5CHK(H5Dget_space(dset));
    hsize_t dims[2] = {0, 0};
    if (H5CHK(H5Sget_simple_extent_ndims(fspace)) != 2 ||
        H5CHK(H5Sget_simple_extent_dims(fspace, dims, NULL)) != 2 ||
        dims[0] != rows * (uint64_t)g_nprocs || dims[1] != cols) {
        errmsg("%s: dataset /%s has dims %llux%llu, expected %" PRIu64 "x%" PRIu64, g_path, DSET,
               (unsigned long long)dims[0], (unsigned long long)dims[1],
               rows * (uint64_t)g_nprocs, cols);
        bad++;
    }
    H5CHK(H5Sclose(fspace));
    bad += check_attrs(dset, rows, cols);

    hsize_t mdims[2] = {rows, cols};
    hid_t mspace = H5CHK(H5Screate_simple(2, mdims, NULL));
    hid_t dxpl = collective_dxpl();
    int owners[2] = {g_rank, (g_rank + 1) % g_nprocs}; /* own rows, then neighbour's */
    for (int i = 0; i < 2; i++) {
        uint64_t row0 = (uint64_t)owners[i] * rows;
        hid_t slab = row_slab(dset, row0, rows, cols);
        memset(buf, 0, rows * cols * sizeof *buf);
        H5CHK(H5Dread(dset, H5T_NATIVE_DOUBLE, mspace, slab, dxpl, buf));
        bad += check_rows(buf, row0, rows, cols, i == 0 ? "own rows" : "neighbour's rows");
        H5CHK(H5Sclose(slab));
    }
    H5CHK(H5Pclose(dxpl));
    H5CHK(H5Sclose(mspace));
    H5CHK(H5Dclose(dset));
    H5CHK(H5Fclose(file));
    H5CHK(H5Pclose(fapl));
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nprocs);
    prog_init(argv[0], g_rank);

    uint64_t rows, cols;
    int prc = parse_args(argc, argv, &rows, &cols);
    if (prc) {
        MPI_Finalize();
        return prc == 1 ? 0 : 2;
    }
    double *buf = malloc(rows * cols * sizeof *buf);
    if (!buf)
        mpi_setup_fail("cannot allocate %" PRIu64 " x %" PRIu64 " doubles", rows, cols);

    double t0 = now_sec();
    create_and_write(rows, cols, buf);
    MPI_Barrier(MPI_COMM_WORLD);
    unsigned long long bad = mpi_sum_u64(reopen_and_verify(rows, cols, buf));
    double secs = now_sec() - t0;

    if (g_rank == 0)
        printf("h5_parallel: %s ranks=%d dims=%" PRIu64 "x%" PRIu64 " seconds=%.3f "
               "mismatches=%llu %s\n",
               g_path, g_nprocs, rows * (uint64_t)g_nprocs, cols, secs, bad,
               bad ? "FAILED" : "OK");
    free(buf);
    H5close();
    MPI_Finalize();
    return bad ? 1 : 0;
}
