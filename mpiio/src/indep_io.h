/* Individual (non-collective) I/O, multi-threaded as in [Feki22, ch. 4]
 * (docs/references.md):
 * a sequential pre-calculation gives every cycle its starting element and
 * offset in the file view and in the buffer (fh_info / bf_info) and its
 * element counts N and M; then threads take cycles round-robin, each building
 * its io array (at most N + M - 1 entries, allocated once, no realloc) and
 * doing that cycle's file access with pwritev/preadv. */
#ifndef SURGE_INDEP_IO_H
#define SURGE_INDEP_IO_H

#include "request.h"

/* Local (no communication). Returns MPI_SUCCESS or an MPI error class.
 * Not reentrant per file: calls on one file are serialized by the caller. */
int indep_run(io_request *rq);
/* Frees the per-thread buffers kept with the file (at close). */
void indep_release(surge_file *f);

#endif
