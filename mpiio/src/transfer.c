#include "transfer.h"

#include <stdlib.h>

#include "hints.h"

enum { SHUFFLE_TAG = 7301 };

/* ---- two-sided ---- */

static int p2p_open(xfer_ctx *x)
{
    for (int s = 0; s < x->nslots; s++) {
        x->slot_buf[s] = x->is_aggregator ? malloc((size_t)x->slot_size) : NULL;
        if (x->is_aggregator && !x->slot_buf[s])
            return MPI_ERR_NO_MEM;
    }
    return MPI_SUCCESS;
}

static void p2p_post(xfer_ctx *x, int s, const xfer_msg *m, int n, int agg_side, int recv)
{
    xfer_slot *sl = &x->slot[s];
    for (int i = 0; i < n; i++) {
        void *base = agg_side ? x->slot_buf[s] + m[i].buf_disp : m[i].mem_base;
        int count = agg_side ? m[i].buf_count : m[i].mem_count;
        MPI_Datatype type = agg_side ? m[i].buf_type : m[i].mem_type;
        MPI_Request *r = &sl->reqs[sl->nreqs++];
        if (recv)
            MPI_Irecv(base, count, type, m[i].peer, SHUFFLE_TAG + s, x->comm, r);
        else
            MPI_Isend(base, count, type, m[i].peer, SHUFFLE_TAG + s, x->comm, r);
    }
}

static void p2p_start(xfer_ctx *x, int s)
{
    xfer_slot *sl = &x->slot[s];
    sl->reqs = realloc(sl->reqs, sizeof(MPI_Request) * (size_t)(sl->nowner + sl->nagg + 1));
    sl->nreqs = 0;
    /* Receives first, so that eager data finds a posted buffer. */
    if (x->to_aggregator) {
        p2p_post(x, s, sl->agg_msgs, sl->nagg, 1, 1);
        p2p_post(x, s, sl->owner_msgs, sl->nowner, 0, 0);
    } else {
        p2p_post(x, s, sl->owner_msgs, sl->nowner, 0, 1);
        p2p_post(x, s, sl->agg_msgs, sl->nagg, 1, 0);
    }
}

static void p2p_finish(xfer_ctx *x, int s)
{
    MPI_Waitall(x->slot[s].nreqs, x->slot[s].reqs, MPI_STATUSES_IGNORE);
    x->slot[s].nreqs = 0;
}

static void p2p_close(xfer_ctx *x)
{
    for (int s = 0; s < x->nslots; s++) {
        free(x->slot_buf[s]);
        free(x->slot[s].reqs);
    }
}

/* ---- one-sided: windows over the sub-buffers, size 0 on non-aggregators ---- */

/* MPICH 4.0.2 (ch4) places every rank's window memory wrongly after the
 * first when a size is not a multiple of 16 bytes: puts land 8 bytes off or
 * on the wrong rank. Rounding up costs nothing elsewhere. */
enum { WIN_SIZE_QUANTUM = 64 };

static int rma_open(xfer_ctx *x)
{
    for (int s = 0; s < x->nslots; s++) {
        MPI_Aint size = x->is_aggregator ? (MPI_Aint)x->slot_size : 0;
        size = (size + WIN_SIZE_QUANTUM - 1) / WIN_SIZE_QUANTUM * WIN_SIZE_QUANTUM;
        int rc = MPI_Win_allocate(size, 1, MPI_INFO_NULL, x->comm, &x->slot_buf[s], &x->win[s]);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    return MPI_SUCCESS;
}

static void rma_issue(xfer_ctx *x, int s, int lock_each)
{
    const xfer_slot *sl = &x->slot[s];
    for (int i = 0; i < sl->nowner; i++) {
        const xfer_msg *m = &sl->owner_msgs[i];
        if (lock_each)
            MPI_Win_lock(MPI_LOCK_SHARED, m->peer, 0, x->win[s]);
        if (x->to_aggregator)
            MPI_Put(m->mem_base, m->mem_count, m->mem_type, m->peer, m->buf_disp, m->buf_count,
                    m->buf_type, x->win[s]);
        else
            MPI_Get(m->mem_base, m->mem_count, m->mem_type, m->peer, m->buf_disp, m->buf_count,
                    m->buf_type, x->win[s]);
    }
}

static void rma_close(xfer_ctx *x)
{
    for (int s = 0; s < x->nslots; s++)
        MPI_Win_free(&x->win[s]);
}

/* Fence: one fence opens the epoch in start, a second completes it. */
static void fence_start(xfer_ctx *x, int s)
{
    MPI_Win_fence(MPI_MODE_NOPRECEDE, x->win[s]);
    rma_issue(x, s, 0);
}

static void fence_finish(xfer_ctx *x, int s)
{
    MPI_Win_fence(MPI_MODE_NOSUCCEED, x->win[s]);
}

/* Passive target: the target cannot see when puts end, nor may origins touch a
 * sub-buffer still under file access, hence a barrier on each side: start's
 * barrier says "every aggregator is done with this sub-buffer" (writes) or "its
 * data is ready" (reads); finish's says "all transfers are complete". */
static void lock_start(xfer_ctx *x, int s)
{
    MPI_Barrier(x->comm);
    rma_issue(x, s, 1);
}

static void lock_finish(xfer_ctx *x, int s)
{
    const xfer_slot *sl = &x->slot[s];
    for (int i = 0; i < sl->nowner; i++)
        MPI_Win_unlock(sl->owner_msgs[i].peer, x->win[s]);
    MPI_Barrier(x->comm);
    if (x->is_aggregator && x->to_aggregator) { /* make remote puts visible locally */
        int me;
        MPI_Comm_rank(x->comm, &me);
        MPI_Win_lock(MPI_LOCK_SHARED, me, 0, x->win[s]);
        MPI_Win_sync(x->win[s]);
        MPI_Win_unlock(me, x->win[s]);
    }
}

const transfer_primitive transfer_primitives[PRIM_COUNT] = {
    [PRIM_ISEND] = {"isend", p2p_open, p2p_start, p2p_finish, p2p_close},
    [PRIM_PUT_FENCE] = {"put_fence", rma_open, fence_start, fence_finish, rma_close},
    [PRIM_PUT_LOCK] = {"put_lock", rma_open, lock_start, lock_finish, rma_close},
};
