"""DCA-IO Procedures 1-3 ([DCA-IO] in docs/references.md) as pure functions, with the printed listings' typos
and ambiguities resolved as follows.

- Procedure 1 (initial execution): per distinct stripe count (and, separately, stripe size) among runs with
  the same process count, the mean IOThroughputTotal; pick the argmax. The printed listing compares
  throughput against stripeCount (a typo); we compare against the running best. Ties go to the smaller
  value (cheaper layout). No run with that process count: the nearest process count; empty history:
  Lustre's default (1, 1 MiB). The count is clamped to the targets available.
- Procedure 2 (recurring execution): 2nd run rule-based (file-per-process -> 1, shared -> numIOProcs,
  size 1 MiB); 3rd and later runs replay our unambiguous reading of it, a state machine, over the app's history:
  COUNT phase doubles the count while throughput improves (capped), then SIZE phase doubles the size
  while it improves, then STABLE reuses the best configuration.
- Procedure 3 (interference): place the `count` consecutive targets (modulo wrap) on free targets if a
  fully free window exists, else the window with most free targets, else start at the target with the
  most free space ("lowest capacity" read as lowest *used* capacity, the balancing intent).
  A rule of Surge's own, not in the paper: shrink the count to the free targets when the app's history shows
  that count reached at least `alpha` of the throughput of the wider layout (GCRM/VORPAL behaviour).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from surge_tune.dcaio.history import DEFAULT_STRIPE_SIZE, Run

MIN_STRIPE_SIZE = 64 << 10  # Lustre and Surge: stripe sizes are multiples of 64 KiB
MAX_STRIPE_SIZE = 64 << 20


@dataclass
class Layout:
    stripe_count: int
    stripe_size: int
    phase: str  # initial | rule-based | heuristic-count | heuristic-size | stable | default
    reason: str
    start_target: int = -1  # -1: let the file system choose
    targets: list[int] = field(default_factory=list)


@dataclass
class Target:
    index: int
    load: float  # fraction of the target's bandwidth in use by others, 0..1 (or a proxy, see loads.py)
    free_bytes: int
    busy: bool


def _round_size(size: int) -> int:
    size = max(MIN_STRIPE_SIZE, min(int(size), MAX_STRIPE_SIZE))
    return size - size % MIN_STRIPE_SIZE


def _best_by_mean(runs: list[Run], key: str) -> tuple[int, float]:
    groups: dict[int, list[float]] = {}
    for r in runs:
        groups.setdefault(getattr(r, key), []).append(r.throughput_mib_s)
    best_value, best_thr = None, float("-inf")
    for value in sorted(groups):  # ascending, strict > : ties keep the smaller value
        mean = sum(groups[value]) / len(groups[value])
        if mean > best_thr:
            best_value, best_thr = value, mean
    return best_value, best_thr


def initial_execution(history: list[Run], nprocs: int, max_targets: int) -> Layout:
    """Procedure 1."""
    if not history:
        return Layout(1, DEFAULT_STRIPE_SIZE, "default", "empty history: Lustre's default layout")
    same = [r for r in history if r.nprocs == nprocs]
    note = f"{len(same)} runs with {nprocs} processes"
    if not same:
        nearest = min({r.nprocs for r in history}, key=lambda n: (abs(n - nprocs), n))
        same = [r for r in history if r.nprocs == nearest]
        note = f"no run with {nprocs} processes; {len(same)} runs with the nearest count {nearest}"
    count, thr_c = _best_by_mean(same, "stripe_count")
    size, thr_s = _best_by_mean(same, "stripe_size")
    count = max(1, min(count, max_targets))
    return Layout(
        count,
        _round_size(size),
        "initial",
        f"{note}: stripe count {count} has the best mean throughput ({thr_c:.1f} MiB/s), "
        f"stripe size {size} ({thr_s:.1f} MiB/s)",
    )


def rule_based(last: Run, max_targets: int) -> Layout:
    """Procedure 2, second execution."""
    if last.shared_file:
        count = max(1, min(last.num_io_procs, max_targets))
        why = f"shared file: one stripe per I/O process ({last.num_io_procs}, capped at {max_targets})"
    else:
        count, why = 1, "file-per-process: one stripe per file"
    return Layout(count, DEFAULT_STRIPE_SIZE, "rule-based", why + "; stripe size starts at 1 MiB")


def heuristic(runs: list[Run], max_targets: int) -> Layout:
    """Procedure 2, third and later executions: replay the state machine over the app's runs."""
    assert len(runs) >= 2
    phase, proposal, why = "heuristic-count", None, ""
    for prev, last in zip(runs, runs[1:], strict=False):
        improved = last.throughput_mib_s > prev.throughput_mib_s
        best = last if improved else prev
        if phase == "heuristic-count":
            if improved and last.stripe_count < max_targets:
                proposal = (min(2 * last.stripe_count, max_targets), last.stripe_size)
                why = (
                    f"throughput rose {prev.throughput_mib_s:.1f} -> {last.throughput_mib_s:.1f} MiB/s: "
                    f"double the stripe count"
                )
                continue
            phase = "heuristic-size"
            why = (
                f"count frozen at {best.stripe_count} "
                + ("(all targets used)" if improved else f"(throughput fell to {last.throughput_mib_s:.1f})")
                + ": try doubling the stripe size"
            )
            proposal = (best.stripe_count, 2 * best.stripe_size)
        elif phase == "heuristic-size":
            if improved:
                proposal = (last.stripe_count, 2 * last.stripe_size)
                why = f"throughput rose to {last.throughput_mib_s:.1f} MiB/s: double the stripe size"
            else:
                phase = "stable"
                proposal = (best.stripe_count, best.stripe_size)
                why = f"throughput fell to {last.throughput_mib_s:.1f} MiB/s: keep the best layout"
        if phase == "heuristic-size" and proposal[1] > MAX_STRIPE_SIZE:
            phase, proposal = "stable", (best.stripe_count, best.stripe_size)
            why = "stripe size at its maximum: keep the best layout"
    if phase == "stable":
        top = max(runs, key=lambda r: r.throughput_mib_s)
        proposal = (top.stripe_count, top.stripe_size)
        why += f" (best recorded: {top.throughput_mib_s:.1f} MiB/s)"
    return Layout(proposal[0], _round_size(proposal[1]), phase, why)


