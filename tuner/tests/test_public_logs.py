"""Where the tuner looks for the public Darshan logs: $SURGE_DARSHAN_LOGS, else beside the repository."""

import os

from surge_tune import public_logs


def test_the_variable_names_the_directory_even_when_it_does_not_exist(monkeypatch, tmp_path):
    missing = str(tmp_path / "no-such-dir")
    monkeypatch.setenv("SURGE_DARSHAN_LOGS", missing)
    assert public_logs.public_logs_dir() == missing
    reason = public_logs.missing_reason()
    assert reason is not None and missing in reason and "SURGE_DARSHAN_LOGS" in reason


def test_a_directory_named_by_the_variable_is_found(monkeypatch, tmp_path):
    monkeypatch.setenv("SURGE_DARSHAN_LOGS", str(tmp_path))
    assert public_logs.public_logs_dir() == str(tmp_path)
    assert public_logs.missing_reason() is None


def test_without_the_variable_the_logs_are_looked_for_beside_the_repository(monkeypatch):
    monkeypatch.delenv("SURGE_DARSHAN_LOGS", raising=False)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    expected = os.path.join(os.path.dirname(repo), "shared", "darshan-logs")
    assert public_logs.public_logs_dir() == os.path.normpath(expected)


def test_when_neither_place_exists_the_reason_says_where_it_looked_and_what_to_set(monkeypatch, tmp_path):
    monkeypatch.delenv("SURGE_DARSHAN_LOGS", raising=False)
    monkeypatch.setattr(public_logs, "_BESIDE_REPO", str(tmp_path / "shared" / "darshan-logs"))
    assert public_logs.public_logs_dir() == str(tmp_path / "shared" / "darshan-logs")
    reason = public_logs.missing_reason()
    assert reason is not None and str(tmp_path / "shared" / "darshan-logs") in reason
    assert "set $SURGE_DARSHAN_LOGS" in reason
