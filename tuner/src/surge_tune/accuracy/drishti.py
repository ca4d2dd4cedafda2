"""Drishti (`drishti-io` on PyPI), run in a virtual environment of its own, its insights with their levels.

The environment is ~/.cache/surge/drishti (or $SURGE_DRISHTI_ENV), created with `python3 -m venv` and
`pip install drishti-io` on first use; a failure says what to run by hand. Drishti prints its report for
people and its CSV export says which insights fired but not at which level, so a small driver (DRIVER,
run with the environment's Python) wraps Drishti's `message()` to record each insight's code and level
(HIGH, WARN, INFO, OK), then runs Drishti's own command line on the log, and prints the record as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from surge_tune.errors import TuneError

ENV = "SURGE_DRISHTI_ENV"
DEFAULT_ENV = os.path.join(os.path.expanduser("~"), ".cache", "surge", "drishti")
PACKAGE = "drishti-io"
LEVELS = {1: "high", 2: "warn", 3: "info", 4: "ok"}  # drishti/includes/config.py: HIGH = 1 ... OK = 4

DRIVER = r"""
import contextlib, io, json, sys
sys.argv = ["drishti", "--issues", "--code", sys.argv[1]]
import drishti.includes.module as module
import drishti.handlers.handle_darshan as handler
from drishti import reporter
seen = []
original = module.message
def recording(code, target, level, issue, recommendations=None, details=None):
    seen.append({"code": code, "level": level, "issue": issue})
    return original(code, target, level, issue, recommendations, details)
module.message = handler.message = recording
with contextlib.redirect_stdout(io.StringIO()):
    reporter.main()
print(json.dumps(seen))
"""


@dataclass
class Insight:
    code: str
    level: str  # high | warn | info | ok
    issue: str


def env_dir() -> str:
    return os.environ.get(ENV) or DEFAULT_ENV


def _python(env: str) -> str:
    return os.path.join(env, "bin", "python")


def ensure_drishti(env: str | None = None, progress=print) -> str:
    """The environment's Python, installing Drishti into it first if it is not there."""
    env = env or env_dir()
    python = _python(env)
    if os.path.exists(python) and _has_drishti(python):
        return python
    progress(f"installing {PACKAGE} into {env} (first use)")
    steps = [[sys.executable, "-m", "venv", env], [python, "-m", "pip", "install", "--quiet", PACKAGE]]
    for step in steps:
        try:
            p = subprocess.run(step, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TuneError(f"cannot install Drishti: `{' '.join(step)}` failed: {e}") from None
        if p.returncode != 0:
            raise TuneError(
                f"cannot install Drishti into {env}: `{' '.join(step)}` exited {p.returncode}:\n"
                f"{(p.stderr or p.stdout)[-1500:]}\nInstall it by hand (python3 -m venv {env} && "
                f"{python} -m pip install {PACKAGE}), point ${ENV} at an environment that has it, "
                "or pass --no-drishti"
            )
    if not _has_drishti(python):
        raise TuneError(f"{PACKAGE} was installed into {env} but the drishti package is still not found there")
    return python


def _has_drishti(python: str) -> bool:
    # find_spec, not import: Drishti parses its command line when its modules load
    check = "import importlib.util, sys; sys.exit(importlib.util.find_spec('drishti.reporter') is None)"
    p = subprocess.run([python, "-c", check], capture_output=True)
    return p.returncode == 0


def insights(python: str, log: str) -> list[Insight]:
    """Drishti's insights on one Darshan log, in the order it reports them; TuneError if Drishti fails."""
    try:
        p = subprocess.run([python, "-c", DRIVER, log], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise TuneError(f"Drishti took more than 600 s on {log}") from None
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no message"])[-1]
        raise TuneError(f"Drishti failed on {log}: {last}")
    try:
        seen = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise TuneError(f"Drishti printed no insight record for {log}") from None
    return [Insight(s["code"], LEVELS.get(s["level"], "info"), s["issue"]) for s in seen]
