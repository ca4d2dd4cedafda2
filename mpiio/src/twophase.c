#include "twophase.h"

#include <stdlib.h>
#include <string.h>

#include "indep_io.h"
#include "overlap.h"
#include "partition.h"
#include "transfer.h"

/* Reads merge neighbouring runs across holes up to this size (one larger
 * pread instead of many); writes never do, holes must stay untouched. */
enum { READ_SIEVE_GAP = 64 << 10 };
enum { DEFAULT_STRIPE = 1 << 20 };
/* Average contiguous piece per rank from which direct access beats two-phase
 * when no stripe size is known (measured on tmpfs and ext4, docs/mpiio.md). */
enum { DEFAULT_DIRECT_PIECE = 64 << 10, READ_PIECE_DIVISOR = 16 };

typedef struct {
    int64_t off, len, pos; /* file offset, length, request byte position */
    int agg;
} piece;

typedef struct {
    int64_t off, len, dc;
} agg_run;

typedef struct {
    int cycle; /* -1 when idle */
    int xfer_pending, io_pending;
    io_job job;
    io_run *runs;
    int64_t nruns;
    MPI_Datatype *types; /* derived types built for this cycle */
    int ntypes;
} tp_slot;

typedef struct {
    io_request *rq;
    surge_file *f;
    surge_hints h;
    fd_layout fd;
    int *agg_rank;
    int my_agg; /* aggregator index of this rank, -1 if none */
    int64_t cycle_size;
    int ncycles;
    piece *mine; /* grouped by aggregator, file order inside a group */
    int *mine_cycle;
    int64_t *mine_by_agg; /* [naggs + 1] */
    int64_t *theirs;      /* received (off, len) pairs, grouped by sender */
    int *their_cycle;
    int64_t *their_by_rank; /* [nprocs + 1], in pairs */
    const transfer_primitive *prim;
    xfer_ctx x;
    tp_slot slot[2];
    int err;
    /* scratch for building one message side */
    int64_t *sd, *sl;
    int64_t scratch_n, scratch_cap;
    agg_run *ar;
    int64_t ar_cap;
} tp_engine;

void twophase_resolve(const surge_file *f, surge_hints *h)
{
    if (h->fd_partition == SURGE_AUTO)
        h->fd_partition = h->stripe_size > 0 ? FD_STRIPE_ALIGNED : FD_EVEN;
    if (h->stripe_size <= 0 && h->fd_partition != FD_EVEN)
        h->stripe_size = DEFAULT_STRIPE;
    if (h->cb_nodes == SURGE_AUTO) {
        int cyclic = h->fd_partition == FD_STATIC_CYCLIC || h->fd_partition == FD_GROUP_CYCLIC;
        h->cb_nodes = cyclic && h->stripe_count > 0 ? h->stripe_count : f->nprocs;
    }
    if (h->cb_nodes > f->nprocs)
        h->cb_nodes = f->nprocs;
    if (h->algorithm == SURGE_AUTO)
        h->algorithm = ALGO_NO_OVERLAP; /* measured best on 2 cores, docs/mpiio.md */
    if (h->primitive == SURGE_AUTO)
        h->primitive = PRIM_ISEND;
    if (h->direct_piece <= 0)
        h->direct_piece = h->stripe_size > 0 ? h->stripe_size : DEFAULT_DIRECT_PIECE;
}

static void *grow(void *p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    *cap = need > 2 * *cap ? need : 2 * *cap;
    return realloc(p, (size_t)*cap * elem);
}

/* ---- offset lists ---- */

static int cycle_of(const tp_engine *e, int64_t off)
{
    int agg;
    int64_t dc, run;
    fd_locate(&e->fd, off, &agg, &dc, &run);
    return (int)(dc / e->cycle_size);
}

