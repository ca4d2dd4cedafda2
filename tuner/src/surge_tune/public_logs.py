"""Where the public Darshan logs are: $SURGE_DARSHAN_LOGS, else the
repository's sibling shared/darshan-logs, else the workplace copy."""

import os

_CANDIDATES = (
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "darshan-logs"),
    "/work/shared/darshan-logs",
)


def public_logs_dir() -> str:
    """The first candidate that exists (the first one when none does, for messages)."""
    named = os.environ.get("SURGE_DARSHAN_LOGS")
    if named:
        return named
    found = [os.path.normpath(c) for c in _CANDIDATES if os.path.isdir(c)]
    return found[0] if found else os.path.normpath(_CANDIDATES[0])
