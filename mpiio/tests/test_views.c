/* Randomized equivalence test: for random file views and memory datatypes,
 * every algorithm x primitive (and the multi-threaded individual path) must
 * write a file byte-identical to the one plain PMPI writes, and read back the
 * same buffers. Usage: test_views DIR SEED NCASES */
#include "common.h"

static const char *algos[] = {"no_overlap", "comm", "write", "write_comm", "write_comm2"};
static const char *prims[] = {"isend", "put_fence", "put_lock"};
static const char *parts[] = {"even", "stripe_aligned", "static_cyclic", "group_cyclic"};

typedef struct {
    const char *kind;
    MPI_Offset disp;
    MPI_Datatype etype, filetype, memtype;
    int count;      /* memtype repetitions */
    MPI_Aint mem_extent;
    long nbytes;
} view_case;

enum { BACKGROUND = 128 << 10 }; /* pre-existing file bytes, past most views */

static int nprocs, rank;

static MPI_Datatype commit(MPI_Datatype t)
{
    MPI_Type_commit(&t);
    return t;
}

static MPI_Datatype resized(MPI_Datatype t, MPI_Aint extent)
{
    MPI_Datatype r;
    MPI_Type_create_resized(t, 0, extent, &r);
    MPI_Type_free(&t);
    return commit(r);
}

static MPI_Datatype bytes_type(int esz)
{
    MPI_Datatype t;
    if (esz == 1)
        return MPI_BYTE;
    MPI_Type_contiguous(esz, MPI_BYTE, &t);
    return commit(t);
}

/* A random memory layout holding nbytes of etype data, contiguous or with
 * holes. It draws a fixed number of random values whatever the rank's data
 * size, so that all ranks stay in step for the collective choices after it. */
static void choose_memtype(view_case *v)
{
    int u;
    MPI_Type_size(v->etype, &u);
    long ne = v->nbytes / u;
    int kind = rnd(0, 3), blk = 1, split = rnd(1, 7), gap = rnd(1, 3);
    for (int tries = 0; tries < 8; tries++) { /* a divisor of ne, at most 8 */
        int b = rnd(1, 8);
        if (ne % b == 0)
            blk = b;
    }
    MPI_Datatype t;
    if (ne == 0 || kind == 0) {
        v->memtype = v->etype;
        v->count = (int)ne;
    } else if (kind == 1 || blk == 1) { /* blocks followed by gaps */
        MPI_Type_contiguous(blk, v->etype, &t);
        v->memtype = resized(t, (MPI_Aint)(blk + gap) * u);
        v->count = (int)(ne / blk);
    } else if (kind == 2) { /* struct of two blocks with holes */
        int a = 1 + split % (blk - 1);
        int bl[2] = {a, blk - a};
        MPI_Aint d[2] = {0, (MPI_Aint)a * u + gap};
        MPI_Datatype ty[2] = {v->etype, v->etype};
        MPI_Type_create_struct(2, bl, d, ty, &t);
        v->memtype = resized(t, (MPI_Aint)blk * u + 2 * gap);
        v->count = (int)(ne / blk);
    } else { /* every other element */
        MPI_Type_vector(blk, 1, 2, v->etype, &t);
        v->memtype = resized(t, (MPI_Aint)blk * 2 * u);
        v->count = (int)(ne / blk);
    }
    MPI_Aint lb;
    MPI_Type_get_extent(v->memtype, &lb, &v->mem_extent);
}

static void make_contiguous(view_case *v)
{
    int esz = (int[]){1, 4, 8}[rnd(0, 2)];
    long before = 0, mine = 0;
    for (int r = 0; r < nprocs; r++) {
        long n = rnd(0, 300) * esz;
        if (r < rank)
            before += n;
        if (r == rank)
            mine = n;
    }
    v->kind = "contiguous";
    v->etype = v->filetype = bytes_type(esz);
    v->disp = rnd(0, 100) + before;
    v->nbytes = mine;
}

static void make_vector(view_case *v)
{
    int b = rnd(1, 16), k = rnd(1, 40);
    MPI_Datatype t;
    MPI_Type_contiguous(b, MPI_INT, &t);
    v->kind = "vector";
    v->etype = MPI_INT;
    v->filetype = resized(t, (MPI_Aint)nprocs * b * 4);
    v->disp = rnd(0, 64) + rank * b * 4;
    v->nbytes = (long)k * b * 4;
}

