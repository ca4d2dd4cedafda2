"""The feature table: one row per job and one row per file, the same for Darshan logs and Surge profiles.

`JOB_SCHEMA` and `FILE_SCHEMA` are the contract (column, Arrow type, meaning); docs/tuner.md is generated
from them (`python3 -m surge_tune schema`). Times are seconds, sizes bytes, rates MiB/s.

I/O time follows Luu et al. as DCA-IO does: the longest per-process I/O time, where a process's time is
its read + write + metadata time on the lowest layer recorded (POSIX and STDIO; MPI-IO only when no POSIX
data exists, because MPI-IO time already contains the POSIX time beneath it). A Darshan shared record
(rank -1) adds its slowest rank's time, as darshan-parser --perf does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from surge_tune.ingest.job import SIZE_BUCKETS, SMALL_BUCKET_TYPICAL_BYTES, SMALL_BUCKETS, Job

MIB = 1 << 20

_F64, _I64, _STR, _BOOL = pa.float64(), pa.int64(), pa.string(), pa.bool_()

# The job fields a report shows at a glance (the HTML report's table, `analyze`'s JSON), in one list so
# the two agree; JOB_IDENTITY is what the JSON adds (the HTML names the app and path in its heading).
JOB_OVERVIEW = (
    "job_id",
    "source",
    "format_version",
    "nprocs",
    "run_time",
    "io_time",
    "bytes_read",
    "bytes_written",
    "throughput_mib_s",
    "num_files",
    "num_shared_files",
    "interface",
    "partial",
)
JOB_IDENTITY = ("job_key", "input_path", "app", "exe", "modules", "stripe_count", "stripe_size")

JOB_SCHEMA: list[tuple[str, pa.DataType, str]] = [
    ("job_key", _STR, "input file name (`ingest`: parent directory / file name)"),
    ("source", _STR, "darshan, surge-profile, corpus-fio or corpus-mpiio"),
    ("input_path", _STR, "file the row was read from"),
    ("job_id", _STR, "scheduler job id recorded in the log/profile"),
    ("app", _STR, "program name (basename of argv[0]); DCA-IO's application identity"),
    ("exe", _STR, "full command line as recorded"),
    ("format_version", _STR, "Darshan library version or profile schema"),
    ("partial", _BOOL, "a Darshan module ran out of memory: counters are lower bounds"),
    ("modules", _STR, "comma-separated I/O modules with records"),
    ("has_dxt", _BOOL, "DXT trace segments were read"),
    ("start_time", _F64, "job start, unix epoch seconds"),
    ("run_time", _F64, "job wall time, s"),
    # -- user-settable configuration (the ML inputs) --
    ("nprocs", _I64, "number of processes"),
    ("num_hosts", _I64, "distinct hosts (0 = not recorded)"),
    ("stripe_count", _I64, "stripe count of the most-written file (-1 = unknown)"),
    ("stripe_size", _I64, "stripe size of the most-written file, bytes (-1 = unknown)"),
    ("num_osts", _I64, "distinct storage targets holding the job's files (-1 = unknown)"),
    ("transfer_size", _I64, "most common access size (Darshan ACCESS1), else mean request size, bytes"),
    ("file_per_process", _BOOL, "every data file is written/read by one rank"),
    ("collective", _BOOL, "collective MPI-IO operations were used"),
    ("interface", _STR, "dominant data interface by bytes: posix, mpiio, stdio or hdf5"),
    # -- application statistics --
    ("num_files", _I64, "files with any record"),
    ("num_data_files", _I64, "files with bytes read or written"),
    ("num_shared_files", _I64, "data files accessed by more than one rank"),
    ("posix_reads", _I64, "POSIX_READS"),
    ("posix_writes", _I64, "POSIX_WRITES"),
    ("posix_opens", _I64, "POSIX_OPENS"),
    ("posix_seeks", _I64, "POSIX_SEEKS"),
    ("posix_stats", _I64, "POSIX_STATS"),
    ("posix_fsyncs", _I64, "POSIX_FSYNCS + POSIX_FDSYNCS"),
    ("mpiio_indep_reads", _I64, "MPIIO_INDEP_READS"),
    ("mpiio_indep_writes", _I64, "MPIIO_INDEP_WRITES"),
    ("mpiio_coll_reads", _I64, "MPIIO_COLL_READS"),
    ("mpiio_coll_writes", _I64, "MPIIO_COLL_WRITES"),
    ("stdio_opens", _I64, "STDIO_OPENS"),
    ("stdio_reads", _I64, "STDIO_READS"),
    ("stdio_writes", _I64, "STDIO_WRITES"),
    ("h5d_reads", _I64, "H5D_READS"),
    ("h5d_writes", _I64, "H5D_WRITES"),
    ("bytes_read", _I64, "POSIX + STDIO bytes read (MPI-IO when no POSIX data)"),
    ("bytes_written", _I64, "POSIX + STDIO bytes written (MPI-IO when no POSIX data)"),
    ("stdio_bytes", _I64, "STDIO_BYTES_READ + STDIO_BYTES_WRITTEN"),
    ("mpiio_bytes", _I64, "MPIIO_BYTES_READ + MPIIO_BYTES_WRITTEN"),
    *[(f"read_{b.lower()}", _I64, f"POSIX_SIZE_READ_{b}") for b in SIZE_BUCKETS],
    *[(f"write_{b.lower()}", _I64, f"POSIX_SIZE_WRITE_{b}") for b in SIZE_BUCKETS],
    ("read_less_1k_pct", _F64, "% of POSIX reads below 1 KiB ([Bang23] readLess1k)"),
    ("write_less_1k_pct", _F64, "% of POSIX writes below 1 KiB ([Bang23] writeLess1k)"),
    ("read_more_1m_pct", _F64, "% of POSIX reads above 1 MiB"),
    ("write_more_1m_pct", _F64, "% of POSIX writes above 1 MiB"),
    ("small_request_pct", _F64, "% of POSIX requests of at most 100 KiB (buckets up to 10K_100K)"),
    ("seq_io_pct", _F64, "% of POSIX requests that are sequential (DCA-IO SeqIOPct)"),
    ("unaligned_pct", _F64, "POSIX_FILE_NOT_ALIGNED as % of POSIX requests"),
    ("meta_ops", _I64, "POSIX opens + stats + seeks + fsyncs + STDIO opens"),
    # -- performance statistics --
    ("read_time", _F64, "sum over ranks of read time, s"),
    ("write_time", _F64, "sum over ranks of write time, s"),
    ("meta_time", _F64, "sum over ranks of metadata time, s"),
    ("slowest_write_time", _F64, "longest single write (POSIX_F_MAX_WRITE_TIME), s"),
    ("io_time", _F64, "longest per-process I/O time (Luu et al.), s"),
    (
        "rank_time_imbalance",
        _F64,
        "(max - mean) / max of per-rank I/O time, 0 = balanced; -1 = unknown (most bytes in reduced records)",
    ),
    ("throughput_mib_s", _F64, "(bytes_read + bytes_written) / io_time, MiB/s: the prediction target"),
]

FILE_SCHEMA: list[tuple[str, pa.DataType, str]] = [
    ("job_key", _STR, "joins the job table"),
    ("record_id", _STR, "Darshan record id (profiles: hash of the path)"),
    ("path", _STR, "file name"),
    ("interface", _STR, "highest interface that touched it: hdf5, mpiio, stdio or posix"),
    ("n_ranks", _I64, "ranks that accessed it (a Darshan rank -1 record counts as nprocs)"),
    ("shared", _BOOL, "accessed by more than one rank"),
    ("reads", _I64, "POSIX_READS + STDIO_READS"),
    ("writes", _I64, "POSIX_WRITES + STDIO_WRITES"),
    ("opens", _I64, "POSIX_OPENS + STDIO_OPENS"),
    ("stats", _I64, "POSIX_STATS"),
    ("fsyncs", _I64, "POSIX_FSYNCS + POSIX_FDSYNCS"),
    ("bytes_read", _I64, "bytes read (POSIX + STDIO)"),
    ("bytes_written", _I64, "bytes written (POSIX + STDIO)"),
    ("small_requests", _I64, "POSIX requests of at most 100 KiB"),
    ("small_bytes", _I64, "estimated bytes of those requests (bucket count x the bucket's geometric middle)"),
    ("seq_requests", _I64, "POSIX_SEQ_READS + POSIX_SEQ_WRITES"),
    ("unaligned_requests", _I64, "POSIX_FILE_NOT_ALIGNED"),
    ("file_alignment", _I64, "POSIX_FILE_ALIGNMENT (file system block), bytes"),
    ("stdio_bytes", _I64, "STDIO bytes"),
    ("mpiio_indep_ops", _I64, "independent MPI-IO reads + writes"),
    ("mpiio_coll_ops", _I64, "collective MPI-IO reads + writes"),
    ("mpiio_bytes", _I64, "MPIIO_BYTES_READ + MPIIO_BYTES_WRITTEN"),
    ("mpiio_small_ops", _I64, "MPI-IO accesses of at most 100 KiB (MPIIO_SIZE_*_AGG_ buckets up to 10K_100K)"),
    ("reduced", _BOOL, "Darshan reduced the record over ranks (rank -1): only slowest/fastest rank are known"),
    ("io_time", _F64, "read + write + meta time summed over ranks, s"),
    ("meta_time", _F64, "metadata time summed over ranks, s"),
    ("slowest_rank_time", _F64, "I/O time of the slowest rank on this file, s"),
    ("fastest_rank_time", _F64, "I/O time of the fastest rank on this file, s"),
    ("slowest_rank_bytes", _I64, "bytes moved by the slowest rank"),
    ("fastest_rank_bytes", _I64, "bytes moved by the fastest rank"),
    ("mpiio_slowest_rank_bytes", _I64, "MPI-IO bytes of the slowest rank (0 = no MPI-IO)"),
    ("mpiio_fastest_rank_bytes", _I64, "MPI-IO bytes of the fastest rank"),
    ("stripe_count", _I64, "stripe count (-1 = unknown)"),
    ("stripe_size", _I64, "stripe size, bytes (-1 = unknown)"),
    ("ost_count", _I64, "distinct storage targets (-1 = unknown)"),
]

JOB_COLUMNS = [c for c, _, _ in JOB_SCHEMA]
FILE_COLUMNS = [c for c, _, _ in FILE_SCHEMA]


def arrow_schema(schema: list[tuple[str, pa.DataType, str]]) -> pa.Schema:
    return pa.schema([pa.field(name, typ) for name, typ, _ in schema])


@dataclass
class JobSummary:
    """A job reduced to what rules, reports and models read."""

    job: Job
    row: dict  # JOB_SCHEMA columns
    files: pd.DataFrame  # FILE_SCHEMA columns
    ranks: pd.DataFrame  # rank, io_time, bytes: per-process totals over its unique files


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def _by_id(job: Job, module: str, names: dict[str, str]) -> pd.DataFrame:
    """Sum the given counters per record id; `names` maps output column -> counter (or a+b)."""
    df = job.frame(module)
    if not len(df):
        return pd.DataFrame(columns=list(names))
    out = pd.DataFrame({"id": df["id"].astype("uint64").astype(str)})
    for col, expr in names.items():
        out[col] = sum(job.counter(module, n) for n in expr.split("+"))
    return out.groupby("id").sum()


def _rank_table(job: Job, time_modules: tuple[str, ...]) -> tuple[pd.DataFrame, float]:
    """Per-rank I/O time and bytes over records owned by one rank; plus the shared-record slowest time."""
    parts, shared_time = [], 0.0
    for module in time_modules:
        df = job.frame(module)
        if not len(df):
            continue
        p = module.split("-")[0].replace("MPI", "MPIIO")  # counter prefix: POSIX, STDIO, MPIIO
        t = sum(job.counter(module, f"{p}_F_{k}_TIME") for k in ("READ", "WRITE", "META"))
        b = job.counter(module, f"{p}_BYTES_READ") + job.counter(module, f"{p}_BYTES_WRITTEN")
        shared = df["rank"] < 0
        shared_time += float(job.counter(module, f"{p}_F_SLOWEST_RANK_TIME")[shared].sum())
        parts.append(pd.DataFrame({"rank": df["rank"][~shared], "io_time": t[~shared], "bytes": b[~shared]}))
    if not parts:
        return pd.DataFrame(columns=["rank", "io_time", "bytes"]), shared_time
    ranks = pd.concat(parts).groupby("rank", as_index=False).sum()
    return ranks, shared_time


def _file_rank_extremes(job: Job, module: str, prefix: str) -> pd.DataFrame:
    """Slowest/fastest rank time and bytes per file, from Darshan's reduction or from per-rank rows."""
    df = job.frame(module)
    if not len(df):
        return pd.DataFrame()
    t = sum(job.counter(module, f"{prefix}_F_{k}_TIME") for k in ("READ", "WRITE", "META"))
    b = job.counter(module, f"{prefix}_BYTES_READ") + job.counter(module, f"{prefix}_BYTES_WRITTEN")
    per = pd.DataFrame(
        {
            "id": df["id"].astype("uint64").astype(str),
            "rank": df["rank"],
            "t": t,
            "b": b,
            "slow_t": job.counter(module, f"{prefix}_F_SLOWEST_RANK_TIME"),
            "fast_t": job.counter(module, f"{prefix}_F_FASTEST_RANK_TIME"),
            "slow_b": job.counter(module, f"{prefix}_SLOWEST_RANK_BYTES"),
            "fast_b": job.counter(module, f"{prefix}_FASTEST_RANK_BYTES"),
        }
    )
    reduced = per[per["rank"] < 0].set_index("id")
    ranked = (
        per[per["rank"] >= 0]
        .groupby("id")
        .agg(
            n_ranks=("rank", "nunique"),
            slowest_rank_time=("t", "max"),
            fastest_rank_time=("t", "min"),
            slowest_rank_bytes=("b", "max"),
            fastest_rank_bytes=("b", "min"),
        )
    )
    from_reduced = pd.DataFrame(
        {
            "n_ranks": job.nprocs,
            "slowest_rank_time": reduced["slow_t"],
            "fastest_rank_time": reduced["fast_t"],
            "slowest_rank_bytes": reduced["slow_b"],
            "fastest_rank_bytes": reduced["fast_b"],
        },
        index=reduced.index,
    )
    both = pd.concat([ranked, from_reduced])
    return both[~both.index.duplicated(keep="last")]