/* Cut this rank's file extents at domain and cycle boundaries. */
static void build_pieces(tp_engine *e)
{
    io_request *rq = e->rq;
    int64_t cap = 0, n = 0;
    piece *v = NULL;
    map_pos p;
    tiled_map_seek(&rq->file, rq->stream_start, &p);
    for (int64_t pos = 0; pos < rq->nbytes;) {
        int64_t off, len = tiled_map_next(&rq->file, &p, rq->nbytes - pos, &off);
        while (len > 0) {
            int agg;
            int64_t dc, run;
            fd_locate(&e->fd, off, &agg, &dc, &run);
            int64_t room = e->cycle_size - dc % e->cycle_size;
            int64_t l = len < run ? len : run;
            l = l < room ? l : room;
            piece *last = n ? &v[n - 1] : NULL;
            if (last && last->agg == agg && last->off + last->len == off &&
                last->pos + last->len == pos && cycle_of(e, last->off) == dc / e->cycle_size) {
                last->len += l;
            } else {
                v = grow(v, &cap, n + 1, sizeof *v);
                v[n++] = (piece){off, l, pos, agg};
            }
            off += l;
            pos += l;
            len -= l;
        }
    }
    /* stable counting sort by aggregator */
    int naggs = e->fd.naggs;
    e->mine_by_agg = calloc((size_t)naggs + 1, sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        e->mine_by_agg[v[i].agg + 1]++;
    for (int a = 0; a < naggs; a++)
        e->mine_by_agg[a + 1] += e->mine_by_agg[a];
    int64_t *fill = malloc(sizeof(int64_t) * (size_t)naggs);
    memcpy(fill, e->mine_by_agg, sizeof(int64_t) * (size_t)naggs);
    e->mine = malloc(sizeof(piece) * (size_t)(n + 1));
    e->mine_cycle = malloc(sizeof(int) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        int64_t j = fill[v[i].agg]++;
        e->mine[j] = v[i];
        e->mine_cycle[j] = cycle_of(e, v[i].off);
    }
    free(fill);
    free(v);
}

/* Each aggregator learns every rank's (offset, length) list for its domain. */
static void exchange_offsets(tp_engine *e)
{
    int np = e->f->nprocs;
    int *scount = calloc((size_t)np, sizeof(int)), *sdisp = calloc((size_t)np, sizeof(int));
    int *rcount = calloc((size_t)np, sizeof(int)), *rdisp = calloc((size_t)np, sizeof(int));
    int64_t nmine = e->mine_by_agg[e->fd.naggs];
    int64_t *sendbuf = malloc(sizeof(int64_t) * (size_t)(2 * nmine + 1));
    for (int a = 0; a < e->fd.naggs; a++) {
        int r = e->agg_rank[a];
        scount[r] = (int)(2 * (e->mine_by_agg[a + 1] - e->mine_by_agg[a]));
        sdisp[r] = (int)(2 * e->mine_by_agg[a]);
    }
    for (int64_t i = 0; i < nmine; i++) {
        sendbuf[2 * i] = e->mine[i].off;
        sendbuf[2 * i + 1] = e->mine[i].len;
    }
    MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, e->f->comm);
    e->their_by_rank = calloc((size_t)np + 1, sizeof(int64_t));
    for (int r = 0; r < np; r++) {
        rdisp[r] = (int)e->their_by_rank[r] * 2;
        e->their_by_rank[r + 1] = e->their_by_rank[r] + rcount[r] / 2;
    }
    int64_t ntheirs = e->their_by_rank[np];
    e->theirs = malloc(sizeof(int64_t) * (size_t)(2 * ntheirs + 1));
    MPI_Alltoallv(sendbuf, scount, sdisp, MPI_INT64_T, e->theirs, rcount, rdisp, MPI_INT64_T,
                  e->f->comm);
    e->their_cycle = malloc(sizeof(int) * (size_t)(ntheirs + 1));
    for (int64_t i = 0; i < ntheirs; i++)
        e->their_cycle[i] = cycle_of(e, e->theirs[2 * i]);
    free(sendbuf);
    free(scount);
    free(sdisp);
    free(rcount);
    free(rdisp);
}

