/*
 * common_mpi.h - small MPI helpers shared by the MPI workload programs:
 * turning an MPI error code into a message that names the operation and the
 * path, and the MPI_Abort path used for setup errors only.
 */
#ifndef SURGE_WORKLOADS_COMMON_MPI_H
#define SURGE_WORKLOADS_COMMON_MPI_H

#include <mpi.h>

/* Report "prefix: OP PATH: <MPI error string>" if rc != MPI_SUCCESS.
 * Returns 0 when rc == MPI_SUCCESS, -1 otherwise. */
int mpi_check(int rc, const char *op, const char *path);

/* Like mpi_check, but a failure is a setup error: MPI_Abort(MPI_COMM_WORLD, 2). */
void mpi_check_setup(int rc, const char *op, const char *path);

/* Report a setup error (printf-style) and MPI_Abort(MPI_COMM_WORLD, 2). */
void mpi_setup_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Sum a local uint64 counter over MPI_COMM_WORLD (collective). */
unsigned long long mpi_sum_u64(unsigned long long local);

#endif
