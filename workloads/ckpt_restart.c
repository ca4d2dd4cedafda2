/*
 * ckpt_restart.c - bundled checkpoint/restart workload (MPI).
 *
 * Exercises the two classic HPC checkpoint patterns:
 *   N-N  every rank writes its own file DIR/step<k>/rank<r>.ckpt with POSIX
 *        open(O_CREAT|O_TRUNC) / pwrite in xfer-size pieces / fsync / close;
 *        restart reads it back with read(2) and checks stat().st_size and EOF.
 *   N-1  all ranks write one shared file DIR/step<k>/shared.ckpt with MPI-IO:
 *        rank 0 writes a small text header with independent MPI_File_write_at,
 *        every rank writes its contiguous block with collective
 *        MPI_File_write_at_all (one call per xfer piece), then MPI_File_sync;
 *        restart reads with MPI_File_read_at_all and checks stat().st_size.
 * Step directories are made by rank 0 with mkdir(2) followed by MPI_Barrier.
 *
 * Data is a deterministic function of (step, rank, mode, offset), so the
 * restart phase - typically a separate mpirun, i.e. a fresh process set -
 * verifies every byte without keeping a copy.  Restart reads the LAST step
 * (steps-1) and needs the same --mb-per-rank/--steps/--mode and rank count.
 *
 * Exit status: 0 success; 1 I/O error or data mismatch (reported first);
 * 2 usage error; MPI_Abort(2) for setup errors (mkdir, MPI_File_open, ...).
 */
#include "common.h"
#include "common_mpi.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES 4096 /* N-1 file: header, then rank blocks */
#define MAX_REPORTS 5     /* mismatch lines printed per rank */

enum { KIND_NN = 1, KIND_N1 = 2 };

struct opts {
    const char *dir;
    uint64_t bytes_per_rank;
    int steps;
    uint64_t xfer;
    int do_nn, do_n1;
    int do_ckpt, do_restart;
};

struct stats {
    unsigned long long bytes;      /* bytes moved by this rank */
    unsigned long long mismatches; /* bytes that differ from the pattern */
    unsigned long long errors;     /* failed calls / wrong sizes */
    int reports;                   /* mismatch lines printed so far */
};

static int g_rank, g_nprocs;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np P ckpt_restart --dir DIR [options]\n"
            "  --dir DIR           checkpoint directory (created if missing)\n"
            "  --mb-per-rank N     MiB of state per rank per step (default 16)\n"
            "  --steps S           checkpoint steps; restart reads step S-1 (default 2)\n"
            "  --xfer BYTES        transfer size, K/M/G suffix ok (default 1M)\n"
            "  --mode nn|n1|both   file-per-process, shared file, or both (default both)\n"
            "  --phase checkpoint|restart|both   (default both)\n"
            "  -h, --help          this message\n"
            "Run restart as a separate mpirun with the same options and rank count.\n");
}

/* Returns 0 ok, 1 help shown, 2 usage error (message printed by rank 0). */
static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"dir", required_argument, 0, 'd'},  {"mb-per-rank", required_argument, 0, 'm'},
        {"steps", required_argument, 0, 's'}, {"xfer", required_argument, 0, 'x'},
        {"mode", required_argument, 0, 'M'}, {"phase", required_argument, 0, 'p'},
        {"help", no_argument, 0, 'h'},       {0, 0, 0, 0}};
    uint64_t v;
    memset(o, 0, sizeof *o);
    o->bytes_per_rank = 16u << 20;
    o->steps = 2;
    o->xfer = 1u << 20;
    o->do_nn = o->do_n1 = o->do_ckpt = o->do_restart = 1;
    opterr = (g_rank == 0);
    int c, li = 0;
    while ((c = getopt_long(argc, argv, "h", lo, &li)) != -1) {
        switch (c) {
        case 'd': o->dir = optarg; break;
        case 'm':
            if (parse_size(optarg, &v) || v == 0 || v > (1u << 20))
                goto bad_val;
            o->bytes_per_rank = v << 20;
            break;
        case 's':
            if (parse_size(optarg, &v) || v == 0 || v > 100000)
                goto bad_val;
            o->steps = (int)v;
            break;
        case 'x':
            if (parse_size(optarg, &v) || v == 0 || v > (1u << 30))
                goto bad_val;
            o->xfer = v;
            break;
        case 'M':
            if (!strcmp(optarg, "nn")) o->do_n1 = 0, o->do_nn = 1;
            else if (!strcmp(optarg, "n1")) o->do_nn = 0, o->do_n1 = 1;
            else if (!strcmp(optarg, "both")) o->do_nn = o->do_n1 = 1;
            else goto bad_val;
            break;
        case 'p':
            if (!strcmp(optarg, "checkpoint")) o->do_restart = 0, o->do_ckpt = 1;
            else if (!strcmp(optarg, "restart")) o->do_ckpt = 0, o->do_restart = 1;
            else if (!strcmp(optarg, "both")) o->do_ckpt = o->do_restart = 1;
            else goto bad_val;
            break;
        case 'h':
            if (g_rank == 0) usage(stdout);
            return 1;
        default:
            if (g_rank == 0) usage(stderr);
            return 2;
        }
        continue;
    bad_val:
        if (g_rank == 0) {
            errmsg("invalid value '%s' for --%s", optarg, lo[li].name);
            usage(stderr);
        }
        return 2;
    }
    if (optind < argc) {
        if (g_rank == 0) {
            errmsg("unexpected argument '%s'", argv[optind]);
            usage(stderr);
        }
        return 2;
    }
    if (!o->dir) {
        if (g_rank == 0) {
            errmsg("--dir is required");
            usage(stderr);
        }
        return 2;
    }
    if (o->xfer > o->bytes_per_rank)
        o->xfer = o->bytes_per_rank;
    return 0;
}

