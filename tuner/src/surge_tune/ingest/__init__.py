"""Read any supported input (Darshan log or Surge profile) into a Job."""

from __future__ import annotations

import struct

from surge_tune.errors import TuneError
from surge_tune.ingest.job import Job

# A Darshan 3.x log starts with its version string ("3.41") in 8 bytes, then DARSHAN_MAGIC_NR as an int64
# in the writer's byte order (ppc64 logs are big-endian).
DARSHAN_MAGIC_NR = 6567223
HEADER_BYTES = 16


def is_darshan_header(head: bytes) -> bool:
    if len(head) < HEADER_BYTES or not head[:1].isdigit():
        return False
    return DARSHAN_MAGIC_NR in (struct.unpack("<q", head[8:16])[0], struct.unpack(">q", head[8:16])[0])


def read_job(path: str, with_dxt: bool = True, job: str | None = None) -> Job:
    """Dispatch on content, not on the file name: a profile may be called anything. `job` picks one job
    of a Surge profile that several runs appended to (a Darshan log holds one job)."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
    except FileNotFoundError:
        raise TuneError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TuneError(f"{path}: is a directory (pass log files, or use 'ingest' for a corpus)") from None
    except OSError as e:
        raise TuneError(f"{path}: cannot read: {e.strerror}") from None
    if is_darshan_header(head):
        from surge_tune.ingest.darshan_log import read_darshan_log

        return read_darshan_log(path, with_dxt=with_dxt)
    if head.lstrip().startswith(b"{"):
        from surge_tune.ingest.surge_profile import read_surge_profile

        return read_surge_profile(path, job)
    raise TuneError(f"{path}: neither a Darshan log nor a Surge profile (surge-profile/1 JSON Lines)")