def _window(targets: list[Target], start: int, count: int) -> list[Target]:
    return [targets[(start + j) % len(targets)] for j in range(count)]


def _free_prefix(targets: list[Target], start: int, count: int) -> int:
    """Consecutive free targets from `start` on (at most `count`)."""
    c = 0
    while c < count and not targets[(start + c) % len(targets)].busy:
        c += 1
    return c


def _mean_throughput(runs: list[Run], count: int) -> float | None:
    values = [r.throughput_mib_s for r in runs if r.stripe_count == count]
    return sum(values) / len(values) if values else None


def interference_adjust(
    layout: Layout, targets: list[Target], app_runs: list[Run] | None = None, alpha: float = 0.9
) -> Layout:
    """Procedure 3."""
    n = len(targets)
    if n == 0:
        return layout
    count = min(layout.stripe_count, n)

    def placed(start: int, c: int, phase: str, why: str) -> Layout:
        chosen = [t.index for t in _window(targets, start, c)]
        return Layout(
            c,
            layout.stripe_size,
            f"{layout.phase}+{phase}",
            f"{layout.reason}; {why}",
            start_target=targets[start].index,
            targets=chosen,
        )

    for start in range(n):
        if not any(t.busy for t in _window(targets, start, count)):
            return placed(start, count, "non-overlapping", f"targets {start}.. are free")
    fit, start = max(((_free_prefix(targets, s, count), s) for s in range(n)), key=lambda fs: (fs[0], -fs[1]))
    if fit and app_runs:
        narrow, wide = _mean_throughput(app_runs, fit), _mean_throughput(app_runs, count)
        if narrow is not None and wide is not None and narrow >= alpha * wide:
            return placed(
                start,
                fit,
                "shrunk-to-free",
                f"only {fit} consecutive free targets and this app reached {narrow:.1f} MiB/s with "
                f"{fit} stripes vs {wide:.1f} with {count} (>= {alpha:.0%}): use the free ones "
                f"(Surge's rule, not in the DCA-IO paper)",
            )
    if any(not t.busy for t in targets):
        start = max(
            range(n),
            key=lambda s: (
                sum(not t.busy for t in _window(targets, s, count)),
                -sum(t.load for t in _window(targets, s, count)),
                -s,
            ),
        )
        free = sum(not t.busy for t in _window(targets, start, count))
        return placed(start, count, "partial-overlap", f"no fully free window: {free} of {count} targets free")
    start = max(range(n), key=lambda s: (targets[s].free_bytes, -s))
    return placed(
        start,
        count,
        "capacity",
        f"every target busy: start at target {targets[start].index}, which has the most free space",
    )
