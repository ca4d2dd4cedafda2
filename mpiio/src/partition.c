#include "partition.h"

#include "hints.h"

static int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return div_up(a, b) * b; }

/* Even (and stripe-aligned even): one contiguous domain per aggregator. */
static void even_locate(const fd_layout *l, int64_t off, int *agg, int64_t *dc, int64_t *run)
{
    int64_t a = (off - l->start) / l->domain;
    int64_t dstart = l->start + a * l->domain;
    *agg = (int)a;
    *dc = off - dstart;
    *run = dstart + l->domain - off;
}

/* Static-cyclic: stripes dealt round-robin, like Lustre's RAID-0 layout. */
static void cyclic_locate(const fd_layout *l, int64_t off, int *agg, int64_t *dc, int64_t *run)
{
    int64_t k = off / l->stripe, k0 = l->start / l->stripe;
    *agg = (int)(k % l->naggs);
    *dc = (k / l->naggs - k0 / l->naggs) * l->stripe + off % l->stripe;
    *run = l->stripe - off % l->stripe;
}

/* Group-cyclic: even split into groups, static-cyclic inside each group. */
static void group_locate(const fd_layout *l, int64_t off, int *agg, int64_t *dc, int64_t *run)
{
    int64_t g = (off - l->start) / l->domain;
    int64_t k = (off - l->start - g * l->domain) / l->stripe;
    *agg = (int)(g * l->group + k % l->group);
    *dc = (k / l->group) * l->stripe + off % l->stripe;
    *run = l->stripe - off % l->stripe;
}

static const fd_scheme schemes[FD_COUNT] = {
    [FD_EVEN] = {"even", even_locate},
    [FD_STRIPE_ALIGNED] = {"stripe_aligned", even_locate},
    [FD_STATIC_CYCLIC] = {"static_cyclic", cyclic_locate},
    [FD_GROUP_CYCLIC] = {"group_cyclic", group_locate},
};

void fd_layout_init(fd_layout *l, int kind, int naggs, int64_t start, int64_t end,
                    int64_t stripe, int group)
{
    l->scheme = &schemes[kind];
    l->naggs = naggs;
    l->end = end;
    l->stripe = stripe;
    l->group = 1;
    switch (kind) {
    case FD_EVEN:
        l->start = start;
        l->domain = div_up(end - start, naggs);
        if (l->domain < 1)
            l->domain = 1;
        l->span = l->domain;
        break;
    case FD_STRIPE_ALIGNED:
        l->start = start - start % stripe;
        l->domain = round_up(div_up(end - l->start, naggs), stripe);
        l->span = l->domain;
        break;
    case FD_STATIC_CYCLIC:
        l->start = start;
        l->span = ((end - 1) / stripe / naggs - start / stripe / naggs + 1) * stripe;
        break;
    case FD_GROUP_CYCLIC: {
        if (group < 1 || group > naggs)
            group = naggs;
        int ngroups = naggs / group;
        l->group = group;
        l->naggs = ngroups * group;
        l->start = start - start % stripe;
        l->domain = round_up(div_up(end - l->start, ngroups), stripe * group);
        l->span = l->domain / group;
        break;
    }
    }
}
