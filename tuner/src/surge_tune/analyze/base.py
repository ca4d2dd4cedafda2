"""What every rule shares: the finding it returns, the fixes it proposes, the thresholds it reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np
import pandas as pd

from surge_tune.features import JobSummary

# Terminal streams are where a program prints, not data it could lay out or batch: rules never name them.
STD_STREAMS = ("<STDIN>", "<STDOUT>", "<STDERR>")
GAIN_CLAMP = 0.95  # no cost model here is good enough to promise a whole I/O phase


@dataclass
class Fix:
    kind: str  # surge-layout | lfs | mpi-hints | burst-buffer | code
    command: str  # what to run or set, ready to paste
    why: str
    layout_of: str = ""  # the directory whose layout this fix sets ("" = not a layout fix)
    stripe_count: int = 0  # the layout it sets (layout fixes only)
    stripe_size: int = 0
    keeps_count: bool = False  # the fix only changes the stripe size; stripe_count is the current one
    hints: dict = field(default_factory=dict)  # mpi-hints: the hints, so a reconciled layout can rewrite them


@dataclass
class Finding:
    code: str
    title: str
    severity: str  # high | warn | info, set by `analyze` from the share of the job's time the fix saves
    summary: str  # one sentence: the causal chain, with the counters that prove each link
    evidence: dict  # counter or derived value -> number/string, the reasons behind the finding
    gain_fraction: float  # estimated share of the job's I/O time the fixes can save (upper bound, <= 0.95)
    assumption: str  # the cost model behind gain_fraction, in words
    fixes: list[Fix] = field(default_factory=list)
    gain: str = ""  # the estimate in words: share of I/O time, seconds, share of the run (set by `analyze`)
    saves_seconds: float = 0.0  # gain_fraction x the job's I/O time
    job_share: float = 0.0  # saves_seconds / the job's run time
    caveats: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Thresholds:
    """Defaults follow Drishti where it has one (small 10 % / 1000 requests, random 20 %, imbalance 15 %,
    STDIO 10 %, collective 50 %); the rest are documented in docs/tuner.md."""

    min_requests: int = 1000  # ignore patterns in jobs with fewer requests than this
    small_request_pct: float = 10.0
    unaligned_pct: float = 10.0
    random_pct: float = 20.0
    metadata_share: float = 0.30  # mean per-rank metadata time / I/O time
    metadata_min_seconds: float = 1.0  # mean per-rank metadata time; tiny jobs are not "metadata bound"
    imbalance: float = 0.15  # (slowest - fastest) / slowest, and (max - mean) / max over ranks
    imbalance_min_seconds: float = 0.1
    imbalance_min_bytes: int = 1 << 20  # a shared file must move this much (and 1% of the job's bytes)
    straggler_min_seconds: float = 1.0  # equal bytes, unequal time: a straggler must lose this much (noise does less)
    balanced_bytes: float = 0.10  # per-rank bytes within this fraction of each other are "balanced"
    shared_file_min_bytes: int = 64 << 20  # a shared file must carry this much to matter for layout
    stdio_share: float = 0.10
    stdio_min_bytes: int = 10 << 20
    independent_share: float = 0.50
    fsync_per_write: float = 0.5  # fsyncs / writes on a file at or above this: "fsync after every write"
    fsync_min_writes: int = 100
    fpp_min_files: int = 256
    fpp_metadata_share: float = 0.10
    min_gain: float = 0.02  # a pattern whose fix would save less than this share of I/O time is not worth a line
    high_share: float = 0.25  # HIGH when the fix can save at least this share of the job's run time
    healthy_io_seconds: float = 1.0  # I/O faster than this is no significant problem, whatever its pattern
    healthy_io_share: float = 0.10  # nor is I/O below this share of the run time
    max_targets: int = 0  # storage targets available; 0 = unknown (see analyze/targets.py)

    @classmethod
    def with_overrides(cls, pairs: list[str]) -> Thresholds:
        t = cls()
        known = {f.name: f.type for f in fields(cls)}
        for pair in pairs:
            name, _, value = pair.partition("=")
            if name not in known or not value:
                raise ValueError(f"unknown threshold {pair!r}; known: {', '.join(known)}")
            try:
                setattr(t, name, (int if known[name] == "int" else float)(value))
            except ValueError:
                raise ValueError(f"threshold {name} needs a number, got {value!r}") from None
        return t


def data_files(s: JobSummary) -> pd.DataFrame:
    """Files that moved bytes, terminal streams excluded."""
    f = s.files
    return f[((f["bytes_read"] + f["bytes_written"]) > 0) & ~f["path"].isin(STD_STREAMS)]


def balanced(a, b, tolerance: float):
    """Two per-rank byte counts (slowest, fastest) within `tolerance` of each other, both nonzero.
    Works on numbers and, element-wise, on columns."""
    return (a > 0) & (b > 0) & (abs(a - b) <= tolerance * np.maximum(a, b))


class Rule:
    """One cause of slow I/O. Subclasses set `code` and `title` and implement `check`."""

    code = ""
    title = ""

    def check(self, s: JobSummary, t: Thresholds) -> Finding | None:
        raise NotImplementedError

    def finding(self, summary: str, evidence: dict, gain_fraction: float, assumption: str, fixes: list[Fix]) -> Finding:
        """`assumption` completes "up to N% of I/O time if ..."; `analyze` adds the numbers and severity."""
        gain_fraction = max(0.0, min(float(gain_fraction), GAIN_CLAMP))
        return Finding(self.code, self.title, "warn", summary, evidence, round(gain_fraction, 3), assumption, fixes)
