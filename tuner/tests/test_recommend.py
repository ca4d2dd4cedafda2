"""The recommender says it does not know when its model misses an application's measured throughput."""

import numpy as np
import pandas as pd

from surge_tune.ml.dataset import EXTENDED_INPUTS
from surge_tune.ml.recommend import recommend


def _table(tmp_path):
    """Apps a and b run the same settings; b's single run was measured 100x faster than the model can know."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):
        app = "b" if i == 0 else "a"
        rows.append(
            {
                "app": app,
                "start_time": float(i),
                "num_hosts": 1,
                "nprocs": [1, 2, 4][i % 3],
                "stripe_count": 1,
                "stripe_size": 1 << 20,
                "transfer_size": [4096, 1 << 20][i % 2],
                "file_per_process": True,
                "collective": False,
                "interface": "posix",
                "bytes_read": 0,
                "bytes_written": 64 << 20,
                "throughput_mib_s": (100.0 if i % 2 else 20.0) * rng.uniform(0.9, 1.1) * (100 if app == "b" else 1),
            }
        )
    df = pd.DataFrame(rows)
    assert set(EXTENDED_INPUTS) - {"mpiio_interface"} <= set(df.columns)
    df.to_parquet(tmp_path / "jobs.parquet")
    return str(tmp_path)


def test_a_model_far_from_the_measured_throughput_gives_no_gain(tmp_path):
    table = _table(tmp_path)
    known = recommend([table], "a")
    assert known["trusted"] and known["gain_vs_current"] is not None
    unknown = recommend([table], "b")
    assert not unknown["trusted"] and unknown["gain_vs_current"] is None
    assert unknown["verdict"].startswith("unknown:") and "off by more than 2x" in unknown["verdict"]
