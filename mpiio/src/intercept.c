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
#include <sys/stat.h>
#include <unistd.h>

#include "file_state.h"
#include "indep_io.h"
#include "request.h"
#include "twophase.h"

enum { OP_WRITE = 1, OP_COLLECTIVE = 2, OP_USE_FP = 4 };

/* Tracked, and data calls are ours (not atomic mode, decodable view, enabled). */
static surge_file *active(MPI_File fh)
{
    surge_file *f = file_state_find(fh);
    return f && f->hints.enabled && f->view_supported && !f->atomic ? f : NULL;
}

static int report(MPI_File fh, int rc)
{
    if (rc != MPI_SUCCESS)
        PMPI_File_call_errhandler(fh, rc);
    return rc;
}

static void set_status(MPI_Status *st, MPI_Count bytes)
{
    if (st == MPI_STATUS_IGNORE)
        return;
    MPI_Status_set_elements_x(st, MPI_BYTE, bytes);
    MPI_Status_set_cancelled(st, 0);
}

/* Explicit-offset PMPI call, for requests whose memory type we cannot decode. */
static int pmpi_fallback(surge_file *f, int flags, MPI_Offset off, const void *buf, int count,
                         MPI_Datatype type, MPI_Count *bytes)
{
    MPI_Status st;
    int rc;
    if (flags & OP_COLLECTIVE)
        rc = flags & OP_WRITE ? PMPI_File_write_at_all(f->fh, off, buf, count, type, &st)
                              : PMPI_File_read_at_all(f->fh, off, (void *)buf, count, type, &st);
    else
        rc = flags & OP_WRITE ? PMPI_File_write_at(f->fh, off, buf, count, type, &st)
                              : PMPI_File_read_at(f->fh, off, (void *)buf, count, type, &st);
    MPI_Get_elements_x(&st, MPI_BYTE, bytes);
    return rc;
}

/* Every data call lands here. Errors go through the file's error handler. */
static int do_access(surge_file *f, int flags, MPI_Offset offset, const void *buf, int count,
                     MPI_Datatype type, MPI_Count *bytes)
{
    *bytes = 0;
    if (flags & OP_USE_FP)
        PMPI_File_get_position(f->fh, &offset);
    io_request rq;
    int rc = io_request_init(&rq, f, flags & OP_WRITE, offset, buf, count, type);
    if (flags & OP_COLLECTIVE)
        rc = twophase_run(&rq, rc);
    else if (rc == MPI_SUCCESS)
        rc = rq.decodable ? indep_run(&rq) : TWOPHASE_USE_PMPI;
    if (rc == TWOPHASE_USE_PMPI) {
        rc = pmpi_fallback(f, flags, offset, buf, count, type, bytes);
    } else if (rc == MPI_SUCCESS) {
        *bytes = rq.nbytes;
        struct stat sb; /* reads stop at end of file */
        if (!(flags & OP_WRITE) && rq.nbytes > 0 && fstat(f->fd, &sb) == 0)
            *bytes = io_request_bytes_before(&rq, sb.st_size);
    }
    if ((flags & OP_USE_FP) && rc == MPI_SUCCESS)
        PMPI_File_seek(f->fh, offset + *bytes / f->etype_size, MPI_SEEK_SET);
    io_request_free(&rq);
    return report(f->fh, rc);
}

static int blocking(surge_file *f, int flags, MPI_Offset off, const void *buf, int count,
                    MPI_Datatype type, MPI_Status *st)
{
    MPI_Count bytes;
    int rc = do_access(f, flags, off, buf, count, type, &bytes);
    if (rc == MPI_SUCCESS)
        set_status(st, bytes);
    return rc;
}

/* Nonblocking forms run eagerly; the request comes back already complete. */
static int greq_query(void *state, MPI_Status *st)
{
    set_status(st, *(MPI_Count *)state);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}

static int greq_free(void *state)
{
    free(state);
    return MPI_SUCCESS;
}

static int greq_cancel(void *state, int complete)
{
    (void)state, (void)complete;
    return MPI_SUCCESS;
}

