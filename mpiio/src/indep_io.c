#include "indep_io.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct {
    map_pos file, mem;  /* where the cycle starts in the view and in the buffer */
    int64_t len;        /* bytes in the cycle */
    int64_t nfile, nmem; /* elements touched: N and M */
} cycle_args;

typedef struct {
    io_request *rq;
    const cycle_args *cycles;
    int ncycles, nthreads, tid;
    int err; /* errno */
} thread_arg;

static int64_t elements_between(const tiled_map *m, int64_t from, int64_t len, map_pos *start)
{
    map_pos last;
    tiled_map_seek(m, from, start);
    tiled_map_seek(m, from + len - 1, &last);
    return tiled_map_element(m, &last) - tiled_map_element(m, start) + 1;
}

/* Pre-calculation: prefix-sum seeks only, no element-by-element matching. */
static cycle_args *precalculate(io_request *rq, int64_t cycle, int ncycles)
{
    cycle_args *a = malloc(sizeof *a * (size_t)ncycles);
    for (int i = 0; i < ncycles; i++) {
        int64_t pos = (int64_t)i * cycle;
        a[i].len = rq->nbytes - pos < cycle ? rq->nbytes - pos : cycle;
        a[i].nfile = elements_between(&rq->file, rq->stream_start + pos, a[i].len, &a[i].file);
        a[i].nmem = elements_between(&rq->mem, pos, a[i].len, &a[i].mem);
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

static void *thread_main(void *p)
{
    thread_arg *t = p;
    io_run *runs = NULL;
    int64_t cap = 0;
    for (int i = t->tid; i < t->ncycles && !t->err; i += t->nthreads) {
        const cycle_args *c = &t->cycles[i];
        int64_t bound = c->nfile + c->nmem - 1; /* exact upper bound on entries */
        if (bound > cap) {
            free(runs);
            cap = bound;
            runs = malloc(sizeof *runs * (size_t)cap);
        }
        int64_t n = build_io_array(t->rq, c, runs);
        t->err = posix_runs(t->rq->f->fd, t->rq->is_write, runs, n);
    }
    free(runs);
    return NULL;
}

int indep_run(io_request *rq)
{
    if (rq->nbytes == 0)
        return MPI_SUCCESS;
    int64_t cycle = rq->f->hints.ind_cycle_size;
    int ncycles = (int)((rq->nbytes + cycle - 1) / cycle);
    int nthreads = rq->f->hints.io_threads;
    if (nthreads > ncycles) /* the thesis caps threads at the number of cycles */
        nthreads = ncycles;
    if (nthreads < 1)
        nthreads = 1;
    cycle_args *cycles = precalculate(rq, cycle, ncycles);
    thread_arg *args = calloc((size_t)nthreads, sizeof *args);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    char *spawned = calloc((size_t)nthreads, 1);
    for (int t = 0; t < nthreads; t++) {
        args[t] = (thread_arg){rq, cycles, ncycles, nthreads, t, 0};
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
