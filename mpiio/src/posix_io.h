/* File access with POSIX pread/pwrite(v): error mapping, the test-only fault
 * injector, and asynchronous (overlapped) file access on a worker thread.
 * Nothing here calls MPI, so it is safe at any MPI thread level. */
#ifndef SURGE_POSIX_IO_H
#define SURGE_POSIX_IO_H

#include <stdint.h>

#include "worker.h"

typedef struct {
    char *buf;
    int64_t off;
    int64_t len;
} io_run;

/* Write or read len bytes at off; returns 0 or an errno value.
 * For reads, *got receives the bytes before end of file (may be NULL). */
int posix_pwrite_full(int fd, const char *buf, int64_t len, int64_t off);
int posix_pread_full(int fd, char *buf, int64_t len, int64_t off, int64_t *got);
/* Runs adjacent in the file are issued as one pwritev/preadv. */
int posix_runs(int fd, int is_write, const io_run *runs, int64_t n);
/* errno -> MPI error class (MPI_ERR_NO_SPACE, MPI_ERR_ACCESS, MPI_ERR_IO, ...). */
int posix_errno_to_mpi(int err);

/* Asynchronous file access: one batch of runs, done by a worker thread. */
typedef struct {
    work_item item; /* first: the worker hands back this pointer */
    int fd;
    int is_write;
    const io_run *runs;
    int64_t nruns;
    int err; /* errno of the first failure */
} io_job;

void io_job_submit(worker *w, io_job *job); /* then worker_wait(w, &job->item) */

#endif