def _small_bytes(job: Job) -> pd.Series:
    """Per record id: the bytes of POSIX requests of at most 100 KiB, estimated from the size buckets."""
    df = job.frame("POSIX")
    if not len(df):
        return pd.Series(dtype=float)
    estimate = sum(
        job.counter("POSIX", f"POSIX_SIZE_{op}_{b}") * size
        for op in ("READ", "WRITE")
        for b, size in zip(SMALL_BUCKETS, SMALL_BUCKET_TYPICAL_BYTES, strict=True)
    )
    return estimate.groupby(df["id"].astype("uint64").astype(str)).sum()


def _reduced_ids(job: Job) -> set[str]:
    """Record ids Darshan reduced over all ranks (rank -1) in any module."""
    ids: set[str] = set()
    for module in ("POSIX", "STDIO", "MPI-IO"):
        df = job.frame(module)
        if len(df):
            ids.update(df.loc[df["rank"] < 0, "id"].astype("uint64").astype(str))
    return ids


def _file_table(job: Job, key: str) -> pd.DataFrame:
    posix = _by_id(
        job,
        "POSIX",
        {
            "reads": "POSIX_READS",
            "writes": "POSIX_WRITES",
            "opens": "POSIX_OPENS",
            "stats": "POSIX_STATS",
            "fsyncs": "POSIX_FSYNCS+POSIX_FDSYNCS",
            "bytes_read": "POSIX_BYTES_READ",
            "bytes_written": "POSIX_BYTES_WRITTEN",
            "small_requests": "+".join(f"POSIX_SIZE_{op}_{b}" for op in ("READ", "WRITE") for b in SMALL_BUCKETS),
            "seq_requests": "POSIX_SEQ_READS+POSIX_SEQ_WRITES",
            "unaligned_requests": "POSIX_FILE_NOT_ALIGNED",
            "io_time": "POSIX_F_READ_TIME+POSIX_F_WRITE_TIME+POSIX_F_META_TIME",
            "meta_time": "POSIX_F_META_TIME",
        },
    )
    stdio = _by_id(
        job,
        "STDIO",
        {
            "reads": "STDIO_READS",
            "writes": "STDIO_WRITES",
            "opens": "STDIO_OPENS",
            "bytes_read": "STDIO_BYTES_READ",
            "bytes_written": "STDIO_BYTES_WRITTEN",
            "stdio_bytes": "STDIO_BYTES_READ+STDIO_BYTES_WRITTEN",
            "io_time": "STDIO_F_READ_TIME+STDIO_F_WRITE_TIME+STDIO_F_META_TIME",
            "meta_time": "STDIO_F_META_TIME",
        },
    )
    mpiio = _by_id(
        job,
        "MPI-IO",
        {
            "mpiio_indep_ops": "MPIIO_INDEP_READS+MPIIO_INDEP_WRITES",
            "mpiio_coll_ops": "MPIIO_COLL_READS+MPIIO_COLL_WRITES",
            "mpiio_bytes": "MPIIO_BYTES_READ+MPIIO_BYTES_WRITTEN",
            "mpiio_small_ops": "+".join(f"MPIIO_SIZE_{op}_AGG_{b}" for op in ("READ", "WRITE") for b in SMALL_BUCKETS),
        },
    )
    files = posix.add(stdio, fill_value=0).add(mpiio, fill_value=0)
    posix_frame = job.frame("POSIX")
    if "POSIX_FILE_ALIGNMENT" in posix_frame.columns:
        files["file_alignment"] = (
            posix_frame.assign(id=posix_frame["id"].astype("uint64").astype(str))
            .groupby("id")["POSIX_FILE_ALIGNMENT"]
            .max()
        )
    extremes = pd.concat([_file_rank_extremes(job, "POSIX", "POSIX"), _file_rank_extremes(job, "STDIO", "STDIO")])
    if len(extremes):
        extremes = extremes.groupby(level=0).max()
        files = files.join(extremes, how="outer")
    mpiio_extremes = _file_rank_extremes(job, "MPI-IO", "MPIIO")
    if len(mpiio_extremes):
        files = files.join(
            mpiio_extremes[["slowest_rank_bytes", "fastest_rank_bytes"]].add_prefix("mpiio_"), how="outer"
        )
    files["reduced"] = files.index.isin(_reduced_ids(job))
    files["small_bytes"] = _small_bytes(job).reindex(files.index).fillna(0)
    files["small_bytes"] = files["small_bytes"].clip(upper=files["bytes_read"] + files["bytes_written"])
    files = files.reindex(
        columns=[
            c
            for c in FILE_COLUMNS
            if c
            not in ("job_key", "record_id", "path", "interface", "shared", "stripe_count", "stripe_size", "ost_count")
        ]
    )
    files = files.fillna(0)
    files["reduced"] = files["reduced"].astype(bool)
    ids = files.index.astype(str)
    names: dict[str, str] = {}
    interface = pd.Series("posix", index=files.index)
    for module, label in (("STDIO", "stdio"), ("MPI-IO", "mpiio"), ("H5D", "hdf5"), ("H5F", "hdf5")):
        df = job.frame(module)
        if len(df):
            touched = set(df["id"].astype("uint64").astype(str))
            interface[interface.index.isin(touched)] = label
    for module in ("POSIX", "STDIO", "MPI-IO", "H5F", "H5D"):
        df = job.frame(module)
        if len(df):
            names.update(zip(df["id"].astype("uint64").astype(str), df["path"], strict=False))
    files["n_ranks"] = files["n_ranks"].clip(lower=1)
    files["shared"] = files["n_ranks"] > 1
    files["interface"] = interface
    files["path"] = [names.get(i, "") for i in ids]
    files["record_id"] = ids
    files["job_key"] = key
    layouts = job.layouts
    if len(layouts):
        lay = layouts.assign(id=layouts["id"].astype("uint64").astype(str)).set_index("id")
        lay = lay[~lay.index.duplicated()]
        for col in ("stripe_count", "stripe_size", "ost_count"):
            files[col] = lay[col].reindex(files.index).fillna(-1)
    else:
        for col in ("stripe_count", "stripe_size", "ost_count"):
            files[col] = -1
    return files.reset_index(drop=True)[FILE_COLUMNS]


