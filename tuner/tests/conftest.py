import glob
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests import the profile builder

from surge_tune.public_logs import missing_reason, public_logs_dir

SHARED_LOGS = public_logs_dir()
# Tests on the public logs run where the logs are ($SURGE_DARSHAN_LOGS, or
# ../shared/darshan-logs beside the repository); elsewhere pytest reports them
# as skipped with the reason (`pytest -rs` lists it).
needs_public_logs = pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")


def public_logs() -> list[str]:
    return sorted(glob.glob(os.path.join(SHARED_LOGS, "**", "*.darshan"), recursive=True))


def example_logs() -> list[str]:
    import darshan

    return sorted(glob.glob(os.path.join(os.path.dirname(darshan.__file__), "examples", "example_logs", "*.darshan")))


@pytest.fixture
def release_log():
    return os.path.join(SHARED_LOGS, "release_logs", "mpi-io-test-x86_64-3.5.0.darshan")
