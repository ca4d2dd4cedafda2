/* The overlap algorithms of [Feki22, ch. 3] (docs/references.md) as schedules
 * over a two-stage pipeline. Stage 0 produces a sub-buffer, stage 1 consumes it:
 *   collective write: stage 0 = shuffle into the aggregator, stage 1 = file write
 *   collective read:  stage 0 = file read,  stage 1 = shuffle out of the aggregator
 * The same algorithm therefore maps to a mirrored schedule for reads (e.g.
 * "communication overlap" makes the shuffle asynchronous in both directions). */
#ifndef SURGE_OVERLAP_H
#define SURGE_OVERLAP_H

typedef struct {
    void *ctx;
    /* Start stage `stage` on sub-buffer `slot`; stage 0 also names the cycle.
     * `async` = 0 asks for a blocking operation (it is waited right after). */
    void (*start)(void *ctx, int stage, int slot, int cycle, int async);
    void (*wait)(void *ctx, int stage, int slot); /* no-op when nothing is pending */
} pipeline_ops;

typedef struct {
    const char *name;
    int nslots; /* 1: one full-size buffer; 2: two half-size sub-buffers */
    void (*write_schedule)(const pipeline_ops *ops, int ncycles);
    void (*read_schedule)(const pipeline_ops *ops, int ncycles);
} overlap_algorithm;

/* Indexed by surge_algo. */
extern const overlap_algorithm overlap_algorithms[];

#endif
