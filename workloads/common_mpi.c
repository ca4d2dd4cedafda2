/*
 * common_mpi.c - implementation of common_mpi.h (MPI error reporting).
 */
#include "common_mpi.h"
#include "common.h"

#include <stdarg.h>
#include <stdio.h>

int mpi_check(int rc, const char *op, const char *path)
{
    if (rc == MPI_SUCCESS)
        return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error code %d", rc);
    errmsg("%s %s: %s", op, path ? path : "", msg);
    return -1;
}

void mpi_check_setup(int rc, const char *op, const char *path)
{
    if (mpi_check(rc, op, path) != 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
}

void mpi_setup_fail(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    errmsg("%s", msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
    for (;;) /* MPI_Abort does not return */
        ;
}

unsigned long long mpi_sum_u64(unsigned long long local)
{
    unsigned long long sum = 0;
    MPI_Allreduce(&local, &sum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    return sum;
}

int mpi_parse_path_and_sizes(int argc, char **argv, const struct option opts[2], uint64_t *sizes[2], uint64_t max,
                             void (*usage)(FILE *), const char **path)
{
    const struct option lo[] = {opts[0], opts[1], {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int rank = 0, c, li = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    opterr = (rank == 0);
    while ((c = getopt_long(argc, argv, "h", lo, &li)) != -1) {
        if (c == opts[0].val || c == opts[1].val) {
            uint64_t *dst = sizes[c == opts[0].val ? 0 : 1];
            if (parse_size(optarg, dst) || *dst == 0 || *dst > max) {
                if (rank == 0) {
                    errmsg("invalid value '%s' for --%s", optarg, lo[li].name);
                    usage(stderr);
                }
                return 2;
            }
        } else if (c == 'h') {
            if (rank == 0) usage(stdout);
            return 1;
        } else {
            if (rank == 0) usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        if (rank == 0) {
            errmsg(optind >= argc ? "missing FILE argument" : "too many arguments");
            usage(stderr);
        }
        return 2;
    }
    *path = argv[optind];
    return 0;
}
