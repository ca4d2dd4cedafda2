"""The tuner's side of `surge run --autotune`: a proposal before the job, a record after it.

`surge run --autotune` (crates/surge-cli/src/autotune.rs) calls `python3 -m surge_tune autotune propose APP`
before it starts the job and `... autotune record APP PROFILE` after the job ended well; each prints one JSON
object on stdout and nothing else, so the Rust side reads a single line. Errors (a history that is not a
database, an unreadable profile) are exit 2 with an `error:` line on stderr, like every other command.

- **propose**: DCA-IO (engine.decide_layout) for APP's next run, with the daemons' queued requests from
  `surge status --toml` as per-target load (loads.py; Procedure 3). An APP with no recorded run gets
  `"status": "no-history"` and no layout: the first run keeps the layout it has, and is recorded. Other
  applications' runs (Procedure 1) are not used: a job's first run on this machine is its reference.
- **record**: the job's Surge profile becomes one history run of APP (history.run_from_summary), so the next
  proposal sees this run's layout (the main file's stripe count and size: the profile's, else `surge
  getstripe` of the file while the job's cluster is up) and throughput.

Surge applies the layout itself (mkdir -p and the directory's default layout through its client), so this
module decides and never touches the file system.
"""

from __future__ import annotations

import os
import subprocess

from surge_tune.dcaio.engine import decide_layout
from surge_tune.dcaio.history import History, run_from_summary
from surge_tune.dcaio.procedures import Target
from surge_tune.errors import TuneError


def propose(db_path: str, app: str, loads: list[Target] | None, max_targets: int = 0) -> dict:
    with History(db_path) as db:
        if not db.runs(app):
            return {
                "status": "no-history",
                "app": app,
                "message": f"no history yet for {app}: layout unchanged (this run will be recorded)",
            }
        decision = decide_layout(db, app, max_targets=max_targets, loads=loads)
    lay = decision.layout
    return {
        "status": "proposed",
        "app": app,
        "direction": decision.direction,
        "run_number": decision.run_number,
        "stripe_count": lay.stripe_count,
        "stripe_size": lay.stripe_size,
        "start_target": lay.start_target,
        "phase": lay.phase,
        "why": lay.reason,
        "message": (
            f"{app} {decision.direction} run #{decision.run_number}: stripe count {lay.stripe_count}, "
            f"stripe size {lay.stripe_size}"
            + (f", from target {lay.start_target}" if lay.start_target >= 0 else "")
            + f" ({lay.phase}: {lay.reason})"
        ),
    }


def _layout_in_surge(summary) -> tuple[int, int] | None:
    """The main file's layout from `surge getstripe` (SURGE_BIN, SURGE_CLUSTER and SURGE_MOUNT of the job): a
    profile lacks it (stripe count 0) when the file was opened through the FUSE mount and only its reads and
    writes reached the interposer. None when Surge cannot say (the file was removed, no surge binary)."""
    files = summary.files
    if not len(files) or not os.environ.get("SURGE_BIN"):
        return None
    path = files.loc[(files["bytes_written"] + files["bytes_read"]).idxmax(), "path"]
    proc = subprocess.run(
        [os.environ["SURGE_BIN"], "getstripe", "-c", "-S", path], capture_output=True, text=True, timeout=60
    )
    fields = proc.stdout.split()
    if proc.returncode != 0 or len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None
    return int(fields[0]), int(fields[1])


def record(db_path: str, app: str, profile: str, job: str | None = None) -> dict:
    from surge_tune.features import summarize
    from surge_tune.ingest import read_job

    summary = summarize(read_job(profile, with_dxt=False, job=job))
    run = run_from_summary(summary, app)
    if summary.row["stripe_count"] <= 0:
        run.stripe_count, run.stripe_size = _layout_in_surge(summary) or (run.stripe_count, run.stripe_size)
    if run.io_bytes_total <= 0 or run.io_time_total <= 0:
        raise TuneError(f"{profile}: the job moved no data through Surge: nothing to record for {app}")
    with History(db_path) as db:
        db.add(run)
        recorded = len(db.runs(app, run.direction))
    return {
        "status": "recorded",
        "app": run.app,
        "direction": run.direction,
        "runs": recorded,
        "stripe_count": run.stripe_count,
        "stripe_size": run.stripe_size,
        "throughput_mib_s": round(run.throughput_mib_s, 3),
        "message": (
            f"recorded {run.app} {run.direction} run #{recorded}: {run.throughput_mib_s:.1f} MiB/s with stripe "
            f"count {run.stripe_count}, stripe size {run.stripe_size} "
            f"({'shared file' if run.shared_file else 'file-per-process'}, {run.nprocs} procs)"
        ),
    }
