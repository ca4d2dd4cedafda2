"""Each cause is diagnosed on a job that has it, and a clean job raises no alarm."""

import json
import os
import subprocess
import sys

import pytest
from conftest import SHARED_LOGS, example_logs, needs_public_logs
from profiles import posix_file, process, write_profile

from surge_tune.analyze import analyze
from surge_tune.analyze.base import Thresholds
from surge_tune.features import summarize
from surge_tune.ingest import read_job

MIB = 1 << 20


def codes(path, **overrides):
    t = Thresholds(**overrides)
    return {f.code for f in analyze(summarize(read_job(str(path))), t).findings}


def clean_fpp(n=4):
    return [
        process(r, n, [posix_file(f"/surge/out/rank{r}", writes=2000, xfer=4 * MIB, write_time=1.0)]) for r in range(n)
    ]


def shared(n, path="/surge/ckpt/shared", **kw):
    return [process(r, n, [posix_file(path, **kw)]) for r in range(n)]


CASES = {
    "small-transfers": lambda: [process(0, 1, [posix_file("/d/log.bin", writes=100_000, xfer=4096, write_time=5.0)])],
    "random-access": lambda: [process(0, 1, [posix_file("/d/table", reads=5000, xfer=MIB, seq_pct=10, read_time=4.0)])],
    "metadata-bound": lambda: [
        process(0, 1, [posix_file("/d/many", writes=10, opens=20_000, stats=20_000, meta_time=8.0, write_time=2.0)])
    ],
    # rank 3 moves 4x the bytes of the others, and takes 4x as long
    "load-imbalance": lambda: [
        process(
            r,
            4,
            [posix_file(f"/d/r{r}", writes=8000 if r == 3 else 2000, xfer=4 * MIB, write_time=4.0 if r == 3 else 1.0)],
        )
        for r in range(4)
    ],
    # equal bytes, rank 3 four times slower: a slow target or node, not the decomposition
    "straggler": lambda: [
        process(r, 4, [posix_file(f"/d/r{r}", writes=2000, xfer=4 * MIB, write_time=4.0 if r == 3 else 1.0)])
        for r in range(4)
    ],
    "shared-file-layout": lambda: shared(8, writes=1000, xfer=4 * MIB, write_time=2.0, stripe_count=1),
    "stdio-bulk": lambda: [
        process(
            0,
            1,
            [
                {
                    "path": "/d/out.txt",
                    "counters": {"STDIO_OPENS": 1, "STDIO_WRITES": 100_000, "STDIO_BYTES_WRITTEN": 400 * MIB},
                    "fcounters": {"STDIO_F_WRITE_TIME": 3.0, "STDIO_F_META_TIME": 0.01},
                }
            ],
        )
    ],
    "independent-io": lambda: shared(
        8,
        writes=2000,
        xfer=16 << 10,
        write_time=2.0,
        stripe_count=8,
        extra={"MPIIO_INDEP_WRITES": 2000, "MPIIO_BYTES_WRITTEN": 2000 * (16 << 10)},
    ),
    "fpp-metadata-storm": lambda: [
        process(r, 512, [posix_file(f"/d/ckpt/rank{r}", writes=4, opens=1, stats=2, meta_time=0.5, write_time=0.2)])
        for r in range(512)
    ],
}


@pytest.mark.parametrize("cause", sorted(CASES))
def test_cause_is_diagnosed(tmp_path, cause):
    path = write_profile(tmp_path / f"{cause}.jsonl", CASES[cause]())
    assert cause in codes(path)


def test_clean_jobs_raise_no_alarm(tmp_path):
    assert codes(write_profile(tmp_path / "fpp.jsonl", clean_fpp())) == set()
    wide = shared(
        4,
        writes=500,
        xfer=4 * MIB,
        write_time=1.0,
        stripe_count=4,
        extra={"MPIIO_COLL_WRITES": 500, "MPIIO_BYTES_WRITTEN": 500 * 4 * MIB},
    )
    assert codes(write_profile(tmp_path / "shared.jsonl", wide)) == set()


def test_layout_fix_is_concrete(tmp_path):
    path = write_profile(tmp_path / "s.jsonl", CASES["shared-file-layout"]())
    finding = next(f for f in analyze(summarize(read_job(path))).findings if f.code == "shared-file-layout")
    commands = [x.command for x in finding.fixes]
    assert "surge setstripe -c 8 -S 1M /surge/ckpt" in commands
    assert "lfs setstripe -c 8 -S 1M /surge/ckpt" in commands
    assert any("striping_factor=8" in c for c in commands)
    assert finding.evidence["writers"] == 8 and finding.evidence["stripe_count"] == 1
    assert 0 < finding.gain_fraction <= 0.95
    # ... and the storage-target cap bounds the recommendation
    capped = analyze(summarize(read_job(path)), Thresholds(max_targets=4)).findings
    assert "surge setstripe -c 4 -S 1M /surge/ckpt" in [x.command for f in capped for x in f.fixes]


@needs_public_logs
def test_real_logs_are_diagnosed():
    assert "stdio-bulk" in codes(os.path.join(SHARED_LOGS, "partial_data_stdio", "partial_data_stdio.darshan"))
    badost = next(p for p in example_logs() if p.endswith("sample-badost.darshan"))
    assert "straggler" in codes(badost)  # a slow OST: equal bytes, one rank 778 s against 34 s on average
    macsio = next(p for p in example_logs() if "macsio" in p)
    # 7795 independent writes of ~200 bytes are 2% of its 90 MiB: by bytes, not an independent-I/O problem
    assert "independent-io" not in codes(macsio)
    release = os.path.join(SHARED_LOGS, "release_logs", "mpi-io-test-x86_64-3.4.0.darshan")
    assert codes(release) == set()  # 4 ranks, 16 MiB collective writes, no layout recorded: nothing to fix


def test_cli_text_json_and_html(tmp_path):
    path = write_profile(tmp_path / "small.jsonl", CASES["small-transfers"]())
    html = tmp_path / "r.html"
    p = subprocess.run(
        [sys.executable, "-m", "surge_tune", "analyze", "--json", "--html", str(html), path],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    f = doc["jobs"][0]["findings"][0]
    assert f["code"] == "small-transfers" and f["evidence"]["POSIX_SIZE_WRITE_1K_10K"] == 100_000
    text = html.read_text()
    assert text.count("data:image/png;base64,") == 3 and "small-transfers" in text
    assert "<link" not in text and 'src="http' not in text and "<script" not in text  # self-contained
    p = subprocess.run([sys.executable, "-m", "surge_tune", "analyze", path], capture_output=True, text=True)
    assert "Small or unaligned transfers" in p.stdout and "surge run -- mpirun" in p.stdout


def test_reports_show_the_one_job_field_list_all_of_them_columns():
    from surge_tune.features import JOB_IDENTITY, JOB_OVERVIEW, JOB_SCHEMA

    columns = {name for name, _, _ in JOB_SCHEMA}
    assert set(JOB_OVERVIEW) | set(JOB_IDENTITY) <= columns
    assert not set(JOB_OVERVIEW) & set(JOB_IDENTITY)
