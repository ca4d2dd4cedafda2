import glob
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests import the profile builder

SHARED_LOGS = os.environ.get("SURGE_DARSHAN_LOGS") or os.path.normpath(
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "darshan-logs")
)


def public_logs() -> list[str]:
    return sorted(glob.glob(os.path.join(SHARED_LOGS, "**", "*.darshan"), recursive=True))


def example_logs() -> list[str]:
    import darshan

    return sorted(glob.glob(os.path.join(os.path.dirname(darshan.__file__), "examples", "example_logs", "*.darshan")))


@pytest.fixture
def release_log():
    return os.path.join(SHARED_LOGS, "release_logs", "mpi-io-test-x86_64-3.5.0.darshan")
