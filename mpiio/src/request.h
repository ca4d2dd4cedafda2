/* One data-access call, decoded: where its bytes live in memory (the memory
 * datatype tiled `count` times) and in the file (the view from a position). */
#ifndef SURGE_REQUEST_H
#define SURGE_REQUEST_H

#include "file_state.h"

typedef struct {
    surge_file *f;
    int is_write;
    char *buf;            /* the caller's buffer */
    char *mem_base;       /* what `mem` offsets are relative to: buf or staging */
    flat_type memtype;    /* decoded memory datatype, or the packed layout */
    tiled_map mem;        /* request byte position -> offset from mem_base */
    tiled_map file;       /* view stream position -> absolute file offset */
    int64_t stream_start; /* first view byte accessed */
    int64_t nbytes;
    int decodable;        /* 0: the memory datatype must be left to PMPI */
    int count;            /* the caller's count and memory datatype */
    MPI_Datatype type;
    char *staging;        /* packed copy of a fragmented memory layout, or NULL */
} io_request;

/* Returns MPI_SUCCESS or the local argument error (MPI error class).
 * Memory layouts that we cannot decode, and for collective calls those made
 * of small pieces, are moved through a packed contiguous copy: MPI_Pack and
 * MPI_Unpack are the MPI library's tuned gather and scatter, and describing
 * millions of 8-byte pieces in messages costs more than the copy. Writes are
 * packed here. (Individual calls gather small pieces per cycle, in their
 * threads: indep_io.c.) */
int io_request_init(io_request *rq, surge_file *f, int is_write, int collective,
                    MPI_Offset offset_etypes, const void *buf, int count, MPI_Datatype type);
/* After a successful read: scatter the packed copy into the caller's buffer. */
void io_request_unstage(io_request *rq);
void io_request_free(io_request *rq);
/* Bytes of the request that lie before end of file `eof` (the view is
 * monotonic, so they form a prefix of the request). */
int64_t io_request_bytes_before(const io_request *rq, int64_t eof);

#endif
