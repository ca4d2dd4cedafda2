"""`surge tune autotune propose|record`, the tuner's side of `surge run --autotune`: one JSON line each."""

import json
import os
import subprocess
import sys

from profiles import posix_file, process, write_profile

from surge_tune.dcaio.loads import parse_loads

MIB = 1 << 20


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "surge_tune", *args], capture_output=True, text=True, env=os.environ)


def _shared_file_run(path, stripe_count, write_secs, writers=4):
    procs = [
        process(
            r,
            writers,
            [posix_file("/surge/out/shared", writes=64, xfer=MIB, write_time=write_secs, stripe_count=stripe_count)],
            exe="/apps/writer",
        )
        for r in range(writers)
    ]
    return write_profile(path, procs)


def _free_targets(tmp_path, n=4):
    loads = tmp_path / "loads.toml"
    loads.write_text("".join(f"[[target]]\nindex = {i}\nload = 0.0\nfree_bytes = 100\n" for i in range(n)))
    return str(loads)


def _json(proc):
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout  # surge run reads exactly one line
    return json.loads(lines[0])


def test_a_first_run_has_no_history_and_keeps_its_layout(tmp_path):
    db = str(tmp_path / "h.db")
    out = _json(_cli("--db", db, "autotune", "propose", "writer", "--loads", _free_targets(tmp_path)))
    assert out["status"] == "no-history"
    assert "no history yet for writer: layout unchanged" in out["message"]
    assert "stripe_count" not in out


def test_record_adds_the_profile_as_a_run_of_the_named_app(tmp_path):
    db = str(tmp_path / "h.db")
    out = _json(_cli("--db", db, "autotune", "record", "ckpt-job", _shared_file_run(tmp_path / "p.jsonl", 1, 2.0)))
    assert (out["status"], out["app"], out["direction"], out["runs"]) == ("recorded", "ckpt-job", "write", 1)
    assert (out["stripe_count"], out["stripe_size"]) == (1, MIB)
    assert abs(out["throughput_mib_s"] - 256 / 2.01) < 0.01  # 4 x 64 MiB over the slowest process's 2 s + 0.01 s meta
    history = json.loads(_cli("--db", db, "history", "ckpt-job", "--json").stdout)
    assert [(r["app"], r["stripe_count"], r["shared_file"]) for r in history] == [("ckpt-job", 1, True)]


def test_after_one_recorded_run_a_shared_file_gets_one_stripe_per_writer(tmp_path):
    db = str(tmp_path / "h.db")
    _json(_cli("--db", db, "autotune", "record", "writer", _shared_file_run(tmp_path / "p.jsonl", 1, 2.0)))
    out = _json(_cli("--db", db, "autotune", "propose", "writer", "--loads", _free_targets(tmp_path, 8)))
    assert (out["status"], out["run_number"], out["phase"]) == ("proposed", 2, "rule-based+non-overlapping")
    assert (out["stripe_count"], out["stripe_size"], out["start_target"]) == (4, MIB, 0)
    assert "one stripe per I/O process" in out["why"] and "stripe count 4" in out["message"]


def test_the_third_run_follows_the_throughput_of_the_first_two(tmp_path):
    db = str(tmp_path / "h.db")
    _json(_cli("--db", db, "autotune", "record", "writer", _shared_file_run(tmp_path / "a.jsonl", 1, 2.0)))
    _json(_cli("--db", db, "autotune", "record", "writer", _shared_file_run(tmp_path / "b.jsonl", 4, 0.5)))
    out = _json(_cli("--db", db, "autotune", "propose", "writer", "--loads", _free_targets(tmp_path, 8)))
    assert (out["run_number"], out["stripe_count"]) == (3, 8)  # four stripes were faster than one: double
    assert out["phase"].startswith("heuristic-count")


def test_a_history_that_is_not_a_database_is_an_error(tmp_path):
    bad = tmp_path / "h.db"
    bad.write_text("this is not SQLite, but it is long enough to have a header of its own ..........\n" * 4)
    p = _cli("--db", str(bad), "autotune", "propose", "writer", "--loads", _free_targets(tmp_path))
    assert p.returncode == 2 and p.stdout == ""
    assert "not a usable history database" in p.stderr


def test_a_profile_without_data_is_not_recorded(tmp_path):
    db = str(tmp_path / "h.db")
    idle = write_profile(tmp_path / "idle.jsonl", [process(0, 1, [posix_file("/surge/out/x", write_time=0.0)])])
    p = _cli("--db", db, "autotune", "record", "writer", idle)
    assert p.returncode == 2 and "moved no data" in p.stderr
    assert _json(_cli("--db", db, "autotune", "propose", "writer", "--loads", _free_targets(tmp_path)))[
        "status"
    ] == "no-history"


def test_a_missing_profile_is_an_error(tmp_path):
    p = _cli("--db", str(tmp_path / "h.db"), "autotune", "record", "writer", str(tmp_path / "none.jsonl"))
    assert p.returncode == 2 and "no such file" in p.stderr


def test_queued_requests_in_surge_status_make_a_daemon_busy():
    text = """cluster_id = "c"\npfs = "/pfs"\n
[[daemon]]\nindex = 0\nstate = "up"\nconnections = 5\nrequests = 900\ncapacity = 100\n
[[daemon.job]]\njob = 7\nwaiting = 0\nin_service = 0\nrequests = 900\nserved_bytes = 1\n
[[daemon]]\nindex = 1\nstate = "up"\nconnections = 1\nrequests = 40\ncapacity = 100\n
[[daemon.job]]\njob = 8\nwaiting = 3\nin_service = 1\nrequests = 40\nserved_bytes = 1\n"""
    t = parse_loads(text, "status")
    # Daemon 0 has many connections (a mount) but nothing queued: free; daemon 1 has 4 requests queued.
    assert [(x.load, x.busy) for x in t] == [(0.0, False), (4.0, True)]
