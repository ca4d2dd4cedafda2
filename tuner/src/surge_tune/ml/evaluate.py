"""Evaluation: the protocol of [Bang23, ch. 5] (balance, random 8:2 split, per-cluster KNN R²), kept to show
how optimistic it is, and the honest held-out figure of `nested.py` (nested GroupKFold by application, with
and without the layout inputs), for KNN and gradient boosting."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split

from surge_tune.ml import nested, selection
from surge_tune.ml.dataset import BEHAVIOUR, LAYOUT_INPUTS, SEED_INPUTS, TARGET, balance_apps, load_jobs, numeric
from surge_tune.ml.models import make_model


def _seed_protocol(balanced: pd.DataFrame, labels: np.ndarray, app_cluster: dict, knn_k: int, seed: int) -> dict:
    """[Bang23, §5.2.4] as printed: random 8:2 split of the (over-sampled) cluster datasets. Duplicated jobs land
    on both sides of the split, so these R² are optimistic by construction."""
    rows, weighted, total = [], 0.0, 0
    datasets = {
        f"cluster {c}": balanced[balanced["app"].map(app_cluster) == c] for c in sorted(set(app_cluster.values()))
    }
    datasets["un-clustered"] = balanced
    for name, d in datasets.items():
        if len(d) < 10:
            rows.append({"dataset": name, "apps": d["app"].nunique(), "jobs": len(d), "r2": None})
            continue
        tr, te = train_test_split(d, test_size=0.2, random_state=seed)
        model = make_model("knn", knn_k, seed).fit(numeric(tr, SEED_INPUTS + ["transfer_size"]), tr[TARGET].to_numpy())
        r2 = r2_score(te[TARGET], model.predict(numeric(te, SEED_INPUTS + ["transfer_size"])))
        rows.append({"dataset": name, "apps": d["app"].nunique(), "jobs": len(d), "r2": round(float(r2), 3)})
        if name != "un-clustered":
            weighted, total = weighted + r2 * len(d), total + len(d)
    return {"rows": rows, "weighted_cluster_r2": round(weighted / total, 3) if total else None}


def evaluate(paths: list[str], seed: int = 0, clusters: int = 0, knn_k: int = 5, variants: bool = True) -> dict:
    jobs = load_jobs(paths)
    with nested.single_threaded():
        # The seed protocol selects on the whole corpus, as the thesis does; the held-out figures select
        # inside each training fold (nested.py).
        balanced = balance_apps(jobs, None, seed)
        top10 = selection.min_max_selection(balanced, BEHAVIOUR, TARGET)
        sbs_k = clusters or nested.SBS_KEEP_K
        final, trail = selection.sbs(balanced, top10, min(sbs_k, max(len(balanced) - 1, 2)), seed)
        if clusters:
            k = clusters
            _, labels = selection.combined_score(selection.scaled(balanced, final), k, seed)
            k_table = []
        else:
            k, labels, k_table = selection.choose_clusters(balanced, final, seed)
        app_cluster = selection.assign_apps(balanced["app"], labels)
        with_layout, pred = nested.held_out(jobs, layout=True, knn_k=knn_k, seed=seed)
        without_layout, _ = nested.held_out(jobs, layout=False, knn_k=knn_k, seed=seed)
        table = nested.every_variant(jobs, knn_k, seed) if variants else []
    q = pd.qcut(pred, q=min(5, len(pred)), duplicates="drop")
    bins = (
        pd.DataFrame({"predicted": pred, "actual": jobs[TARGET].to_numpy()})
        .groupby(q, observed=True)
        .mean()
        .round(1)
        .reset_index(drop=True)
        .to_dict("records")
    )
    return {
        "jobs": len(jobs),
        "apps": int(jobs["app"].nunique()),
        "sources": jobs["source"].value_counts().to_dict(),
        "layouts": int(jobs[LAYOUT_INPUTS].drop_duplicates().shape[0]),
        "selection": {"top10": top10, "sbs_trail": trail, "final": final},
        "clustering": {
            "k": k,
            "k_table": k_table,
            "cluster_sizes": np.bincount(labels).tolist(),
            "apps_assigned_80pct": len(app_cluster),
            "apps_total": int(balanced["app"].nunique()),
        },
        "seed_protocol": _seed_protocol(balanced, labels, app_cluster, knn_k, seed),
        "held_out": {"with_layout": with_layout, "without_layout": without_layout},
        "variants": table,
        "calibration_bins_held_out": bins,
    }


def format_report(r: dict) -> str:
    out = [
        f"{r['jobs']} jobs, {r['apps']} applications, {r['layouts']} layouts; sources {r['sources']}",
        f"min-max selection (top 10): {', '.join(r['selection']['top10'])}",
        f"SBS final clustering features: {', '.join(r['selection']['final'])}",
        f"clusters: k={r['clustering']['k']} sizes {r['clustering']['cluster_sizes']}; "
        f"{r['clustering']['apps_assigned_80pct']}/{r['clustering']['apps_total']} apps pass the 80% rule",
        "",
        "Seed protocol, the thesis's [Bang23] (balanced, random 8:2, KNN; optimistic: duplicates cross the split)",
        "",
        "| dataset | apps | jobs | R² |",
        "|---|---|---|---|",
    ]
    out += [f"| {x['dataset']} | {x['apps']} | {x['jobs']} | {x['r2']} |" for x in r["seed_protocol"]["rows"]]
    out += [
        f"\nsize-weighted cluster R²: {r['seed_protocol']['weighted_cluster_r2']}",
        "",
        "Held out (nested GroupKFold by application: selection, clustering and the variant chosen inside "
        "each training fold)",
        "",
        "| layout inputs | R² (log) | within 2x % | R² | MAPE % | 80% interval coverage % | variants chosen |",
        "|---|---|---|---|---|---|---|",
    ]
    for h in r["held_out"].values():
        chosen = "; ".join(
            f"{c['chosen']['model']} {c['chosen']['inputs']}{' clustered' if c['chosen']['clustered'] else ''}"
            for c in h["folds"]
        )
        out.append(
            f"| {'yes' if h['layout_inputs'] else 'no'} | {h['r2_log']} | {h['within_2x_pct']} | {h['r2']} | "
            f"{h['mape_pct']} | {h['coverage_80_pct']} | {chosen} |"
        )
    if r["variants"]:
        out += [
            "",
            "Every variant on its own (GroupKFold by application; a description, not used to choose)",
            "",
            "| model | inputs | clustered | layout inputs | R² (log) | within 2x % | R² | MAPE % | coverage % |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        out += [
            f"| {x['model']} | {x['inputs']} | {'yes' if x['clustered'] else 'no'} | "
            f"{'yes' if x['layout_inputs'] else 'no'} | {x['r2_log']} | {x['within_2x_pct']} | {x['r2']} | "
            f"{x['mape_pct']} | {x['coverage_80_pct']} |"
            for x in r["variants"]
        ]
    if r["calibration_bins_held_out"]:
        out += [
            "",
            "Binned predicted vs actual (held-out predictions with layout inputs; MiB/s, quintiles of the prediction)",
            "",
            "| predicted | actual |",
            "|---|---|",
        ]
        out += [f"| {b['predicted']} | {b['actual']} |" for b in r["calibration_bins_held_out"]]
    return "\n".join(out)
