/* File-domain partitioning: which aggregator owns each byte of the aggregate
 * access range, and where it sits in that aggregator's "domain coordinate"
 * (the concatenation of the aggregator's pieces in file order). Cycles cut
 * domain coordinates into collective-buffer-sized windows, so every scheme
 * below only has to provide `locate`. */
#ifndef SURGE_PARTITION_H
#define SURGE_PARTITION_H

#include <stdint.h>

typedef struct fd_layout fd_layout;

typedef struct {
    const char *name;
    /* Owner aggregator index and domain coordinate of byte `off`, and how many
     * bytes from `off` stay contiguous in both file and domain coordinate. */
    void (*locate)(const fd_layout *l, int64_t off, int *agg, int64_t *dc, int64_t *run);
} fd_scheme;

struct fd_layout {
    const fd_scheme *scheme;
    int naggs;         /* aggregators actually used (group-cyclic may use fewer) */
    int64_t start;     /* first byte of the domain grid (aligned down for striped schemes) */
    int64_t end;       /* one past the last accessed byte */
    int64_t stripe;    /* stripe size (striped schemes) */
    int64_t domain;    /* even: bytes per aggregator; group-cyclic: bytes per group */
    int group;         /* group-cyclic: aggregators per group */
    int64_t span;      /* largest domain coordinate + 1 over all aggregators */
};

/* kind is a surge_fd_partition; stripe > 0 is required by the striped kinds,
 * group is the group size for group-cyclic (typically the stripe count). */
void fd_layout_init(fd_layout *l, int kind, int naggs, int64_t start, int64_t end,
                    int64_t stripe, int group);

static inline void fd_locate(const fd_layout *l, int64_t off, int *agg, int64_t *dc,
                             int64_t *run)
{
    l->scheme->locate(l, off, agg, dc, run);
}

#endif