/* [*lo, *hi) = the entries of cyc[lo..hi) (sorted) that belong to cycle c. */
static void cycle_slice(const int *cyc, int64_t lo, int64_t hi, int c, int64_t *a, int64_t *b)
{
    int64_t l = lo, h = hi;
    while (l < h) {
        int64_t m = (l + h) / 2;
        if (cyc[m] < c)
            l = m + 1;
        else
            h = m;
    }
    *a = l;
    h = hi;
    while (l < h) {
        int64_t m = (l + h) / 2;
        if (cyc[m] <= c)
            l = m + 1;
        else
            h = m;
    }
    *b = l;
}

/* ---- per-cycle message plan ---- */

static void scratch_push(tp_engine *e, int64_t d, int64_t len)
{
    if (e->scratch_n && e->sd[e->scratch_n - 1] + e->sl[e->scratch_n - 1] == d) {
        e->sl[e->scratch_n - 1] += len;
        return;
    }
    int64_t cap = e->scratch_cap;
    e->sd = grow(e->sd, &cap, e->scratch_n + 1, sizeof(int64_t));
    cap = e->scratch_cap;
    e->sl = grow(e->sl, &cap, e->scratch_n + 1, sizeof(int64_t));
    e->scratch_cap = cap;
    e->sd[e->scratch_n] = d;
    e->sl[e->scratch_n] = len;
    e->scratch_n++;
}

/* Describe the scratch list as (displacement, count, type): a plain byte
 * range when contiguous, an hindexed type otherwise. */
static void scratch_type(tp_engine *e, tp_slot *sl, MPI_Aint *disp, int *count,
                         MPI_Datatype *type)
{
    int64_t n = e->scratch_n;
    if (n == 1) {
        *disp = (MPI_Aint)e->sd[0];
        *count = (int)e->sl[0];
        *type = MPI_BYTE;
    } else {
        int *bl = malloc(sizeof(int) * (size_t)n);
        MPI_Aint *dd = malloc(sizeof(MPI_Aint) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            bl[i] = (int)e->sl[i];
            dd[i] = (MPI_Aint)e->sd[i];
        }
        MPI_Type_create_hindexed((int)n, bl, dd, MPI_BYTE, type);
        MPI_Type_commit(type);
        sl->types = realloc(sl->types, sizeof(MPI_Datatype) * (size_t)(sl->ntypes + 1));
        sl->types[sl->ntypes++] = *type;
        *disp = 0;
        *count = 1;
        free(bl);
        free(dd);
    }
    e->scratch_n = 0;
}

static int64_t dc_in_cycle(const tp_engine *e, int64_t off, int c)
{
    int agg;
    int64_t dc, run;
    fd_locate(&e->fd, off, &agg, &dc, &run);
    return dc - (int64_t)c * e->cycle_size;
}

static int by_offset(const void *a, const void *b)
{
    int64_t x = ((const agg_run *)a)->off, y = ((const agg_run *)b)->off;
    return (x > y) - (x < y);
}

static void plan_owner_side(tp_engine *e, tp_slot *sl, xfer_slot *xs, int c)
{
    io_request *rq = e->rq;
    xs->nowner = 0;
    for (int a = 0; a < e->fd.naggs; a++) {
        int64_t lo, hi;
        cycle_slice(e->mine_cycle, e->mine_by_agg[a], e->mine_by_agg[a + 1], c, &lo, &hi);
        if (lo == hi)
            continue;
        xfer_msg *m = &xs->owner_msgs[xs->nowner++];
        m->peer = e->agg_rank[a];
        for (int64_t i = lo; i < hi; i++) { /* user-memory side */
            map_pos mp;
            tiled_map_seek(&rq->mem, e->mine[i].pos, &mp);
            for (int64_t done = 0; done < e->mine[i].len;) {
                int64_t where, n = tiled_map_next(&rq->mem, &mp, e->mine[i].len - done, &where);
                scratch_push(e, where, n);
                done += n;
            }
        }
        MPI_Aint mdisp;
        scratch_type(e, sl, &mdisp, &m->mem_count, &m->mem_type);
        m->mem_base = rq->mem_base + mdisp;
        for (int64_t i = lo; i < hi; i++) /* aggregator side */
            scratch_push(e, dc_in_cycle(e, e->mine[i].off, c), e->mine[i].len);
        scratch_type(e, sl, &m->buf_disp, &m->buf_count, &m->buf_type);
    }
}