static int nonblocking(surge_file *f, int flags, MPI_Offset off, const void *buf, int count,
                       MPI_Datatype type, MPI_Request *req)
{
    MPI_Count *bytes = malloc(sizeof *bytes);
    int rc = do_access(f, flags, off, buf, count, type, bytes);
    if (rc != MPI_SUCCESS) {
        free(bytes);
        *req = MPI_REQUEST_NULL;
        return rc;
    }
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, bytes, req);
    return MPI_Grequest_complete(*req);
}

/* Split collectives: the work happens in begin; end reports it. */
static int split_begin(surge_file *f, int flags, MPI_Offset off, const void *buf, int count,
                       MPI_Datatype type)
{
    MPI_Count bytes;
    int rc = do_access(f, flags, off, buf, count, type, &bytes);
    f->split_bytes = rc == MPI_SUCCESS ? bytes : 0;
    return rc;
}

static int split_end(surge_file *f, MPI_Status *st)
{
    set_status(st, f->split_bytes);
    return MPI_SUCCESS;
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
    f->fd = open(path, flags | O_CLOEXEC);
    int ok = f->fd >= 0, all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, f->comm);
    if (!all_ok) { /* e.g. a path only the MPI library understands: leave it to PMPI */
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
        file_state_remove(f);
        io_worker_stop(f->worker);
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
    int rc = PMPI_File_set_info(fh, info);
    surge_file *f = file_state_find(fh);
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
    int rc = PMPI_File_set_atomicity(fh, flag);
    surge_file *f = file_state_find(fh);
    if (f && rc == MPI_SUCCESS)
        f->atomic = flag;
    return rc;
}

int MPI_File_sync(MPI_File fh)
{
    surge_file *f = file_state_find(fh);
    if (f && fsync(f->fd) != 0)
        report(fh, MPI_ERR_IO); /* still call PMPI: sync is collective */
    return PMPI_File_sync(fh);
}

/* ---- data access ---- */

#define W (OP_WRITE)
#define C (OP_COLLECTIVE)
#define FP (OP_USE_FP)

int MPI_File_write_all(MPI_File fh, const void *buf, int count, MPI_Datatype t, MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? blocking(f, W | C | FP, 0, buf, count, t, st)
             : PMPI_File_write_all(fh, buf, count, t, st);
}

int MPI_File_write_at_all(MPI_File fh, MPI_Offset off, const void *buf, int count,
                          MPI_Datatype t, MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? blocking(f, W | C, off, buf, count, t, st)
             : PMPI_File_write_at_all(fh, off, buf, count, t, st);
}

int MPI_File_read_all(MPI_File fh, void *buf, int count, MPI_Datatype t, MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? blocking(f, C | FP, 0, buf, count, t, st)
             : PMPI_File_read_all(fh, buf, count, t, st);
}

int MPI_File_read_at_all(MPI_File fh, MPI_Offset off, void *buf, int count, MPI_Datatype t,
                         MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? blocking(f, C, off, buf, count, t, st)
             : PMPI_File_read_at_all(fh, off, buf, count, t, st);
}

int MPI_File_write(MPI_File fh, const void *buf, int count, MPI_Datatype t, MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? blocking(f, W | FP, 0, buf, count, t, st) : PMPI_File_write(fh, buf, count, t, st);
}

int MPI_File_write_at(MPI_File fh, MPI_Offset off, const void *buf, int count, MPI_Datatype t,
                      MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? blocking(f, W, off, buf, count, t, st)
             : PMPI_File_write_at(fh, off, buf, count, t, st);
}

int MPI_File_read(MPI_File fh, void *buf, int count, MPI_Datatype t, MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? blocking(f, FP, 0, buf, count, t, st) : PMPI_File_read(fh, buf, count, t, st);
}

int MPI_File_read_at(MPI_File fh, MPI_Offset off, void *buf, int count, MPI_Datatype t,
                     MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? blocking(f, 0, off, buf, count, t, st)
             : PMPI_File_read_at(fh, off, buf, count, t, st);
}

int MPI_File_iwrite_all(MPI_File fh, const void *buf, int count, MPI_Datatype t, MPI_Request *r)
{
    surge_file *f = active(fh);
    return f ? nonblocking(f, W | C | FP, 0, buf, count, t, r)
             : PMPI_File_iwrite_all(fh, buf, count, t, r);
}

