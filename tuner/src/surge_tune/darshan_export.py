"""`surge tune export PROFILE -o LOG.darshan`: a Surge profile written as a Darshan log, so tools that read
only Darshan logs (Drishti, darshan-parser, PyDarshan's report) can read Surge jobs.

The writer is libdarshan-util's own (darshan_log_create, _put_job, _put_exe, _put_mounts, _put_namehash,
_put_mod, _close: darshan-logutils.h), the library PyDarshan ships and loads; its structures come from
PyDarshan's CFFI declarations, so records have the layout the installed library reads. The name table is
handed over as the linked list its HASH_ITER walks (only each entry's `next` is followed on writing).

What goes in, as Darshan's runtime would have written it:
  - the POSIX module, and the MPI-IO module when the profile has MPI-IO counters (the interposer records
    them for programs that call MPI-IO: docs/profile.md); Lustre layouts are not written;
  - the MPI ranks' records: processes outside MPI (a launcher's shell) would each have a Darshan log of
    their own, so they are left out, unless no process ran under MPI;
  - a file every rank accessed becomes one shared record (rank -1) per module, reduced as Darshan reduces
    it: counts and times summed, offsets, modes and ends the maximum, starts the minimum, and the fastest
    and slowest rank's number, bytes and time;
  - counters a profile does not record (memory alignment, strides, common access sizes) are 0.
"""

from __future__ import annotations

import glob
import os
import struct
import zlib

import numpy as np
import pandas as pd

from surge_tune.errors import TuneError

# Module: (darshan_module_id, record format version of Darshan 3.4 and 3.5 (log format 3.41), counter prefix),
# in the order the log holds them.
MODULES = {"POSIX": (1, 4, "POSIX"), "MPI-IO": (2, 3, "MPIIO")}
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


def counter_names(module: str = "POSIX") -> tuple[list[str], list[str]]:
    """A module's counter and fcounter names in record order, from the library itself."""
    from darshan.backend.cffi_backend import ffi, libdutil

    def names(table) -> list[str]:
        out, i = [], 0
        while not (name := ffi.string(table[i]).decode()).endswith("NUM_INDICES"):
            out.append(name)
            i += 1
        return out

    prefix = MODULES[module][2].lower()
    return names(getattr(libdutil, f"{prefix}_counter_names")), names(getattr(libdutil, f"{prefix}_f_counter_names"))


# How a shared record combines the ranks' values (Darshan's POSIX and MPI-IO reductions); the rest are summed.
_MAX = (
    "POSIX_MAX_BYTE_READ",
    "POSIX_MAX_BYTE_WRITTEN",
    "POSIX_FILE_ALIGNMENT",
    "POSIX_MEM_ALIGNMENT",
    "MPIIO_MODE",
)
# A size that goes with the slowest call: the shared record takes the size of the rank with the slowest one.
_SIZE_OF_MAX_TIME = {
    "MPIIO_MAX_READ_TIME_SIZE": "MPIIO_F_MAX_READ_TIME",
    "MPIIO_MAX_WRITE_TIME_SIZE": "MPIIO_F_MAX_WRITE_TIME",
}
_MIN_NONZERO = ("START_TIMESTAMP",)
_LATEST = ("END_TIMESTAMP",)
_MAX_F = ("POSIX_F_MAX_READ_TIME", "POSIX_F_MAX_WRITE_TIME", "MPIIO_F_MAX_READ_TIME", "MPIIO_F_MAX_WRITE_TIME")


def _reduce(rows: pd.DataFrame, counters: list[str], fcounters: list[str], prefix: str) -> dict:
    """One shared record from the per-rank rows of a file every rank accessed."""
    out = {"rank": -1}
    for name in counters + fcounters:
        col = rows[name]
        if name in _SIZE_OF_MAX_TIME:
            out[name] = col[rows[_SIZE_OF_MAX_TIME[name]].idxmax()]
        elif name in _MAX or name in _MAX_F or name.endswith(_LATEST):
            out[name] = col.max()
        elif name.endswith(_MIN_NONZERO):
            started = col[col > 0]
            out[name] = started.min() if len(started) else 0.0
        else:
            out[name] = col.sum()
    times = rows[[f"{prefix}_F_READ_TIME", f"{prefix}_F_WRITE_TIME", f"{prefix}_F_META_TIME"]].sum(axis=1)
    nbytes = rows[f"{prefix}_BYTES_READ"] + rows[f"{prefix}_BYTES_WRITTEN"]
    fast, slow = times.idxmin(), times.idxmax()
    out.update(
        {
            f"{prefix}_FASTEST_RANK": rows.at[fast, "rank"],
            f"{prefix}_FASTEST_RANK_BYTES": nbytes[fast],
            f"{prefix}_F_FASTEST_RANK_TIME": times[fast],
            f"{prefix}_SLOWEST_RANK": rows.at[slow, "rank"],
            f"{prefix}_SLOWEST_RANK_BYTES": nbytes[slow],
            f"{prefix}_F_SLOWEST_RANK_TIME": times[slow],
            f"{prefix}_F_VARIANCE_RANK_TIME": float(np.var(times)),
            f"{prefix}_F_VARIANCE_RANK_BYTES": float(np.var(nbytes)),
        }
    )
    return out


def module_records(job, module: str = "POSIX") -> list[tuple[int, str, dict]]:
    """(record id, path, counters by name) for each record of `module` the log gets, in record order."""
    counters, fcounters = counter_names(module)
    frame = job.frame(module)
    if not len(frame):
        return []
    rows = frame[frame["rank"] < job.nprocs].copy()
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
            records.append((int(rid), path, _reduce(per_rank, counters, fcounters, MODULES[module][2])))
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
    modules = {m: module_records(job, m) for m in MODULES}
    if not modules["POSIX"]:
        raise TuneError(f"{job.input_path}: no POSIX records to export")
    records = [r for recs in modules.values() for r in recs]
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
        for module, module_recs in modules.items():
            if module_recs:
                _put_module(lib, fd, module, module_recs, out)
    finally:
        lib.darshan_log_close(fd)
    return len(records)


def _put_module(lib, fd, module: str, records: list[tuple[int, str, dict]], out: str) -> None:
    """Writes one module's records: each a darshan_base_record (id, rank), its counters, its fcounters."""
    counters, fcounters = counter_names(module)
    module_id, version, _ = MODULES[module]
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
    _check(lib.darshan_log_put_mod(fd, module_id, buf, len(buf), version), f"{module} records", out)


def _check(rc: int, what: str, out: str) -> None:
    if rc < 0:
        raise TuneError(f"{out}: libdarshan-util failed to write the {what}")