static void plan_aggregator_side(tp_engine *e, tp_slot *sl, xfer_slot *xs, int s, int c)
{
    int64_t nar = 0;
    xs->nagg = 0;
    for (int r = 0; r < e->f->nprocs; r++) {
        int64_t lo, hi;
        cycle_slice(e->their_cycle, e->their_by_rank[r], e->their_by_rank[r + 1], c, &lo, &hi);
        if (lo == hi)
            continue;
        xfer_msg *m = &xs->agg_msgs[xs->nagg++];
        m->peer = r;
        for (int64_t i = lo; i < hi; i++) {
            int64_t off = e->theirs[2 * i], len = e->theirs[2 * i + 1];
            int64_t dc = dc_in_cycle(e, off, c);
            scratch_push(e, dc, len);
            e->ar = grow(e->ar, &e->ar_cap, nar + 1, sizeof(agg_run));
            e->ar[nar++] = (agg_run){off, len, dc};
        }
        scratch_type(e, sl, &m->buf_disp, &m->buf_count, &m->buf_type);
    }
    /* File runs: sort the cycle's pieces by offset and coalesce. */
    qsort(e->ar, (size_t)nar, sizeof(agg_run), by_offset);
    sl->runs = realloc(sl->runs, sizeof(io_run) * (size_t)(nar + 1));
    sl->nruns = 0;
    int64_t gap_limit = e->rq->is_write ? 0 : READ_SIEVE_GAP;
    for (int64_t i = 0; i < nar; i++) {
        io_run *last = sl->nruns ? &sl->runs[sl->nruns - 1] : NULL;
        if (last) {
            int64_t gap = e->ar[i].off - (last->off + last->len);
            char *dst = e->x.slot_buf[s] + e->ar[i].dc;
            if (gap >= 0 && gap <= gap_limit && dst - (last->buf + last->len) == gap) {
                last->len += gap + e->ar[i].len;
                continue;
            }
        }
        sl->runs[sl->nruns++] =
            (io_run){e->x.slot_buf[s] + e->ar[i].dc, e->ar[i].off, e->ar[i].len};
    }
}

static void plan_slot(tp_engine *e, int s, int c)
{
    tp_slot *sl = &e->slot[s];
    xfer_slot *xs = &e->x.slot[s];
    sl->cycle = c;
    plan_owner_side(e, sl, xs, c);
    if (e->my_agg >= 0)
        plan_aggregator_side(e, sl, xs, s, c);
}

static void release_slot(tp_engine *e, int s)
{
    tp_slot *sl = &e->slot[s];
    for (int i = 0; i < sl->ntypes; i++)
        MPI_Type_free(&sl->types[i]);
    sl->ntypes = 0;
    sl->nruns = 0;
    sl->cycle = -1;
    e->x.slot[s].nowner = e->x.slot[s].nagg = 0;
}

/* ---- pipeline stages ---- */

static void note_error(tp_engine *e, int err)
{
    if (err && !e->err)
        e->err = posix_errno_to_mpi(err);
}

static void file_start(tp_engine *e, int s, int async)
{
    tp_slot *sl = &e->slot[s];
    if (sl->nruns == 0 || e->err) /* after an error: keep communicating, stop writing */
        return;
    if (async && e->f->worker) {
        sl->job.fd = e->f->fd;
        sl->job.is_write = e->rq->is_write;
        sl->job.runs = sl->runs;
        sl->job.nruns = sl->nruns;
        io_job_submit(e->f->worker, &sl->job);
        sl->io_pending = 1;
    } else {
        note_error(e, posix_runs(e->f->fd, e->rq->is_write, sl->runs, sl->nruns));
    }
}

static void file_wait(tp_engine *e, int s)
{
    tp_slot *sl = &e->slot[s];
    if (!sl->io_pending)
        return;
    worker_wait(e->f->worker, &sl->job.item);
    sl->io_pending = 0;
    note_error(e, sl->job.err);
}

