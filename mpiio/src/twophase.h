/* Two-phase collective I/O engine: offset-list exchange, aggregator
 * selection, file-domain partitioning, cycles bounded by cb_buffer_size, and
 * the shuffle / file-access stages driven by an overlap algorithm. When the
 * ranks' byte ranges do not interleave (and surge_cb is auto), every rank
 * accesses its own data directly instead. */
#ifndef SURGE_TWOPHASE_H
#define SURGE_TWOPHASE_H

#include "request.h"

enum { TWOPHASE_USE_PMPI = -1 };

/* Collective over rq->f->comm; local_err is this rank's io_request_init result.
 * Returns the same MPI error class on every rank (MPI_SUCCESS, the largest
 * argument error of any rank, or the largest I/O error any aggregator hit),
 * or TWOPHASE_USE_PMPI on every rank when some rank's memory datatype cannot
 * be decoded and the call must be served by PMPI. */
int twophase_run(io_request *rq, int local_err);

/* Replace SURGE_AUTO settings by the values the engine will use. */
void twophase_resolve(const surge_file *f, surge_hints *h);

#endif
