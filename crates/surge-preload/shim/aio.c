/* POSIX AIO on Surge descriptors. glibc's AIO threads call the kernel
 * directly, past this shim, so requests on Surge files are served here at
 * submission (synchronously) and complete at once; the aiocb's own error
 * and return fields carry the result, as glibc's do.
 *
 * Wraps: aio_read, aio_write, aio_read64, aio_write64, aio_fsync,
 * aio_fsync64, aio_error, aio_error64, aio_return, aio_return64,
 * aio_suspend, aio_suspend64, aio_cancel, aio_cancel64, lio_listio,
 * lio_listio64.
 */
#include "route.h"

#include <aio.h>
#include <signal.h>

static int surge_aiocb(const struct aiocb *cb) { return cb && surge_fd(cb->aio_fildes); }

static void finish(struct aiocb *cb, ssize_t result) {
    cb->__return_value = result;
    cb->__error_code = result < 0 ? errno : 0;
    if (cb->aio_sigevent.sigev_notify == SIGEV_SIGNAL) raise(cb->aio_sigevent.sigev_signo);
}

static int submit(struct aiocb *cb, int write) {
    const struct surge_handler *c = surge_handler();
    if (!c) return -1;
    if (cb->aio_offset < 0) {
        errno = EINVAL;
        return -1;
    }
    ssize_t n = write ? HANDLER_CALL(c, write, cb->aio_fildes, (const void *)cb->aio_buf, cb->aio_nbytes, cb->aio_offset)
                      : HANDLER_CALL(c, read, cb->aio_fildes, (void *)cb->aio_buf, cb->aio_nbytes, cb->aio_offset);
    finish(cb, n);
    return 0;
}

int aio_read(struct aiocb *cb) { return surge_aiocb(cb) ? submit(cb, 0) : REAL(aio_read)(cb); }
int aio_write(struct aiocb *cb) { return surge_aiocb(cb) ? submit(cb, 1) : REAL(aio_write)(cb); }
int aio_read64(struct aiocb64 *cb) { return aio_read((struct aiocb *)cb); }
int aio_write64(struct aiocb64 *cb) { return aio_write((struct aiocb *)cb); }

int aio_fsync(int op, struct aiocb *cb) {
    if (!surge_aiocb(cb)) return REAL(aio_fsync)(op, cb);
    const struct surge_handler *c = surge_handler();
    if (!c) return -1;
    finish(cb, HANDLER_CALL(c, fsync, cb->aio_fildes));
    return 0;
}
int aio_fsync64(int op, struct aiocb64 *cb) { return aio_fsync(op, (struct aiocb *)cb); }

int aio_error(const struct aiocb *cb) { return surge_aiocb(cb) ? cb->__error_code : REAL(aio_error)(cb); }
int aio_error64(const struct aiocb64 *cb) { return aio_error((const struct aiocb *)cb); }

ssize_t aio_return(struct aiocb *cb) { return surge_aiocb(cb) ? cb->__return_value : REAL(aio_return)(cb); }
ssize_t aio_return64(struct aiocb64 *cb) { return aio_return((struct aiocb *)cb); }

/* Surge requests are already complete: wait only when none in the list is. */
int aio_suspend(const struct aiocb *const list[], int n, const struct timespec *timeout) {
    for (int i = 0; i < n; i++)
        if (surge_aiocb(list[i])) return 0;
    return REAL(aio_suspend)(list, n, timeout);
}
int aio_suspend64(const struct aiocb64 *const list[], int n, const struct timespec *timeout) {
    return aio_suspend((const struct aiocb *const *)list, n, timeout);
}

int aio_cancel(int fd, struct aiocb *cb) {
    if (surge_fd(fd) || surge_aiocb(cb)) return AIO_ALLDONE;
    return REAL(aio_cancel)(fd, cb);
}
int aio_cancel64(int fd, struct aiocb64 *cb) { return aio_cancel(fd, (struct aiocb *)cb); }

int lio_listio(int mode, struct aiocb *const list[], int n, struct sigevent *sev) {
    int surge = 0;
    for (int i = 0; i < n; i++) surge |= surge_aiocb(list[i]);
    if (!surge) return REAL(lio_listio)(mode, list, n, sev);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        struct aiocb *cb = list[i];
        if (!cb || cb->aio_lio_opcode == LIO_NOP) continue;
        if (!surge_aiocb(cb)) {
            /* Mixed lists are rare: the host requests go one by one. */
            failed |= (cb->aio_lio_opcode == LIO_READ ? REAL(aio_read)(cb) : REAL(aio_write)(cb)) < 0;
            continue;
        }
        failed |= submit(cb, cb->aio_lio_opcode == LIO_WRITE) < 0;
        failed |= cb->__error_code != 0;
    }
    if (mode == LIO_NOWAIT && sev && sev->sigev_notify == SIGEV_SIGNAL) raise(sev->sigev_signo);
    if (failed) {
        errno = EIO;
        return -1;
    }
    return 0;
}
int lio_listio64(int mode, struct aiocb64 *const list[], int n, struct sigevent *sev) {
    return lio_listio(mode, (struct aiocb *const *)list, n, sev);
}
