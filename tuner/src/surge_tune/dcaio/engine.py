"""Which procedure applies to the coming run of an application, and the resulting layout."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from surge_tune.dcaio import procedures as P
from surge_tune.dcaio.history import History
from surge_tune.errors import TuneError
from surge_tune.units import size_arg

DEFAULT_TARGETS = 4  # the paper's local testbed; used only when nothing tells us the real number


@dataclass
class Decision:
    app: str
    direction: str  # write | read: only runs of this direction were compared
    run_number: int  # the coming run is the app's n-th of this direction
    nprocs: int
    max_targets: int
    layout: P.Layout

    def setstripe_args(self, path: str) -> list[str]:
        args = ["setstripe", "-c", str(self.layout.stripe_count), "-S", size_arg(self.layout.stripe_size)]
        if self.layout.start_target >= 0:
            args += ["-i", str(self.layout.start_target)]
        return args + [path]

    def describe(self) -> str:
        lay = self.layout
        where = f" starting at target {lay.start_target} (targets {lay.targets})" if lay.start_target >= 0 else ""
        return (
            f"{self.app}: {self.direction} run #{self.run_number}, {self.nprocs} procs, {self.max_targets} targets\n"
            f"layout: stripe count {lay.stripe_count}, stripe size {size_arg(lay.stripe_size)}{where}\n"
            f"phase: {lay.phase}\nwhy: {lay.reason}\n"
            f"command: surge {' '.join(self.setstripe_args('DIR'))}"
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "command": "surge " + " ".join(self.setstripe_args("DIR"))}


def decide_layout(
    db: History,
    app: str,
    nprocs: int | None = None,
    max_targets: int = 0,
    loads: list[P.Target] | None = None,
    allow_new: bool = False,
    direction: str | None = None,
) -> Decision:
    """`direction` (write | read): the coming run's; default the direction of the app's last recorded run."""
    recorded = db.runs(app)
    direction = direction or (recorded[-1].direction if recorded else "write")
    runs = [r for r in recorded if r.direction == direction]
    max_targets = max_targets or (len(loads) if loads else DEFAULT_TARGETS)
    if recorded and not runs and not allow_new:
        raise TuneError(
            f"{app} has no recorded {direction} run (its runs are {recorded[-1].direction} runs); "
            f"use --new --nprocs N for a first {direction} run"
        )
    if not runs:
        if not allow_new:
            known = ", ".join(db.apps()) or "none recorded"
            raise TuneError(
                f"unknown application {app!r}: no recorded runs (known: {known}). "
                f"Record runs with `surge tune record LOG`, or use --new --nprocs N for a first run."
            )
        if not nprocs:
            raise TuneError("--new needs --nprocs N: the initial-execution rule matches runs by process count")
        layout = P.initial_execution(db.all_runs(direction), nprocs, max_targets)
    elif len(runs) == 1:
        layout = P.rule_based(runs[-1], max_targets)
    else:
        layout = P.heuristic(runs, max_targets)
    if loads:
        layout = P.interference_adjust(layout, loads, runs)
    return Decision(app, direction, len(runs) + 1, nprocs or (runs[-1].nprocs if runs else 0), max_targets, layout)
