"""The suite's labels file (labels.toml): which input shows which cause.

    [[case]]
    name = "tiny-1"                      # unique in the suite
    input = "profiles/tiny-1.jsonl"      # a Surge profile or Darshan log, relative to the suite directory
    cause = "small-transfers"            # a cause id (accuracy/causes.py) or "none" for a clean control
    source = "generated"                 # generated | public

Reading refuses what would make a score wrong rather than fail: an unknown cause, a missing input, a
duplicated name, a case without one of the four keys.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import tomllib

from surge_tune.accuracy.causes import CAUSES, known
from surge_tune.errors import TuneError

LABELS = "labels.toml"
SOURCES = ("generated", "public")


@dataclass(frozen=True)
class Case:
    name: str
    input: str  # as written in the file (relative to the suite, or absolute)
    cause: str
    source: str

    def path(self, suite: str) -> str:
        return os.path.join(suite, self.input)


def read_labels(suite: str) -> list[Case]:
    where = os.path.join(suite, LABELS)
    try:
        with open(where, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise TuneError(f"{suite}: no {LABELS} (write a suite with --generate DIR)") from None
    except tomllib.TOMLDecodeError as e:
        raise TuneError(f"{where}: not valid TOML: {e}") from None
    entries = data.get("case")
    if not isinstance(entries, list) or not entries:
        raise TuneError(f"{where}: no [[case]] entries")
    cases, names = [], set()
    for i, entry in enumerate(entries, 1):
        missing = [k for k in ("name", "input", "cause", "source") if not isinstance(entry.get(k), str)]
        if missing:
            raise TuneError(f"{where}: case {i} lacks {', '.join(missing)} (strings)")
        case = Case(entry["name"], entry["input"], entry["cause"], entry["source"])
        if case.name in names:
            raise TuneError(f"{where}: case name {case.name!r} appears twice")
        if not known(case.cause):
            raise TuneError(
                f"{where}: case {case.name!r}: unknown cause {case.cause!r} (known: none, {', '.join(CAUSES)})"
            )
        if case.source not in SOURCES:
            raise TuneError(f"{where}: case {case.name!r}: source must be one of {', '.join(SOURCES)}")
        if not os.path.exists(case.path(suite)):
            raise TuneError(f"{where}: case {case.name!r}: input {case.path(suite)} does not exist")
        names.add(case.name)
        cases.append(case)
    return cases


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_labels(suite: str, cases: list[Case], header: str) -> str:
    lines = [f"# {line}" for line in header.splitlines()]
    for c in cases:
        lines += ["", "[[case]]"]
        lines += [f"{k} = {_quoted(getattr(c, k))}" for k in ("name", "input", "cause", "source")]
    where = os.path.join(suite, LABELS)
    with open(where, "w") as f:
        f.write("\n".join(lines) + "\n")
    return where
