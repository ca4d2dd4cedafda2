"""[Bang23, §5.3]: predict throughput over a grid of the user-settable parameters and return the best settings.

The model is gradient boosting on the extended inputs over all jobs (the best leakage-free configuration
in docs/tuner.md); the grid varies only the inputs, within the range seen in training. Inputs that never
vary in the training data are reported: the model cannot know their effect, so the recommendation keeps
the app's current value for them.

A model that predicts the app's current settings more than TRUST_FACTOR away from the measured median
cannot rank other settings for it either: then the recommender says it does not know (no gain figure)
instead of dividing by a wrong baseline (a "2044x gain").
"""

from __future__ import annotations

import itertools

import pandas as pd

from surge_tune.errors import TuneError
from surge_tune.ml.dataset import EXTENDED_INPUTS, TARGET, load_jobs, numeric
from surge_tune.ml.models import make_model

TRUST_FACTOR = 2.0

GRID = {
    "nprocs": [1, 2, 4, 8, 16, 32, 64],
    "stripe_count": [1, 2, 4, 8, 16],
    "stripe_size": [1 << 20, 4 << 20, 16 << 20],
    "transfer_size": [4096, 65536, 1 << 20, 4 << 20, 16 << 20],
    "file_per_process": [0, 1],
    "collective": [0, 1],
    "mpiio_interface": [0, 1],
}


def recommend(paths: list[str], app: str, nprocs: int | None = None, seed: int = 0, top: int = 5) -> dict:
    jobs = load_jobs(paths)
    mine = jobs[jobs["app"] == app]
    if mine.empty:
        raise TuneError(
            f"no job of application {app!r} in the table (known: {', '.join(sorted(jobs['app'].unique()))})"
        )
    model = make_model("xgboost", seed=seed).fit(numeric(jobs, EXTENDED_INPUTS), jobs[TARGET].to_numpy())
    typical = mine[EXTENDED_INPUTS].median()
    fixed = [c for c in EXTENDED_INPUTS if jobs[c].nunique() <= 1]
    grid = {
        c: (
            [nprocs]
            if c == "nprocs" and nprocs
            else [typical[c]]
            if c in fixed or c not in GRID
            else [v for v in GRID[c] if jobs[c].min() <= v <= jobs[c].max()] or [typical[c]]
        )
        for c in EXTENDED_INPUTS
    }
    combos = pd.DataFrame(list(itertools.product(*grid.values())), columns=list(grid))
    combos = combos[~((combos["collective"] == 1) & (combos["mpiio_interface"] == 0))]  # collective needs MPI-IO
    combos["predicted_mib_s"] = model.predict(numeric(combos, EXTENDED_INPUTS))
    best = combos.sort_values("predicted_mib_s", ascending=False).head(top)
    current = float(model.predict(numeric(typical.to_frame().T, EXTENDED_INPUTS))[0])
    measured = float(mine[TARGET].median())
    trusted = measured > 0 and current > 0 and 1 / TRUST_FACTOR <= current / measured <= TRUST_FACTOR
    verdict = (
        f"best predicted settings below, {best['predicted_mib_s'].iloc[0] / current:.2f}x the current prediction"
        if trusted
        else f"unknown: the model predicts {current:.1f} MiB/s for {app}'s current settings where {measured:.1f} "
        f"MiB/s was measured (off by more than {TRUST_FACTOR:g}x), so it cannot tell which settings are faster"
    )
    return {
        "app": app,
        "jobs_of_app": len(mine),
        "measured_median_mib_s": measured,
        "predicted_current_mib_s": current,
        "trusted": trusted,
        "verdict": verdict,
        "grid_points": len(combos),
        "not_learnable_inputs": fixed,
        "searched_within_training_range": {c: v for c, v in grid.items() if len(v) > 1},
        "best": best.to_dict("records"),
        "gain_vs_current": float(best["predicted_mib_s"].iloc[0] / current) if trusted else None,
    }