static uint64_t seed_for(int step, int rank, int kind)
{
    return pattern_seed((uint64_t)step, (uint64_t)rank, (uint64_t)kind);
}

static void step_dir(char *buf, size_t n, const struct opts *o, int step)
{
    snprintf(buf, n, "%s/step%d", o->dir, step);
}

/* Deterministic N-1 header (zero padded to HEADER_BYTES). */
static void make_header(char *hdr, const struct opts *o, int step)
{
    memset(hdr, 0, HEADER_BYTES);
    snprintf(hdr, HEADER_BYTES,
             "SURGE-CKPT v1 step=%d nranks=%d bytes_per_rank=%" PRIu64 " header=%d\n",
             step, g_nprocs, o->bytes_per_rank, HEADER_BYTES);
}

static void note_mismatch(struct stats *st, uint64_t bad, uint64_t first,
                          const char *path, uint64_t file_off_base)
{
    if (bad == 0)
        return;
    st->mismatches += bad;
    if (st->reports++ < MAX_REPORTS)
        errmsg("%s: %" PRIu64 " mismatching bytes in chunk, first at file offset %" PRIu64,
               path, bad, file_off_base + first);
}

/* rank 0 creates DIR and DIR/step<k>; everybody waits for it. */
static void make_dirs(const struct opts *o, int step)
{
    char path[PATH_MAX];
    int ok = 1;
    if (g_rank == 0) {
        if (mkdir(o->dir, 0755) != 0 && errno != EEXIST) {
            syserr("mkdir", o->dir);
            ok = 0;
        }
        step_dir(path, sizeof path, o, step);
        if (ok && mkdir(path, 0755) != 0 && errno != EEXIST) {
            syserr("mkdir", path);
            ok = 0;
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok)
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- N-N: one POSIX file per rank ---------------------------------------- */

static void nn_write(const struct opts *o, int step, char *buf, struct stats *st)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/step%d/rank%d.ckpt", o->dir, step, g_rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        syserr("open", path);
        st->errors++;
        return;
    }
    uint64_t seed = seed_for(step, g_rank, KIND_NN);
    for (uint64_t off = 0; off < o->bytes_per_rank; off += o->xfer) {
        size_t len = (size_t)(o->bytes_per_rank - off < o->xfer ? o->bytes_per_rank - off : o->xfer);
        pattern_fill(buf, len, seed, off);
        if (pwrite_full(fd, buf, len, (off_t)off, path) != 0) {
            st->errors++;
            break;
        }
        st->bytes += len;
    }
    if (fsync(fd) != 0) {
        syserr("fsync", path);
        st->errors++;
    }
    if (close(fd) != 0) {
        syserr("close", path);
        st->errors++;
    }
}

