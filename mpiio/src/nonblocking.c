#include "nonblocking.h"

#include <stdlib.h>

#include "access.h"
#include "twophase.h"

struct nb_op {
    work_item item; /* first: the progress thread hands back this pointer */
    surge_file *f;
    int flags;
    MPI_Offset offset;
    const void *buf;
    int count;
    MPI_Datatype type; /* a duplicate: the caller may free its handle at once */
    MPI_Request req;   /* generalized request, or MPI_REQUEST_NULL (split) */
    MPI_Count bytes;
    int rc;
};

/* Open MPI 4.1.4 deadlocks when the one-sided primitives create or free
 * their windows (MPI_Win_allocate / MPI_Win_free agree on a communicator id)
 * in this thread while the caller waits in MPI_Wait: such collective calls
 * run eagerly. */
static int in_background(const surge_file *f, int flags)
{
    int level;
    MPI_Query_thread(&level);
    if (level != MPI_THREAD_MULTIPLE)
        return 0;
    surge_hints h = f->hints;
    twophase_resolve(f, &h);
    return !(flags & OP_COLLECTIVE) || h.primitive == PRIM_ISEND;
}

static int greq_query(void *state, MPI_Status *st)
{
    nb_op *op = state;
    access_set_status(st, op->bytes);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    st->MPI_ERROR = op->rc;
    return op->rc;
}

static int greq_free(void *state)
{
    free(state);
    return MPI_SUCCESS;
}

static int greq_cancel(void *state, int complete)
{
    (void)state, (void)complete; /* a started access cannot be taken back */
    return MPI_SUCCESS;
}

static void execute(nb_op *op)
{
    op->rc = access_run(op->f, op->flags, op->offset, op->buf, op->count, op->type, &op->bytes);
    if (op->rc != MPI_SUCCESS)
        PMPI_File_call_errhandler(op->f->fh, op->rc);
}

static void run_in_background(work_item *item)
{
    nb_op *op = (nb_op *)item;
    execute(op);
    MPI_Type_free(&op->type);
}

/* After this the caller's MPI_Wait may return and free op. */
static void complete_request(work_item *item)
{
    MPI_Grequest_complete(((nb_op *)item)->req);
}

nb_op *nonblocking_start(surge_file *f, int flags, MPI_Offset offset, const void *buf, int count,
                         MPI_Datatype type, MPI_Request *req, int *rc)
{
    nb_op *op = calloc(1, sizeof *op);
    *op = (nb_op){.f = f, .flags = flags, .offset = offset, .buf = buf, .count = count,
                  .req = MPI_REQUEST_NULL};
    int background = in_background(f, flags);
    if (background && !f->progress)
        f->progress = worker_start(); /* NULL: the call runs eagerly */
    *rc = MPI_SUCCESS;
    if (!background || !f->progress) { /* eager: run now, hand back a completed request */
        nonblocking_drain(f);
        op->type = type;
        execute(op);
        op->item.done = 1;
        *rc = op->rc;
        if (*rc != MPI_SUCCESS && req) {
            free(op);
            *req = MPI_REQUEST_NULL;
            return NULL;
        }
        if (req) {
            MPI_Grequest_start(greq_query, greq_free, greq_cancel, op, req);
            MPI_Grequest_complete(*req);
        }
        return op;
    }
    MPI_Type_dup(type, &op->type);
    if (req) {
        MPI_Grequest_start(greq_query, greq_free, greq_cancel, op, req);
        op->req = *req;
    }
    op->item.run = run_in_background;
    op->item.finished = req ? complete_request : NULL;
    worker_submit(f->progress, &op->item);
    return op;
}

int nonblocking_finish(nb_op *op, MPI_Count *bytes)
{
    if (!op->item.done)
        worker_wait(op->f->progress, &op->item);
    int rc = op->rc;
    *bytes = op->bytes;
    free(op);
    return rc;
}

void nonblocking_drain(surge_file *f)
{
    if (f->progress)
        worker_drain(f->progress);
}

void nonblocking_stop(surge_file *f)
{
    worker_stop(f->progress);
    f->progress = NULL;
}
