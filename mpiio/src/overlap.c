#include "overlap.h"

#include "hints.h"

#define START(st, slot, c, a) ops->start(ops->ctx, st, slot, c, a)
#define WAIT(st, slot) ops->wait(ops->ctx, st, slot)
#define BLOCKING(st, slot, c) (START(st, slot, c, 0), WAIT(st, slot))

/* No-Overlap baseline: produce, then consume, on one full-size buffer. */
static void sequential(const pipeline_ops *ops, int n)
{
    for (int c = 0; c < n; c++) {
        BLOCKING(0, 0, c);
        BLOCKING(1, 0, c);
    }
}

/* [Feki22, ch. 3] Algorithm 1 shape: stage 0 of the next cycle runs while stage 1 blocks.
 * The loop runs n-1 times; prologue and epilogue handle one cycle each. */
static void async_first(const pipeline_ops *ops, int n)
{
    int p1 = 0, p2 = 1;
    START(0, p1, 0, 1);
    for (int c = 1; c < n; c++) {
        START(0, p2, c, 1);
        WAIT(0, p1);
        BLOCKING(1, p1, c - 1);
        p1 ^= 1, p2 ^= 1;
    }
    WAIT(0, p1);
    BLOCKING(1, p1, n - 1);
}

/* Algorithm 2 shape: stage 1 runs in the background; up to two in flight.
 * [Feki22]'s listing waits on p_2 at the end; after the swap the pending one is p_1. */
static void async_second(const pipeline_ops *ops, int n)
{
    int p1 = 0, p2 = 1;
    BLOCKING(0, p1, 0);
    START(1, p1, 0, 1);
    for (int c = 1; c < n; c++) {
        BLOCKING(0, p2, c);
        START(1, p2, c, 1);
        WAIT(1, p1);
        p1 ^= 1, p2 ^= 1;
    }
    WAIT(1, p1);
}

/* Algorithm 3 shape: both stages asynchronous, completed by a joint wait.
 * [Feki22]'s listing never writes the last buffer; the epilogue does. */
static void joint(const pipeline_ops *ops, int n)
{
    int p1 = 0, p2 = 1;
    BLOCKING(0, p1, 0);
    for (int c = 1; c < n; c++) {
        START(1, p1, c - 1, 1);
        START(0, p2, c, 1);
        WAIT(0, p2);
        WAIT(1, p1);
        p1 ^= 1, p2 ^= 1;
    }
    BLOCKING(1, p1, n - 1);
}

/* Algorithm 4 (Write-Communication-2), our consistent reading of the garbled
 * listing: two cycles per iteration, and every wait on a sub-buffer is
 * immediately followed by posting that sub-buffer's next operation. */
static void dataflow(const pipeline_ops *ops, int n)
{
    START(0, 0, 0, 1);
    for (int c = 0; c < n; c += 2) {
        WAIT(1, 1);
        if (c + 1 < n)
            START(0, 1, c + 1, 1);
        WAIT(0, 0);
        START(1, 0, c, 1);
        if (c + 1 < n) {
            WAIT(0, 1);
            START(1, 1, c + 1, 1);
        }
        WAIT(1, 0);
        if (c + 2 < n)
            START(0, 0, c + 2, 1);
    }
    WAIT(1, 1);
}

const overlap_algorithm overlap_algorithms[ALGO_COUNT] = {
    [ALGO_NO_OVERLAP] = {"no_overlap", 1, sequential, sequential},
    [ALGO_COMM] = {"comm", 2, async_first, async_second},
    [ALGO_WRITE] = {"write", 2, async_second, async_first},
    [ALGO_WRITE_COMM] = {"write_comm", 2, joint, joint},
    [ALGO_WRITE_COMM2] = {"write_comm2", 2, dataflow, dataflow},
};