static void nn_verify(const struct opts *o, int step, char *buf, struct stats *st)
{
    char path[PATH_MAX];
    struct stat sb;
    snprintf(path, sizeof path, "%s/step%d/rank%d.ckpt", o->dir, step, g_rank);
    if (stat(path, &sb) != 0) {
        syserr("stat", path);
        st->errors++;
        return;
    }
    if ((uint64_t)sb.st_size != o->bytes_per_rank) {
        errmsg("%s: size %lld, expected %" PRIu64, path, (long long)sb.st_size,
               o->bytes_per_rank);
        st->errors++;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        syserr("open", path);
        st->errors++;
        return;
    }
    uint64_t seed = seed_for(step, g_rank, KIND_NN);
    uint64_t off = 0;
    while (off < o->bytes_per_rank) {
        size_t want = (size_t)(o->bytes_per_rank - off < o->xfer ? o->bytes_per_rank - off : o->xfer);
        ssize_t got = read_full(fd, buf, want, path);
        if (got < 0) {
            st->errors++;
            break;
        }
        uint64_t first = 0;
        note_mismatch(st, pattern_check(buf, (size_t)got, seed, off, &first), first, path, 0);
        st->bytes += (uint64_t)got;
        off += (uint64_t)got;
        if ((size_t)got < want) {
            errmsg("%s: unexpected EOF at offset %" PRIu64 ", expected %" PRIu64 " bytes",
                   path, off, o->bytes_per_rank);
            st->errors++;
            break;
        }
    }
    if (off == o->bytes_per_rank) { /* the file must end exactly here */
        ssize_t extra = read_full(fd, buf, 1, path);
        if (extra != 0) {
            if (extra > 0)
                errmsg("%s: data beyond expected end %" PRIu64, path, o->bytes_per_rank);
            st->errors++;
        }
    }
    if (close(fd) != 0) {
        syserr("close", path);
        st->errors++;
    }
}

/* ---- N-1: one shared file through MPI-IO ---------------------------------- */

/* Collective open; an open failure is a setup error (the collective calls that
 * follow could not be matched safely), so it aborts. */
static MPI_File n1_open(const char *path, int amode)
{
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, path, amode, MPI_INFO_NULL, &fh);
    int failed = (rc != MPI_SUCCESS), any = 0;
    if (failed)
        mpi_check(rc, "MPI_File_open", path);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any)
        mpi_setup_fail("cannot open shared checkpoint %s on all ranks", path);
    return fh;
}

static void n1_close(MPI_File *fh, const char *path, struct stats *st)
{
    if (mpi_check(MPI_File_close(fh), "MPI_File_close", path))
        st->errors++;
}

static void n1_write(const struct opts *o, int step, char *buf, struct stats *st)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/step%d/shared.ckpt", o->dir, step);
    /* O_TRUNC semantics: drop a stale file from an earlier, larger run. */
    if (g_rank == 0)
        MPI_File_delete(path, MPI_INFO_NULL); /* ENOENT is fine */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File fh = n1_open(path, MPI_MODE_CREATE | MPI_MODE_WRONLY);

    if (g_rank == 0) {
        char hdr[HEADER_BYTES];
        make_header(hdr, o, step);
        if (mpi_check(MPI_File_write_at(fh, 0, hdr, HEADER_BYTES, MPI_BYTE, MPI_STATUS_IGNORE),
                      "MPI_File_write_at(header)", path))
            st->errors++;
        else
            st->bytes += HEADER_BYTES;
    }
    uint64_t seed = seed_for(step, g_rank, KIND_N1);
    MPI_Offset base = HEADER_BYTES + (MPI_Offset)g_rank * (MPI_Offset)o->bytes_per_rank;
    /* Every rank holds the same amount, so all make the same number of
     * collective calls even if one of them fails. */
    for (uint64_t off = 0; off < o->bytes_per_rank; off += o->xfer) {
        int len = (int)(o->bytes_per_rank - off < o->xfer ? o->bytes_per_rank - off : o->xfer);
        pattern_fill(buf, (size_t)len, seed, off);
        if (mpi_check(MPI_File_write_at_all(fh, base + (MPI_Offset)off, buf, len, MPI_BYTE,
                                            MPI_STATUS_IGNORE),
                      "MPI_File_write_at_all", path))
            st->errors++;
        else
            st->bytes += (uint64_t)len;
    }
    if (mpi_check(MPI_File_sync(fh), "MPI_File_sync", path))
        st->errors++;
    n1_close(&fh, path, st);
}

