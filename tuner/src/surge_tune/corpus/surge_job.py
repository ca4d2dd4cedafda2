"""Run one corpus workload through Surge with a chosen layout, and read back the layout its files got.

Each run is its own job: `surge run --daemons N` starts a job-scoped cluster on private directories (a
buffer under /dev/shm, a mount point and a PFS directory under the run's scratch directory, and a cluster
file that does not exist, so a cluster someone else runs is never joined). Inside the job a shell sets the
data directory's default layout (`surge mkdir -p`, `surge setstripe -c COUNT -S SIZE`), runs the workload
with its stdout in a local file, then asks `surge getstripe -c` and `-S` for the files the workload wrote:
the layout a profile records is the one Surge gave the files, not the one asked for. The job's files stay
in the buffer (`--no-stage-out`), which is removed with the run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from surge_tune.dcaio.apply import surge_binary
from surge_tune.errors import TuneError

RUN_TIMEOUT_S = 600


@dataclass(frozen=True)
class Layout:
    stripe_count: int
    stripe_size: int

    def tag(self) -> str:
        return f"c{self.stripe_count}-S{self.stripe_size >> 10}K"


@dataclass(frozen=True)
class JobDirs:
    """Where one job's cluster lives; `data` is the directory the workload writes in, under the mount."""

    scratch: str
    tag: str
    shm_root: str

    @property
    def mount(self) -> str:
        return os.path.join(self.scratch, self.tag, "mnt")

    @property
    def data(self) -> str:
        return os.path.join(self.mount, "data")

    @property
    def stdout_file(self) -> str:
        return os.path.join(self.scratch, self.tag, "workload.out")

    @property
    def buffer(self) -> str:
        return os.path.join(self.shm_root, self.tag)

    def create(self) -> None:
        os.makedirs(self.mount, exist_ok=True)
        os.makedirs(os.path.join(self.scratch, self.tag, "pfs"), exist_ok=True)

    def remove(self) -> None:
        shutil.rmtree(os.path.join(self.scratch, self.tag), ignore_errors=True)
        shutil.rmtree(self.buffer, ignore_errors=True)


def run_in_surge(
    dirs: JobDirs, workload: list[str], layout: Layout, files: list[str], daemons: int, env: dict | None = None
) -> tuple[str, dict[str, Layout]]:
    """Run `workload` (which writes `files`, paths under dirs.data) in a job-scoped Surge cluster whose data
    directory has `layout`; return the workload's stdout and the layout Surge reports for each file."""
    surge = surge_binary()
    q = shlex.quote
    paths = " ".join(q(f) for f in files)
    script = " && ".join(
        [
            f"{q(surge)} mkdir -p {q(dirs.data)}",
            f"{q(surge)} setstripe -c {layout.stripe_count} -S {layout.stripe_size} {q(dirs.data)}",
            f"{shlex.join(workload)} > {q(dirs.stdout_file)}",
            f"{q(surge)} getstripe -c {paths}",
            f"{q(surge)} getstripe -S {paths}",
        ]
    )
    cmd = [
        surge,
        "run",
        "--daemons",
        str(daemons),
        "--no-stage-out",
        "--buffer",
        dirs.buffer,
        "--pfs",
        os.path.join(dirs.scratch, dirs.tag, "pfs"),
        "--mount",
        dirs.mount,
        "--profile",
        os.path.join(dirs.scratch, dirs.tag, "surge-profile.jsonl"),
        "-q",
        "--",
        "sh",
        "-c",
        script,
    ]
    job_env = {**os.environ, **(env or {}), "SURGE_CLUSTER": os.path.join(dirs.scratch, dirs.tag, "no-cluster.toml")}
    job_env.pop("SURGE_MOUNT", None)  # --mount says where this job's Surge is
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=job_env)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise TuneError(f"surge run failed ({proc.returncode}): {' | '.join(tail)[:400]}")
    with open(dirs.stdout_file) as f:
        workload_out = f.read()
    return workload_out, parse_getstripe(proc.stdout, files)


def parse_getstripe(stdout: str, files: list[str]) -> dict[str, Layout]:
    """`surge getstripe -c PATHS` then `-S PATHS`: the values alone for one path, `PATH: value` for several."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if len(lines) != 2 * len(files):
        raise TuneError(f"surge getstripe: expected {2 * len(files)} lines for {len(files)} files, got {stdout!r}")

    def values(block: list[str]) -> list[int]:
        try:
            return [int(line.rsplit(":", 1)[-1] if len(files) > 1 else line) for line in block]
        except ValueError:
            raise TuneError(f"surge getstripe: unexpected output {block!r}") from None

    counts, sizes = values(lines[: len(files)]), values(lines[len(files) :])
    return {f: Layout(c, s) for f, c, s in zip(files, counts, sizes, strict=True)}
