/* The interface between the shim and its Rust handler (libsurge_preload_handler.so,
 * crates/surge-preload/src/lib.rs). Every call returns -1 (or NULL) with
 * errno set on failure, as libc does. Paths are Surge paths ("/" is the
 * mount point), as surge_px_resolve gave them; descriptors are the kernel
 * placeholder descriptors the handler hands out. The modes of open (with
 * O_CREAT) and mkdir come with the process's umask applied (the shim
 * tracks it). */
#ifndef SURGE_HANDLER_H
#define SURGE_HANDLER_H

#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

/* Return values of resolve. */
#define SURGE_HOST 0      /* not Surge's: libc, arguments as given */
#define SURGE_PATH 1      /* Surge's: the Surge path is in out */
#define SURGE_HOST_PATH 2 /* not Surge's: libc with the absolute path in out */

/* X(return type, name, parameters): the handler's functions, each exported as
 * surge_px_<name>. */
#define SURGE_HANDLER_FUNCTIONS(X)                                                        \
    X(int, resolve, (int dirfd, const char *path, char *out, size_t cap))              \
    X(int, open, (const char *path, int flags, unsigned mode))                         \
    X(int, reopen, (int fd, int flags))                                                \
    X(ssize_t, read, (int fd, void *buf, size_t n, int64_t off))                       \
    X(ssize_t, write, (int fd, const void *buf, size_t n, int64_t off))                \
    X(ssize_t, readv, (int fd, const struct iovec *iov, int count, int64_t off))       \
    X(ssize_t, writev, (int fd, const struct iovec *iov, int count, int64_t off))      \
    X(int64_t, lseek, (int fd, int64_t off, int whence))                               \
    X(int, fsync, (int fd))                                                            \
    X(int, ftruncate, (int fd, int64_t len))                                           \
    X(int, fallocate, (int fd, int mode, int64_t off, int64_t len))                    \
    X(int, fstat, (int fd, struct stat *st))                                           \
    X(int, fstatx, (int fd, struct statx *stx))                                        \
    X(int, statfs, (struct statfs * sf))                                               \
    X(int, close, (int fd))                                                            \
    X(int, dup, (int oldfd, int newfd))                                                \
    X(int, getfl, (int fd))                                                            \
    X(int, lock, (int fd, int cmd, struct flock *lk))                                  \
    X(int, flock, (int fd, int operation))                                             \
    X(int, stat, (const char *path, struct stat *st))                                  \
    X(int, statx, (const char *path, struct statx *stx))                               \
    X(int, lstat, (const char *path, struct stat *st))                                 \
    X(int, lstatx, (const char *path, struct statx *stx))                              \
    X(int, follow, (char *path, int links))                                            \
    X(ssize_t, readlink, (const char *path, char *buf, size_t len))                    \
    X(int, symlink, (const char *target, const char *path))                            \
    X(int, access, (const char *path, int amode))                                      \
    X(int, unlink, (const char *path))                                                 \
    X(int, mkdir, (const char *path, unsigned mode))                                   \
    X(int, rmdir, (const char *path))                                                  \
    X(int, rename, (const char *from, const char *to, unsigned flags))                 \
    X(int, link, (const char *from, const char *to, int follow))                       \
    X(int, chmod, (const char *path, unsigned mode, int nofollow))                     \
    X(int, utimens, (const char *path, const struct timespec *times, int nofollow))    \
    X(int, chown, (const char *path, unsigned uid, unsigned gid))                      \
    X(ssize_t, getxattr, (const char *path, const char *name, void *value, size_t size, int nofollow)) \
    X(int, setxattr, (const char *path, const char *name, const void *value, size_t size, int flags, int nofollow)) \
    X(ssize_t, listxattr, (const char *path, char *list, size_t size, int nofollow))  \
    X(int, removexattr, (const char *path, const char *name, int nofollow))            \
    X(int, truncate, (const char *path, int64_t len))                                  \
    X(int, fd_path, (int fd, char *out, size_t cap))                                   \
    X(ssize_t, fd_link, (int fd, char *buf, size_t len))                               \
    X(int, chdir, (const char *path))                                                  \
    X(void, leave_cwd, (void))                                                         \
    X(void, adopt_cwd, (const char *host_path))                                        \
    X(void, note_stream, (int fd))                                                     \
    X(int, host_name, (const char *path, char *out, size_t cap))                       \
    X(void *, opendir, (int fd))                                                       \
    X(struct dirent64 *, readdir, (void *dir))                                         \
    X(int, closedir, (void *dir))                                                      \
    X(int, dirfd, (void *dir))                                                         \
    X(long, telldir, (void *dir))                                                      \
    X(void, seekdir, (void *dir, long position))                                       \
    X(int, unsupported, (const char *call, int fd, const char *path, int err))         \
    X(int, special_file, (const char *kind, const char *path))                         \
    X(int, program, (const char *path, char *interp, char *arg, size_t cap))           \
    X(int, probe_program, (const char *path))                                          \
    X(void, flush_profile, (void))                                                     \
    X(void, atfork_prepare, (void))                                                    \
    X(void, atfork_parent, (void))                                                     \
    X(void, atfork_child, (void))                                                      \
    X(void, share_lock_files, (void))                                                  \
    X(void, before_exec, (void))                                                       \
    X(void, after_spawn, (void))                                                       \
    X(void, fuse_mode, (uint64_t dev))                                                 \
    X(int, meta_fast, (uint32_t server_pid))                                           \
    X(ssize_t, fast_read, (int fd, void *buf, size_t n, int64_t off))                  \
    X(ssize_t, fast_write, (int fd, const void *buf, size_t n, int64_t off))           \
    X(ssize_t, fast_readv, (int fd, const struct iovec *iov, int count, int64_t off))  \
    X(ssize_t, fast_writev, (int fd, const struct iovec *iov, int count, int64_t off)) \
    X(void, fast_sync_sizes, (void))                                                   \
    X(void, fast_noted, (int fd, int call, double seconds))                            \
    X(void, fast_forget, (int fd))                                                     \
    X(void, mpiio_opened, (const void *fh, const char *name, int collective, int mode, double seconds)) \
    X(void, mpiio_recorded, (const void *fh, int call, int64_t bytes, double seconds)) \
    X(void, mpiio_closed, (const void *fh, double seconds))

