"""The ML pipeline end to end on a small real corpus (quick fio + MPI-IO runs) plus the public logs."""

import shutil

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import SHARED_LOGS, needs_public_logs

from surge_tune.corpus.generate import generate
from surge_tune.ingest.batch import ingest
from surge_tune.ml import selection
from surge_tune.ml.dataset import balance_apps
from surge_tune.ml.evaluate import evaluate, format_report
from surge_tune.ml.recommend import recommend


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not (shutil.which("fio") and shutil.which("mpirun") and shutil.which("mpicc")):
        pytest.fail("fio and Open MPI are required (scripts/setup.sh installs them)")
    out = tmp_path_factory.mktemp("corpus")
    summary = generate(str(out), quick=True)
    assert summary["failed"] == [] and summary["ingest_errors"] == []
    return out, summary


@pytest.fixture(scope="module")
def public_table(tmp_path_factory):
    out = tmp_path_factory.mktemp("public")
    ingest([SHARED_LOGS], str(out), workers=2, progress=False)
    return out


def test_generated_runs_are_real_and_ingested(corpus):
    out, summary = corpus
    jobs = pq.read_table(out / "table" / "jobs.parquet").to_pandas()
    assert len(jobs) == summary["runs"] >= 16
    assert set(jobs["source"]) == {"corpus-fio", "corpus-mpiio"}
    assert (jobs["throughput_mib_s"] > 0).all() and (jobs["io_time"] > 0).all()
    coll = jobs[jobs["app"] == "mpiio-shared-coll"]
    assert coll["collective"].all() and not coll["file_per_process"].any()
    assert set(jobs["transfer_size"]) == {4096, 1 << 20}


def test_min_max_selection_and_the_80_percent_rule():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=200)})
    df["target"] = 3 * df["a"] + rng.normal(scale=0.1, size=200)
    df["b"] = df["a"] + rng.normal(scale=0.01, size=200)  # redundant with a
    df["c"] = rng.normal(size=200)
    df["target"] += 0.5 * df["c"]
    assert selection.min_max_selection(df, ["a", "b", "c"], "target", n_select=2, n_low=1) == ["a", "c"]
    apps = pd.Series(["x"] * 10 + ["y"] * 10)
    labels = np.array([0] * 9 + [1] + [0] * 5 + [1] * 5)
    assert selection.assign_apps(apps, labels) == {"x": 0}  # y splits 50/50: excluded
    balanced = balance_apps(pd.DataFrame({"app": ["x"] * 3 + ["y"] * 9, "v": range(12)}), 5, 0)
    assert balanced.groupby("app").size().to_dict() == {"x": 5, "y": 5}


@needs_public_logs
def test_evaluation_end_to_end(corpus, public_table):
    out, _ = corpus
    report = evaluate([str(out), str(public_table)], seed=0)
    assert report["apps"] >= 8 and len(report["selection"]["top10"]) == 10
    assert len(report["selection"]["final"]) == 3
    assert report["clustering"]["k"] >= 1
    assert {r["dataset"] for r in report["seed_protocol"]["rows"]} >= {"un-clustered"}
    rows = report["leakage_free"]
    assert len(rows) == 12 and {r["model"] for r in rows} == {"knn", "xgboost"}
    assert {r["inputs"] for r in rows} == {"seed", "extended", "extended+pattern"}
    for r in rows:
        assert np.isfinite(r["r2"]) and r["mape_pct"] >= 0 and 0 <= r["coverage_80_pct"] <= 100
    assert "GroupKFold" in format_report(report)


def test_recommendation_searches_settable_parameters(corpus):
    out, _ = corpus
    rec = recommend([str(out)], "mpiio-shared-coll")
    assert rec["best"] and rec["best"][0]["predicted_mib_s"] > 0
    assert "stripe_count" in rec["not_learnable_inputs"]  # plain directories: no layout in the corpus
    assert "transfer_size" in rec["searched_within_training_range"]
