/* Nonblocking (MPI_File_i*) and split-collective calls.
 *
 * When the application initialised MPI with MPI_THREAD_MULTIPLE, each file
 * gets a progress thread that runs these calls in order, in the background,
 * while the caller computes; the MPI_Request is a generalized request that
 * the thread completes. Below MPI_THREAD_MULTIPLE a thread other than the
 * caller's may not call MPI (the collective's shuffle, and completing the
 * request, are MPI calls), and standard MPI offers no hook to progress a
 * generalized request from MPI_Wait/MPI_Test; the call then runs eagerly at
 * initiation and returns a request that is already complete. */
#ifndef SURGE_NONBLOCKING_H
#define SURGE_NONBLOCKING_H

#include "file_state.h"

typedef struct nb_op nb_op;

/* Start one access (explicit offset in etypes, flags as access_run). With
 * req, the result completes an MPI generalized request; without, it is
 * collected by nonblocking_finish (split collectives). *rc is the error of a
 * call that ran eagerly and failed; its request is then MPI_REQUEST_NULL. */
nb_op *nonblocking_start(surge_file *f, int flags, MPI_Offset offset, const void *buf, int count,
                         MPI_Datatype type, MPI_Request *req, int *rc);
/* Wait for an operation started without a request; returns its error code
 * and frees it. */
int nonblocking_finish(nb_op *op, MPI_Count *bytes);
/* Wait until every started operation on f has finished: f's communicator,
 * view and worker are then the caller's again. */
void nonblocking_drain(surge_file *f);
/* Drain, then end f's progress thread (at close). */
void nonblocking_stop(surge_file *f);

#endif
