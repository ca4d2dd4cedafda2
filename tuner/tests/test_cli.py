import subprocess
import sys

import pytest

COMMANDS = [
    [],
    ["analyze"],
    ["ingest"],
    ["schema"],
    ["record"],
    ["history"],
    ["layout"],
    ["corpus"],
    ["corpus", "generate"],
    ["ml"],
    ["ml", "evaluate"],
    ["ml", "recommend"],
    ["bench"],
]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "surge_tune", *args], capture_output=True, text=True)


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_help_everywhere(cmd):
    p = _cli(*cmd, "--help")
    assert p.returncode == 0 and "usage:" in p.stdout


def test_schema_lists_every_column():
    from surge_tune.features import FILE_COLUMNS, JOB_COLUMNS

    out = _cli("schema").stdout
    assert all(f"`{c}`" in out for c in JOB_COLUMNS + FILE_COLUMNS)


def test_bad_arguments_are_clear(tmp_path):
    p = _cli("analyze", "--set", "nonsense=1", "x")
    assert p.returncode != 0 and "unknown threshold" in p.stderr
    p = _cli("--db", str(tmp_path / "h.db"), "history", "ghost")
    assert p.returncode != 0 and "no runs recorded for application 'ghost'" in p.stderr
    p = _cli("--db", str(tmp_path / "h.db"), "layout", "ghost", "--new")
    assert p.returncode != 0 and "--new needs --nprocs" in p.stderr
    p = _cli("ml", "evaluate", str(tmp_path))
    assert p.returncode != 0 and "no jobs.parquet" in p.stderr
    p = _cli("corpus", "generate", "--out", str(tmp_path / "c"), "--tools", "ior")
    assert p.returncode != 0 and "unknown tool" in p.stderr


def test_analyze_of_a_missing_file_exits_2_with_one_error_line(tmp_path):
    p = _cli("analyze", str(tmp_path / "nope.darshan"))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [f"error: {tmp_path / 'nope.darshan'}: no such file"]
