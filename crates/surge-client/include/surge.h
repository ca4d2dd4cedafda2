/*
 * surge.h - C interface of the Surge client library (libsurge_client).
 *
 * Surge is a burst-buffer file system: files live in a namespace of their
 * own ("/ckpt/rank0"), striped over the cluster's daemons. These calls work
 * like their libc namesakes on that namespace:
 *
 *   - On failure they return -1 (NULL for surge_opendir) and set errno to
 *     what a local file system would report (ENOENT, EEXIST, ENOSPC, EIO,
 *     EBADF, ...). surge_last_error() then has a message saying what went
 *     wrong and, where it helps, what to do (e.g. "daemon 2 (10.0.0.3:7000)
 *     is not reachable ...; check `surge status`"). On success errno is
 *     left as it was, as libc leaves it.
 *   - No call hangs on a dead daemon: it fails with EIO within the timeout
 *     (SURGE_TIMEOUT seconds, default 30).
 *   - Paths are absolute Surge paths; a relative path is taken from "/".
 *   - Descriptors are small non-negative ints private to Surge (they are not
 *     kernel descriptors); the lowest free one is reused first.
 *   - All calls are thread-safe; surge_pread/surge_pwrite on one descriptor
 *     may run from many threads at once.
 *
 * The cluster is found through the cluster file `surge start` writes:
 * $SURGE_CLUSTER, else ~/.surge/cluster.toml. Every request carries the job
 * identity: $SURGE_JOB_ID, else $SLURM_JOB_ID, else the process group.
 *
 * Link with -lsurge_client (shared), or libsurge_client.a (static) followed
 * by -lgcc_s -lutil -lrt -lpthread -lm -ldl.
 */
#ifndef SURGE_H
#define SURGE_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Connects to the cluster of `cluster_file` (NULL: the default above).
 * Idempotent: once connected, later calls return 0 and ignore the argument.
 * Optional: every other call connects implicitly on first use.
 * Errors: ENOTCONN if the cluster file or its secret is missing or invalid. */
int surge_init(const char *cluster_file);

/* As open(2). flags: O_RDONLY/O_WRONLY/O_RDWR, O_CREAT, O_EXCL, O_TRUNC,
 * O_APPEND, O_DIRECTORY. A directory may be opened read-only (reads then
 * fail with EISDIR). Reading a write-only descriptor, or writing a
 * read-only one, fails with EBADF. */
int surge_open(const char *path, int flags, mode_t mode);
int surge_close(int fd);

/* As read(2)/write(2): use and advance the descriptor's position. A write
 * with O_APPEND goes to the current end of file. A write either completes
 * or fails (-1); a read is short only at end of file; holes read as zeros. */
ssize_t surge_read(int fd, void *buf, size_t count);
ssize_t surge_write(int fd, const void *buf, size_t count);

/* As pread(2)/pwrite(2): at `offset`, position untouched. */
ssize_t surge_pread(int fd, void *buf, size_t count, off_t offset);
ssize_t surge_pwrite(int fd, const void *buf, size_t count, off_t offset);

/* As lseek(2) with SEEK_SET, SEEK_CUR or SEEK_END (others: EINVAL). */
off_t surge_lseek(int fd, off_t offset, int whence);

/* Makes the file's written data durable on every daemon holding it. */
int surge_fsync(int fd);

/* As ftruncate(2)/truncate(2): shrinks, or extends with zeros. */
int surge_ftruncate(int fd, off_t length);
int surge_truncate(const char *path, off_t length);

/* As stat(2)/fstat(2). Filled in: st_mode (S_IFREG or S_IFDIR | mode),
 * st_ino, st_nlink (1, directories 2), st_size, st_blksize (the stripe
 * size), st_blocks (512-byte units), st_atim/st_mtim (modification time),
 * st_ctim, st_uid/st_gid (the caller's). Other fields are 0. */
int surge_stat(const char *path, struct stat *st);
int surge_fstat(int fd, struct stat *st);

int surge_mkdir(const char *path, mode_t mode);
int surge_rmdir(const char *path);
int surge_unlink(const char *path);
/* As rename(2): an existing file at `to` is replaced. */
int surge_rename(const char *from, const char *to);

/* Directory streams. surge_opendir reads the whole listing (name order). */
typedef struct SurgeDir surge_dir;
surge_dir *surge_opendir(const char *path);
/* Copies the next entry's NUL-terminated name into name_out (capacity `cap`
 * bytes) and sets *is_dir (if not NULL) to 1 for a directory, else 0.
 * Returns 1 for an entry, 0 at the end, -1 on error (ERANGE: name_out is
 * too small; the entry is not consumed). */
int surge_readdir(surge_dir *dir, char *name_out, size_t cap, int *is_dir);
int surge_closedir(surge_dir *dir);

/* Layouts (striping), as `surge setstripe`:
 *   stripe_count  daemons a file is striped over; -1 all, 0 inherit
 *   stripe_size   bytes per stripe unit, a multiple of 64 KiB; 0 inherit
 *   first         daemon of the first stripe; -1 automatic (spread files)
 * On a directory: sets the default its new files inherit. On a missing
 * path: creates an empty file with this layout. On an existing file:
 * EINVAL (a file's layout is fixed when it is created). Invalid values
 * (more stripes than daemons, a bad size): EINVAL. */
int surge_setstripe(const char *path, long stripe_count, unsigned long long stripe_size, long first);

/* A file's layout, or a directory's own default, whose fields may be 0
 * (inherit) or UINT_MAX (all daemons / automatic). NULL outputs are skipped. */
int surge_getstripe(const char *path, unsigned *stripe_count, unsigned long long *stripe_size,
                    unsigned *first);

/* The message of this thread's last failed call ("" if none). The string
 * stays valid until this thread's next failing call. */
const char *surge_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* SURGE_H */