def _distinct_targets(layouts: pd.DataFrame) -> int:
    """Storage targets the job touched: the union of OST ids when recorded (DCA-IO's StripeCount
    computation), else the widest file's stripe count; -1 when no layout is known."""
    if not len(layouts):
        return -1
    if "ost_ids" in layouts.columns:
        union = set().union(*layouts["ost_ids"])
        if union:
            return len(union)
    widest = int(layouts["ost_count"].max())
    return widest if widest > 0 else -1


def summarize(job: Job, key: str | None = None, source: str | None = None) -> JobSummary:
    import os

    key = key or os.path.basename(job.input_path)
    files = _file_table(job, key)
    has_posix = len(job.frame("POSIX")) > 0
    time_modules = ("POSIX", "STDIO") if has_posix or len(job.frame("STDIO")) else ("MPI-IO",)
    ranks, shared_time = _rank_table(job, time_modules)
    io_time = (float(ranks["io_time"].max()) if len(ranks) else 0.0) + shared_time

    c = job.total
    reads, writes = c("POSIX", "POSIX_READS"), c("POSIX", "POSIX_WRITES")
    requests = reads + writes
    buckets = {
        f"{op.lower()}_{b.lower()}": c("POSIX", f"POSIX_SIZE_{op}_{b}")
        for op in ("READ", "WRITE")
        for b in SIZE_BUCKETS
    }
    small = sum(v for k, v in buckets.items() if k.split("_", 1)[1] in {b.lower() for b in SMALL_BUCKETS})

    def bucket_sum(op: str, chosen) -> float:
        return sum(buckets[f"{op}_{b.lower()}"] for b in chosen)

    stdio_bytes = c("STDIO", "STDIO_BYTES_READ", "STDIO_BYTES_WRITTEN")
    mpiio_bytes = c("MPI-IO", "MPIIO_BYTES_READ", "MPIIO_BYTES_WRITTEN")
    if has_posix or len(job.frame("STDIO")):
        bytes_read = c("POSIX", "POSIX_BYTES_READ") + c("STDIO", "STDIO_BYTES_READ")
        bytes_written = c("POSIX", "POSIX_BYTES_WRITTEN") + c("STDIO", "STDIO_BYTES_WRITTEN")
    else:
        bytes_read, bytes_written = c("MPI-IO", "MPIIO_BYTES_READ"), c("MPI-IO", "MPIIO_BYTES_WRITTEN")
    total_bytes = bytes_read + bytes_written

    data_files = files[(files["bytes_read"] + files["bytes_written"]) > 0]
    main_file = data_files.loc[data_files["bytes_written"].idxmax()] if len(data_files) else None
    osts = _distinct_targets(job.layouts)
    access = job.frame("POSIX")
    if "POSIX_ACCESS1_ACCESS" in access.columns and (access["POSIX_ACCESS1_COUNT"] > 0).any():
        weights = access.groupby("POSIX_ACCESS1_ACCESS")["POSIX_ACCESS1_COUNT"].sum()
        transfer = int(weights.idxmax())
    else:
        transfer = int(total_bytes / max(requests + c("STDIO", "STDIO_READS", "STDIO_WRITES"), 1))

    iface_bytes = {
        "posix": c("POSIX", "POSIX_BYTES_READ", "POSIX_BYTES_WRITTEN"),
        "stdio": stdio_bytes,
        "mpiio": mpiio_bytes,
        "hdf5": c("H5D", "H5D_BYTES_READ", "H5D_BYTES_WRITTEN"),
    }
    # A higher layer's bytes also appear below it; prefer the highest layer carrying most of the data.
    interface = "posix"
    for name in ("hdf5", "mpiio"):
        if iface_bytes[name] >= 0.5 * max(total_bytes, 1) and iface_bytes[name] > 0:
            interface = name
            break
    else:
        if stdio_bytes > iface_bytes["posix"]:
            interface = "stdio"

    mean_rank_time = float(ranks["io_time"].mean()) if len(ranks) else 0.0
    max_rank_time = float(ranks["io_time"].max()) if len(ranks) else 0.0
    row = {
        "job_key": key,
        "source": source or job.source,
        "input_path": job.input_path,
        "job_id": job.job_id,
        "app": job.app,
        "exe": job.exe,
        "format_version": job.format_version,
        "partial": job.partial,
        "modules": ",".join(m for m, df in job.modules.items() if len(df)),
        "has_dxt": len(job.dxt) > 0,
        "start_time": job.start_time,
        "run_time": job.run_time,
        "nprocs": job.nprocs,
        "num_hosts": job.num_hosts,
        "stripe_count": int(main_file["stripe_count"]) if main_file is not None else -1,
        "stripe_size": int(main_file["stripe_size"]) if main_file is not None else -1,
        "num_osts": osts,
        "transfer_size": transfer,
        "file_per_process": bool(len(data_files)) and not bool(data_files["shared"].any()),
        "collective": c("MPI-IO", "MPIIO_COLL_READS", "MPIIO_COLL_WRITES", "MPIIO_COLL_OPENS") > 0,
        "interface": interface,
        "num_files": len(files),
        "num_data_files": len(data_files),
        "num_shared_files": int(data_files["shared"].sum()) if len(data_files) else 0,
        "posix_reads": reads,
        "posix_writes": writes,
        "posix_opens": c("POSIX", "POSIX_OPENS"),
        "posix_seeks": c("POSIX", "POSIX_SEEKS"),
        "posix_stats": c("POSIX", "POSIX_STATS"),
        "posix_fsyncs": c("POSIX", "POSIX_FSYNCS", "POSIX_FDSYNCS"),
        "mpiio_indep_reads": c("MPI-IO", "MPIIO_INDEP_READS"),
        "mpiio_indep_writes": c("MPI-IO", "MPIIO_INDEP_WRITES"),
        "mpiio_coll_reads": c("MPI-IO", "MPIIO_COLL_READS"),
        "mpiio_coll_writes": c("MPI-IO", "MPIIO_COLL_WRITES"),
        "stdio_opens": c("STDIO", "STDIO_OPENS"),
        "stdio_reads": c("STDIO", "STDIO_READS"),
        "stdio_writes": c("STDIO", "STDIO_WRITES"),
        "h5d_reads": c("H5D", "H5D_READS"),
        "h5d_writes": c("H5D", "H5D_WRITES"),
        "bytes_read": bytes_read,
        "bytes_written": bytes_written,
        "stdio_bytes": stdio_bytes,
        "mpiio_bytes": mpiio_bytes,
        **buckets,
        "read_less_1k_pct": _pct(bucket_sum("read", SIZE_BUCKETS[:2]), reads),
        "write_less_1k_pct": _pct(bucket_sum("write", SIZE_BUCKETS[:2]), writes),
        "read_more_1m_pct": _pct(bucket_sum("read", SIZE_BUCKETS[5:]), reads),
        "write_more_1m_pct": _pct(bucket_sum("write", SIZE_BUCKETS[5:]), writes),
        "small_request_pct": _pct(small, requests),
        "seq_io_pct": _pct(c("POSIX", "POSIX_SEQ_READS", "POSIX_SEQ_WRITES"), requests),
        "unaligned_pct": _pct(c("POSIX", "POSIX_FILE_NOT_ALIGNED"), requests),
        "meta_ops": c("POSIX", "POSIX_OPENS", "POSIX_STATS", "POSIX_SEEKS", "POSIX_FSYNCS", "POSIX_FDSYNCS")
        + c("STDIO", "STDIO_OPENS"),
        "read_time": c("POSIX", "POSIX_F_READ_TIME") + c("STDIO", "STDIO_F_READ_TIME"),
        "write_time": c("POSIX", "POSIX_F_WRITE_TIME") + c("STDIO", "STDIO_F_WRITE_TIME"),
        "meta_time": c("POSIX", "POSIX_F_META_TIME") + c("STDIO", "STDIO_F_META_TIME"),
        "slowest_write_time": float(job.counter("POSIX", "POSIX_F_MAX_WRITE_TIME").max()) if has_posix else 0.0,
        "io_time": io_time,
        "rank_time_imbalance": _rank_time_imbalance(files, total_bytes, max_rank_time, mean_rank_time),
        "throughput_mib_s": total_bytes / MIB / io_time if io_time > 0 else 0.0,
    }
    return JobSummary(job=job, row=coerce_row(row), files=files, ranks=ranks)


