"""The two regressors: the KNN of [Bang23, §5.2.4] and gradient boosting (xgboost-cpu). Both predict log throughput."""

from __future__ import annotations

import numpy as np
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler


class LogTarget:
    """Fit on log(throughput): throughput spans orders of magnitude and errors are relative."""

    def __init__(self, model):
        self.model = model

    def fit(self, x: np.ndarray, y: np.ndarray) -> LogTarget:
        self.model.fit(x, np.log(y))
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.exp(self.model.predict(x))


def knn(k: int = 5) -> LogTarget:
    return LogTarget(_KnnCapped(k))


def boosting(seed: int = 0) -> LogTarget:
    from xgboost import XGBRegressor  # heavy import, only when a model is built

    return LogTarget(
        XGBRegressor(
            n_estimators=300,
            max_depth=4,
            learning_rate=0.05,
            subsample=0.8,
            colsample_bytree=0.9,
            random_state=seed,
            n_jobs=1,  # repeatable, and no thread oversubscription on a loaded machine
            verbosity=0,
        )
    )


class _KnnCapped:
    """KNN on standardised log inputs; K shrinks when a cluster has fewer training jobs than K."""

    def __init__(self, k: int):
        self.k = k

    def fit(self, x, y):
        self.pipe = make_pipeline(
            StandardScaler(), KNeighborsRegressor(n_neighbors=min(self.k, len(x)), weights="distance")
        )
        self.pipe.fit(np.log1p(np.clip(x, 0, None)), y)
        return self

    def predict(self, x):
        return self.pipe.predict(np.log1p(np.clip(x, 0, None)))


def make_model(name: str, knn_k: int = 5, seed: int = 0) -> LogTarget:
    return knn(knn_k) if name == "knn" else boosting(seed)


MODEL_NAMES = ("knn", "xgboost")
