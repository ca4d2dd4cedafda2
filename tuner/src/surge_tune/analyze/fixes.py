"""Concrete fixes, spelled the same way by every rule."""

from __future__ import annotations

import os
import shlex

from surge_tune.analyze.base import Fix
from surge_tune.units import size_arg


def target_dir(path: str) -> str:
    """Layouts are inherited from the directory, so fixes set the directory holding the file."""
    return os.path.dirname(path) or "."


def layout(count: int, size: int, path: str, why: str) -> list[Fix]:
    d = shlex.quote(target_dir(path))
    return [
        Fix("surge-layout", f"surge setstripe -c {count} -S {size_arg(size)} {d}", why),
        Fix("lfs", f"lfs setstripe -c {count} -S {size_arg(size)} {d}", "same layout on Lustre"),
    ]


def mpi_hints(hints: dict[str, object], why: str) -> Fix:
    text = ";".join(f"{k}={v}" for k, v in hints.items())
    romio = "\\n".join(f"{k} {v}" for k, v in hints.items())
    return Fix(
        "mpi-hints",
        f"MPI_Info_set for each of: {text}  (or: printf '{romio}\\n' > hints; export ROMIO_HINTS=$PWD/hints)",
        why,
    )


def burst_buffer(exe: str, why: str) -> Fix:
    argv0 = exe.split()[0] if exe.strip() else "./app"
    return Fix("burst-buffer", f"surge run -- mpirun ... {argv0}", why)


def code(change: str, why: str) -> Fix:
    return Fix("code", change, why)
