"""`surge tune export PROFILE -o LOG.darshan`: a Surge profile written as a Darshan log, so tools that read
only Darshan logs (Drishti, darshan-parser, PyDarshan's report) can read Surge jobs.

The writer is libdarshan-util's own (darshan_log_create, _put_job, _put_exe, _put_mounts, _put_namehash,
_put_mod, _close: darshan-logutils.h), the library PyDarshan ships and loads; its structures come from
PyDarshan's CFFI declarations, so records have the layout the installed library reads. The name table is
handed over as the linked list its HASH_ITER walks (only each entry's `next` is followed on writing).

What goes in, as Darshan's runtime would have written it:
  - the POSIX module only (a profile records no other module; Lustre layouts are not written);
  - the MPI ranks' records: processes outside MPI (a launcher's shell) would each have a Darshan log of
    their own, so they are left out, unless no process ran under MPI;
  - a file every rank accessed becomes one shared record (rank -1) reduced as Darshan reduces it: counts
    and times summed, offsets and ends the maximum, starts the minimum, and the fastest and slowest
    rank's number, bytes and time;
  - counters a profile does not record (memory alignment, strides, access sizes) are 0.
"""

from __future__ import annotations

import glob
import os
import struct
import zlib

import numpy as np
import pandas as pd

from surge_tune.errors import TuneError

POSIX_MODULE_ID = 1  # darshan_module_id: NULL, POSIX, MPI-IO, ...
POSIX_VERSION = 4  # DARSHAN_POSIX_VER of Darshan 3.4 and 3.5 (log format 3.41)
ZLIB = 0  # enum darshan_comp_type
PATH_MAX = 4096  # darshan_log_put_namehash copies each name into a buffer of PATH_MAX + 1 bytes
EXE_BYTES = 1024  # the command line kept (Darshan's runtime keeps a bounded prefix too)

_WRITER_DECLS = """
typedef struct { void *tbl; void *prev; void *next; void *hh_prev; void *hh_next; void *key;
                 unsigned keylen; unsigned hashv; } surge_ut_hash_handle;
struct surge_name_record_ref { void *name_record; surge_ut_hash_handle hlink; };
void *darshan_log_create(const char *name, int comp_type, int partial_flag);
int darshan_log_put_job(void *fd, struct darshan_job *job);
int darshan_log_put_exe(void *fd, char *buf);
int darshan_log_put_mounts(void *fd, struct darshan_mnt_info *mnt_data_array, int count);
int darshan_log_put_namehash(void *fd, struct surge_name_record_ref *hash);
int darshan_log_put_mod(void *fd, int mod_id, void *mod_buf, int mod_buf_sz, int ver);
void darshan_log_close(void *fd);
"""

_writer = None


def _library():
    """(ffi, lib): libdarshan-util with the writer functions declared (once per process)."""
    global _writer
    if _writer is None:
        import cffi
        from darshan.backend.cffi_backend import ffi as reader_ffi
        from darshan.discover_darshan import discover_darshan_wheel

        ffi = cffi.FFI()
        ffi.include(reader_ffi)
        ffi.cdef(_WRITER_DECLS)
        wheel = glob.glob(os.path.join(discover_darshan_wheel(), "libdarshan-util*.so*"))
        _writer = ffi, ffi.dlopen(wheel[0] if wheel else "libdarshan-util.so")
    return _writer


def counter_names() -> tuple[list[str], list[str]]:
    """POSIX counter and fcounter names in record order, from the library itself."""
    from darshan.backend.cffi_backend import ffi, libdutil

    def names(table) -> list[str]:
        out, i = [], 0
        while not (name := ffi.string(table[i]).decode()).endswith("NUM_INDICES"):
            out.append(name)
            i += 1
        return out

    return names(libdutil.posix_counter_names), names(libdutil.posix_f_counter_names)


# How a shared record combines the ranks' values (Darshan's POSIX reduction); the rest are summed.
_MAX = ("POSIX_MAX_BYTE_READ", "POSIX_MAX_BYTE_WRITTEN", "POSIX_FILE_ALIGNMENT", "POSIX_MEM_ALIGNMENT")
_MIN_NONZERO = ("START_TIMESTAMP",)
_LATEST = ("END_TIMESTAMP",)
_MAX_F = ("POSIX_F_MAX_READ_TIME", "POSIX_F_MAX_WRITE_TIME")


