"""The in-memory form of one job, whatever it was read from (Darshan log or Surge profile).

Every module is one DataFrame with one row per (record id, rank): columns `id`, `rank`, `path`, then the
module's counters and fcounters under their Darshan names. Rank -1 means Darshan reduced the record over
all ranks (a shared file). Counters absent from a source are simply absent columns; `Job.counter` reads
them as zeros so rules and features never special-case a Darshan version.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# Modules whose counters the tuner reads. PnetCDF/DAOS records still count toward "modules" in the table.
IO_MODULES = ("POSIX", "MPI-IO", "STDIO", "H5F", "H5D")


@dataclass
class Job:
    source: str  # "darshan" or "surge-profile"
    input_path: str
    job_id: str
    exe: str
    nprocs: int
    start_time: float  # unix epoch seconds
    run_time: float  # seconds
    format_version: str = ""  # Darshan library version, or the profile schema
    partial: bool = False  # Darshan ran out of module memory: counters are a lower bound
    warnings: list[str] = field(default_factory=list)  # parts of the input that were skipped, and why
    num_hosts: int = 0  # 0 = unknown (Darshan logs do not record hosts outside DXT)
    modules: dict[str, pd.DataFrame] = field(default_factory=dict)
    # One row per file record: id, path, stripe_count, stripe_size, ost_count (-1 = unknown), and
    # ost_ids (tuple) when the source names the targets.
    layouts: pd.DataFrame = field(default_factory=pd.DataFrame)
    # DXT segments: module, id, rank, op ("read"/"write"), offset, length, start, end. Empty when absent.
    dxt: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def app(self) -> str:
        """Application identity as DCA-IO defines it: the program name (basename of argv[0])."""
        argv0 = self.exe.split()[0] if self.exe.strip() else "unknown"
        return os.path.basename(argv0) or "unknown"

    def frame(self, module: str) -> pd.DataFrame:
        return self.modules.get(module, _EMPTY)

    def counter(self, module: str, name: str) -> pd.Series:
        """One counter column of a module, zeros when this source does not record it."""
        df = self.frame(module)
        if name in df.columns:
            # Darshan uses -1 for "not recorded"; never let it subtract from sums.
            return df[name].clip(lower=0)
        return pd.Series(np.zeros(len(df)), index=df.index)

    def total(self, module: str, *names: str) -> float:
        return float(sum(self.counter(module, n).sum() for n in names))


_EMPTY = pd.DataFrame(columns=["id", "rank", "path"])

SIZE_BUCKETS = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M", "1M_4M", "4M_10M", "10M_100M", "100M_1G", "1G_PLUS")
# Darshan's buckets include their upper bound (100K_1M holds requests of exactly 1 MiB), so a request is
# "small" only in the buckets up to 100 KiB: counting 100K_1M as small would flag 1 MiB transfers.
SMALL_BUCKETS = SIZE_BUCKETS[:4]
# A representative size per small bucket (the geometric middle of its bounds) to estimate their bytes.
SMALL_BUCKET_TYPICAL_BYTES = (50, 320, 3238, 32381)
