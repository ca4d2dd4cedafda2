"""Where the public Darshan logs are (the darshan-hpc/darshan-logs collection).

Two places only, so the tuner behaves the same on every machine: the directory named by
$SURGE_DARSHAN_LOGS, else `../shared/darshan-logs` beside the repository (found from this file,
so it holds for a source checkout or an editable install, not for a copy in site-packages)."""

from __future__ import annotations

import os

ENV = "SURGE_DARSHAN_LOGS"
# tuner/src/surge_tune/public_logs.py -> the repository's parent directory
_BESIDE_REPO = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "darshan-logs")


def public_logs_dir() -> str:
    """Where the logs should be: $SURGE_DARSHAN_LOGS when set (even if it does not exist, so a
    mistyped value is reported, not silently replaced), else the repository-relative place."""
    return os.environ.get(ENV) or os.path.normpath(_BESIDE_REPO)


def missing_reason() -> str | None:
    """None when the logs are there; otherwise one line saying where they were looked for."""
    where = public_logs_dir()
    if os.path.isdir(where):
        return None
    if os.environ.get(ENV):
        return f"the public Darshan logs are not at {where} (from ${ENV})"
    return f"the public Darshan logs are not at {where} (set ${ENV} to the darshan-logs directory)"
