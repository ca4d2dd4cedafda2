/* Semantics beyond byte equality: errors reported on every rank, hints read
 * back, file-pointer consistency with PMPI, and larger multi-cycle runs.
 * Usage: test_semantics DIR [inject|overlap]
 *   inject: expects SURGE_MPIIO_TEST_FAIL_WRITE / _RANK to be set, and checks
 *   that the injected mid-cycle failure reaches every rank, for every
 *   algorithm and primitive, without hanging.
 *   overlap: expects TEST_THREAD_MULTIPLE; checks that nonblocking and split
 *   collectives run in the background (they return while another rank has
 *   not even started its part) and still write and read PMPI's bytes. */
#include <time.h>
#include <signal.h>
#include <sys/resource.h>

#include "common.h"

static const char *algos[] = {"no_overlap", "comm", "write", "write_comm", "write_comm2"};
static const char *prims[] = {"isend", "put_fence", "put_lock"};
static int nprocs, rank, failures;
static char path[512], ref[512];

static void check(const char *what, int ok)
{
    int all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!all)
        failures++;
    if (rank == 0)
        printf("%s %s\n", all ? "ok  " : "FAIL", what);
}

static MPI_Info info_of(const char *const *kv)
{
    MPI_Info info;
    MPI_Info_create(&info);
    for (; kv && kv[0]; kv += 2)
        MPI_Info_set(info, kv[0], kv[1]);
    return info;
}

static int has(MPI_Info info, const char *key, const char *want)
{
    char v[MPI_MAX_INFO_VAL + 1];
    int flag;
    MPI_Info_get(info, key, MPI_MAX_INFO_VAL, v, &flag);
    return flag && !strcmp(v, want);
}

static void test_hints(void)
{
    char agg[16];
    snprintf(agg, sizeof agg, "%d", nprocs > 1 ? 2 : 1);
    const char *kv[] = {"cb_nodes", agg, "cb_buffer_size", "1048576", "surge_algorithm",
                        "write_comm2", "surge_primitive", "put_fence", "surge_fd_partition",
                        "static_cyclic", "striping_unit", "65536", "striping_factor", "2",
                        "surge_io_threads", "2", NULL};
    MPI_Info in = info_of(kv), out;
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, in, &fh);
    MPI_File_get_info(fh, &out);
    int ok = 1;
    for (int i = 0; kv[i]; i += 2)
        ok &= has(out, kv[i], kv[i + 1]);
    check("hints given at open are read back by MPI_File_get_info", ok);
    MPI_Info_free(&out);
    const char *kv2[] = {"surge_algorithm", "comm", NULL};
    MPI_Info upd = info_of(kv2);
    MPI_File_set_info(fh, upd);
    MPI_File_get_info(fh, &out);
    check("MPI_File_set_info changes surge_algorithm", has(out, "surge_algorithm", "comm") &&
                                                           has(out, "cb_buffer_size", "1048576"));
    MPI_Info_free(&out);
    MPI_Info_free(&upd);
    MPI_Info_free(&in);
    MPI_File_close(&fh);
}

static void test_invalid_views(void)
{
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    /* decreasing displacements on the last rank only */
    int bl[2] = {4, 4};
    MPI_Aint d[2] = {8, 0};
    MPI_Datatype bad, odd;
    MPI_Type_create_hindexed(2, bl, d, MPI_BYTE, &bad);
    MPI_Type_commit(&bad);
    int rc = MPI_File_set_view(fh, 0, MPI_BYTE, rank == nprocs - 1 ? bad : MPI_BYTE, "native",
                               MPI_INFO_NULL);
    check("non-monotonic filetype on one rank fails set_view on every rank", rc != MPI_SUCCESS);
    /* filetype size not a multiple of the etype on rank 0 only */
    MPI_Type_contiguous(6, MPI_BYTE, &odd);
    MPI_Type_commit(&odd);
    rc = MPI_File_set_view(fh, 0, MPI_INT, rank == 0 ? odd : MPI_INT, "native", MPI_INFO_NULL);
    check("filetype/etype size mismatch on one rank fails on every rank", rc != MPI_SUCCESS);
    rc = MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL);
    check("a valid view afterwards succeeds", rc == MPI_SUCCESS);
    MPI_Type_free(&bad);
    MPI_Type_free(&odd);
    MPI_File_close(&fh);
}