/* Random factorisation of nprocs into nd grid dimensions. */
static void grid(int nd, int *p)
{
    int left = nprocs;
    for (int d = 0; d < nd - 1; d++) {
        int divs[16], n = 0;
        for (int x = 1; x <= left; x++)
            if (left % x == 0)
                divs[n++] = x;
        p[d] = divs[rnd(0, n - 1)];
        left /= p[d];
    }
    p[nd - 1] = left;
}

static void make_subarray(view_case *v, int nd)
{
    int g[3], p[3], sub[3], start[3], c[3];
    grid(nd, p);
    int r = rank;
    for (int d = nd - 1; d >= 0; d--) {
        c[d] = r % p[d];
        r /= p[d];
    }
    long elems = 1;
    for (int d = 0; d < nd; d++) {
        g[d] = rnd(1, nd == 2 ? 40 : 12);
        if (g[d] < p[d])
            g[d] = p[d];
        int q = g[d] / p[d], rem = g[d] % p[d];
        sub[d] = q + (c[d] < rem);
        start[d] = c[d] * q + (c[d] < rem ? c[d] : rem);
        elems *= sub[d];
    }
    int esz = (int[]){1, 8, 24}[rnd(0, 2)];
    int order = rnd(0, 1) ? MPI_ORDER_C : MPI_ORDER_FORTRAN;
    v->kind = nd == 2 ? "subarray2d" : "subarray3d";
    v->etype = bytes_type(esz);
    MPI_Type_create_subarray(nd, g, sub, start, order, v->etype, &v->filetype);
    MPI_Type_commit(&v->filetype);
    v->disp = rnd(0, 64);
    v->nbytes = elems * esz * rnd(1, 2); /* one or two "time steps" */
}

static void make_indexed(view_case *v)
{
    int unit_int = rnd(0, 1), usz = unit_int ? 4 : 1;
    int k = rnd(nprocs, 60), shift = rnd(0, nprocs - 1);
    int bl[64], di[64], n = 0, pos = 0;
    MPI_Aint hd[64];
    for (int j = 0; j < k; j++) {
        int len = rnd(1, 16);
        int owner = j < nprocs ? (j + shift) % nprocs : rnd(0, nprocs + nprocs / 3);
        if (owner == rank) { /* owners >= nprocs leave a hole */
            bl[n] = len;
            di[n] = pos;
            hd[n] = (MPI_Aint)pos * usz;
            n++;
        }
        pos += len;
    }
    MPI_Datatype t;
    if (unit_int)
        MPI_Type_indexed(n, bl, di, MPI_INT, &t);
    else
        MPI_Type_create_hindexed(n, bl, hd, MPI_BYTE, &t);
    long mine = 0;
    for (int i = 0; i < n; i++)
        mine += bl[i];
    v->kind = "indexed_holes";
    v->etype = unit_int ? MPI_INT : MPI_BYTE;
    v->filetype = resized(t, (MPI_Aint)pos * usz);
    v->disp = rnd(0, 64);
    v->nbytes = mine * usz * rnd(1, 3);
}

static void free_type(MPI_Datatype *t)
{
    int ni, na, nd, comb;
    MPI_Type_get_envelope(*t, &ni, &na, &nd, &comb);
    if (comb != MPI_COMBINER_NAMED)
        MPI_Type_free(t);
}

static MPI_Info make_info(const char *algo, const char *prim, int indep)
{
    MPI_Info info;
    char v[32];
    MPI_Info_create(&info);
    if (!algo) {
        MPI_Info_set(info, "surge_mpiio", "disable");
        return info;
    }
    if (!strcmp(algo, "default"))
        return info; /* everything automatic */
    MPI_Info_set(info, "surge_cb", "enable"); /* exercise the engine even without interleaving */
    MPI_Info_set(info, "surge_algorithm", algo);
    MPI_Info_set(info, "surge_primitive", prim);
    MPI_Info_set(info, "surge_fd_partition", parts[rnd(0, 3)]);
    snprintf(v, sizeof v, "%d", rnd(1, nprocs));
    MPI_Info_set(info, "cb_nodes", v);
    snprintf(v, sizeof v, "%d", rnd(16, 2048));
    MPI_Info_set(info, "cb_buffer_size", v);
    snprintf(v, sizeof v, "%d", rnd(8, 256));
    MPI_Info_set(info, "striping_unit", v);
    snprintf(v, sizeof v, "%d", rnd(1, nprocs));
    MPI_Info_set(info, "striping_factor", v);
    if (indep) {
        snprintf(v, sizeof v, "%d", rnd(1, 4));
        MPI_Info_set(info, "surge_io_threads", v);
        snprintf(v, sizeof v, "%d", rnd(5, 300));
        MPI_Info_set(info, "surge_ind_cycle_size", v);
    }
    return info;
}

