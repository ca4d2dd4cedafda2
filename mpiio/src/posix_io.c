#include "posix_io.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Test-only fault injection: SURGE_MPIIO_TEST_FAIL_WRITE=N makes every N-th
 * data write of this process fail with EIO (SURGE_MPIIO_TEST_FAIL_RANK=r limits
 * it to one MPI_COMM_WORLD rank, read from OMPI/PMI environment variables). */
static atomic_long write_calls;
static long fail_at = -1;
static pthread_once_t fail_once = PTHREAD_ONCE_INIT;

static void fail_init(void)
{
    const char *n = getenv("SURGE_MPIIO_TEST_FAIL_WRITE");
    const char *r = getenv("SURGE_MPIIO_TEST_FAIL_RANK");
    if (!n || atol(n) <= 0)
        return;
    if (r && *r) {
        const char *me = getenv("OMPI_COMM_WORLD_RANK");
        if (!me)
            me = getenv("PMI_RANK");
        if (!me || atoi(me) != atoi(r))
            return;
    }
    fail_at = atol(n);
}

static int injected_failure(void)
{
    pthread_once(&fail_once, fail_init);
    return fail_at > 0 && (atomic_fetch_add(&write_calls, 1) + 1) % fail_at == 0;
}

int posix_errno_to_mpi(int err)
{
    switch (err) {
    case 0: return MPI_SUCCESS;
    case ENOSPC: return MPI_ERR_NO_SPACE;
    case EDQUOT: return MPI_ERR_QUOTA;
    case EACCES:
    case EPERM: return MPI_ERR_ACCESS;
    case EROFS:
    case EBADF: return MPI_ERR_READ_ONLY;
    default: return MPI_ERR_IO;
    }
}

int posix_pwrite_full(int fd, const char *buf, int64_t len, int64_t off)
{
    if (injected_failure())
        return EIO;
    while (len > 0) {
        ssize_t n = pwrite(fd, buf, (size_t)len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        buf += n;
        off += n;
        len -= n;
    }
    return 0;
}

int posix_pread_full(int fd, char *buf, int64_t len, int64_t off, int64_t *got)
{
    int64_t total = 0;
    while (total < len) {
        ssize_t n = pread(fd, buf + total, (size_t)(len - total), (off_t)(off + total));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno;
        if (n == 0)
            break; /* end of file */
        total += n;
    }
    if (got)
        *got = total;
    memset(buf + total, 0, (size_t)(len - total)); /* bytes past end of file read as zero */
    return 0;
}

/* One vectored call for runs [i, j) that are adjacent in the file. */
static int vectored(int fd, int is_write, const io_run *runs, int64_t n)
{
    if (n == 1)
        return is_write ? posix_pwrite_full(fd, runs[0].buf, runs[0].len, runs[0].off)
                        : posix_pread_full(fd, runs[0].buf, runs[0].len, runs[0].off, NULL);
    if (is_write && injected_failure())
        return EIO;
    struct iovec iov[IOV_MAX];
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        iov[i].iov_base = runs[i].buf;
        iov[i].iov_len = (size_t)runs[i].len;
        total += runs[i].len;
    }
    ssize_t done = is_write ? pwritev(fd, iov, (int)n, (off_t)runs[0].off)
                            : preadv(fd, iov, (int)n, (off_t)runs[0].off);
    if (done < 0)
        return errno;
    /* Short transfer: finish run by run from where the kernel stopped. */
    if (done == total)
        return 0;
    for (int64_t i = 0; i < n; i++) {
        if (done >= runs[i].len) {
            done -= runs[i].len;
            continue;
        }
        int err = is_write ? posix_pwrite_full(fd, runs[i].buf + done, runs[i].len - done,
                                               runs[i].off + done)
                           : posix_pread_full(fd, runs[i].buf + done, runs[i].len - done,
                                              runs[i].off + done, NULL);
        if (err)
            return err;
        done = 0;
    }
    return 0;
}

int posix_runs(int fd, int is_write, const io_run *runs, int64_t n)
{
    int64_t i = 0;
    while (i < n) {
        int64_t j = i + 1;
        while (j < n && j - i < IOV_MAX && runs[j].off == runs[j - 1].off + runs[j - 1].len)
            j++;
        int err = vectored(fd, is_write, runs + i, j - i);
        if (err)
            return err;
        i = j;
    }
    return 0;
}

static void io_job_run(work_item *item)
{
    io_job *job = (io_job *)item;
    job->err = posix_runs(job->fd, job->is_write, job->runs, job->nruns);
}

void io_job_submit(worker *w, io_job *job)
{
    job->item.run = io_job_run;
    job->item.finished = NULL;
    job->err = 0;
    worker_submit(w, &job->item);
}
