#include "indep_io.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    map_pos file, mem;  /* where the cycle starts in the view and in the buffer */
    int64_t len;        /* bytes in the cycle */
    int64_t nfile, nmem; /* elements touched: N and M */
} cycle_args;

/* One thread's io array, merged runs and bounce buffer. Kept with the file
 * across calls: at 1-byte elements a 2 MiB cycle needs 96 MiB of arrays, and
 * faulting fresh pages in every call (in every thread, all contending for
 * the process's memory map) cost more than the threads gained. */
struct indep_scratch {
    io_run *runs, *merged;
    int64_t cap;
    char *bounce;
    int64_t bounce_cap;
};

typedef struct {
    io_request *rq;
    const cycle_args *cycles;
    int ncycles, nthreads, tid;
    indep_scratch *scratch;
    int err; /* errno */
} thread_arg;

/* Pre-calculation: prefix-sum seeks only, no element-by-element matching. */
static cycle_args *precalculate(io_request *rq, int64_t cycle, int ncycles)
{
    cycle_args *a = malloc(sizeof *a * (size_t)ncycles);
    for (int i = 0; i < ncycles; i++) {
        int64_t pos = (int64_t)i * cycle;
        a[i].len = rq->nbytes - pos < cycle ? rq->nbytes - pos : cycle;
        a[i].nfile = tiled_map_elements(&rq->file, rq->stream_start + pos, a[i].len, &a[i].file);
        a[i].nmem = tiled_map_elements(&rq->mem, pos, a[i].len, &a[i].mem);
    }
    return a;
}

/* Build IO for one cycle: merge-walk the view against the buffer. */
static int64_t build_io_array(io_request *rq, const cycle_args *c, io_run *out)
{
    map_pos fp = c->file, mp = c->mem;
    int64_t foff = 0, flen = 0, moff = 0, mlen = 0, left = c->len, n = 0;
    while (left > 0) {
        if (!flen)
            flen = tiled_map_next(&rq->file, &fp, left, &foff);
        if (!mlen)
            mlen = tiled_map_next(&rq->mem, &mp, left, &moff);
        int64_t l = flen < mlen ? flen : mlen;
        out[n++] = (io_run){rq->mem_base + moff, foff, l};
        foff += l, flen -= l;
        moff += l, mlen -= l;
        left -= l;
    }
    return n;
}

/* Entries below this average size are copied through a contiguous bounce
 * buffer: one pwrite of the cycle costs far less than a pwritev of thousands
 * of tiny iovecs, and each thread gathers (or scatters) its own cycles, so
 * the copy runs in parallel. */
enum { GATHER_BELOW_AVG_RUN = 4096 };

/* File access of one cycle's io array through `bounce`: runs adjacent in the
 * file become one run of the bounce buffer (`merged` has room for n). */
static int through_bounce(io_request *rq, const io_run *runs, int64_t n, char *bounce,
                          io_run *merged)
{
    int64_t nmerged = 0, pos = 0;
    for (int64_t i = 0; i < n; i++, pos += runs[i - 1].len) {
        io_run *last = nmerged ? &merged[nmerged - 1] : NULL;
        if (last && last->off + last->len == runs[i].off)
            last->len += runs[i].len;
        else
            merged[nmerged++] = (io_run){bounce + pos, runs[i].off, runs[i].len};
        if (rq->is_write)
            memcpy(bounce + pos, runs[i].buf, (size_t)runs[i].len);
    }
    int err = posix_runs(rq->f->fd, rq->is_write, merged, nmerged);
    for (int64_t i = 0, p = 0; !rq->is_write && !err && i < n; p += runs[i++].len)
        memcpy(runs[i].buf, bounce + p, (size_t)runs[i].len);
    return err;
}

static void *thread_main(void *p)
{
    thread_arg *t = p;
    indep_scratch *s = t->scratch;
    for (int i = t->tid; i < t->ncycles && !t->err; i += t->nthreads) {
        const cycle_args *c = &t->cycles[i];
        int64_t bound = c->nfile + c->nmem - 1; /* exact upper bound on entries */
        if (bound > s->cap) {
            free(s->runs);
            free(s->merged);
            s->runs = malloc(sizeof *s->runs * (size_t)bound);
            s->merged = malloc(sizeof *s->merged * (size_t)bound);
            s->cap = s->runs && s->merged ? bound : 0;
            if (!s->cap) {
                t->err = ENOMEM;
                break;
            }
        }
        int64_t n = build_io_array(t->rq, c, s->runs);
        int gather = n > 1 && c->len < GATHER_BELOW_AVG_RUN * n;
        if (gather && c->len > s->bounce_cap) {
            free(s->bounce);
            s->bounce = malloc((size_t)c->len);
            s->bounce_cap = s->bounce ? c->len : 0;
        }
        if (gather && s->bounce)
            t->err = through_bounce(t->rq, s->runs, n, s->bounce, s->merged);
        else
            t->err = posix_runs(t->rq->f->fd, t->rq->is_write, s->runs, n);
    }
    return NULL;
}

/* At least n scratch slots on the file. */
static indep_scratch *scratch_for(surge_file *f, int n)
{
    if (n > f->nscratch) {
        indep_scratch *grown = realloc(f->scratch, sizeof *grown * (size_t)n);
        if (!grown)
            return NULL;
        memset(grown + f->nscratch, 0, sizeof *grown * (size_t)(n - f->nscratch));
        f->scratch = grown;
        f->nscratch = n;
    }
    return f->scratch;
}

void indep_release(surge_file *f)
{
    for (int i = 0; i < f->nscratch; i++) {
        free(f->scratch[i].runs);
        free(f->scratch[i].merged);
        free(f->scratch[i].bounce);
    }
    free(f->scratch);
    f->scratch = NULL;
    f->nscratch = 0;
}

int indep_run(io_request *rq)
{
    if (rq->nbytes == 0)
        return MPI_SUCCESS;
    int64_t cycle = rq->f->hints.ind_cycle_size;
    int ncycles = (int)((rq->nbytes + cycle - 1) / cycle);
    int nthreads = rq->f->hints.io_threads;
    if (nthreads > ncycles) /* [Feki22, ch. 4] caps threads at the number of cycles */
        nthreads = ncycles;
    if (nthreads < 1)
        nthreads = 1;
    indep_scratch *scratch = scratch_for(rq->f, nthreads);
    if (!scratch)
        return MPI_ERR_NO_MEM;
    cycle_args *cycles = precalculate(rq, cycle, ncycles);
    thread_arg *args = calloc((size_t)nthreads, sizeof *args);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    char *spawned = calloc((size_t)nthreads, 1);
    for (int t = 0; t < nthreads; t++) {
        args[t] = (thread_arg){rq, cycles, ncycles, nthreads, t, &scratch[t], 0};
        if (t > 0) /* thread 0 is the caller */
            spawned[t] = pthread_create(&th[t], NULL, thread_main, &args[t]) == 0;
    }
    thread_main(&args[0]);
    int err = args[0].err;
    for (int t = 1; t < nthreads; t++) {
        if (spawned[t])
            pthread_join(th[t], NULL);
        else
            thread_main(&args[t]); /* could not spawn: do its cycles here */
        if (!err)
            err = args[t].err;
    }
    free(spawned);
    free(th);
    free(args);
    free(cycles);
    return posix_errno_to_mpi(err);
}
