#include "flatten.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Runs are only ever appended or merged into the last one, so n never
 * shrinks: once it passes `limit` the type is known to be that fragmented and
 * decoding stops early (the caller then packs instead of describing runs). */
typedef struct {
    flat_run *v;
    int64_t n, cap;
    int64_t limit;
} run_vec;

static int over_limit(const run_vec *rv) { return rv->n > rv->limit; }

static void vec_push(run_vec *rv, int64_t off, int64_t len)
{
    if (len <= 0 || over_limit(rv))
        return;
    if (rv->n > 0) { /* merge with the previous run when adjacent */
        flat_run *last = &rv->v[rv->n - 1];
        if (last->off + last->len == off) {
            last->len += len;
            return;
        }
    }
    if (rv->n == rv->cap) {
        rv->cap = rv->cap ? rv->cap * 2 : 16;
        rv->v = realloc(rv->v, (size_t)rv->cap * sizeof *rv->v);
    }
    rv->v[rv->n].off = off;
    rv->v[rv->n].len = len;
    rv->n++;
}

/* Append `count` copies of child, copy i shifted by base + i*stride. */
static void vec_repeat(run_vec *out, const run_vec *child, int64_t base, int64_t count,
                       int64_t stride)
{
    if (child->n == 1 && child->v[0].len == stride) { /* dense: one run */
        vec_push(out, base + child->v[0].off, count * stride);
        return;
    }
    if (over_limit(child)) {
        out->n = out->limit + 1;
        return;
    }
    for (int64_t i = 0; i < count && !over_limit(out); i++)
        for (int64_t r = 0; r < child->n; r++)
            vec_push(out, base + i * stride + child->v[r].off, child->v[r].len);
}

static int64_t type_extent(MPI_Datatype t)
{
    MPI_Aint lb, ext;
    MPI_Type_get_extent(t, &lb, &ext);
    return (int64_t)ext;
}

/* Pair types are named but have holes; the MPI standard defines them as structs. */
static int named_layout(MPI_Datatype t, run_vec *out)
{
    int size;
    MPI_Type_size(t, &size);
    if (size == type_extent(t)) {
        vec_push(out, 0, size);
        return MPI_SUCCESS;
    }
#define PAIR(mpitype, ctype)                                                                   \
    if (t == mpitype) {                                                                        \
        struct pair { ctype v; int i; };                                                       \
        vec_push(out, 0, sizeof(ctype));                                                       \
        vec_push(out, offsetof(struct pair, i), sizeof(int));                                  \
        return MPI_SUCCESS;                                                                    \
    }
    PAIR(MPI_DOUBLE_INT, double)
    PAIR(MPI_LONG_INT, long)
    PAIR(MPI_SHORT_INT, short)
    PAIR(MPI_LONG_DOUBLE_INT, long double)
#undef PAIR
    return MPI_ERR_TYPE;
}

static int flatten_into(MPI_Datatype t, run_vec *out);

/* Flatten a constructor argument and free it if it is a derived handle. */
static int flatten_child(MPI_Datatype t, run_vec *out)
{
    int ni, na, nd, comb;
    MPI_Type_get_envelope(t, &ni, &na, &nd, &comb);
    int rc = flatten_into(t, out);
    if (comb != MPI_COMBINER_NAMED)
        MPI_Type_free(&t);
    return rc;
}