/* The MPI-IO calls mpiio_recorded counts (crates/surge-preload/src/mpiio.rs,
 * Call::from_code): reads are even, writes odd; by kind, independent,
 * collective, split collective, non-blocking. */
#define SURGE_MPIIO_INDEP_READ 0
#define SURGE_MPIIO_INDEP_WRITE 1
#define SURGE_MPIIO_COLL_READ 2
#define SURGE_MPIIO_COLL_WRITE 3
#define SURGE_MPIIO_SPLIT_READ 4
#define SURGE_MPIIO_SPLIT_WRITE 5
#define SURGE_MPIIO_NB_READ 6
#define SURGE_MPIIO_NB_WRITE 7
#define SURGE_MPIIO_SYNC 8
#define SURGE_MPIIO_VIEW 9
#define SURGE_MPIIO_HINTS 10

/* The errno of a call whose Surge path crosses a symbolic link (the
 * protocol's LINK_MET, beyond every errno): follow gives the path to try
 * next, as the kernel resolves links, and the call is made again. */
#define SURGE_ELINK 0x10000
/* Most links one call follows, as the kernel's limit; then ELOOP. */
#define SURGE_MAX_LINKS 40

/* What program returns for a `#!` script (its interpreter and argument
 * written out) instead of a memfd holding a binary. */
#define SURGE_SCRIPT (-2)

/* What the fast_ calls return when the kernel must serve the call instead. */
#define SURGE_FALLBACK (-2)

/* The kernel's calls on mount descriptors that fast_noted counts in the profile. */
#define SURGE_NOTED_OPEN 0
#define SURGE_NOTED_FSYNC 1

/* The first word of a Surge directory stream ("SURGEDIR"); a libc DIR holds
 * a descriptor and a lock there. */
#define SURGE_DIR_MAGIC 0x5355524745444952ULL

#endif