static void test_read_only(void)
{
    MPI_File fh;
    char buf[64] = {0};
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    int rc = MPI_File_write_at_all(fh, rank * 64, buf, 64, MPI_BYTE, MPI_STATUS_IGNORE), cls;
    MPI_Error_class(rc, &cls);
    check("write_all on a read-only file fails with MPI_ERR_READ_ONLY everywhere",
          cls == MPI_ERR_READ_ONLY);
    MPI_File_close(&fh);
}

/* The last rank may only grow files to 64 KiB: its aggregator writes fail
 * with EFBIG in the middle of the cycles. */
static void test_size_limited(void)
{
    const long per_rank = 1 << 20;
    char *buf = malloc(per_rank);
    memset(buf, rank + 1, per_rank);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 64 << 10;
    if (rank == nprocs - 1)
        setrlimit(RLIMIT_FSIZE, &lim);
    for (int a = 0; a < 5; a++) {
        const char *kv[] = {"surge_algorithm", algos[a], "cb_buffer_size", "262144", NULL};
        MPI_Info info = info_of(kv);
        MPI_File fh;
        prepare_file(path, 0, MPI_COMM_WORLD);
        MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, info, &fh);
        int rc = MPI_File_write_at_all(fh, rank * per_rank, buf, (int)per_rank, MPI_BYTE,
                                       MPI_STATUS_IGNORE);
        MPI_File_close(&fh);
        MPI_Info_free(&info);
        char what[128];
        snprintf(what, sizeof what, "file-size limit hit mid-cycle is reported everywhere (%s)",
                 algos[a]);
        check(what, rc != MPI_SUCCESS);
    }
    setrlimit(RLIMIT_FSIZE, &old);
    free(buf);
}

/* Filetype: one block per rank, ranks' blocks interleaved round-robin. */
static MPI_Datatype interleaved_blocks(int block)
{
    MPI_Datatype blk, ft;
    MPI_Type_contiguous(block, MPI_BYTE, &blk);
    MPI_Type_create_resized(blk, 0, (MPI_Aint)block * nprocs, &ft);
    MPI_Type_commit(&ft);
    MPI_Type_free(&blk);
    return ft;
}

/* Bigger data, many cycles, default settings and every algorithm. */
static void test_large(void)
{
    const int block = 64 << 10, blocks = 16; /* 1 MiB per rank, interleaved */
    char *buf = malloc((size_t)block * blocks), *back = malloc((size_t)block * blocks);
    for (long i = 0; i < (long)block * blocks; i++)
        buf[i] = (char)(i * 31 + rank * 7);
    MPI_Datatype ft = interleaved_blocks(block);
    const char *off[] = {"surge_mpiio", "disable", NULL};
    for (int a = -1; a < 5; a++) {
        const char *kv[] = {"surge_algorithm", a < 0 ? "auto" : algos[a], "cb_buffer_size",
                            a < 0 ? "16777216" : "262144", NULL};
        MPI_Info info = info_of(kv), ioff = info_of(off);
        MPI_File fh;
        for (int pass = 0; pass < 2; pass++) { /* PMPI reference, then the library */
            const char *p = pass ? path : ref;
            prepare_file(p, 0, MPI_COMM_WORLD);
            MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_CREATE | MPI_MODE_RDWR,
                          pass ? info : ioff, &fh);
            MPI_File_set_view(fh, (MPI_Offset)rank * block, MPI_BYTE, ft, "native",
                              MPI_INFO_NULL);
            MPI_File_write_all(fh, buf, block * blocks, MPI_BYTE, MPI_STATUS_IGNORE);
            MPI_Offset pos;
            MPI_File_get_position(fh, &pos);
            if (pass)
                check("individual file pointer advanced as PMPI sees it",
                      pos == (MPI_Offset)block * blocks);
            MPI_File_close(&fh);
        }
        char why[128], what[160];
        snprintf(what, sizeof what, "1 MiB/rank interleaved write_all, algorithm %s",
                 a < 0 ? "auto" : algos[a]);
        check(what, files_equal(ref, path, MPI_COMM_WORLD, why, sizeof why));
        MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, info, &fh);
        MPI_File_set_view(fh, (MPI_Offset)rank * block, MPI_BYTE, ft, "native", MPI_INFO_NULL);
        memset(back, 0, (size_t)block * blocks);
        MPI_File_read_all(fh, back, block * blocks, MPI_BYTE, MPI_STATUS_IGNORE);
        MPI_File_close(&fh);
        snprintf(what, sizeof what, "read_all returns the data, algorithm %s",
                 a < 0 ? "auto" : algos[a]);
        check(what, !memcmp(buf, back, (size_t)block * blocks));
        MPI_Info_free(&info);
        MPI_Info_free(&ioff);
    }
    MPI_Type_free(&ft);
    free(buf);
    free(back);
}

