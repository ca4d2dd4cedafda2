"""The honest held-out figure: nested cross-validation grouped by application.

Outer loop: GroupKFold by application, so every job of a held-out application is unseen. Inside each outer
training set, everything that learns from data is fitted again on the training applications only: the
clustering features (min-max selection and SBS of [Bang23, §5.2.2]) and k, the clusters, the models and
the calibration split of the 80% intervals. Which variant (model x inputs x clustering) predicts the
held-out applications is chosen by an inner GroupKFold over the training applications (pooled R² of log
throughput), before the outer test applications are predicted; they are scored once, after every fold.

`held_out(jobs, layout=False)` is the ablation: the same procedure with the layout inputs (stripe count and
size) removed from every input set. Everything runs single-threaded (xgboost `n_jobs=1`, one BLAS/OpenMP
thread), so a figure is repeatable on a loaded machine.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import mean_absolute_percentage_error, r2_score
from sklearn.model_selection import GroupKFold, GroupShuffleSplit
from sklearn.preprocessing import StandardScaler

from surge_tune.errors import TuneError
from surge_tune.ml import selection
from surge_tune.ml.dataset import BEHAVIOUR, INPUT_SETS, LAYOUT_INPUTS, TARGET, balance_apps, numeric
from surge_tune.ml.models import MODEL_NAMES, make_model

INTERVAL = 0.8
MIN_CLUSTER_TRAIN = 8  # a cluster with fewer training jobs falls back to the un-clustered model
OUTER_FOLDS, INNER_FOLDS = 5, 4
SBS_KEEP_K = 4  # the thesis settles on 4 clusters; SBS scores feature subsets with it


@dataclass(frozen=True)
class Variant:
    model: str
    inputs: str  # a key of INPUT_SETS
    clustered: bool

    def columns(self, layout: bool) -> list[str]:
        return [c for c in INPUT_SETS[self.inputs] if layout or c not in LAYOUT_INPUTS]

    def describe(self) -> dict:
        return {"model": self.model, "inputs": self.inputs, "clustered": self.clustered}


VARIANTS = [Variant(m, i, c) for m in MODEL_NAMES for i in INPUT_SETS for c in (False, True)]


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """One BLAS/OpenMP thread (KMeans), and quiet about duplicate points: repeated configurations give
    identical rows, and KMeans warns when it finds fewer distinct clusters than asked."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def group_folds(jobs: pd.DataFrame, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    n_apps = jobs["app"].nunique()
    if n_apps < 3:
        raise TuneError(f"held-out evaluation needs at least 3 applications, the table has {n_apps}")
    return list(GroupKFold(n_splits=min(n, n_apps)).split(jobs, groups=jobs["app"]))


class ClusteringChoice:
    """The clustering features and k, chosen on a training set as [Bang23] does on the whole corpus;
    cached per training set, since every clustered variant of a fold shares them."""

    def __init__(self, seed: int):
        self.seed = seed
        self._cache: dict[tuple, tuple[list[str], int]] = {}

    def __call__(self, train: pd.DataFrame) -> tuple[list[str], int]:
        key = tuple(train.index)
        if key not in self._cache:
            balanced = balance_apps(train, None, self.seed)
            top10 = selection.min_max_selection(balanced, BEHAVIOUR, TARGET)
            final, _ = selection.sbs(balanced, top10, min(SBS_KEEP_K, max(len(balanced) - 1, 2)), self.seed)
            k, _, _ = selection.choose_clusters(balanced, final, self.seed)
            self._cache[key] = (final, k)
        return self._cache[key]


def fit_predict(
    train: pd.DataFrame,
    test: pd.DataFrame,
    variant: Variant,
    layout: bool,
    clustering: ClusteringChoice,
    knn_k: int,
    seed: int,
) -> tuple[np.ndarray, float]:
    """Predictions for `test` and the 80% log-interval half-width from a calibration split of `train`."""
    inputs = variant.columns(layout)
    fit_idx, cal_idx = next(
        GroupShuffleSplit(n_splits=1, test_size=0.25, random_state=seed).split(train, groups=train["app"])
    )
    fit, cal = train.iloc[fit_idx], train.iloc[cal_idx]

    def predictor(frame: pd.DataFrame):
        model = make_model(variant.model, knn_k, seed).fit(numeric(frame, inputs), frame[TARGET].to_numpy())
        return lambda rows: model.predict(numeric(rows, inputs))

    predict = predictor(fit)
    features, k = clustering(train) if variant.clustered else ([], 1)
    if k > 1:
        scaler = StandardScaler().fit(np.log1p(numeric(fit, features).clip(0)))
        km = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(
            scaler.transform(np.log1p(numeric(fit, features).clip(0)))
        )
        per_cluster = {
            c: predictor(fit[km.labels_ == c]) for c in range(k) if (km.labels_ == c).sum() >= MIN_CLUSTER_TRAIN
        }
        global_model = predict

        def predict(rows: pd.DataFrame) -> np.ndarray:
            out = global_model(rows)
            labels = km.predict(scaler.transform(np.log1p(numeric(rows, features).clip(0))))
            for c, model in per_cluster.items():
                if (labels == c).any():
                    out[labels == c] = model(rows[labels == c])
            return out

    half_width = float(np.quantile(np.abs(np.log(predict(cal)) - np.log(cal[TARGET].to_numpy())), INTERVAL))
    return predict(test), half_width


