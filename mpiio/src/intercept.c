/* MPI_File_* wrappers over PMPI.
 *
 * PMPI stays the source of truth for everything we do not implement: it
 * opens the file, holds the same view (set_view is forwarded) and owns the
 * individual file pointer (we read it with get_position and advance it with
 * seek), so get_view, seek, get_position, get_byte_offset, shared-pointer
 * calls, set_size and friends need no wrapper. Data calls on files we track
 * are served with pread/pwrite on our own descriptor; both layers keep no
 * user-space cache, so on one node every completed call is visible to the
 * other layer, and MPI_File_sync flushes both. */
#include <fcntl.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "access.h"
#include "file_state.h"
#include "indep_io.h"
#include "nonblocking.h"
#include "twophase.h"

/* Tracked, and data calls are ours (not atomic mode, decodable view,
 * enabled). Nonblocking calls still in flight finish first, so that calls
 * keep their order and nothing else uses the file's communicator meanwhile. */
static surge_file *active(MPI_File fh)
{
    surge_file *f = file_state_find(fh);
    if (f)
        nonblocking_drain(f);
    return f && f->hints.enabled && f->view_supported && !f->atomic ? f : NULL;
}

static int report(MPI_File fh, int rc)
{
    if (rc != MPI_SUCCESS)
        PMPI_File_call_errhandler(fh, rc);
    return rc;
}

/* Blocking calls: through the individual file pointer it advances by what
 * was accessed (reads stop at end of file). */
static int blocking(surge_file *f, int flags, MPI_Offset off, const void *buf, int count,
                    MPI_Datatype type, MPI_Status *st)
{
    if (flags & OP_USE_FP)
        PMPI_File_get_position(f->fh, &off);
    MPI_Count bytes;
    int rc = access_run(f, flags, off, buf, count, type, &bytes);
    if (rc == MPI_SUCCESS) {
        if (flags & OP_USE_FP)
            PMPI_File_seek(f->fh, off + bytes / f->etype_size, MPI_SEEK_SET);
        access_set_status(st, bytes);
    }
    return report(f->fh, rc);
}

/* Nonblocking and split calls: the individual file pointer moves past the
 * whole request at initiation (MPI 3.1 section 13.4.3), before the access
 * itself, which may run in the background. */
static nb_op *initiate(surge_file *f, int flags, MPI_Offset off, const void *buf, int count,
                       MPI_Datatype type, MPI_Request *req, int *rc)
{
    if (flags & OP_USE_FP) {
        MPI_Count size;
        MPI_Type_size_x(type, &size);
        PMPI_File_get_position(f->fh, &off);
        if (count >= 0)
            PMPI_File_seek(f->fh, off + size * count / f->etype_size, MPI_SEEK_SET);
    }
    nb_op *op = nonblocking_start(f, flags & ~OP_USE_FP, off, buf, count, type, req, rc);
    report(f->fh, *rc);
    return op;
}

static int nonblocking(surge_file *f, int flags, MPI_Offset off, const void *buf, int count,
                       MPI_Datatype type, MPI_Request *req)
{
    int rc;
    initiate(f, flags, off, buf, count, type, req, &rc);
    return rc;
}

static int split_begin(surge_file *f, int flags, MPI_Offset off, const void *buf, int count,
                       MPI_Datatype type)
{
    int rc;
    f->split_op = initiate(f, flags, off, buf, count, type, NULL, &rc);
    return rc;
}

/* Called without draining first: the pending split is what it waits for. */
static int split_end(surge_file *f, MPI_Status *st)
{
    MPI_Count bytes = 0;
    int rc = f->split_op ? nonblocking_finish(f->split_op, &bytes) : MPI_SUCCESS;
    f->split_op = NULL;
    if (rc == MPI_SUCCESS)
        access_set_status(st, bytes);
    return rc; /* the error handler ran when the access failed */
}

/* ---- open / close / view / hints ---- */

static int globally_disabled(void)
{
    const char *v = getenv("SURGE_MPIIO_DISABLE");
    return v && *v && strcmp(v, "0");
}

/* "ufs:/path" style prefixes name an MPI-IO driver, not part of the path. */
static const char *strip_prefix(const char *name)
{
    const char *colon = strchr(name, ':');
    if (colon && colon - name >= 2 && !memchr(name, '/', (size_t)(colon - name)))
        return colon + 1;
    return name;
}

static void share_hints(surge_file *f)
{
    MPI_Bcast(&f->hints, sizeof f->hints, MPI_BYTE, 0, f->comm);
}