static void test_injected(void)
{
    const long per_rank = 256 << 10;
    char *buf = malloc(per_rank);
    memset(buf, 7, per_rank);
    for (int a = 0; a < 5; a++)
        for (int p = 0; p < 3; p++) {
            const char *kv[] = {"surge_algorithm", algos[a], "surge_primitive", prims[p],
                                "cb_buffer_size", "8192", "surge_cb", "enable", NULL};
            MPI_Info info = info_of(kv);
            MPI_File fh;
            MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, info, &fh);
            int rc = MPI_File_write_at_all(fh, rank * per_rank, buf, (int)per_rank, MPI_BYTE,
                                           MPI_STATUS_IGNORE), cls;
            MPI_Error_class(rc, &cls);
            MPI_File_close(&fh);
            MPI_Info_free(&info);
            char what[128];
            snprintf(what, sizeof what, "injected write failure reported everywhere (%s, %s)",
                     algos[a], prims[p]);
            check(what, cls == MPI_ERR_IO);
        }
    /* disjoint ranges: the collective call goes direct, errors still agreed */
    const char *kv[] = {"surge_io_threads", "2", "surge_ind_cycle_size", "4096", NULL};
    MPI_Info info = info_of(kv);
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, info, &fh);
    int cls, rc0 = MPI_File_write_at_all(fh, rank * per_rank, buf, (int)per_rank, MPI_BYTE,
                                         MPI_STATUS_IGNORE);
    MPI_Error_class(rc0, &cls);
    MPI_File_close(&fh);
    check("injected failure in a direct (non-interleaved) write_all reported everywhere",
          cls == MPI_ERR_IO);
    /* individual I/O: only the failing rank sees its own error */
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, info, &fh);
    int rc = MPI_File_write_at(fh, rank * per_rank, buf, (int)per_rank, MPI_BYTE,
                               MPI_STATUS_IGNORE);
    MPI_File_close(&fh);
    MPI_Info_free(&info);
    check("injected failure in threaded individual write is reported on its rank",
          rank != 0 || rc != MPI_SUCCESS);
    free(buf);
}

/* Rank 0 joins a collective 1 s late; every other rank's initiation must
 * return long before that, so the collective cannot have run inside it. */
static const double LATE = 1.0;

static void late_rank0(void)
{
    if (rank == 0) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
}