static int flatten_subarray(const int *ints, MPI_Datatype old, run_vec *out)
{
    int nd = ints[0];
    const int *sizes = ints + 1, *subs = ints + 1 + nd, *starts = ints + 1 + 2 * nd;
    int fortran = ints[1 + 3 * nd] == MPI_ORDER_FORTRAN;
    int64_t ext = type_extent(old);
    int64_t stride[32], idx[32];
    if (nd > 32)
        return MPI_ERR_TYPE;
    /* dims[] reordered so that dimension 0 varies slowest */
    int dim[32];
    for (int d = 0; d < nd; d++)
        dim[d] = fortran ? nd - 1 - d : d;
    int64_t s = ext;
    for (int d = nd - 1; d >= 0; d--) {
        stride[d] = s;
        s *= sizes[dim[d]];
        idx[d] = 0;
    }
    for (int d = 0; d < nd; d++)
        if (subs[dim[d]] == 0)
            return MPI_SUCCESS;
    run_vec child = {.limit = out->limit};
    int rc = flatten_child(old, &child);
    if (rc == MPI_SUCCESS) {
        int inner = nd - 1;
        while (!over_limit(out)) {
            int64_t base = 0;
            for (int d = 0; d < nd; d++)
                base += (starts[dim[d]] + idx[d]) * stride[d];
            vec_repeat(out, &child, base, subs[dim[inner]], ext);
            int d = inner - 1; /* odometer over the outer dimensions */
            while (d >= 0 && ++idx[d] == subs[dim[d]])
                idx[d--] = 0;
            if (d < 0)
                break;
        }
    }
    free(child.v);
    return rc;
}

static int flatten_into(MPI_Datatype t, run_vec *out)
{
    int ni, na, nd, comb;
    MPI_Type_get_envelope(t, &ni, &na, &nd, &comb);
    if (comb == MPI_COMBINER_NAMED || comb == MPI_COMBINER_F90_REAL ||
        comb == MPI_COMBINER_F90_COMPLEX || comb == MPI_COMBINER_F90_INTEGER)
        return named_layout(t, out);
    if (comb == MPI_COMBINER_DARRAY)
        return MPI_ERR_TYPE;

    int *ints = malloc(sizeof(int) * (size_t)(ni + 1));
    MPI_Aint *addrs = malloc(sizeof(MPI_Aint) * (size_t)(na + 1));
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * (size_t)(nd + 1));
    MPI_Type_get_contents(t, ni, na, nd, ints, addrs, types);
    int rc = MPI_SUCCESS;

    if (comb == MPI_COMBINER_STRUCT) {
        for (int i = 0; i < ints[0] && rc == MPI_SUCCESS && !over_limit(out); i++) {
            run_vec child = {.limit = out->limit};
            rc = flatten_child(types[i], &child);
            vec_repeat(out, &child, addrs[i], ints[1 + i], type_extent(types[i]));
            free(child.v);
        }
    } else if (comb == MPI_COMBINER_SUBARRAY) {
        rc = flatten_subarray(ints, types[0], out);
    } else {
        int64_t ext = type_extent(types[0]);
        run_vec child = {.limit = out->limit};
        rc = flatten_child(types[0], &child);
        switch (rc == MPI_SUCCESS ? comb : -1) {
        case -1:
            break;
        case MPI_COMBINER_DUP:
        case MPI_COMBINER_RESIZED: /* offsets unchanged; the parent reads the new extent */
            vec_repeat(out, &child, 0, 1, ext);
            break;
        case MPI_COMBINER_CONTIGUOUS:
            vec_repeat(out, &child, 0, ints[0], ext);
            break;
        case MPI_COMBINER_VECTOR:
            for (int i = 0; i < ints[0]; i++)
                vec_repeat(out, &child, (int64_t)i * ints[2] * ext, ints[1], ext);
            break;
        case MPI_COMBINER_HVECTOR:
            for (int i = 0; i < ints[0]; i++)
                vec_repeat(out, &child, (int64_t)i * addrs[0], ints[1], ext);
            break;
        case MPI_COMBINER_INDEXED:
            for (int i = 0; i < ints[0]; i++)
                vec_repeat(out, &child, (int64_t)ints[1 + ints[0] + i] * ext, ints[1 + i], ext);
            break;
        case MPI_COMBINER_HINDEXED:
            for (int i = 0; i < ints[0]; i++)
                vec_repeat(out, &child, addrs[i], ints[1 + i], ext);
            break;
        case MPI_COMBINER_INDEXED_BLOCK:
            for (int i = 0; i < ints[0]; i++)
                vec_repeat(out, &child, (int64_t)ints[2 + i] * ext, ints[1], ext);
            break;
        case MPI_COMBINER_HINDEXED_BLOCK:
            for (int i = 0; i < ints[0]; i++)
                vec_repeat(out, &child, addrs[i], ints[1], ext);
            break;
        default:
            rc = MPI_ERR_TYPE;
        }
        free(child.v);
    }
    free(ints);
    free(addrs);
    free(types);
    return rc;
}

