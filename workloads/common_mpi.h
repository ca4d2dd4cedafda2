/*
 * common_mpi.h - small MPI helpers shared by the MPI workload programs:
 * turning an MPI error code into a message that names the operation and the
 * path, and the MPI_Abort path used for setup errors only.
 */
#ifndef SURGE_WORKLOADS_COMMON_MPI_H
#define SURGE_WORKLOADS_COMMON_MPI_H

#include <getopt.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

/* Report "prefix: OP PATH: <MPI error string>" if rc != MPI_SUCCESS.
 * Returns 0 when rc == MPI_SUCCESS, -1 otherwise. */
int mpi_check(int rc, const char *op, const char *path);

/* Like mpi_check, but a failure is a setup error: MPI_Abort(MPI_COMM_WORLD, 2). */
void mpi_check_setup(int rc, const char *op, const char *path);

/* Report a setup error (printf-style) and MPI_Abort(MPI_COMM_WORLD, 2). */
void mpi_setup_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Sum a local uint64 counter over MPI_COMM_WORLD (collective). */
unsigned long long mpi_sum_u64(unsigned long long local);

/* Parses "FILE [--A N] [--B N] [-h]" for an MPI workload: sizes[i] (K/M/G
 * suffixes accepted) is set by option opts[i] and keeps its default when
 * the option is absent; each must be in 1..max. Only rank 0 prints usage
 * and errors. Returns 0 to go on, 1 after --help, 2 on bad input. */
int mpi_parse_path_and_sizes(int argc, char **argv, const struct option opts[2], uint64_t *sizes[2], uint64_t max,
                             void (*usage)(FILE *), const char **path);

#endif
