#include "hints.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/xattr.h>

const char *const surge_algo_names[ALGO_COUNT] = {"no_overlap", "comm", "write", "write_comm",
                                                  "write_comm2"};
const char *const surge_primitive_names[PRIM_COUNT] = {"isend", "put_fence", "put_lock"};
const char *const surge_fd_partition_names[FD_COUNT] = {"even", "stripe_aligned",
                                                        "static_cyclic", "group_cyclic"};

/* An unrecognised value leaves the setting unchanged. */
static void parse_enum(const char *v, const char *const *names, int n, int *out)
{
    if (!strcasecmp(v, "auto")) {
        *out = SURGE_AUTO;
        return;
    }
    for (int i = 0; i < n; i++)
        if (!strcasecmp(v, names[i])) {
            *out = i;
            return;
        }
}

/* Accepts plain bytes or a k/m/g suffix; returns 0 when unparsable. */
static int64_t parse_size(const char *v)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    switch (*end) {
    case 'k': case 'K': x <<= 10; break;
    case 'm': case 'M': x <<= 20; break;
    case 'g': case 'G': x <<= 30; break;
    default: break;
    }
    return x > 0 ? x : 0;
}

typedef enum { K_ENUM_ALGO, K_ENUM_PRIM, K_ENUM_FD, K_ENUM_CB, K_INT, K_SIZE, K_SWITCH } key_kind;

static const char *const cb_names[2] = {"disable", "enable"};

typedef struct {
    const char *info_key;
    const char *env;
    key_kind kind;
    size_t field;
} hint_key;

#define F(x) offsetof(surge_hints, x)
static const hint_key keys[] = {
    {"surge_mpiio", "SURGE_MPIIO", K_SWITCH, F(enabled)},
    {"surge_cb", "SURGE_MPIIO_CB", K_ENUM_CB, F(cb)},
    {"surge_algorithm", "SURGE_MPIIO_ALGO", K_ENUM_ALGO, F(algorithm)},
    {"surge_primitive", "SURGE_MPIIO_PRIMITIVE", K_ENUM_PRIM, F(primitive)},
    {"surge_fd_partition", "SURGE_MPIIO_FD_PARTITION", K_ENUM_FD, F(fd_partition)},
    {"cb_nodes", "SURGE_MPIIO_CB_NODES", K_INT, F(cb_nodes)},
    {"cb_buffer_size", "SURGE_MPIIO_CB_BUFFER_SIZE", K_SIZE, F(cb_buffer_size)},
    {"striping_unit", NULL, K_SIZE, F(stripe_size)},
    {"surge_stripe_size", "SURGE_MPIIO_STRIPE_SIZE", K_SIZE, F(stripe_size)},
    {"striping_factor", "SURGE_MPIIO_STRIPE_COUNT", K_INT, F(stripe_count)},
    {"surge_io_threads", "SURGE_MPIIO_IO_THREADS", K_INT, F(io_threads)},
    {"surge_ind_cycle_size", "SURGE_MPIIO_IND_CYCLE_SIZE", K_SIZE, F(ind_cycle_size)},
    {"surge_direct_piece", "SURGE_MPIIO_DIRECT_PIECE", K_SIZE, F(direct_piece)},
};
#undef F

static void apply(surge_hints *h, const hint_key *k, const char *v)
{
    char *field = (char *)h + k->field;
    switch (k->kind) {
    case K_ENUM_ALGO: parse_enum(v, surge_algo_names, ALGO_COUNT, (int *)field); break;
    case K_ENUM_PRIM: parse_enum(v, surge_primitive_names, PRIM_COUNT, (int *)field); break;
    case K_ENUM_FD: parse_enum(v, surge_fd_partition_names, FD_COUNT, (int *)field); break;
    case K_ENUM_CB: parse_enum(v, cb_names, 2, (int *)field); break;
    case K_SWITCH:
        *(int *)field = strcasecmp(v, "disable") && strcmp(v, "0") && strcasecmp(v, "false");
        break;
    case K_INT: {
        int x = atoi(v);
        if (x > 0)
            *(int *)field = x;
        else if (!strcasecmp(v, "auto"))
            *(int *)field = SURGE_AUTO;
        break;
    }
    case K_SIZE: {
        int64_t x = parse_size(v);
        if (x > 0)
            *(int64_t *)field = x;
        break;
    }
    }
}

