/* Hints: defaults, SURGE_MPIIO_* environment variables, MPI_Info keys.
 * Precedence: MPI_Info hint > environment variable > built-in default. */
#ifndef SURGE_HINTS_H
#define SURGE_HINTS_H

#include <mpi.h>
#include <stdint.h>

enum { SURGE_AUTO = -1 };

typedef enum {
    ALGO_NO_OVERLAP,
    ALGO_COMM,
    ALGO_WRITE,
    ALGO_WRITE_COMM,
    ALGO_WRITE_COMM2,
    ALGO_COUNT
} surge_algo;

typedef enum { PRIM_ISEND, PRIM_PUT_FENCE, PRIM_PUT_LOCK, PRIM_COUNT } surge_primitive;

typedef enum {
    FD_EVEN,
    FD_STRIPE_ALIGNED,
    FD_STATIC_CYCLIC,
    FD_GROUP_CYCLIC,
    FD_COUNT
} surge_fd_partition;

typedef struct {
    int enabled;         /* surge_mpiio=enable|disable: disable leaves the file to PMPI */
    int cb;              /* surge_cb: SURGE_AUTO, 1 = always two-phase, 0 = never */
    int algorithm;       /* surge_algorithm, SURGE_AUTO or surge_algo */
    int primitive;       /* surge_primitive */
    int fd_partition;    /* surge_fd_partition */
    int cb_nodes;        /* aggregators; SURGE_AUTO = automatic */
    int64_t cb_buffer_size;
    int64_t stripe_size; /* surge_stripe_size / striping_unit; 0 = unknown */
    int stripe_count;    /* striping_factor; 0 = unknown */
    int io_threads;      /* surge_io_threads for individual I/O */
    int64_t ind_cycle_size; /* surge_ind_cycle_size: individual I/O cycle buffer */
    int64_t direct_piece;   /* surge_direct_piece: cb=auto goes direct from this piece size */
} surge_hints;

extern const char *const surge_algo_names[ALGO_COUNT];
extern const char *const surge_primitive_names[PRIM_COUNT];
extern const char *const surge_fd_partition_names[FD_COUNT];

void hints_init(surge_hints *h);               /* defaults, then environment */
void hints_apply_info(surge_hints *h, MPI_Info info);
/* Stripe size/count of an existing Lustre file (xattr "lustre.lov"); leaves
 * h unchanged elsewhere. Surge's own layout arrives through hints for now. */
void hints_detect_layout(surge_hints *h, const char *path);
/* Writes every key, with the value in effect (resolved when the caller knows it). */
void hints_export(const surge_hints *h, MPI_Info info);

#endif
