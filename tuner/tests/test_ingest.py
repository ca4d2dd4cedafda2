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


def _dxt_posix_version_offset(data: bytes) -> int:
    """Where the header stores the DXT_POSIX module version in the mpi_io_test_with_dxt log (format 3.21:
    16 module maps, then 16 uint32 versions; POSIX=4, MPI-IO=3, STDIO=2, DXT_POSIX=1, DXT_MPIIO=2)."""
    import struct

    for off in range(0, 4096, 4):
        v = struct.unpack_from("<12I", data, off)
        if (v[1], v[2], v[8], v[9], v[10]) == (4, 3, 2, 1, 2):
            return off + 4 * 9
    raise AssertionError("module version table not found")


@needs_public_logs
def test_a_dxt_module_of_a_newer_format_is_skipped_with_a_warning_not_the_whole_log(tmp_path):
    import struct

    original = os.path.join(SHARED_LOGS, "mpi_io_test_with_dxt", _first_darshan("mpi_io_test_with_dxt"))
    data = bytearray(Path(original).read_bytes())
    struct.pack_into("<I", data, _dxt_posix_version_offset(data), 99)  # a DXT_POSIX version from the future
    newer = tmp_path / "newer-dxt.darshan"
    newer.write_bytes(bytes(data))
    job = read_job(str(newer))
    assert any("DXT_POSIX trace skipped" in w and "version" in w for w in job.warnings)
    assert set(job.dxt["module"]) == {"DXT_MPIIO"}  # the other trace is still read
    same = summarize(read_job(original)).row
    row = summarize(job).row
    assert (row["bytes_written"], row["posix_writes"]) == (same["bytes_written"], same["posix_writes"])
    p = subprocess.run([sys.executable, "-m", "surge_tune", "analyze", str(newer)], capture_output=True, text=True)
    assert p.returncode == 0 and "warning:" in p.stderr and "DXT_POSIX trace skipped" in p.stderr


def test_a_profile_is_named_after_its_mpi_program_and_helpers_get_ranks_of_their_own(tmp_path):
    from profiles import posix_file, process, write_profile

    helpers = [
        process(-1, 1, [], exe="sh -c mkdir -p out && mpirun -np 2 ./sim", pid=100),
        process(-1, 1, [posix_file("/d/out/.keep", writes=1, xfer=10)], exe="mkdir -p out", pid=101),
        process(-1, 1, [], exe="mpirun -np 2 ./sim", pid=102),
    ]
    ranks = [
        process(r, 2, [posix_file(f"/d/out/r{r}", writes=10, xfer=1 << 20)], exe="./sim", pid=200 + r) for r in (0, 1)
    ]
    path = write_profile(tmp_path / "job.jsonl", helpers + ranks)
    job = read_job(path)
    assert job.app == "sim" and job.exe == "./sim" and job.nprocs == 2
    ranks_by_path = {row["path"]: row["rank"] for _, row in job.frame("POSIX").iterrows()}
    assert ranks_by_path["/d/out/r0"] == 0 and ranks_by_path["/d/out/r1"] == 1
    assert ranks_by_path["/d/out/.keep"] >= 2  # mkdir's pseudo-rank never collides with an MPI rank


def test_a_profile_two_runs_appended_to_is_refused_whole_and_read_one_job_at_a_time(tmp_path):
    from profiles import posix_file, process, write_profile

    def run(job_id, files):
        return [process(0, 1, [posix_file(f"/d/{job_id}/f{i}", writes=4) for i in range(files)], job_id=job_id)]

    path = write_profile(tmp_path / "reused.jsonl", run("101", 1) + run("102", 3))
    with pytest.raises(TuneError, match=r"holds the profiles of 2 jobs \(101, 102\).*--job ID"):
        read_job(path)
    assert len(read_job(path, job="102").frame("POSIX")) == 3
    assert len(read_job(path, job="101").frame("POSIX")) == 1
    with pytest.raises(TuneError, match=r"no process of job '7' \(the file holds job\(s\) 101, 102\)"):
        read_job(path, job="7")
    p = subprocess.run([sys.executable, "-m", "surge_tune", "analyze", path], capture_output=True, text=True)
    assert p.returncode == 1 and "--job ID" in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "surge_tune", "analyze", "--json", "--job", "102", path], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
