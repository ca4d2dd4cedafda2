/* Shuffle data-transfer primitives ([Feki22, §3.3]): two-sided Isend/Irecv,
 * one-sided MPI_Put/Get with fence (active target), and MPI_Put/Get under a
 * shared passive-target lock plus barriers. All move the same message plan:
 * per sub-buffer slot, a list of (user memory <-> aggregator sub-buffer)
 * messages, each side described by a base, a count and a datatype. */
#ifndef SURGE_TRANSFER_H
#define SURGE_TRANSFER_H

#include <mpi.h>
#include <stdint.h>

typedef struct {
    int peer; /* rank in the file's communicator */
    /* the data owner's user memory */
    void *mem_base;
    int mem_count;
    MPI_Datatype mem_type;
    /* the aggregator's sub-buffer: displacement from its start */
    MPI_Aint buf_disp;
    int buf_count;
    MPI_Datatype buf_type;
} xfer_msg;

typedef struct {
    xfer_msg *owner_msgs; /* I own the data; peer is the aggregator */
    int nowner;
    xfer_msg *agg_msgs;   /* I am the aggregator; peer owns the data */
    int nagg;
    MPI_Request *reqs;
    int nreqs;
} xfer_slot;

typedef struct {
    MPI_Comm comm;
    int to_aggregator;  /* 1 for writes (owners -> aggregators), 0 for reads */
    int is_aggregator;
    int nslots;
    int64_t slot_size;
    char *slot_buf[2];  /* the aggregator's sub-buffers (window memory for RMA) */
    MPI_Win win[2];
    xfer_slot slot[2];
} xfer_ctx;

typedef struct {
    const char *name;
    int (*open)(xfer_ctx *x); /* collective: allocates slot_buf (and windows) */
    void (*start)(xfer_ctx *x, int slot);
    void (*finish)(xfer_ctx *x, int slot);
    void (*close)(xfer_ctx *x);
} transfer_primitive;

/* Indexed by surge_primitive. */
extern const transfer_primitive transfer_primitives[];

#endif
