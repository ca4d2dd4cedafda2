"""[Bang23, §5.2.2-5.2.3]: min-max correlation feature selection, SBS with KMeans, the app -> cluster rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.metrics import davies_bouldin_score, silhouette_score
from sklearn.preprocessing import StandardScaler


def min_max_selection(
    df: pd.DataFrame, candidates: list[str], target: str, n_select: int = 10, n_low: int = 10
) -> list[str]:
    """Start from the feature most correlated with the target; then, among the `n_low` features least
    correlated with the previously selected one, add the one most correlated with the target.
    Correlation is Pearson |r| (the thesis says "correlation coefficient" despite the MI name)."""
    usable = [c for c in candidates if df[c].nunique() > 1]
    corr = df[usable + [target]].corr().abs().fillna(0.0)
    selected = [corr[target].drop(target).idxmax()]
    while len(selected) < min(n_select, len(usable)):
        rest = [c for c in usable if c not in selected]
        low = corr.loc[rest, selected[-1]].nsmallest(n_low).index
        selected.append(corr.loc[low, target].idxmax())
    return selected


def scaled(df: pd.DataFrame, cols: list[str]) -> np.ndarray:
    # Counts span orders of magnitude: log1p then standardise (a [gap] choice, documented).
    return StandardScaler().fit_transform(np.log1p(df[cols].clip(lower=0).astype(float).to_numpy()))


def combined_score(x: np.ndarray, k: int, seed: int) -> tuple[float, np.ndarray]:
    """Silhouette / Davies-Bouldin (higher is better), the thesis's Combined Score."""
    labels = KMeans(n_clusters=k, n_init=4, random_state=seed).fit_predict(x)
    if len(set(labels)) < 2:
        return float("-inf"), labels
    sample = min(len(x), 2000)  # exact silhouette is O(n^2)
    sil = silhouette_score(x, labels, sample_size=sample, random_state=seed)
    dbi = davies_bouldin_score(x, labels)
    return sil / max(dbi, 1e-9), labels


def sbs(df: pd.DataFrame, features: list[str], k: int, seed: int, keep: int = 3) -> tuple[list[str], list[dict]]:
    """Sequential backward selection: drop the feature whose removal maximises the Combined Score."""
    trail, current = [], list(features)
    while len(current) > keep:
        scored = [
            (combined_score(scaled(df, [f for f in current if f != drop]), k, seed)[0], drop) for drop in current
        ]
        best, drop = max(scored)
        current.remove(drop)
        trail.append({"dropped": drop, "score": round(best, 4), "features": list(current)})
    return current, trail


def choose_clusters(
    df: pd.DataFrame, features: list[str], seed: int, k_range=range(2, 7), min_cluster_share: float = 0.05
) -> tuple[int, np.ndarray, list[dict]]:
    """Best Combined Score among k whose smallest cluster holds at least `min_cluster_share` of jobs
    (the thesis's "every cluster at least 10,000 jobs", scaled to corpus size)."""
    x = scaled(df, features)
    table, best = [], None
    for k in k_range:
        if k >= len(df):
            break
        score, labels = combined_score(x, k, seed)
        smallest = np.bincount(labels).min() / len(labels)
        table.append({"k": k, "score": round(score, 4), "smallest_share": round(float(smallest), 3)})
        if smallest >= min_cluster_share and (best is None or score > best[0]):
            best = (score, k, labels)
    if best is None:
        return 1, np.zeros(len(df), dtype=int), table
    return best[1], best[2], table


def assign_apps(apps: pd.Series, labels: np.ndarray, share: float = 0.8) -> dict[str, int]:
    """[Bang23, §5.2.3]: an app whose jobs fall >= 80% in one cluster is that cluster's; others are excluded."""
    out = {}
    for app, lab in pd.DataFrame({"app": apps.to_numpy(), "label": labels}).groupby("app")["label"]:
        counts = lab.value_counts(normalize=True)
        if counts.iloc[0] >= share:
            out[app] = int(counts.index[0])
    return out
