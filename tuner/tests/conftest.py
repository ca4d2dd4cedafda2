import glob
import os
import shutil
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


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS_FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "corpus-quick")


def surge_bin() -> str:
    """The surge binary the corpus tests run: $SURGE_BIN, else this checkout's build (release, then debug),
    else `surge` on PATH."""
    built = [os.path.join(REPO, "target", kind, "surge") for kind in ("release", "debug")]
    found = os.environ.get("SURGE_BIN") or next((b for b in built if os.access(b, os.X_OK)), shutil.which("surge"))
    if not found:
        pytest.fail("surge is required: `cargo build -p surge-cli -p surged -p surge-preload`, or set SURGE_BIN")
    return found
