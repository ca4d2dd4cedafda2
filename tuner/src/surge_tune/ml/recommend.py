"""[Bang23, §5.3]: predict throughput over a grid of the user-settable parameters and return the best settings.

The model is gradient boosting on the extended inputs (which include the layout: stripe count and size)
over all jobs; the grid varies only the inputs, within the range seen in training. Inputs that never vary
in the training data are reported: the model cannot know their effect, so the recommendation keeps the
app's current value for them.

The app's current settings are those of its latest run, and their measured throughput the median over
the app's runs with exactly those settings. **Confidence rule**: when the model predicts the current
settings more than TRUST_FACTOR away from that measured throughput, it cannot rank other settings for the
app either, so the recommender says it does not know (`trusted: false`, no gain figure) instead of
dividing by a wrong baseline (a "2044x gain").

`held_out` measures the rule on applications the model never saw: each app is left out of training in
turn, each of its distinct settings plays the current one, and the report gives how often the prediction
for the current settings is within 2x of the measurement, and how often the predictions for the app's
other settings are, when the rule trusted the model and when it did not.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from surge_tune.errors import TuneError
from surge_tune.ml.dataset import EXTENDED_INPUTS, TARGET, load_jobs, numeric
from surge_tune.ml.models import make_model
from surge_tune.ml.nested import single_threaded

TRUST_FACTOR = 2.0

GRID = {
    "nprocs": [1, 2, 4, 8, 16, 32, 64],
    "stripe_count": [1, 2, 4, 8, 16],
    "stripe_size": [65536, 1 << 20, 4 << 20, 16 << 20],
    "transfer_size": [4096, 65536, 1 << 20, 4 << 20, 16 << 20],
    "file_per_process": [0, 1],
    "collective": [0, 1],
    "mpiio_interface": [0, 1],
}


def _fit(jobs: pd.DataFrame, seed: int):
    return make_model("xgboost", seed=seed).fit(numeric(jobs, EXTENDED_INPUTS), jobs[TARGET].to_numpy())


def _settings(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct setting of the runs, with the median measured throughput of its runs."""
    return runs.groupby(EXTENDED_INPUTS, as_index=False)[TARGET].median()


def _trusted(predicted: float, measured: float) -> bool:
    return measured > 0 and predicted > 0 and 1 / TRUST_FACTOR <= predicted / measured <= TRUST_FACTOR


def recommend(paths: list[str], app: str, nprocs: int | None = None, seed: int = 0, top: int = 5) -> dict:
    jobs = load_jobs(paths)
    mine = jobs[jobs["app"] == app]
    if mine.empty:
        raise TuneError(
            f"no job of application {app!r} in the table (known: {', '.join(sorted(jobs['app'].unique()))})"
        )
    model = _fit(jobs, seed)
    latest = mine.sort_values("start_time").iloc[-1]
    current_settings = latest[EXTENDED_INPUTS].astype(float)
    same = (mine[EXTENDED_INPUTS].astype(float) == current_settings).all(axis=1)
    measured = float(mine.loc[same, TARGET].median())
    fixed = [c for c in EXTENDED_INPUTS if jobs[c].nunique() <= 1]
    grid = {
        c: (
            [nprocs]
            if c == "nprocs" and nprocs
            else [current_settings[c]]
            if c in fixed or c not in GRID
            else [v for v in GRID[c] if jobs[c].min() <= v <= jobs[c].max()] or [current_settings[c]]
        )
        for c in EXTENDED_INPUTS
    }
    combos = pd.DataFrame(list(itertools.product(*grid.values())), columns=list(grid))
    combos = combos[~((combos["collective"] == 1) & (combos["mpiio_interface"] == 0))]  # collective needs MPI-IO
    combos["predicted_mib_s"] = model.predict(numeric(combos, EXTENDED_INPUTS))
    best = combos.sort_values("predicted_mib_s", ascending=False).head(top)
    current = float(model.predict(numeric(current_settings.to_frame().T, EXTENDED_INPUTS))[0])
    trusted = _trusted(current, measured)
    verdict = (
        f"best predicted settings below, {best['predicted_mib_s'].iloc[0] / current:.2f}x the current prediction"
        if trusted
        else f"unknown: the model predicts {current:.1f} MiB/s for {app}'s current settings where {measured:.1f} "
        f"MiB/s was measured (off by more than {TRUST_FACTOR:g}x), so it cannot tell which settings are faster"
    )
    return {
        "app": app,
        "jobs_of_app": len(mine),
        "current_settings": current_settings.to_dict(),
        "measured_current_mib_s": measured,
        "predicted_current_mib_s": current,
        "trusted": trusted,
        "verdict": verdict,
        "grid_points": len(combos),
        "not_learnable_inputs": fixed,
        "searched_within_training_range": {c: v for c, v in grid.items() if len(v) > 1},
        "best": best.to_dict("records"),
        "gain_vs_current": float(best["predicted_mib_s"].iloc[0] / current) if trusted else None,
    }


def held_out(paths: list[str], seed: int = 0) -> dict:
    """The confidence rule on applications left out of training, one at a time (see the module doc)."""
    jobs = load_jobs(paths)
    if jobs["app"].nunique() < 2:
        raise TuneError("held-out evaluation needs at least 2 applications in the table")
    per_app, cases = [], []
    with single_threaded():
        for app, mine in jobs.groupby("app"):
            model = _fit(jobs[jobs["app"] != app], seed)
            settings = _settings(mine)
            predicted = model.predict(numeric(settings, EXTENDED_INPUTS))
            within = np.abs(np.log(predicted / settings[TARGET].to_numpy())) <= np.log(TRUST_FACTOR)
            for i in range(len(settings)):
                others = np.delete(within, i)
                cases.append({"trusted": bool(within[i]), "others_within": int(others.sum()), "others": len(others)})
            per_app.append(
                {"app": app, "settings": len(settings), "current_within_2x_pct": round(100 * float(within.mean()), 1)}
            )
    table = pd.DataFrame(cases)

    def others_pct(rows: pd.DataFrame) -> float | None:
        return round(100 * rows["others_within"].sum() / rows["others"].sum(), 1) if rows["others"].sum() else None

    return {
        "apps": len(per_app),
        "cases": len(table),
        "current_within_2x_pct": round(100 * float(table["trusted"].mean()), 1),
        "unknown_pct": round(100 * float((~table["trusted"]).mean()), 1),
        "other_settings_within_2x_pct_when_trusted": others_pct(table[table["trusted"]]),
        "other_settings_within_2x_pct_when_unknown": others_pct(table[~table["trusted"]]),
        "per_app": per_app,
    }
