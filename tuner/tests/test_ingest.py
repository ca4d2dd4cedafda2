import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import SHARED_LOGS, example_logs, needs_public_logs, public_logs

from surge_tune.errors import TuneError
from surge_tune.features import FILE_COLUMNS, JOB_COLUMNS, summarize
from surge_tune.ingest import read_job
from surge_tune.ingest.batch import ingest
from surge_tune.ingest.isolate import imap_isolated

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "ckpt_fpp.jsonl")


@needs_public_logs
def test_every_public_log_parses_or_is_reported_with_a_reason():
    logs = public_logs() + example_logs()
    assert len(logs) >= 80, f"expected the public logs under {SHARED_LOGS}"
    outcomes = list(imap_isolated(lambda p: summarize(read_job(p)).row, logs, workers=2))
    assert {o.item for o in outcomes} == set(logs)
    for o in outcomes:
        assert o.ok or o.reason, o.item
    parsed = [o for o in outcomes if o.ok]
    assert len(parsed) == len(logs), [(o.item, o.reason) for o in outcomes if not o.ok]
    versions = {o.value["format_version"] for o in parsed}
    assert {"3.0.0", "3.1.8", "3.2.1", "3.4.7", "3.5.0"} <= versions


@needs_public_logs
def test_formats_3_0_to_3_5_give_the_same_counters():
    """The release logs run the same program: bytes and process counts must agree across versions."""
    rows = [summarize(read_job(p)).row for p in public_logs() if "/release_logs/" in p]
    assert len(rows) >= 30
    assert {r["nprocs"] for r in rows} == {4}
    # 64 MiB of data on every version, plus a few bytes of stdout that only later versions record
    assert all(0 <= r["bytes_written"] - (64 << 20) < 4096 for r in rows)


@needs_public_logs
def test_lustre_components_dxt_and_partial_flags():
    badost = next(p for p in example_logs() if p.endswith("sample-badost.darshan"))
    s = summarize(read_job(badost))
    assert s.row["stripe_count"] == 1 and s.row["num_osts"] > 1  # per-file count 1, many OSTs in the job
    dxt = summarize(read_job(os.path.join(SHARED_LOGS, "mpi_io_test_with_dxt", _first_darshan("mpi_io_test_with_dxt"))))
    assert dxt.row["has_dxt"] and len(dxt.job.dxt) > 0
    partial = summarize(read_job(os.path.join(SHARED_LOGS, "partial_data_stdio", "partial_data_stdio.darshan")))
    assert partial.row["partial"]


def _first_darshan(folder):
    return next(n for n in sorted(os.listdir(os.path.join(SHARED_LOGS, folder))) if n.endswith(".darshan"))


def test_surge_profile_fixture_reads_like_a_darshan_job():
    s = summarize(read_job(FIXTURE))
    r = s.row
    assert r["source"] == "surge-profile" and r["app"] == "app" and r["nprocs"] == 2
    assert r["bytes_written"] == 2 * 67108864 and r["posix_writes"] == 128
    assert r["file_per_process"] and r["stripe_count"] == 2 and r["stripe_size"] == 1 << 20
    assert r["io_time"] == pytest.approx(1.11)
    assert r["throughput_mib_s"] == pytest.approx(128 / 1.11)
    assert list(s.files.columns) == FILE_COLUMNS and set(r) == set(JOB_COLUMNS)


def test_malformed_profile_line_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    lines = Path(FIXTURE).read_text().splitlines()
    bad.write_text(lines[0] + "\n{not json\n")
    with pytest.raises(TuneError, match=r"bad.jsonl:2: malformed profile line"):
        read_job(str(bad))
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"schema": "surge-profile/1"}) + "\n")
    with pytest.raises(TuneError, match="lacks"):
        read_job(str(missing))


@needs_public_logs
def test_truncated_log_is_reported_and_the_batch_continues(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    good = [p for p in public_logs() if "/release_logs/" in p][:6]
    for p in good:
        shutil.copy(p, corpus)
    source = os.path.join(SHARED_LOGS, "mpi_io_test_with_dxt", _first_darshan("mpi_io_test_with_dxt"))
    data = Path(source).read_bytes()
    # Two cuts: one that makes libdarshan-util abort() in some versions, one it reports as an error.
    (corpus / "cut_early.darshan").write_bytes(data[:2000])
    (corpus / "cut_late.darshan").write_bytes(data[: len(data) // 2])
    (corpus / "garbage.darshan").write_bytes(b"\x00" * 100)
    shutil.copy(FIXTURE, corpus / "profile.jsonl")
    stats = ingest([str(corpus)], str(tmp_path / "out"), workers=2, row_group_jobs=2, progress=False)
    skipped = {os.path.basename(e["path"]): e["reason"] for e in stats.errors}
    assert set(skipped) == {"cut_early.darshan", "cut_late.darshan", "garbage.darshan"}
    assert all(skipped.values())
    assert stats.jobs == len(good) + 1
    jobs = pq.read_table(tmp_path / "out" / "jobs.parquet")
    assert jobs.num_rows == stats.jobs and jobs.column_names == JOB_COLUMNS
    assert pq.ParquetFile(tmp_path / "out" / "jobs.parquet").num_row_groups >= 3  # streamed, not one blob
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert len(errors) == 3


def test_a_reader_crash_is_contained():
    def crash_on_two(x):
        if x == 2:
            os.abort()
        return x * 10

    outcomes = {o.item: o for o in imap_isolated(crash_on_two, [1, 2, 3, 4], workers=2)}
    assert outcomes[2].ok is False and "SIGABRT" in outcomes[2].reason
    assert [outcomes[i].value for i in (1, 3, 4)] == [10, 30, 40]


def test_cli_reports_bad_inputs_and_exits_nonzero(tmp_path):
    def run(*a):
        return subprocess.run([sys.executable, "-m", "surge_tune", *a], capture_output=True, text=True)

    p = run("analyze", str(tmp_path / "nope.darshan"))
    assert p.returncode != 0 and "nope.darshan: no such file" in p.stderr
    notlog = tmp_path / "x.darshan"
    notlog.write_text("hello")
    p = run("analyze", str(notlog), FIXTURE)
    assert p.returncode != 0 and "neither a Darshan log nor a Surge profile" in p.stderr
    assert "== " + FIXTURE in p.stdout  # the good input is still analyzed
    p = run("ingest", str(tmp_path / "missing_dir"), "--out", str(tmp_path / "o"))
    assert p.returncode != 0 and "no such file" in p.stderr
