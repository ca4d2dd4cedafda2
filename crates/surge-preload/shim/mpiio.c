/* MPI-IO calls, counted for the profile as Darshan's MPI-IO module counts
 * them (the handler's mpiio.rs keeps the counters). Each MPI_File_* entry
 * point below calls the MPI library's own and reports what it did: opens
 * (collective over more than one process), independent, collective, split
 * collective and non-blocking reads and writes with their bytes (count x
 * the datatype's size, from PMPI_Type_size), syncs, views, hints, closes,
 * each timed. Only files the name of which leads into Surge are counted.
 *
 * No MPI header is used: the shim is built once for every MPI library.
 * The handle types differ (Open MPI's MPI_Comm, MPI_Datatype and MPI_Info
 * are pointers, MPICH's are ints; MPI_File is a pointer in both, MPI_Offset
 * 64 bits), so they are declared here as pointers and passed on unchanged.
 * This is sound on x86-64: the System V ABI passes the first six integer
 * or pointer arguments in registers and the rest in 8-byte stack slots, an
 * int and a pointer alike, and a callee reads only the width it declares;
 * a value received as a pointer and passed on in the same position reaches
 * the MPI library with the same bits where it looks. Nothing here reads an
 * int handle as a pointer: only MPI_File (a pointer in both) is kept.
 *
 * A program that never calls MPI-IO pays nothing: the MPI library's
 * functions are looked up on the first call (dlsym), so these definitions
 * link no MPI library into a program that has none.
 *
 * Wraps: MPI_File_open, MPI_File_read, MPI_File_read_at,
 * MPI_File_read_shared, MPI_File_read_all, MPI_File_read_at_all,
 * MPI_File_read_ordered, MPI_File_read_all_begin,
 * MPI_File_read_at_all_begin, MPI_File_read_ordered_begin, MPI_File_iread,
 * MPI_File_iread_at, MPI_File_iread_shared, MPI_File_iread_all,
 * MPI_File_iread_at_all, MPI_File_write, MPI_File_write_at,
 * MPI_File_write_shared, MPI_File_write_all, MPI_File_write_at_all,
 * MPI_File_write_ordered, MPI_File_write_all_begin,
 * MPI_File_write_at_all_begin, MPI_File_write_ordered_begin,
 * MPI_File_iwrite, MPI_File_iwrite_at, MPI_File_iwrite_shared,
 * MPI_File_iwrite_all, MPI_File_iwrite_at_all, MPI_File_sync,
 * MPI_File_set_view, MPI_File_set_info, MPI_File_close.
 */
#include "shim.h"

#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* An MPI handle or pointer argument, passed on as received (see above). */
typedef void *mpi_handle;
typedef long long mpi_offset;

/* MPI_SUCCESS is 0 in every MPI library. */
#define MPI_OK 0

/* Set while this thread is inside an MPI_File call: an MPI library's own
 * MPI_File calls (ROMIO's ordered operations) are part of the outer one. */
static __thread int in_mpiio;

/* The MPI library's function `name`: the next definition after this
 * library's; else its profiling twin `pname`, from whichever loaded object
 * has it (an MPI library loaded outside the global scope, RTLD_LOCAL as
 * under a Python extension, binds its callers to this library's wrappers,
 * and RTLD_NEXT cannot see it). Aborts when there is none: the program
 * called an MPI function that no MPI library provides. */