/* Writes (or reads) the case's data with one of several call forms; returns
 * the MPI error code and checks the reported element count. */
static int access_data(MPI_File fh, view_case *v, char *buf, int write, int form, int *bad_count)
{
    MPI_Status st;
    MPI_Request req;
    int rc, half = v->count / 2, got = -1;
    char *buf2 = buf + (MPI_Aint)half * v->mem_extent;
    switch (form) {
    case 0:
        rc = write ? MPI_File_write_at_all(fh, 0, buf, v->count, v->memtype, &st)
                   : MPI_File_read_at_all(fh, 0, buf, v->count, v->memtype, &st);
        break;
    case 1: /* two calls through the individual file pointer */
        rc = write ? MPI_File_write_all(fh, buf, half, v->memtype, &st)
                   : MPI_File_read_all(fh, buf, half, v->memtype, &st);
        if (rc == MPI_SUCCESS)
            rc = write ? MPI_File_write_all(fh, buf2, v->count - half, v->memtype, &st)
                       : MPI_File_read_all(fh, buf2, v->count - half, v->memtype, &st);
        MPI_Get_count(&st, v->memtype, &got);
        *bad_count = rc == MPI_SUCCESS && got != v->count - half;
        return rc;
    case 2:
        rc = write ? MPI_File_iwrite_all(fh, buf, v->count, v->memtype, &req)
                   : MPI_File_iread_all(fh, buf, v->count, v->memtype, &req);
        if (rc == MPI_SUCCESS)
            MPI_Wait(&req, &st);
        break;
    case 3:
        rc = write ? MPI_File_write_all_begin(fh, buf, v->count, v->memtype)
                   : MPI_File_read_all_begin(fh, buf, v->count, v->memtype);
        if (rc == MPI_SUCCESS)
            rc = write ? MPI_File_write_all_end(fh, buf, &st) : MPI_File_read_all_end(fh, buf, &st);
        break;
    case 4:
        rc = write ? MPI_File_write_at_all_begin(fh, 0, buf, v->count, v->memtype)
                   : MPI_File_read_at_all_begin(fh, 0, buf, v->count, v->memtype);
        if (rc == MPI_SUCCESS)
            rc = write ? MPI_File_write_at_all_end(fh, buf, &st)
                       : MPI_File_read_at_all_end(fh, buf, &st);
        break;
    case 5:
        rc = write ? MPI_File_iwrite_at_all(fh, 0, buf, v->count, v->memtype, &req)
                   : MPI_File_iread_at_all(fh, 0, buf, v->count, v->memtype, &req);
        if (rc == MPI_SUCCESS)
            MPI_Wait(&req, &st);
        break;
    case 6: /* individual, explicit offset */
        rc = write ? MPI_File_write_at(fh, 0, buf, v->count, v->memtype, &st)
                   : MPI_File_read_at(fh, 0, buf, v->count, v->memtype, &st);
        break;
    default: /* individual, two calls through the file pointer */
        rc = write ? MPI_File_write(fh, buf, half, v->memtype, &st)
                   : MPI_File_read(fh, buf, half, v->memtype, &st);
        if (rc == MPI_SUCCESS)
            rc = write ? MPI_File_write(fh, buf2, v->count - half, v->memtype, &st)
                       : MPI_File_read(fh, buf2, v->count - half, v->memtype, &st);
        MPI_Get_count(&st, v->memtype, &got);
        *bad_count = rc == MPI_SUCCESS && got != v->count - half;
        return rc;
    }
    MPI_Get_count(&st, v->memtype, &got);
    *bad_count = rc == MPI_SUCCESS && got != v->count;
    return rc;
}

/* Open, set the view, access, close. */
static int run_once(const char *path, MPI_Info info, view_case *v, char *buf, int write, int form,
                    int *bad_count)
{
    MPI_File fh;
    int amode = write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY;
    int rc = MPI_File_open(MPI_COMM_WORLD, path, amode, info, &fh);
    if (rc != MPI_SUCCESS)
        return rc;
    rc = MPI_File_set_view(fh, v->disp, v->etype, v->filetype, "native", MPI_INFO_NULL);
    if (rc == MPI_SUCCESS)
        rc = access_data(fh, v, buf, write, form, bad_count);
    MPI_File_close(&fh);
    return rc;
}

