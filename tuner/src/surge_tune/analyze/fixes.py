"""Concrete fixes, spelled the same way by every rule."""

from __future__ import annotations

import os
import shlex

from surge_tune.analyze.base import Fix
from surge_tune.units import size_arg


def target_dir(path: str) -> str:
    """Layouts are inherited from the directory, so fixes set the directory holding the file."""
    return os.path.dirname(path) or "."


def layout(count: int, size: int, path: str, why: str, keeps_count: bool = False) -> list[Fix]:
    """`keeps_count`: the fix is about the stripe size; `count` is the file's current one."""
    d = target_dir(path)
    q = shlex.quote(d)
    where = {"layout_of": d, "stripe_count": count, "stripe_size": size, "keeps_count": keeps_count}
    return [
        Fix("surge-layout", f"surge setstripe -c {count} -S {size_arg(size)} {q}", why, **where),
        Fix("lfs", f"lfs setstripe -c {count} -S {size_arg(size)} {q}", "same layout on Lustre", **where),
    ]


def mpi_hints(hints: dict[str, object], why: str, layout_of: str = "") -> Fix:
    """`layout_of`: the file whose layout the hints set (they carry striping_factor and striping_unit)."""
    text = ";".join(f"{k}={v}" for k, v in hints.items())
    romio = "\\n".join(f"{k} {v}" for k, v in hints.items())
    fix = Fix(
        "mpi-hints",
        f"MPI_Info_set for each of: {text}  (or: printf '{romio}\\n' > hints; export ROMIO_HINTS=$PWD/hints)",
        why,
        hints=dict(hints),
    )
    if layout_of:
        fix.layout_of = target_dir(layout_of)
        fix.stripe_count, fix.stripe_size = int(hints["striping_factor"]), int(hints["striping_unit"])
    return fix


def restripe(fix: Fix, count: int, size: int) -> Fix:
    """The same layout fix, setting `count` stripes of `size` bytes (reconciling two findings' layouts)."""
    if fix.kind == "mpi-hints":
        hints = {**fix.hints, "striping_factor": count, "striping_unit": size}
        if "cb_nodes" in hints:
            hints["cb_nodes"] = count  # one aggregator per stripe, as the hints said before
        merged = mpi_hints(hints, fix.why)
        merged.layout_of, merged.stripe_count, merged.stripe_size = fix.layout_of, count, size
        return merged
    tool = "surge setstripe" if fix.kind == "surge-layout" else "lfs setstripe"
    return Fix(
        fix.kind,
        f"{tool} -c {count} -S {size_arg(size)} {shlex.quote(fix.layout_of)}",
        fix.why,
        layout_of=fix.layout_of,
        stripe_count=count,
        stripe_size=size,
    )


def burst_buffer(exe: str, why: str) -> Fix:
    argv0 = exe.split()[0] if exe.strip() else "./app"
    return Fix("burst-buffer", f"surge run -- mpirun ... {argv0}", why)


def code(change: str, why: str) -> Fix:
    return Fix("code", change, why)
