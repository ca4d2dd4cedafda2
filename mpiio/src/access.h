/* One data-access call on a tracked file, routed to the two-phase engine
 * (collective), the threaded individual path, or PMPI when the memory
 * datatype cannot be served. Used by the MPI_File_* wrappers and by the
 * progress thread of nonblocking calls. */
#ifndef SURGE_ACCESS_H
#define SURGE_ACCESS_H

#include "file_state.h"

enum { OP_WRITE = 1, OP_COLLECTIVE = 2, OP_USE_FP = 4 };

/* Explicit offset (in etypes of the view); OP_USE_FP is the caller's business.
 * Returns an MPI error code, not yet given to the file's error handler, and
 * the bytes accessed (reads stop at end of file). Collective when flags has
 * OP_COLLECTIVE. */
int access_run(surge_file *f, int flags, MPI_Offset offset, const void *buf, int count,
               MPI_Datatype type, MPI_Count *bytes);

/* The status every completed data call reports. */
void access_set_status(MPI_Status *st, MPI_Count bytes);

#endif