void hints_init(surge_hints *h)
{
    h->enabled = 1;
    h->cb = SURGE_AUTO;
    h->algorithm = SURGE_AUTO;
    h->primitive = SURGE_AUTO;
    h->fd_partition = SURGE_AUTO;
    h->cb_nodes = SURGE_AUTO;
    h->cb_buffer_size = 16 << 20;
    h->stripe_size = 0;
    h->stripe_count = 0;
    h->io_threads = 1;
    h->ind_cycle_size = 32 << 20;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = keys[i].env ? getenv(keys[i].env) : NULL;
        if (v && *v)
            apply(h, &keys[i], v);
    }
    /* SURGE_MPIIO_DISABLE=1 is the documented global off switch. */
    const char *off = getenv("SURGE_MPIIO_DISABLE");
    if (off && *off && strcmp(off, "0"))
        h->enabled = 0;
}

void hints_apply_info(surge_hints *h, MPI_Info info)
{
    if (info == MPI_INFO_NULL)
        return;
    char v[MPI_MAX_INFO_VAL + 1];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int flag = 0;
        MPI_Info_get(info, keys[i].info_key, MPI_MAX_INFO_VAL, v, &flag);
        if (flag)
            apply(h, &keys[i], v);
    }
}

void hints_export(const surge_hints *h, MPI_Info info)
{
    char v[64];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const hint_key *k = &keys[i];
        const char *field = (const char *)h + k->field;
        int iv = *(const int *)field;
        switch (k->kind) {
        case K_ENUM_ALGO:
            snprintf(v, sizeof v, "%s", iv < 0 ? "auto" : surge_algo_names[iv]);
            break;
        case K_ENUM_PRIM:
            snprintf(v, sizeof v, "%s", iv < 0 ? "auto" : surge_primitive_names[iv]);
            break;
        case K_ENUM_FD:
            snprintf(v, sizeof v, "%s", iv < 0 ? "auto" : surge_fd_partition_names[iv]);
            break;
        case K_ENUM_CB: snprintf(v, sizeof v, "%s", iv < 0 ? "auto" : cb_names[iv]); break;
        case K_SWITCH: snprintf(v, sizeof v, "%s", iv ? "enable" : "disable"); break;
        case K_INT:
            if (iv <= 0 && k->field == offsetof(surge_hints, stripe_count))
                continue; /* unknown layout: leave the key to the MPI library */
            snprintf(v, sizeof v, "%d", iv);
            break;
        case K_SIZE:
            if (*(const int64_t *)field <= 0)
                continue;
            snprintf(v, sizeof v, "%lld", (long long)*(const int64_t *)field);
            break;
        }
        MPI_Info_set(info, k->info_key, v);
    }
}

void hints_detect_layout(surge_hints *h, const char *path)
{
    /* struct lov_user_md_v1/v3: magic, pattern, 16-byte object id, then
     * __u32 lmm_stripe_size at byte 24 and __u16 lmm_stripe_count at 28. */
    unsigned char lov[256];
    ssize_t n = getxattr(path, "lustre.lov", lov, sizeof lov);
    if (n < 32)
        return;
    uint32_t size;
    uint16_t count;
    memcpy(&size, lov + 24, sizeof size);
    memcpy(&count, lov + 28, sizeof count);
    if (h->stripe_size <= 0 && size > 0)
        h->stripe_size = size;
    if (h->stripe_count <= 0 && count > 0 && count != 0xffff)
        h->stripe_count = count;
}
