"""Training rows from the feature table, and the column groups the models use."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from surge_tune.errors import TuneError

TARGET = "throughput_mib_s"
# The five user-settable inputs of [Bang23, §5.2.4] are numNode, numCPU, numProc, numOST, stripeSize. numCPU is a
# per-machine constant here (all runs on one node), so it carries no information and is left out.
SEED_INPUTS = ["num_hosts", "nprocs", "stripe_count", "stripe_size"]
# The layout a user sets with `surge setstripe` / `lfs setstripe`; the ablation removes them from every input set.
LAYOUT_INPUTS = ["stripe_count", "stripe_size"]
# What a Surge user can also set before a run: request size, file sharing mode, collective I/O.
EXTENDED_INPUTS = SEED_INPUTS + ["transfer_size", "file_per_process", "collective", "mpiio_interface"]
# "Better than the thesis": also the app's access pattern, which a previous run of the app tells (history /
# its last profile) and which does not depend on the measured time, so it cannot leak the target.
BEHAVIOUR_INPUTS = EXTENDED_INPUTS + [
    "read_fraction",
    "seq_io_pct",
    "small_request_pct",
    "unaligned_pct",
    "num_data_files",
]
INPUT_SETS = {"seed": SEED_INPUTS, "extended": EXTENDED_INPUTS, "extended+pattern": BEHAVIOUR_INPUTS}
# Behaviour statistics the clustering may choose from ([Bang23] Table 5.1, application statistics).
BEHAVIOUR = [
    "run_time",
    "num_files",
    "num_data_files",
    "num_shared_files",
    "posix_reads",
    "posix_writes",
    "posix_opens",
    "posix_seeks",
    "posix_stats",
    "stdio_opens",
    "stdio_reads",
    "stdio_writes",
    "read_less_1k_pct",
    "write_less_1k_pct",
    "read_more_1m_pct",
    "write_more_1m_pct",
    "small_request_pct",
    "seq_io_pct",
    "unaligned_pct",
    "meta_ops",
    "read_time",
    "write_time",
    "meta_time",
    "slowest_write_time",
    "rank_time_imbalance",
    "bytes_read",
    "bytes_written",
    "stdio_bytes",
]


MIN_BYTES = 1 << 20  # [Bang23, §5.2.1] keeps jobs with > 1 GB of I/O; our corpus is smaller, so 1 MiB


def load_jobs(paths: list[str], min_bytes: int = MIN_BYTES) -> pd.DataFrame:
    """Jobs that moved at least `min_bytes` and have a measured throughput."""
    frames = []
    for p in paths:
        # a table directory (from `ingest`), a corpus directory (its table/), or a jobs.parquet file
        f = (
            next(
                (
                    c
                    for c in (os.path.join(p, "jobs.parquet"), os.path.join(p, "table", "jobs.parquet"))
                    if os.path.exists(c)
                ),
                p,
            )
            if os.path.isdir(p)
            else p
        )
        if not os.path.isfile(f):
            raise TuneError(f"{p}: no jobs.parquet (run `surge tune ingest ... --out DIR` first)")
        frames.append(pd.read_parquet(f))
    jobs = pd.concat(frames, ignore_index=True)
    jobs = jobs[(jobs["bytes_read"] + jobs["bytes_written"] >= min_bytes) & (jobs[TARGET] > 0)].copy()
    if jobs.empty:
        raise TuneError("no job with I/O in the given tables")
    jobs["mpiio_interface"] = (jobs["interface"] == "mpiio").astype(int)
    jobs["read_fraction"] = jobs["bytes_read"] / (jobs["bytes_read"] + jobs["bytes_written"])
    for c in ("file_per_process", "collective"):
        jobs[c] = jobs[c].astype(int)
    return jobs.reset_index(drop=True)


def numeric(df: pd.DataFrame, cols: list[str]) -> np.ndarray:
    return df[cols].astype(float).to_numpy()


def balance_apps(jobs: pd.DataFrame, per_app: int | None, seed: int) -> pd.DataFrame:
    """[Bang23, §5.2.1]: random over- and under-sampling to the same number of jobs per application."""
    per_app = per_app or int(jobs.groupby("app").size().median())
    parts = [g.sample(n=per_app, replace=len(g) < per_app, random_state=seed) for _, g in jobs.groupby("app")]
    return pd.concat(parts, ignore_index=True)