def _rank_time_imbalance(files: pd.DataFrame, total_bytes: float, max_time: float, mean_time: float) -> float:
    """Per-rank imbalance, or -1 when reduced records (whose per-rank split is unknown) carry most bytes:
    a per-rank table that misses them would otherwise call the job balanced."""
    reduced_bytes = float(
        (files.loc[files["reduced"], "bytes_read"] + files.loc[files["reduced"], "bytes_written"]).sum()
    )
    if total_bytes > 0 and reduced_bytes > total_bytes / 2:
        return -1.0
    return (max_time - mean_time) / max_time if max_time > 0 else 0.0


def coerce_row(row: dict) -> dict:
    """Cast every value to its schema type so Parquet row groups always agree."""
    out = {}
    for name, typ, _ in JOB_SCHEMA:
        v = row[name]
        if typ == _I64:
            out[name] = int(v) if v is not None and np.isfinite(v) else -1
        elif typ == _F64:
            out[name] = float(v)
        elif typ == _BOOL:
            out[name] = bool(v)
        else:
            out[name] = str(v)
    return out


def schema_markdown() -> str:
    lines = []
    for title, schema in (("Job table (`jobs.parquet`)", JOB_SCHEMA), ("File table (`files.parquet`)", FILE_SCHEMA)):
        lines += [f"#### {title}", "", "| column | type | meaning |", "|---|---|---|"]
        lines += [f"| `{n}` | {t} | {d} |" for n, t, d in schema]
        lines.append("")
    return "\n".join(lines)
