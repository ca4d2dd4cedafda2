"""Build Surge profiles (surge-profile/1) by hand for tests: one helper per file, one per process."""

from __future__ import annotations

import json

BUCKETS = [
    ("0_100", 100),
    ("100_1K", 1024),
    ("1K_10K", 10240),
    ("10K_100K", 102400),
    ("100K_1M", 1 << 20),
    ("1M_4M", 4 << 20),
    ("4M_10M", 10 << 20),
    ("10M_100M", 100 << 20),
    ("100M_1G", 1 << 30),
    ("1G_PLUS", 1 << 62),
]


def bucket(size: int) -> str:
    return next(name for name, upper in BUCKETS if size <= upper)  # Darshan: buckets include their upper bound


def posix_file(
    path,
    *,
    writes=0,
    reads=0,
    xfer=1 << 20,
    seq_pct=100,
    write_time=0.0,
    read_time=0.0,
    meta_time=0.01,
    opens=1,
    stats=0,
    seeks=0,
    unaligned=0,
    stripe_count=1,
    stripe_size=1 << 20,
    extra=None,
):
    c = {
        "POSIX_OPENS": opens,
        "POSIX_READS": reads,
        "POSIX_WRITES": writes,
        "POSIX_SEEKS": seeks,
        "POSIX_STATS": stats,
        "POSIX_FSYNCS": 0,
        "POSIX_RENAMES": 0,
        "POSIX_UNLINKS": 0,
        "POSIX_MKDIRS": 0,
        "POSIX_READDIRS": 0,
        "POSIX_BYTES_READ": reads * xfer,
        "POSIX_BYTES_WRITTEN": writes * xfer,
        "POSIX_MAX_BYTE_READ": max(reads * xfer - 1, 0),
        "POSIX_MAX_BYTE_WRITTEN": max(writes * xfer - 1, 0),
        "POSIX_CONSEC_READS": reads * seq_pct // 100,
        "POSIX_CONSEC_WRITES": writes * seq_pct // 100,
        "POSIX_SEQ_READS": reads * seq_pct // 100,
        "POSIX_SEQ_WRITES": writes * seq_pct // 100,
        "POSIX_RW_SWITCHES": 0,
        "POSIX_FILE_NOT_ALIGNED": unaligned,
    }
    for op, n in (("READ", reads), ("WRITE", writes)):
        for name, _ in BUCKETS:
            c[f"POSIX_SIZE_{op}_{name}"] = n if name == bucket(xfer) else 0
    c.update(extra or {})
    f = {
        "POSIX_F_OPEN_START_TIMESTAMP": 0.01,
        "POSIX_F_READ_START_TIMESTAMP": 0.02 if reads else 0,
        "POSIX_F_READ_END_TIMESTAMP": 0.02 + read_time if reads else 0,
        "POSIX_F_WRITE_START_TIMESTAMP": 0.02 if writes else 0,
        "POSIX_F_WRITE_END_TIMESTAMP": 0.02 + write_time if writes else 0,
        "POSIX_F_CLOSE_END_TIMESTAMP": 0.03 + read_time + write_time + meta_time,
        "POSIX_F_READ_TIME": read_time,
        "POSIX_F_WRITE_TIME": write_time,
        "POSIX_F_META_TIME": meta_time,
    }
    return {"path": path, "stripe_count": stripe_count, "stripe_size": stripe_size, "counters": c, "fcounters": f}


def process(rank, nprocs, files, *, job_id="1234", exe="/apps/app", pid=None, host="n1", end=None):
    """`end`: seconds after the job start the process ended (default: just after its I/O)."""
    io = max((sum(v for k, v in f["fcounters"].items() if k.endswith("_TIME")) for f in files), default=0)
    end = end if end is not None else 0.05 + io
    return {
        "schema": "surge-profile/1",
        "job_id": job_id,
        "exe": exe,
        "argv0": exe.rsplit("/", 1)[-1],
        "host": host,
        "pid": pid or 4000 + max(rank, 0),
        "rank": rank,
        "nprocs": nprocs,
        "job_start": 1763800000.0,
        "start": 0.01,
        "end": end,
        "files": files,
    }


def write_profile(path, procs) -> str:
    with open(path, "w") as f:
        for p in procs:
            f.write(json.dumps(p) + "\n")
    return str(path)
