"""Set a decided layout with `surge setstripe` ($SURGE_BIN, else `surge` on PATH)."""

from __future__ import annotations

import os
import shutil
import subprocess

from surge_tune.dcaio.engine import Decision
from surge_tune.errors import TuneError


def surge_binary() -> str:
    """The `surge` command (`$SURGE_BIN`, else PATH), for applying layouts and running the corpus."""
    binary = os.environ.get("SURGE_BIN") or shutil.which("surge")
    if not binary or not os.access(binary, os.X_OK):
        raise TuneError("the surge binary was not found (set SURGE_BIN or put `surge` on PATH)")
    return binary


def apply_layout(decision: Decision, path: str) -> str:
    cmd = [surge_binary(), *decision.setstripe_args(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise TuneError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return f"applied: {' '.join(cmd)}" + (f"\n{proc.stdout.strip()}" if proc.stdout.strip() else "")