int MPI_File_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh)
{
    int rc = PMPI_File_open(comm, filename, amode, info, fh);
    if (rc != MPI_SUCCESS || globally_disabled() || (amode & MPI_MODE_SEQUENTIAL))
        return rc;
    surge_file *f = calloc(1, sizeof *f);
    f->fh = *fh;
    f->amode = amode;
    MPI_Comm_dup(comm, &f->comm);
    MPI_Comm_rank(f->comm, &f->rank);
    MPI_Comm_size(f->comm, &f->nprocs);
    const char *path = strip_prefix(filename);
    hints_init(&f->hints);
    hints_apply_info(&f->hints, info);
    if (f->rank == 0)
        hints_detect_layout(&f->hints, path);
    share_hints(f);
    int flags = amode & MPI_MODE_RDONLY ? O_RDONLY : amode & MPI_MODE_WRONLY ? O_WRONLY : O_RDWR;
    f->fd = f->hints.enabled ? open(path, flags | O_CLOEXEC) : -1;
    int ok = f->fd >= 0, all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, f->comm);
    /* Disabled by hint, or a path only the MPI library understands: the file
     * is PMPI's alone and costs nothing more at close. */
    if (!all_ok) {
        if (f->fd >= 0)
            close(f->fd);
        MPI_Comm_free(&f->comm);
        free(f);
        return rc;
    }
    f->etype_size = 1;
    f->view_supported = 1;
    flat_type_build(MPI_BYTE, &f->filetype);
    file_state_add(f);
    return rc;
}

int MPI_File_close(MPI_File *fh)
{
    surge_file *f = file_state_find(*fh);
    if (f) {
        nonblocking_stop(f);
        file_state_remove(f);
        worker_stop(f->worker);
        indep_release(f);
        close(f->fd);
        MPI_Comm_free(&f->comm);
        flat_type_free(&f->filetype);
        free(f);
    }
    return PMPI_File_close(fh);
}

/* Local validity of a view, by the rules of MPI 3.1 section 13.3. */
static int check_view(MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype,
                      flat_type *ft, int *decoded, int64_t *etype_size)
{
    *decoded = 0;
    if (etype == MPI_DATATYPE_NULL || filetype == MPI_DATATYPE_NULL)
        return MPI_ERR_TYPE;
    if (disp < 0 && disp != MPI_DISPLACEMENT_CURRENT)
        return MPI_ERR_ARG;
    int esize;
    MPI_Type_size(etype, &esize);
    *etype_size = esize;
    if (flat_type_build(filetype, ft) != MPI_SUCCESS)
        return MPI_SUCCESS; /* not decodable: PMPI validates and serves it */
    *decoded = 1;
    if (esize <= 0 || ft->size % esize)
        return MPI_ERR_TYPE;
    if (!flat_type_is_valid_filetype(ft))
        return MPI_ERR_ARG;
    return MPI_SUCCESS;
}

int MPI_File_set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype,
                      const char *datarep, MPI_Info info)
{
    surge_file *f = file_state_find(fh);
    if (!f)
        return PMPI_File_set_view(fh, disp, etype, filetype, datarep, info);
    nonblocking_drain(f);
    flat_type ft;
    memset(&ft, 0, sizeof ft);
    int decoded;
    int64_t esize = 1;
    int err = check_view(disp, etype, filetype, &ft, &decoded, &esize);
    int unsupported = !decoded || !datarep || strcmp(datarep, "native") ||
                      disp == MPI_DISPLACEMENT_CURRENT;
    /* Agree first, so that an invalid view on one rank fails on all of them
     * instead of leaving the others inside a collective PMPI call. */
    int in[2] = {err, unsupported}, out[2];
    MPI_Allreduce(in, out, 2, MPI_INT, MPI_MAX, f->comm);
    if (out[0]) {
        flat_type_free(&ft);
        return report(fh, out[0]);
    }
    int rc = PMPI_File_set_view(fh, disp, etype, filetype, datarep, info);
    if (rc != MPI_SUCCESS) {
        flat_type_free(&ft);
        return rc;
    }
    flat_type_free(&f->filetype);
    f->filetype = ft;
    f->disp = disp;
    f->etype_size = esize;
    f->view_supported = !out[1];
    hints_apply_info(&f->hints, info);
    share_hints(f);
    return rc;
}