int MPI_File_iwrite_at_all(MPI_File fh, MPI_Offset off, const void *buf, int count,
                           MPI_Datatype t, MPI_Request *r)
{
    surge_file *f = active(fh);
    return f ? nonblocking(f, W | C, off, buf, count, t, r)
             : PMPI_File_iwrite_at_all(fh, off, buf, count, t, r);
}

int MPI_File_iread_all(MPI_File fh, void *buf, int count, MPI_Datatype t, MPI_Request *r)
{
    surge_file *f = active(fh);
    return f ? nonblocking(f, C | FP, 0, buf, count, t, r)
             : PMPI_File_iread_all(fh, buf, count, t, r);
}

int MPI_File_iread_at_all(MPI_File fh, MPI_Offset off, void *buf, int count, MPI_Datatype t,
                          MPI_Request *r)
{
    surge_file *f = active(fh);
    return f ? nonblocking(f, C, off, buf, count, t, r)
             : PMPI_File_iread_at_all(fh, off, buf, count, t, r);
}

int MPI_File_iwrite(MPI_File fh, const void *buf, int count, MPI_Datatype t, MPI_Request *r)
{
    surge_file *f = active(fh);
    return f ? nonblocking(f, W | FP, 0, buf, count, t, r)
             : PMPI_File_iwrite(fh, buf, count, t, r);
}

int MPI_File_iwrite_at(MPI_File fh, MPI_Offset off, const void *buf, int count, MPI_Datatype t,
                       MPI_Request *r)
{
    surge_file *f = active(fh);
    return f ? nonblocking(f, W, off, buf, count, t, r)
             : PMPI_File_iwrite_at(fh, off, buf, count, t, r);
}

int MPI_File_iread(MPI_File fh, void *buf, int count, MPI_Datatype t, MPI_Request *r)
{
    surge_file *f = active(fh);
    return f ? nonblocking(f, FP, 0, buf, count, t, r) : PMPI_File_iread(fh, buf, count, t, r);
}

int MPI_File_iread_at(MPI_File fh, MPI_Offset off, void *buf, int count, MPI_Datatype t,
                      MPI_Request *r)
{
    surge_file *f = active(fh);
    return f ? nonblocking(f, 0, off, buf, count, t, r)
             : PMPI_File_iread_at(fh, off, buf, count, t, r);
}

int MPI_File_write_all_begin(MPI_File fh, const void *buf, int count, MPI_Datatype t)
{
    surge_file *f = active(fh);
    return f ? split_begin(f, W | C | FP, 0, buf, count, t)
             : PMPI_File_write_all_begin(fh, buf, count, t);
}

int MPI_File_write_all_end(MPI_File fh, const void *buf, MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? split_end(f, st) : PMPI_File_write_all_end(fh, buf, st);
}

int MPI_File_write_at_all_begin(MPI_File fh, MPI_Offset off, const void *buf, int count,
                                MPI_Datatype t)
{
    surge_file *f = active(fh);
    return f ? split_begin(f, W | C, off, buf, count, t)
             : PMPI_File_write_at_all_begin(fh, off, buf, count, t);
}

int MPI_File_write_at_all_end(MPI_File fh, const void *buf, MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? split_end(f, st) : PMPI_File_write_at_all_end(fh, buf, st);
}

int MPI_File_read_all_begin(MPI_File fh, void *buf, int count, MPI_Datatype t)
{
    surge_file *f = active(fh);
    return f ? split_begin(f, C | FP, 0, buf, count, t)
             : PMPI_File_read_all_begin(fh, buf, count, t);
}

int MPI_File_read_all_end(MPI_File fh, void *buf, MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? split_end(f, st) : PMPI_File_read_all_end(fh, buf, st);
}

int MPI_File_read_at_all_begin(MPI_File fh, MPI_Offset off, void *buf, int count,
                               MPI_Datatype t)
{
    surge_file *f = active(fh);
    return f ? split_begin(f, C, off, buf, count, t)
             : PMPI_File_read_at_all_begin(fh, off, buf, count, t);
}

int MPI_File_read_at_all_end(MPI_File fh, void *buf, MPI_Status *st)
{
    surge_file *f = active(fh);
    return f ? split_end(f, st) : PMPI_File_read_at_all_end(fh, buf, st);
}