static void *mpi_function(const char *name, const char *pname) {
    void *f = dlsym(RTLD_NEXT, name);
    void *program = f ? NULL : dlopen(NULL, RTLD_LAZY);
    struct link_map *object = NULL;
    if (program && dlinfo(program, RTLD_DI_LINKMAP, &object) == 0) {
        for (; object && !f; object = object->l_next) {
            void *lib = object->l_name[0] ? dlopen(object->l_name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
            if (!lib) continue;
            f = dlsym(lib, pname);
            dlclose(lib);
        }
    }
    if (program) dlclose(program);
    if (!f) {
        fprintf(stderr, "surge: %s was called, but no loaded MPI library defines it\n", name);
        abort();
    }
    return f;
}

/* The MPI library's definition of `fn` (else of `twin`), resolved once per call site. */
#define LIBRARY_FUNCTION(fn, twin)                                            \
    ({                                                                        \
        static __typeof__(&fn) real_;                                         \
        if (!real_) real_ = (__typeof__(&fn))mpi_function(#fn, twin);         \
        real_;                                                                \
    })
#define MPI_REAL(fn) LIBRARY_FUNCTION(fn, "P" #fn)

/* The profiling entry points the counters ask (never defined here). */
int PMPI_Type_size(mpi_handle type, int *size);
int PMPI_Comm_size(mpi_handle comm, int *size);

/* Bytes of `count` items of `type`: 0 if the library cannot say. */
static int64_t bytes_of(int count, mpi_handle type) {
    int size = 0;
    if (count <= 0 || LIBRARY_FUNCTION(PMPI_Type_size, "PMPI_Type_size")(type, &size) != MPI_OK || size < 0)
        return 0;
    return (int64_t)count * size;
}

/* Should this process count MPI-IO calls at all? (Surge is on, and not a
 * vfork child sharing its parent's memory.) */
static bool counting(void) { return surge_mount_len && !in_mpiio && surge_is_owner(); }

/* Reports `call` on fh, begun at `start`, if it succeeded and fh may be
 * a Surge file (the handler knows: it is loaded once one was opened). */
static int recorded(mpi_handle fh, int call, int count, mpi_handle type, double start, int rc) {
    double seconds = surge_monotonic() - start;
    const struct surge_handler *c = surge_handler_if_loaded();
    if (rc == MPI_OK && c) HANDLER_CALL_VOID(c, mpiio_recorded, fh, call, bytes_of(count, type), seconds);
    return rc;
}

/* A call on an open file, timed and reported as `call` with `count` items of `type`. */
#define COUNTED(fn, call, count, type, args)                        \
    do {                                                            \
        if (!counting()) return MPI_REAL(fn) args;                  \
        in_mpiio++;                                                 \
        double start_ = surge_monotonic();                          \
        int rc_ = MPI_REAL(fn) args;                                \
        in_mpiio--;                                                 \
        return recorded(fh, call, count, type, start_, rc_);        \
    } while (0)

/* The shapes of the read and write calls: parameters, then arguments. */
#define PLAIN (mpi_handle fh, const void *buf, int count, mpi_handle type, mpi_handle out), (fh, buf, count, type, out)
#define AT                                                                                  \
    (mpi_handle fh, mpi_offset off, const void *buf, int count, mpi_handle type, mpi_handle out), \
        (fh, off, buf, count, type, out)
#define BEGIN (mpi_handle fh, const void *buf, int count, mpi_handle type), (fh, buf, count, type)
#define AT_BEGIN \
    (mpi_handle fh, mpi_offset off, const void *buf, int count, mpi_handle type), (fh, off, buf, count, type)

/* X(name, SURGE_MPIIO_ code, shape): the reads and writes counted. A split
 * collective is counted at its _begin, which names the data; its _end
 * only waits. */
#define SURGE_MPIIO_ACCESSES(X)                                               \
    X(read, INDEP_READ, PLAIN)                                                \
    X(read_at, INDEP_READ, AT)                                                \
    X(read_shared, INDEP_READ, PLAIN)                                         \
    X(read_all, COLL_READ, PLAIN)                                             \
    X(read_at_all, COLL_READ, AT)                                             \
    X(read_ordered, COLL_READ, PLAIN)                                         \
    X(read_all_begin, SPLIT_READ, BEGIN)                                      \
    X(read_at_all_begin, SPLIT_READ, AT_BEGIN)                                \
    X(read_ordered_begin, SPLIT_READ, BEGIN)                                  \
    X(iread, NB_READ, PLAIN)                                                  \
    X(iread_at, NB_READ, AT)                                                  \
    X(iread_shared, NB_READ, PLAIN)                                           \
    X(iread_all, NB_READ, PLAIN)                                              \
    X(iread_at_all, NB_READ, AT)                                              \
    X(write, INDEP_WRITE, PLAIN)                                              \
    X(write_at, INDEP_WRITE, AT)                                              \
    X(write_shared, INDEP_WRITE, PLAIN)                                       \
    X(write_all, COLL_WRITE, PLAIN)                                           \
    X(write_at_all, COLL_WRITE, AT)                                           \
    X(write_ordered, COLL_WRITE, PLAIN)                                       \
    X(write_all_begin, SPLIT_WRITE, BEGIN)                                    \
    X(write_at_all_begin, SPLIT_WRITE, AT_BEGIN)                              \
    X(write_ordered_begin, SPLIT_WRITE, BEGIN)                                \
    X(iwrite, NB_WRITE, PLAIN)                                                \
    X(iwrite_at, NB_WRITE, AT)                                                \
    X(iwrite_shared, NB_WRITE, PLAIN)                                         \
    X(iwrite_all, NB_WRITE, PLAIN)                                            \
    X(iwrite_at_all, NB_WRITE, AT)

#define ACCESS(name, code, shape) ACCESS_(name, code, shape)
#define ACCESS_(name, code, params, args)                                       \
    int MPI_File_##name params;                                                 \
    int MPI_File_##name params { COUNTED(MPI_File_##name, SURGE_MPIIO_##code, count, type, args); }
SURGE_MPIIO_ACCESSES(ACCESS)
#undef ACCESS_
#undef ACCESS

int MPI_File_sync(mpi_handle fh);
int MPI_File_sync(mpi_handle fh) { COUNTED(MPI_File_sync, SURGE_MPIIO_SYNC, 0, NULL, (fh)); }

int MPI_File_set_view(mpi_handle fh, mpi_offset disp, mpi_handle etype, mpi_handle filetype, const char *datarep,
                      mpi_handle info);
int MPI_File_set_view(mpi_handle fh, mpi_offset disp, mpi_handle etype, mpi_handle filetype, const char *datarep,
                      mpi_handle info) {
    COUNTED(MPI_File_set_view, SURGE_MPIIO_VIEW, 0, NULL, (fh, disp, etype, filetype, datarep, info));
}

int MPI_File_set_info(mpi_handle fh, mpi_handle info);
int MPI_File_set_info(mpi_handle fh, mpi_handle info) { COUNTED(MPI_File_set_info, SURGE_MPIIO_HINTS, 0, NULL, (fh, info)); }

/* Is the working directory on the mount (where a relative name leads)? */
static bool cwd_on_mount(void) {
    char cwd[PATH_MAX];
    if (surge_cwd_inside) return true;
    if (!REAL(getcwd)(cwd, sizeof cwd)) return false;
    return strncmp(cwd, surge_mount, surge_mount_len) == 0 &&
           (cwd[surge_mount_len] == '/' || cwd[surge_mount_len] == '\0');
}

/* Could MPI_File_open's `name` be a Surge file? (The handler decides; this
 * keeps it unloaded for host files.) A name holding the mount prefix may
 * be, after a driver prefix ("ufs:"); so may a relative one from a working
 * directory on the mount. */
static bool may_be_surge(const char *name) {
    if (strstr(name, surge_mount)) return true;
    const char *colon = strchr(name, ':');
    bool absolute = name[0] == '/' || (colon && colon[1] == '/');
    return !absolute && cwd_on_mount();
}

int MPI_File_open(mpi_handle comm, const char *name, int amode, mpi_handle info, mpi_handle *fh);
int MPI_File_open(mpi_handle comm, const char *name, int amode, mpi_handle info, mpi_handle *fh) {
    if (!counting()) return MPI_REAL(MPI_File_open)(comm, name, amode, info, fh);
    in_mpiio++;
    double start = surge_monotonic();
    int rc = MPI_REAL(MPI_File_open)(comm, name, amode, info, fh);
    double seconds = surge_monotonic() - start;
    in_mpiio--;
    int processes = 1;
    if (rc == MPI_OK && fh && name && may_be_surge(name) && LIBRARY_FUNCTION(PMPI_Comm_size, "PMPI_Comm_size")(comm, &processes) == MPI_OK) {
        const struct surge_handler *c = surge_handler();
        if (c) HANDLER_CALL_VOID(c, mpiio_opened, *fh, name, processes > 1, amode, seconds);
    }
    return rc;
}

int MPI_File_close(mpi_handle *fh);
int MPI_File_close(mpi_handle *fh) {
    /* The handle is MPI_FILE_NULL after the close: it is taken before. */
    mpi_handle handle = fh ? *fh : NULL;
    if (!counting()) return MPI_REAL(MPI_File_close)(fh);
    in_mpiio++;
    double start = surge_monotonic();
    int rc = MPI_REAL(MPI_File_close)(fh);
    double seconds = surge_monotonic() - start;
    in_mpiio--;
    const struct surge_handler *c = surge_handler_if_loaded();
    if (rc == MPI_OK && c) HANDLER_CALL_VOID(c, mpiio_closed, handle, seconds);
    return rc;
}