def scores(actual: np.ndarray, pred: np.ndarray, width: np.ndarray) -> dict:
    log_error = np.abs(np.log(pred) - np.log(actual))
    return {
        "r2": round(float(r2_score(actual, pred)), 3),
        "r2_log": round(float(r2_score(np.log(actual), np.log(pred))), 3),
        "within_2x_pct": round(100 * float((log_error <= np.log(2)).mean()), 1),
        "mape_pct": round(100 * float(mean_absolute_percentage_error(actual, pred)), 1),
        "coverage_80_pct": round(100 * float((log_error <= width).mean()), 1),
    }


def cross_validated(
    jobs: pd.DataFrame,
    folds: list,
    variant: Variant,
    layout: bool,
    clustering: ClusteringChoice,
    knn_k: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold predictions and interval half-widths of one fixed variant."""
    pred, width = np.zeros(len(jobs)), np.zeros(len(jobs))
    for train_idx, test_idx in folds:
        p, w = fit_predict(jobs.iloc[train_idx], jobs.iloc[test_idx], variant, layout, clustering, knn_k, seed)
        pred[test_idx], width[test_idx] = p, w
    return pred, width


def held_out(jobs: pd.DataFrame, layout: bool = True, knn_k: int = 5, seed: int = 0) -> tuple[dict, np.ndarray]:
    """Nested GroupKFold: the scores of the variant each outer fold chose by its inner CV, pooled over folds,
    and the held-out predictions."""
    clustering = ClusteringChoice(seed)
    pred, width, folds_report = np.zeros(len(jobs)), np.zeros(len(jobs)), []
    with single_threaded():
        for train_idx, test_idx in group_folds(jobs, OUTER_FOLDS):
            train, test = jobs.iloc[train_idx], jobs.iloc[test_idx]
            best, inner_score = choose_variant(train, layout, clustering, knn_k, seed)
            pred[test_idx], width[test_idx] = fit_predict(train, test, best, layout, clustering, knn_k, seed)
            folds_report.append(
                {
                    "held_out_apps": sorted(test["app"].unique()),
                    "chosen": best.describe(),
                    "inner_r2_log": round(inner_score, 3),
                }
            )
    return {"layout_inputs": layout, **scores(jobs[TARGET].to_numpy(), pred, width), "folds": folds_report}, pred


def choose_variant(
    train: pd.DataFrame, layout: bool, clustering: ClusteringChoice, knn_k: int, seed: int
) -> tuple[Variant, float]:
    """The variant with the best pooled R² of log throughput over an inner GroupKFold of the training apps
    (the first of VARIANTS wins a tie)."""
    inner, actual = group_folds(train, INNER_FOLDS), np.log(train[TARGET].to_numpy())
    inner_scores = {}
    for v in VARIANTS:
        p, _ = cross_validated(train, inner, v, layout, clustering, knn_k, seed)
        inner_scores[v] = float(r2_score(actual, np.log(p)))
    best = max(VARIANTS, key=lambda v: inner_scores[v])
    return best, inner_scores[best]


def every_variant(jobs: pd.DataFrame, knn_k: int = 5, seed: int = 0) -> list[dict]:
    """Each variant's own GroupKFold scores: a description of the variants, never used to choose one."""
    clustering, folds, actual = ClusteringChoice(seed), group_folds(jobs, OUTER_FOLDS), jobs[TARGET].to_numpy()
    rows = []
    with single_threaded():
        for v in VARIANTS:
            for layout in (True, False):
                pred, width = cross_validated(jobs, folds, v, layout, clustering, knn_k, seed)
                rows.append({**v.describe(), "layout_inputs": layout, **scores(actual, pred, width)})
    return rows