/* Writes: stage 0 shuffles, stage 1 writes. Reads: stage 0 reads, 1 shuffles. */
static int is_shuffle(const tp_engine *e, int stage)
{
    return (stage == 0) == e->rq->is_write;
}

static void stage_start(void *ctx, int stage, int s, int cycle, int async)
{
    tp_engine *e = ctx;
    if (stage == 0)
        plan_slot(e, s, cycle);
    if (is_shuffle(e, stage)) {
        e->prim->start(&e->x, s);
        e->slot[s].xfer_pending = 1;
    } else if (e->my_agg >= 0) {
        file_start(e, s, async);
    }
}

static void stage_wait(void *ctx, int stage, int s)
{
    tp_engine *e = ctx;
    tp_slot *sl = &e->slot[s];
    if (sl->cycle < 0)
        return;
    if (is_shuffle(e, stage)) {
        if (sl->xfer_pending)
            e->prim->finish(&e->x, s);
        sl->xfer_pending = 0;
    } else {
        file_wait(e, s);
    }
    if (stage == 1)
        release_slot(e, s);
}

/* ---- driver ---- */

static void request_range(io_request *rq, int64_t *start, int64_t *end)
{
    map_pos p;
    int64_t off;
    tiled_map_seek(&rq->file, rq->stream_start, &p);
    tiled_map_next(&rq->file, &p, 1, &off);
    *start = off;
    tiled_map_seek(&rq->file, rq->stream_start + rq->nbytes - 1, &p);
    tiled_map_next(&rq->file, &p, 1, &off);
    *end = off + 1;
}

static void engine_free(tp_engine *e)
{
    for (int s = 0; s < 2; s++) {
        free(e->slot[s].runs);
        free(e->slot[s].types);
        free(e->x.slot[s].owner_msgs);
        free(e->x.slot[s].agg_msgs);
    }
    free(e->agg_rank);
    free(e->mine);
    free(e->mine_cycle);
    free(e->mine_by_agg);
    free(e->theirs);
    free(e->their_cycle);
    free(e->their_by_rank);
    free(e->sd);
    free(e->sl);
    free(e->ar);
}