static void test_overlap(void)
{
    const int block = 64 << 10, blocks = 8; /* interleaved: two-phase runs */
    const long n = (long)block * blocks;
    char *buf = malloc((size_t)n), *back = malloc((size_t)n);
    for (long i = 0; i < n; i++)
        buf[i] = (char)(i * 13 + rank * 5);
    MPI_Datatype ft = interleaved_blocks(block);
    const char *off[] = {"surge_mpiio", "disable", NULL};
    const char *on[] = {"surge_cb", "enable", "cb_buffer_size", "65536", NULL};
    MPI_Info ioff = info_of(off), ion = info_of(on);
    MPI_File fh;
    prepare_file(ref, 0, MPI_COMM_WORLD);
    MPI_File_open(MPI_COMM_WORLD, ref, MPI_MODE_CREATE | MPI_MODE_RDWR, ioff, &fh);
    MPI_File_set_view(fh, (MPI_Offset)rank * block, MPI_BYTE, ft, "native", MPI_INFO_NULL);
    MPI_File_write_all(fh, buf, (int)n, MPI_BYTE, MPI_STATUS_IGNORE);
    MPI_File_close(&fh);
    for (int form = 0; form < 2; form++) {
        prepare_file(path, 0, MPI_COMM_WORLD);
        MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, ion, &fh);
        MPI_File_set_view(fh, (MPI_Offset)rank * block, MPI_BYTE, ft, "native", MPI_INFO_NULL);
        MPI_Request req;
        MPI_Status st;
        int count = -1;
        late_rank0();
        double t = MPI_Wtime();
        if (form == 0)
            MPI_File_iwrite_all(fh, buf, (int)n, MPI_BYTE, &req);
        else
            MPI_File_write_all_begin(fh, buf, (int)n, MPI_BYTE);
        double took = MPI_Wtime() - t;
        MPI_Offset pos;
        MPI_File_get_position(fh, &pos);
        if (form == 0)
            MPI_Wait(&req, &st);
        else
            MPI_File_write_all_end(fh, buf, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        const char *what = form ? "write_all_begin" : "iwrite_all";
        char msg[160];
        snprintf(msg, sizeof msg, "%s returns before the late rank joins (background)", what);
        check(msg, rank == 0 || took < LATE / 2);
        snprintf(msg, sizeof msg, "%s moved the file pointer at initiation, counted all", what);
        check(msg, pos == n && count == n);
        MPI_File_close(&fh);
        char why[128];
        snprintf(msg, sizeof msg, "%s wrote PMPI's bytes", what);
        check(msg, files_equal(ref, path, MPI_COMM_WORLD, why, sizeof why));
        MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, ion, &fh);
        MPI_File_set_view(fh, (MPI_Offset)rank * block, MPI_BYTE, ft, "native", MPI_INFO_NULL);
        memset(back, 0, (size_t)n);
        late_rank0();
        t = MPI_Wtime();
        if (form == 0)
            MPI_File_iread_all(fh, back, (int)n, MPI_BYTE, &req);
        else
            MPI_File_read_all_begin(fh, back, (int)n, MPI_BYTE);
        took = MPI_Wtime() - t;
        if (form == 0)
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        else
            MPI_File_read_all_end(fh, back, MPI_STATUS_IGNORE);
        MPI_File_close(&fh);
        what = form ? "read_all_begin" : "iread_all";
        snprintf(msg, sizeof msg, "%s returns before the late rank joins, reads the data", what);
        check(msg, (rank == 0 || took < LATE / 2) && !memcmp(buf, back, (size_t)n));
    }
    MPI_Info_free(&ioff);
    MPI_Info_free(&ion);
    MPI_Type_free(&ft);
    free(buf);
    free(back);
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 2)
        MPI_Abort(MPI_COMM_WORLD, 2);
    snprintf(path, sizeof path, "%s/sem.%d", argv[1], nprocs);
    snprintf(ref, sizeof ref, "%s/semref.%d", argv[1], nprocs);
    if (argc > 2 && !strcmp(argv[2], "inject")) {
        test_injected();
    } else if (argc > 2 && !strcmp(argv[2], "overlap")) {
        test_overlap();
    } else {
        test_hints();
        test_invalid_views();
        test_read_only();
        test_size_limited();
        test_large();
    }
    if (rank == 0)
        printf("test_semantics np=%d: %d failures\n", nprocs, failures);
    MPI_Finalize();
    return failures ? 1 : 0;
}
