/* Per-file state, found from the MPI_File handle through a small hash table. */
#ifndef SURGE_FILE_STATE_H
#define SURGE_FILE_STATE_H

#include <mpi.h>
#include <stdint.h>

#include "flatten.h"
#include "hints.h"
#include "posix_io.h"

typedef struct indep_scratch indep_scratch;

typedef struct surge_file {
    MPI_File fh;
    MPI_Comm comm;       /* private duplicate: our messages never meet the user's */
    int rank, nprocs;
    int fd;              /* our own POSIX descriptor on the opened path */
    int amode;
    int view_supported;  /* 0: view not decodable, PMPI serves data calls until next set_view */
    int atomic;          /* atomic mode is left to PMPI */
    surge_hints hints;   /* identical on every rank (broadcast from rank 0) */
    MPI_Offset disp;
    int64_t etype_size;
    flat_type filetype;
    worker *worker;      /* file access thread, started on first asynchronous access */
    worker *progress;    /* runs nonblocking calls in the background, or NULL */
    struct nb_op *split_op;     /* the pending split collective, or NULL */
    indep_scratch *scratch; /* individual I/O buffers, one per thread */
    int nscratch;
    struct surge_file *next;
} surge_file;

surge_file *file_state_find(MPI_File fh);
void file_state_add(surge_file *f);
void file_state_remove(surge_file *f);

#endif
