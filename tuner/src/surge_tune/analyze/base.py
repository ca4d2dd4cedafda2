"""What every rule shares: the finding it returns, the fixes it proposes, the thresholds it reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from surge_tune.features import JobSummary


@dataclass
class Fix:
    kind: str  # surge-layout | lfs | mpi-hints | burst-buffer | code
    command: str  # what to run or set, ready to paste
    why: str


@dataclass
class Finding:
    code: str
    title: str
    severity: str  # "high" when the estimated gain is at least Thresholds.high_gain, else "warn"
    summary: str  # one sentence: what happens and where
    evidence: dict  # counter or derived value -> number/string, the reasons behind the finding
    gain_fraction: float  # estimated share of the job's I/O time the fixes can save (upper bound)
    gain: str  # the estimate in words, with its assumption
    fixes: list[Fix] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Thresholds:
    """Defaults follow Drishti where it has one (small 1 MiB / 10 % / 1000, random 20 %, imbalance 15 %,
    STDIO 10 %, collective 50 %); the rest are documented in docs/tuner.md."""

    min_requests: int = 1000  # ignore patterns in jobs with fewer requests than this
    small_request_pct: float = 10.0
    unaligned_pct: float = 10.0
    random_pct: float = 20.0
    metadata_share: float = 0.30  # metadata time / I/O time
    metadata_min_seconds: float = 1.0  # summed over ranks; tiny jobs are not "metadata bound"
    imbalance: float = 0.15  # (slowest - fastest) / slowest, and (max - mean) / max over ranks
    imbalance_min_seconds: float = 0.1
    shared_file_min_bytes: int = 64 << 20  # a shared file must carry this much to matter for layout
    stdio_share: float = 0.10
    stdio_min_bytes: int = 10 << 20
    independent_share: float = 0.50
    fpp_min_files: int = 256
    fpp_metadata_share: float = 0.10
    high_gain: float = 0.25
    min_gain: float = 0.02  # a pattern whose fix would save less than this is not worth a line
    max_targets: int = 0  # storage targets available; 0 = unknown (then writers bound the stripe count)

    @classmethod
    def with_overrides(cls, pairs: list[str]) -> Thresholds:
        t = cls()
        known = {f.name: f.type for f in fields(cls)}
        for pair in pairs:
            name, _, value = pair.partition("=")
            if name not in known or not value:
                raise ValueError(f"unknown threshold {pair!r}; known: {', '.join(known)}")
            setattr(t, name, (int if known[name] == "int" else float)(value))
        return t


class Rule:
    """One cause of slow I/O. Subclasses set `code` and `title` and implement `check`."""

    code = ""
    title = ""

    def check(self, s: JobSummary, t: Thresholds) -> Finding | None:
        raise NotImplementedError

    def finding(
        self, t: Thresholds, summary: str, evidence: dict, gain_fraction: float, gain: str, fixes: list[Fix]
    ) -> Finding:
        gain_fraction = max(0.0, min(float(gain_fraction), 0.95))
        return Finding(
            self.code,
            self.title,
            "high" if gain_fraction >= t.high_gain else "warn",
            summary,
            evidence,
            round(gain_fraction, 3),
            gain,
            fixes,
        )