static int by_start(const void *a, const void *b)
{
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

/* What every rank tells the others before a collective call. */
enum { A_START, A_END, A_ERR, A_FALLBACK, A_PIECE, A_FIELDS };

/* all[] holds A_FIELDS-tuples; ranks without data have start >= end. */
static int ranges_interleave(int64_t *all, int n)
{
    qsort(all, (size_t)n, A_FIELDS * sizeof(int64_t), by_start);
    int64_t reach = INT64_MIN;
    for (int i = 0; i < n; i++) {
        const int64_t *a = all + A_FIELDS * i;
        if (a[0] >= a[1])
            continue;
        if (a[0] < reach)
            return 1;
        reach = a[1] > reach ? a[1] : reach;
    }
    return 0;
}

int twophase_run(io_request *rq, int local_err)
{
    surge_file *f = rq->f;
    int64_t start = INT64_MAX, end = 0, piece = INT64_MAX;
    if (!local_err && rq->decodable && rq->nbytes > 0) {
        map_pos p;
        request_range(rq, &start, &end);
        piece = rq->nbytes / tiled_map_elements(&rq->file, rq->stream_start, rq->nbytes, &p);
    }
    /* One allgather agrees on argument errors, PMPI fallback, the accessed
     * range, whether ranks' ranges interleave, and the smallest average
     * contiguous file piece of any rank. */
    int64_t mine[A_FIELDS] = {start, end, local_err, !rq->decodable, piece};
    int64_t *all = malloc(sizeof(int64_t) * A_FIELDS * (size_t)f->nprocs);
    MPI_Allgather(mine, A_FIELDS, MPI_INT64_T, all, A_FIELDS, MPI_INT64_T, f->comm);
    int64_t err = 0, fallback = 0;
    int interleaved = ranges_interleave(all, f->nprocs); /* sorts all[] */
    for (int r = 0; r < f->nprocs; r++) {
        const int64_t *a = all + A_FIELDS * r;
        err = a[A_ERR] > err ? a[A_ERR] : err;
        fallback |= a[A_FALLBACK];
        start = a[A_START] < start ? a[A_START] : start;
        end = a[A_END] > end ? a[A_END] : end;
        piece = a[A_PIECE] < piece ? a[A_PIECE] : piece;
    }
    free(all);
    if (err)
        return (int)err;
    if (fallback)
        return TWOPHASE_USE_PMPI;
    if (end <= start)
        return MPI_SUCCESS; /* nobody accesses anything */
    tp_engine e;
    memset(&e, 0, sizeof e);
    e.h = f->hints;
    twophase_resolve(f, &e.h);
    /* Reads share pages and locks without conflict, so they go direct from
     * smaller pieces than writes (measured crossovers: about 4 KiB and
     * 64 KiB on tmpfs and ext4). */
    int64_t direct_piece = rq->is_write ? e.h.direct_piece : e.h.direct_piece / READ_PIECE_DIVISOR;
    if (e.h.cb == 0 || (e.h.cb == SURGE_AUTO && (!interleaved || piece >= direct_piece))) {
        /* Shuffling buys nothing when ranks' ranges are disjoint (as ROMIO's
         * romio_cb_*=automatic sees it) or when every rank's pieces are
         * already large: each rank accesses its own data directly. */
        int rc = indep_run(rq), any;
        MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, f->comm);
        return any;
    }

    e.rq = rq;
    e.f = f;
    const overlap_algorithm *algo = &overlap_algorithms[e.h.algorithm];
    e.prim = &transfer_primitives[e.h.primitive];
    fd_layout_init(&e.fd, e.h.fd_partition, e.h.cb_nodes, start, end, e.h.stripe_size,
                   e.h.stripe_count);
    e.cycle_size = e.h.cb_buffer_size / algo->nslots;
    if (e.h.fd_partition != FD_EVEN && e.cycle_size >= e.fd.stripe)
        e.cycle_size -= e.cycle_size % e.fd.stripe; /* stripe-aligned cycles */
    e.ncycles = (int)((e.fd.span + e.cycle_size - 1) / e.cycle_size);
    e.agg_rank = malloc(sizeof(int) * (size_t)e.fd.naggs);
    e.my_agg = -1;
    for (int a = 0; a < e.fd.naggs; a++) {
        e.agg_rank[a] = (int)((int64_t)a * f->nprocs / e.fd.naggs);
        if (e.agg_rank[a] == f->rank)
            e.my_agg = a;
    }
    for (int s = 0; s < 2; s++) {
        e.slot[s].cycle = -1;
        e.x.slot[s].owner_msgs = malloc(sizeof(xfer_msg) * (size_t)e.fd.naggs);
        e.x.slot[s].agg_msgs = malloc(sizeof(xfer_msg) * (size_t)f->nprocs);
    }
    e.x.comm = f->comm;
    e.x.to_aggregator = rq->is_write;
    e.x.is_aggregator = e.my_agg >= 0;
    e.x.nslots = algo->nslots;
    e.x.slot_size = e.cycle_size;
    if (algo->nslots > 1 && e.my_agg >= 0 && !f->worker)
        f->worker = worker_start(); /* NULL: file access simply stays synchronous */

    build_pieces(&e);
    exchange_offsets(&e);
    int rc = e.prim->open(&e.x), any_rc;
    MPI_Allreduce(&rc, &any_rc, 1, MPI_INT, MPI_MAX, f->comm); /* e.g. out of memory */
    if (any_rc == MPI_SUCCESS) {
        pipeline_ops ops = {&e, stage_start, stage_wait};
        (rq->is_write ? algo->write_schedule : algo->read_schedule)(&ops, e.ncycles);
    } else {
        e.err = any_rc;
    }
    if (rc == MPI_SUCCESS)
        e.prim->close(&e.x);
    int global_err;
    MPI_Allreduce(&e.err, &global_err, 1, MPI_INT, MPI_MAX, f->comm);
    engine_free(&e);
    return global_err;
}
