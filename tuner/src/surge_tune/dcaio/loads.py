"""Per-target load for the interference adjustment.

Sources, in order: a file given with --loads (TOML or JSON), else `surge status --toml` when the surge
binary is found. Both accept the same two shapes:
  [[target]] index, load (0..1 share of the target's bandwidth used by other jobs), free_bytes
  [[daemon]] as printed by `surge status --toml`: index, state, connections, bytes_used, capacity, device_free
Surge daemons do not report bandwidth yet, so for [[daemon]] entries `load` is used when present, else the
requests queued at the daemon now (its `[[daemon.job]]` entries' `waiting + in_service`, when the entry has
the `requests` counter of a current `surge status`), else other clients' connections (connections - 1, the
status query's own) stand in: busy when > 0.
Lustre OST load needs `lfs`/`lctl`; when they are absent we say so and continue without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import tomllib

from surge_tune.dcaio.procedures import Target
from surge_tune.errors import TuneError

BUSY_LOAD = 0.2  # a target above 20% of its bandwidth in use by others is not "free"


def _targets_from_doc(doc: dict, origin: str) -> list[Target]:
    entries = doc.get("target") or doc.get("targets") or doc.get("daemon") or doc.get("daemons")
    if not isinstance(entries, list) or not entries:
        raise TuneError(f"{origin}: no [[target]] or [[daemon]] entries")
    targets = []
    for pos, e in enumerate(entries):
        if not isinstance(e, dict):
            raise TuneError(f"{origin}: entry {pos} is not a table")
        down = e.get("state", "up") != "up"
        if "load" in e:
            load = float(e["load"])
        elif "requests" in e:
            # `surge status --toml` of a daemon: the requests its jobs have waiting or in service now.
            load = float(sum(int(j.get("waiting", 0)) + int(j.get("in_service", 0)) for j in e.get("job", [])))
        elif "connections" in e:
            load = float(max(int(e["connections"]) - 1, 0))
        else:
            raise TuneError(f"{origin}: entry {pos} has neither 'load' nor 'connections'")
        if "free_bytes" in e:
            free = int(e["free_bytes"])
        elif "capacity" in e:
            free = max(int(e["capacity"]) - int(e.get("bytes_used", 0)), 0)
        else:
            free = int(e.get("device_free", 0))
        targets.append(
            Target(
                index=int(e.get("index", pos)), load=load, free_bytes=0 if down else free, busy=down or load > BUSY_LOAD
            )
        )
    return sorted(targets, key=lambda t: t.index)


def parse_loads(text: str, origin: str) -> list[Target]:
    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise TuneError(f"{origin}: not valid TOML or JSON: {e}") from None
    return _targets_from_doc(doc, origin)


def lustre_status() -> str:
    missing = [tool for tool in ("lfs", "lctl") if not shutil.which(tool)]
    if missing:
        return f"Lustre OST load unavailable: {' and '.join(missing)} not found on this machine"
    return "Lustre tools found; OST load from `lctl get_param obdfilter.*.stats` needs a server node (not read)"


def read_target_loads(path: str | None, surge_bin: str | None = None) -> list[Target] | None:
    """Targets with their load, or None (with a note on stderr) when no source is available."""
    if path:
        try:
            with open(path) as f:
                return parse_loads(f.read(), path)
        except OSError as e:
            raise TuneError(f"{path}: cannot read loads: {e.strerror}") from None
    binary = surge_bin or shutil.which("surge")
    if binary and os.access(binary, os.X_OK):
        proc = subprocess.run([binary, "status", "--toml"], capture_output=True, text=True, timeout=30)
        if proc.stdout.strip():
            return parse_loads(proc.stdout, "surge status --toml")
    import sys

    print(f"note: no per-target load (no --loads, no running Surge cluster); {lustre_status()}", file=sys.stderr)
    return None