int flat_type_build(MPI_Datatype type, flat_type *out)
{
    return flat_type_build_limited(type, INT64_MAX - 1, out);
}

int flat_type_build_limited(MPI_Datatype type, int64_t max_runs, flat_type *out)
{
    memset(out, 0, sizeof *out);
    run_vec rv = {.limit = max_runs};
    int rc = flatten_into(type, &rv);
    if (rc == MPI_SUCCESS && over_limit(&rv))
        rc = FLAT_TOO_FRAGMENTED;
    if (rc != MPI_SUCCESS) {
        free(rv.v);
        return rc;
    }
    out->runs = rv.v;
    out->nruns = rv.n;
    out->prefix = malloc(sizeof(int64_t) * (size_t)(rv.n + 1));
    out->prefix[0] = 0;
    for (int64_t i = 0; i < rv.n; i++)
        out->prefix[i + 1] = out->prefix[i] + rv.v[i].len;
    out->size = out->prefix[rv.n];
    out->extent = type_extent(type);
    return MPI_SUCCESS;
}

void flat_type_free(flat_type *ft)
{
    free(ft->runs);
    free(ft->prefix);
    memset(ft, 0, sizeof *ft);
}

int flat_type_is_contiguous(const flat_type *ft)
{
    return ft->nruns == 1 && ft->runs[0].off == 0 && ft->runs[0].len == ft->extent;
}

int flat_type_is_valid_filetype(const flat_type *ft)
{
    if (ft->nruns == 0)
        return 1;
    if (ft->runs[0].off < 0)
        return 0;
    for (int64_t i = 1; i < ft->nruns; i++)
        if (ft->runs[i].off < ft->runs[i - 1].off + ft->runs[i - 1].len)
            return 0;
    const flat_run *last = &ft->runs[ft->nruns - 1];
    return last->off + last->len - ft->runs[0].off <= ft->extent;
}

void tiled_map_init(tiled_map *m, const flat_type *ft, int64_t base)
{
    m->ft = ft;
    m->base = base;
    m->contiguous = flat_type_is_contiguous(ft);
}

void tiled_map_seek(const tiled_map *m, int64_t pos, map_pos *p)
{
    const flat_type *ft = m->ft;
    if (m->contiguous) {
        p->tile = 0;
        p->run = 0;
        p->skip = pos;
        return;
    }
    p->tile = pos / ft->size;
    int64_t rem = pos % ft->size;
    int64_t lo = 0, hi = ft->nruns - 1; /* last run with prefix <= rem */
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (ft->prefix[mid] <= rem)
            lo = mid;
        else
            hi = mid - 1;
    }
    p->run = lo;
    p->skip = rem - ft->prefix[lo];
}

int64_t tiled_map_next(const tiled_map *m, map_pos *p, int64_t maxlen, int64_t *where)
{
    const flat_type *ft = m->ft;
    if (m->contiguous) {
        *where = m->base + p->skip;
        p->skip += maxlen;
        return maxlen;
    }
    const flat_run *r = &ft->runs[p->run];
    int64_t avail = r->len - p->skip;
    int64_t n = avail < maxlen ? avail : maxlen;
    *where = m->base + p->tile * ft->extent + r->off + p->skip;
    p->skip += n;
    if (p->skip == r->len) {
        p->skip = 0;
        if (++p->run == ft->nruns) {
            p->run = 0;
            p->tile++;
        }
    }
    return n;
}

static int64_t element_index(const tiled_map *m, const map_pos *p)
{
    return m->contiguous ? 0 : p->tile * m->ft->nruns + p->run;
}

int64_t tiled_map_elements(const tiled_map *m, int64_t from, int64_t len, map_pos *start)
{
    map_pos last;
    tiled_map_seek(m, from, start);
    tiled_map_seek(m, from + len - 1, &last);
    return element_index(m, &last) - element_index(m, start) + 1;
}