static int failures;

static void fail(int c, view_case *v, const char *what, const char *algo, const char *prim,
                 int form, const char *why)
{
    failures++;
    if (rank == 0)
        printf("FAIL case %d (%s, memcount %d): %s algo=%s prim=%s form=%d: %s\n", c, v->kind,
               v->count, what, algo, prim, form, why);
}

static int all_ok(int ok)
{
    int all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all;
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 4) {
        if (rank == 0)
            fprintf(stderr, "usage: %s DIR SEED NCASES\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *dir = argv[1];
    int seed = atoi(argv[2]), ncases = atoi(argv[3]), checks = 0;
    int verbose = getenv("TEST_VERBOSE") != NULL;
    char ref[512], tst[512], why[256];
    snprintf(ref, sizeof ref, "%s/ref.%d", dir, nprocs);
    snprintf(tst, sizeof tst, "%s/tst.%d", dir, nprocs);

    for (int c = 0; c < ncases; c++) {
        rng_seed((uint64_t)seed * 1000003u + (uint64_t)c);
        view_case v;
        memset(&v, 0, sizeof v);
        switch (c % 5) {
        case 0: make_contiguous(&v); break;
        case 1: make_vector(&v); break;
        case 2: make_subarray(&v, 2); break;
        case 3: make_subarray(&v, 3); break;
        default: make_indexed(&v); break;
        }
        choose_memtype(&v);
        size_t bufsize = (size_t)v.count * (size_t)v.mem_extent + 64;
        char *data = malloc(bufsize), *rd_ref = malloc(bufsize), *rd = malloc(bufsize);
        for (size_t i = 0; i < bufsize; i++)
            data[i] = (char)(rank * 131 + i * 7 + c);
        int bad = 0;

        MPI_Info off = make_info(NULL, NULL, 0);
        prepare_file(ref, BACKGROUND, MPI_COMM_WORLD);
        int rc = run_once(ref, off, &v, data, 1, 0, &bad);
        memset(rd_ref, 0xEE, bufsize);
        if (rc == MPI_SUCCESS)
            rc = run_once(ref, off, &v, rd_ref, 0, 0, &bad);
        MPI_Info_free(&off);
        if (!all_ok(rc == MPI_SUCCESS)) {
            fail(c, &v, "reference PMPI run failed", "-", "-", 0, "");
            continue;
        }
        /* 15 collective combinations, the individual path, then all defaults */
        for (int combo = 0; combo <= 16; combo++) {
            int indep = combo == 15;
            const char *algo = combo == 16 ? "default" : indep ? "auto" : algos[combo / 3];
            const char *prim = combo >= 15 ? "auto" : prims[combo % 3];
            MPI_Info info = make_info(algo, prim, indep);
            int wform = rnd(0, 5), rform = rnd(0, 5);
            if (indep) {
                wform = rnd(6, 7);
                rform = rnd(6, 7);
            }
            if (verbose && rank == 0) {
                printf("case %d %s algo=%s prim=%s wform=%d rform=%d\n", c, v.kind, algo, prim,
                       wform, rform);
                fflush(stdout);
            }
            prepare_file(tst, BACKGROUND, MPI_COMM_WORLD);
            rc = run_once(tst, info, &v, data, 1, wform, &bad);
            checks++;
            if (!all_ok(rc == MPI_SUCCESS && !bad)) {
                fail(c, &v, "write failed or bad count", algo, prim, wform, "");
            } else if (!files_equal(ref, tst, MPI_COMM_WORLD, why, sizeof why)) {
                fail(c, &v, "file differs from PMPI's", algo, prim, wform, why);
            } else {
                memset(rd, 0xEE, bufsize);
                rc = run_once(tst, info, &v, rd, 0, rform, &bad);
                if (!all_ok(rc == MPI_SUCCESS && !bad && !memcmp(rd, rd_ref, bufsize)))
                    fail(c, &v, "read differs from PMPI's", algo, prim, rform, "");
            }
            MPI_Info_free(&info);
        }
        if (v.memtype != v.etype)
            free_type(&v.memtype);
        if (v.filetype != v.etype)
            free_type(&v.filetype);
        free_type(&v.etype);
        free(data);
        free(rd_ref);
        free(rd);
    }
    if (rank == 0)
        printf("test_views np=%d seed=%d: %d cases, %d checks, %d failures\n", nprocs, seed,
               ncases, checks, failures);
    MPI_Finalize();
    return failures ? 1 : 0;
}
