/* Datatype flattening: an MPI datatype becomes an ordered list of byte runs
 * (typemap order), and a "tiled map" walks count/filetype repetitions of it. */
#ifndef SURGE_FLATTEN_H
#define SURGE_FLATTEN_H

#include <mpi.h>
#include <stdint.h>

typedef struct {
    int64_t off; /* byte displacement from the datatype origin */
    int64_t len;
} flat_run;

typedef struct {
    flat_run *runs;
    int64_t nruns;
    int64_t *prefix; /* prefix[i] = data bytes before run i; prefix[nruns] = size */
    int64_t size;    /* MPI_Type_size */
    int64_t extent;  /* MPI_Type_get_extent: the step between repetitions */
} flat_type;

enum { FLAT_TOO_FRAGMENTED = -2 };

/* Returns MPI_SUCCESS, or MPI_ERR_TYPE for a combiner we do not decode
 * (MPI_COMBINER_DARRAY); callers then leave the file to PMPI. */
int flat_type_build(MPI_Datatype type, flat_type *out);
/* The same, but gives up with FLAT_TOO_FRAGMENTED (and no output) as soon as
 * the type is known to have more than max_runs runs. */
int flat_type_build_limited(MPI_Datatype type, int64_t max_runs, flat_type *out);
void flat_type_free(flat_type *ft);
/* True when consecutive repetitions form one contiguous byte range. */
int flat_type_is_contiguous(const flat_type *ft);
/* Filetype rules of MPI 3.1 section 13.3: nonnegative, monotonically
 * nondecreasing, non-overlapping displacements, also across tiles. */
int flat_type_is_valid_filetype(const flat_type *ft);

/* A tiled map places repetition k of a flat type at base + k*extent.
 * Positions are counted in data bytes (the "stream"). */
typedef struct {
    const flat_type *ft;
    int64_t base;
    int contiguous;
} tiled_map;

typedef struct {
    int64_t tile;
    int64_t run;
    int64_t skip; /* bytes of runs[run] already consumed */
} map_pos;

void tiled_map_init(tiled_map *m, const flat_type *ft, int64_t base);
void tiled_map_seek(const tiled_map *m, int64_t stream_pos, map_pos *p);
/* Next contiguous chunk at p, at most maxlen bytes; stores its address or
 * file offset in *where and advances p. */
int64_t tiled_map_next(const tiled_map *m, map_pos *p, int64_t maxlen, int64_t *where);
/* Runs (elements) that the len bytes from stream position `from` touch (len >
 * 0), by two prefix-sum seeks; *start receives the position of `from`. */
int64_t tiled_map_elements(const tiled_map *m, int64_t from, int64_t len, map_pos *start);

#endif
