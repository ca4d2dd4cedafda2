#include "request.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Average memory run below which packing beats describing every piece. */
enum { PACK_BELOW_AVG_RUN = 4096 };

/* The whole request as one contiguous layout over a packed copy. */
static int use_packed_layout(io_request *rq)
{
    rq->staging = malloc((size_t)rq->nbytes);
    if (!rq->staging)
        return MPI_ERR_NO_MEM;
    flat_type_build(MPI_BYTE, &rq->memtype);
    rq->memtype.extent = rq->memtype.size = rq->memtype.runs[0].len = rq->nbytes;
    rq->memtype.prefix[1] = rq->nbytes;
    tiled_map_init(&rq->mem, &rq->memtype, 0);
    rq->mem_base = rq->staging;
    if (rq->is_write) {
        int pos = 0;
        MPI_Pack(rq->buf, rq->count, rq->type, rq->staging, (int)rq->nbytes, &pos,
                 MPI_COMM_SELF);
    }
    return MPI_SUCCESS;
}

int io_request_init(io_request *rq, surge_file *f, int is_write, int collective,
                    MPI_Offset offset_etypes, const void *buf, int count, MPI_Datatype type)
{
    memset(rq, 0, sizeof *rq);
    rq->f = f;
    rq->is_write = is_write;
    rq->buf = rq->mem_base = (char *)buf;
    rq->count = count;
    rq->type = type;
    if (count < 0)
        return MPI_ERR_COUNT;
    if (type == MPI_DATATYPE_NULL)
        return MPI_ERR_TYPE;
    if (offset_etypes < 0)
        return MPI_ERR_ARG;
    if (is_write && (f->amode & MPI_MODE_RDONLY))
        return MPI_ERR_READ_ONLY;
    if (!is_write && (f->amode & MPI_MODE_WRONLY))
        return MPI_ERR_ACCESS;
    MPI_Count tsize;
    MPI_Type_size_x(type, &tsize);
    rq->nbytes = (int64_t)tsize * count;
    if (rq->nbytes % f->etype_size)
        return MPI_ERR_TYPE;
    if (rq->nbytes > 0 && f->filetype.size == 0)
        return MPI_ERR_ARG;
    rq->stream_start = offset_etypes * f->etype_size;
    tiled_map_init(&rq->file, &f->filetype, f->disp);
    int packable = rq->nbytes > 0 && rq->nbytes <= INT_MAX;
    int pack_small = packable && collective;
    int64_t max_runs = pack_small ? tsize / PACK_BELOW_AVG_RUN : INT64_MAX - 1;
    int rc = flat_type_build_limited(type, max_runs > 0 ? max_runs : 1, &rq->memtype);
    rq->decodable = rc == MPI_SUCCESS || packable;
    if (rc == MPI_SUCCESS) {
        tiled_map_init(&rq->mem, &rq->memtype, 0);
        if (!pack_small || rq->mem.contiguous || tsize >= PACK_BELOW_AVG_RUN * rq->memtype.nruns)
            return MPI_SUCCESS;
        flat_type_free(&rq->memtype);
    }
    return rq->decodable ? use_packed_layout(rq) : MPI_SUCCESS;
}

void io_request_unstage(io_request *rq)
{
    if (!rq->staging || rq->is_write)
        return;
    int pos = 0;
    MPI_Unpack(rq->staging, (int)rq->nbytes, &pos, rq->buf, rq->count, rq->type, MPI_COMM_SELF);
}

void io_request_free(io_request *rq)
{
    flat_type_free(&rq->memtype);
    free(rq->staging);
}

int64_t io_request_bytes_before(const io_request *rq, int64_t eof)
{
    map_pos p;
    tiled_map_seek(&rq->file, rq->stream_start, &p);
    int64_t done = 0;
    while (done < rq->nbytes) {
        int64_t off;
        int64_t n = tiled_map_next(&rq->file, &p, rq->nbytes - done, &off);
        if (off + n > eof)
            return done + (eof > off ? eof - off : 0);
        done += n;
    }
    return done;
}