static void n1_verify(const struct opts *o, int step, char *buf, struct stats *st)
{
    char path[PATH_MAX];
    struct stat sb;
    snprintf(path, sizeof path, "%s/step%d/shared.ckpt", o->dir, step);
    uint64_t expect = HEADER_BYTES + (uint64_t)g_nprocs * o->bytes_per_rank;

    int missing = 0, any_missing = 0;
    if (stat(path, &sb) != 0) {
        syserr("stat", path);
        missing = 1;
    } else if ((uint64_t)sb.st_size != expect) {
        errmsg("%s: size %lld, expected %" PRIu64 " (header + %d ranks x %" PRIu64 ")", path,
               (long long)sb.st_size, expect, g_nprocs, o->bytes_per_rank);
        st->errors++;
    }
    MPI_Allreduce(&missing, &any_missing, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_missing) { /* skip consistently on every rank */
        st->errors++;
        return;
    }
    MPI_File fh = n1_open(path, MPI_MODE_RDONLY);

    if (g_rank == 0) {
        char hdr[HEADER_BYTES], want[HEADER_BYTES];
        MPI_Status s;
        int n = 0;
        make_header(want, o, step);
        memset(hdr, 0, sizeof hdr);
        if (mpi_check(MPI_File_read_at(fh, 0, hdr, HEADER_BYTES, MPI_BYTE, &s),
                      "MPI_File_read_at(header)", path)) {
            st->errors++;
        } else {
            MPI_Get_count(&s, MPI_BYTE, &n);
            st->bytes += (uint64_t)n;
            if (n != HEADER_BYTES || memcmp(hdr, want, HEADER_BYTES) != 0) {
                hdr[sizeof hdr - 1] = '\0';
                errmsg("%s: bad header (read %d bytes)\n  got:      %.120s  expected: %.120s",
                       path, n, hdr, want);
                st->mismatches++;
            }
        }
    }
    uint64_t seed = seed_for(step, g_rank, KIND_N1);
    MPI_Offset base = HEADER_BYTES + (MPI_Offset)g_rank * (MPI_Offset)o->bytes_per_rank;
    for (uint64_t off = 0; off < o->bytes_per_rank; off += o->xfer) {
        int len = (int)(o->bytes_per_rank - off < o->xfer ? o->bytes_per_rank - off : o->xfer);
        MPI_Status s;
        int n = 0;
        memset(buf, 0, (size_t)len);
        if (mpi_check(MPI_File_read_at_all(fh, base + (MPI_Offset)off, buf, len, MPI_BYTE, &s),
                      "MPI_File_read_at_all", path)) {
            st->errors++;
            continue;
        }
        MPI_Get_count(&s, MPI_BYTE, &n);
        if (n != len) {
            errmsg("%s: short read at offset %lld: %d of %d bytes", path,
                   (long long)(base + (MPI_Offset)off), n, len);
            st->errors++;
        }
        uint64_t first = 0;
        note_mismatch(st, pattern_check(buf, (size_t)len, seed, off, &first), first, path,
                      (uint64_t)base);
        st->bytes += (uint64_t)n;
    }
    n1_close(&fh, path, st);
}

/* ---- phases ---------------------------------------------------------------- */

static const char *mode_name(const struct opts *o)
{
    return o->do_nn && o->do_n1 ? "both" : o->do_nn ? "nn" : "n1";
}

/* Prints the phase summary on rank 0; returns nonzero if anything failed. */
static int summarize(const char *phase, const struct opts *o, int steps, struct stats *st,
                     double secs)
{
    unsigned long long bytes = mpi_sum_u64(st->bytes);
    unsigned long long bad = mpi_sum_u64(st->mismatches);
    unsigned long long errs = mpi_sum_u64(st->errors);
    double t = 0;
    MPI_Allreduce(&secs, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0) {
        printf("%s: mode=%s ranks=%d steps=%d bytes=%llu seconds=%.3f MiB/s=%.1f "
               "mismatches=%llu errors=%llu %s\n",
               phase, mode_name(o), g_nprocs, steps, bytes, t,
               t > 0 ? (double)bytes / MIB / t : 0.0, bad, errs,
               bad || errs ? "FAILED" : "OK");
        fflush(stdout);
    }
    return bad || errs;
}

static int phase_checkpoint(const struct opts *o, char *buf)
{
    struct stats st = {0};
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_sec();
    for (int step = 0; step < o->steps; step++) {
        make_dirs(o, step);
        if (o->do_nn)
            nn_write(o, step, buf, &st);
        if (o->do_n1)
            n1_write(o, step, buf, &st);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return summarize("checkpoint", o, o->steps, &st, now_sec() - t0);
}

static int phase_restart(const struct opts *o, char *buf)
{
    struct stats st = {0};
    int step = o->steps - 1;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_sec();
    if (o->do_nn)
        nn_verify(o, step, buf, &st);
    if (o->do_n1)
        n1_verify(o, step, buf, &st);
    MPI_Barrier(MPI_COMM_WORLD);
    return summarize("restart", o, 1, &st, now_sec() - t0);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nprocs);
    prog_init(argv[0], g_rank);

    struct opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc != 0) { /* every rank parsed the same argv, so all leave here */
        MPI_Finalize();
        return prc == 1 ? 0 : 2;
    }
    char *buf = malloc((size_t)o.xfer);
    if (!buf)
        mpi_setup_fail("cannot allocate %" PRIu64 " byte transfer buffer", o.xfer);

    int failed = 0;
    if (o.do_ckpt)
        failed |= phase_checkpoint(&o, buf);
    if (o.do_restart)
        failed |= phase_restart(&o, buf);

    free(buf);
    MPI_Finalize();
    return failed ? 1 : 0;
}
