#include "access.h"

#include <sys/stat.h>

#include "indep_io.h"
#include "request.h"
#include "twophase.h"

/* Explicit-offset PMPI call, for requests whose memory type we cannot serve. */
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

int access_run(surge_file *f, int flags, MPI_Offset offset, const void *buf, int count,
               MPI_Datatype type, MPI_Count *bytes)
{
    *bytes = 0;
    io_request rq;
    int rc = io_request_init(&rq, f, flags & OP_WRITE, flags & OP_COLLECTIVE, offset, buf, count,
                             type);
    if (flags & OP_COLLECTIVE)
        rc = twophase_run(&rq, rc);
    else if (rc == MPI_SUCCESS)
        rc = rq.decodable ? indep_run(&rq) : TWOPHASE_USE_PMPI;
    if (rc == TWOPHASE_USE_PMPI) {
        rc = pmpi_fallback(f, flags, offset, buf, count, type, bytes);
    } else if (rc == MPI_SUCCESS) {
        io_request_unstage(&rq);
        *bytes = rq.nbytes;
        struct stat sb; /* reads stop at end of file */
        if (!(flags & OP_WRITE) && rq.nbytes > 0 && fstat(f->fd, &sb) == 0)
            *bytes = io_request_bytes_before(&rq, sb.st_size);
    }
    io_request_free(&rq);
    return rc;
}

void access_set_status(MPI_Status *st, MPI_Count bytes)
{
    if (st == MPI_STATUS_IGNORE)
        return;
    MPI_Status_set_elements_x(st, MPI_BYTE, bytes);
    MPI_Status_set_cancelled(st, 0);
}
