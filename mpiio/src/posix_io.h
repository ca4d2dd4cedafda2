/* File access with POSIX pread/pwrite(v): error mapping, the test-only fault
 * injector, and a worker thread for asynchronous (overlapped) file access.
 * Nothing here calls MPI, so it is safe at any MPI thread level. */
#ifndef SURGE_POSIX_IO_H
#define SURGE_POSIX_IO_H

#include <pthread.h>
#include <stdint.h>

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

typedef struct io_job {
    int fd;
    int is_write;
    const io_run *runs;
    int64_t nruns;
    int err;  /* errno of the first failure */
    int done;
    struct io_job *next;
} io_job;

typedef struct io_worker io_worker;

io_worker *io_worker_start(void);
void io_worker_stop(io_worker *w);
void io_worker_submit(io_worker *w, io_job *job);
void io_worker_wait(io_worker *w, io_job *job);

#endif
