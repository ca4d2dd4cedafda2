"""How many storage targets a recommended stripe count may use.

A stripe count above the file system's target count is refused (Lustre) or silently capped, so a fix must
never say `-c 1024`. The cap is, in order: `--set max_targets=N`; else the highest storage-target index the
job's layouts name, plus one (the file system has at least that many), but no less than DEFAULT_TARGETS;
else DEFAULT_TARGETS, stated in the fix as an assumption.
"""

from __future__ import annotations

from dataclasses import dataclass

from surge_tune.features import JobSummary

DEFAULT_TARGETS = 16  # a stated default when nothing tells the target count


@dataclass
class TargetCap:
    count: int
    how: str  # where the number comes from, in words


def target_cap(s: JobSummary, max_targets: int) -> TargetCap:
    if max_targets > 0:
        return TargetCap(max_targets, f"max_targets={max_targets}")
    layouts = s.job.layouts
    if len(layouts) and "ost_ids" in layouts.columns:
        known = max((max(ids) + 1 for ids in layouts["ost_ids"] if len(ids)), default=0)
        if known > DEFAULT_TARGETS:
            return TargetCap(known, f"the log names storage targets up to index {known - 1}")
    return TargetCap(
        DEFAULT_TARGETS, f"the target count is unknown: capped at {DEFAULT_TARGETS}, set max_targets=N to change"
    )