int MPI_File_set_info(MPI_File fh, MPI_Info info)
{
    surge_file *f = file_state_find(fh);
    if (f)
        nonblocking_drain(f);
    int rc = PMPI_File_set_info(fh, info);
    if (f && rc == MPI_SUCCESS) {
        hints_apply_info(&f->hints, info);
        share_hints(f);
    }
    return rc;
}

int MPI_File_get_info(MPI_File fh, MPI_Info *info_used)
{
    int rc = PMPI_File_get_info(fh, info_used);
    surge_file *f = file_state_find(fh);
    if (f && rc == MPI_SUCCESS) {
        surge_hints h = f->hints;
        twophase_resolve(f, &h);
        hints_export(&h, *info_used);
    }
    return rc;
}

int MPI_File_set_atomicity(MPI_File fh, int flag)
{
    surge_file *f = file_state_find(fh);
    if (f)
        nonblocking_drain(f);
    int rc = PMPI_File_set_atomicity(fh, flag);
    if (f && rc == MPI_SUCCESS)
        f->atomic = flag;
    return rc;
}

int MPI_File_sync(MPI_File fh)
{
    surge_file *f = file_state_find(fh);
    if (f)
        nonblocking_drain(f);
    if (f && fsync(f->fd) != 0)
        report(fh, MPI_ERR_IO); /* still call PMPI: sync is collective */
    return PMPI_File_sync(fh);
}

/* ---- data access ----
 * Every data wrapper has one shape: serve the call when the file is ours,
 * else hand it to PMPI. Explicit-offset forms take the offset after the
 * handle (EXPLICIT), individual-pointer forms take none (FILE_POINTER). */

#define FILE_POINTER(x)
#define EXPLICIT(x) , x
#define OFFSET_OF_FILE_POINTER 0
#define OFFSET_OF_EXPLICIT off

#define DATA_CALL(name, form, cbuf, flags, serve, result_type)                                 \
    int MPI_File_##name(MPI_File fh form(MPI_Offset off), cbuf void *buf, int count,          \
                        MPI_Datatype t, result_type result)                                    \
    {                                                                                          \
        surge_file *f = active(fh);                                                            \
        return f ? serve(f, flags, OFFSET_OF_##form, buf, count, t, result)                    \
                 : PMPI_File_##name(fh form(off), buf, count, t, result);                      \
    }

/* Split collectives: begin is a data call without a result; end waits. */
#define SPLIT_CALL(name, form, cbuf, flags)                                                    \
    int MPI_File_##name##_begin(MPI_File fh form(MPI_Offset off), cbuf void *buf, int count,  \
                                MPI_Datatype t)                                                \
    {                                                                                          \
        surge_file *f = active(fh);                                                            \
        return f ? split_begin(f, flags, OFFSET_OF_##form, buf, count, t)                      \
                 : PMPI_File_##name##_begin(fh form(off), buf, count, t);                      \
    }                                                                                          \
    int MPI_File_##name##_end(MPI_File fh, cbuf void *buf, MPI_Status *st)                    \
    {                                                                                          \
        surge_file *f = file_state_find(fh);                                                   \
        return f && f->split_op ? split_end(f, st) : PMPI_File_##name##_end(fh, buf, st);      \
    }

#define W OP_WRITE
#define C OP_COLLECTIVE
#define FP OP_USE_FP
#define BLOCKING(name, form, cbuf, flags) DATA_CALL(name, form, cbuf, flags, blocking, MPI_Status *)
#define NONBLOCKING(name, form, cbuf, flags)                                                   \
    DATA_CALL(name, form, cbuf, flags, nonblocking, MPI_Request *)

/* X(name, form, buffer qualifier, flags) for each call, names prefixed. */
#define EACH_COLLECTIVE(X, prefix)                                                             \
    X(prefix##write_all, FILE_POINTER, const, W | C | FP)                                      \
    X(prefix##write_at_all, EXPLICIT, const, W | C)                                            \
    X(prefix##read_all, FILE_POINTER, , C | FP)                                                \
    X(prefix##read_at_all, EXPLICIT, , C)
#define EACH_DATA_CALL(X, prefix)                                                              \
    EACH_COLLECTIVE(X, prefix)                                                                 \
    X(prefix##write, FILE_POINTER, const, W | FP)                                              \
    X(prefix##write_at, EXPLICIT, const, W)                                                    \
    X(prefix##read, FILE_POINTER, , FP)                                                        \
    X(prefix##read_at, EXPLICIT, , 0)

EACH_DATA_CALL(BLOCKING, )
EACH_DATA_CALL(NONBLOCKING, i)
EACH_COLLECTIVE(SPLIT_CALL, )