def _reduce(rows: pd.DataFrame, counters: list[str], fcounters: list[str]) -> dict:
    """One shared record from the per-rank rows of a file every rank accessed."""
    out = {"rank": -1}
    for name in counters + fcounters:
        col = rows[name]
        if name in _MAX or name in _MAX_F or name.endswith(_LATEST):
            out[name] = col.max()
        elif name.endswith(_MIN_NONZERO):
            started = col[col > 0]
            out[name] = started.min() if len(started) else 0.0
        else:
            out[name] = col.sum()
    times = rows[["POSIX_F_READ_TIME", "POSIX_F_WRITE_TIME", "POSIX_F_META_TIME"]].sum(axis=1)
    nbytes = rows["POSIX_BYTES_READ"] + rows["POSIX_BYTES_WRITTEN"]
    fast, slow = times.idxmin(), times.idxmax()
    out.update(
        {
            "POSIX_FASTEST_RANK": rows.at[fast, "rank"],
            "POSIX_FASTEST_RANK_BYTES": nbytes[fast],
            "POSIX_F_FASTEST_RANK_TIME": times[fast],
            "POSIX_SLOWEST_RANK": rows.at[slow, "rank"],
            "POSIX_SLOWEST_RANK_BYTES": nbytes[slow],
            "POSIX_F_SLOWEST_RANK_TIME": times[slow],
            "POSIX_F_VARIANCE_RANK_TIME": float(np.var(times)),
            "POSIX_F_VARIANCE_RANK_BYTES": float(np.var(nbytes)),
        }
    )
    return out


def posix_records(job) -> list[tuple[int, str, dict]]:
    """(record id, path, counters by name) for each record the log gets, in record order."""
    counters, fcounters = counter_names()
    posix = job.frame("POSIX")
    if not len(posix):
        raise TuneError(f"{job.input_path}: no POSIX records to export")
    rows = posix[posix["rank"] < job.nprocs].copy()
    for name in counters + fcounters:
        if name not in rows.columns:
            rows[name] = 0
    records = []
    for rid, per_file in rows.groupby("id", sort=False):
        path = str(per_file["path"].iloc[0])
        if len(path.encode()) >= PATH_MAX:
            raise TuneError(f"{job.input_path}: a file name of {len(path.encode())} bytes does not fit a Darshan log")
        per_rank = per_file.groupby("rank", as_index=False).sum(numeric_only=True)
        if job.nprocs > 1 and len(per_rank) == job.nprocs:
            records.append((int(rid), path, _reduce(per_rank, counters, fcounters)))
        else:
            records += [(int(rid), path, r) for r in per_rank.to_dict("records")]
    return records


def export(profile: str, out: str, job: str | None = None) -> int:
    """Write `profile` (its job `job`, when several runs appended to it) as the Darshan log `out`
    (replaced if it exists); return the records written."""
    from surge_tune.ingest import read_job

    job = read_job(profile, with_dxt=False, job=job)
    if job.source == "darshan":
        raise TuneError(f"{profile} is already a Darshan log")
    counters, fcounters = counter_names()
    records = posix_records(job)
    ffi, lib = _library()
    if os.path.exists(out):
        os.remove(out)  # the library creates with O_EXCL
    fd = lib.darshan_log_create(out.encode(), ZLIB, 0)
    if fd == ffi.NULL:
        raise TuneError(f"{out}: libdarshan-util cannot create the log")
    try:
        job_rec = ffi.new("struct darshan_job *")
        job_rec.uid = os.getuid()
        start, end = job.start_time, job.start_time + job.run_time
        job_rec.start_time_sec, job_rec.start_time_nsec = int(start), int(start % 1 * 1e9)
        job_rec.end_time_sec, job_rec.end_time_nsec = int(end), int(end % 1 * 1e9)
        job_rec.nprocs = job.nprocs
        job_rec.jobid = zlib.crc32(job.job_id.encode())
        _check(lib.darshan_log_put_job(fd, job_rec), "job", out)
        _check(lib.darshan_log_put_exe(fd, ffi.new("char[]", job.exe.encode()[:EXE_BYTES])), "exe", out)
        # One mount entry at least: readers take the exe as the text before the first mount's newline.
        mount = ffi.new("struct darshan_mnt_info *")
        mount.mnt_type, mount.mnt_path = b"surge", b"/"
        _check(lib.darshan_log_put_mounts(fd, mount, 1), "mount table", out)
        keep = []  # the name records and list entries must outlive put_namehash
        head = ffi.NULL
        for rid, path in reversed(list(dict((rid, path) for rid, path, _ in records).items())):
            name = ffi.new("char[]", struct.pack("<Q", rid) + path.encode() + b"\0")
            ref = ffi.new("struct surge_name_record_ref *")
            ref.name_record, ref.hlink.next = name, head
            keep += [name, ref]
            head = ref
        _check(lib.darshan_log_put_namehash(fd, head), "name records", out)
        layout = struct.Struct(f"<Qq{len(counters)}q{len(fcounters)}d")
        buf = b"".join(
            layout.pack(
                rid,
                int(rec["rank"]),
                *(int(rec[n]) for n in counters),
                *(float(rec[n]) for n in fcounters),
            )
            for rid, _, rec in records
        )
        _check(lib.darshan_log_put_mod(fd, POSIX_MODULE_ID, buf, len(buf), POSIX_VERSION), "POSIX records", out)
    finally:
        lib.darshan_log_close(fd)
    return len(records)


def _check(rc: int, what: str, out: str) -> None:
    if rc < 0:
        raise TuneError(f"{out}: libdarshan-util failed to write the {what}")
