"""Write a labelled suite: real runs of pathologies.c through `surge run`, plus the documented public logs.

Each workload case runs `surge run --no-fuse -- sh -c 'mkdir DIR [&& surge setstripe ...] && mpirun ...'`
on a job-scoped cluster of its own (a fresh buffer in the work directory, removed after the run), so the
profile `surge run` writes is the job's whole I/O: the MPI ranks and the shell that made the directory.
The suite directory gets profiles/<case>.jsonl and labels.toml; public logs are labelled in place.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from surge_tune.accuracy.labels import Case, write_labels
from surge_tune.corpus.generate import MPI_ENV
from surge_tune.errors import TuneError
from surge_tune.public_logs import missing_reason, public_logs_dir

SOURCE = os.path.join(os.path.dirname(__file__), "pathologies.c")


@dataclass(frozen=True)
class Workload:
    name: str
    flag: str  # pathologies.c's flag ("" = the clean file-per-process run)
    cause: str
    stripes: int = 0  # stripe count set on the case's directory; 0 = the cluster's default, -1 = one per rank
    # stripe size set on it (0 = default): the transfer size of a case whose pathology is not alignment,
    # so that its requests start on stripe boundaries and only its own pathology shows
    stripe_size: int = 0


WORKLOADS = (
    Workload("clean-fpp", "", "none"),
    Workload("clean-shared", "--shared", "none", stripes=-1),
    Workload("clean-collective", "--interleaved", "none"),
    Workload("tiny", "--tiny", "small-transfers"),
    Workload("fsync", "--fsync", "fsync-per-write", stripe_size=128 << 10),
    Workload("one-stripe", "--shared", "narrow-shared-stripe", stripes=1),
    Workload("one-rank", "--one-rank", "rank-imbalance"),
    Workload("random", "--random", "random-access", stripe_size=128 << 10),
    Workload("many-files", "--many-files", "metadata-storm"),
    Workload("independent", "--independent", "independent-io"),
    Workload("unaligned", "--unaligned", "unaligned-access"),
)

# Public logs whose behaviour is documented (their READMEs, and the tuner's tests on them).
PUBLIC = (
    # one stripe, so collective buffering picks one aggregator that does all POSIX I/O (test_causes.py)
    ("skew_io/skew-app.darshan", "narrow-shared-stripe"),
    # the mpi-io-test program logged by each Darshan release: 4 ranks, I/O in tens of milliseconds
    ("release_logs/mpi-io-test-x86_64-3.*.darshan", "none"),
    # h5py without MPI-IO, 10 ranks writing 1 to 100 bytes each (README.md of the folder)
    ("hdf5_diagonal_write_only/hdf5_diagonal_write_*.darshan", "none"),
)


def find_surge(surge: str | None) -> str:
    """--surge, else $SURGE_BIN (set by `surge tune`), else `surge` on PATH."""
    found = surge or os.environ.get("SURGE_BIN") or shutil.which("surge")
    if not found or not os.access(found, os.X_OK):
        raise TuneError(
            "no surge binary to run the workloads: pass --surge PATH, run as `surge tune ...`, or put surge on PATH"
        )
    return found


def compile_workload(out_dir: str) -> str:
    mpicc = shutil.which("mpicc")
    if not mpicc:
        raise TuneError("mpicc is not on PATH: the accuracy suite compiles pathologies.c with it")
    binary = os.path.join(out_dir, "pathologies")
    p = subprocess.run([mpicc, "-O2", "-o", binary, SOURCE], capture_output=True, text=True)
    if p.returncode != 0:
        raise TuneError(f"mpicc failed on {SOURCE}:\n{p.stderr}")
    return binary


def _run_case(w: Workload, name: str, surge: str, binary: str, work: str, profile: str, nprocs: int, mib: int):
    mount = os.path.join(work, "mnt")
    case_dir = os.path.join(mount, name)
    steps = [f"mkdir {case_dir}"]
    if w.stripes or w.stripe_size:
        count = nprocs if w.stripes < 0 else w.stripes
        steps.append(f"{surge} setstripe -c {count} -S {w.stripe_size or 1 << 20} /{name}")
    steps.append(f"mpirun -np {nprocs} --oversubscribe {binary} {case_dir} --MIB {mib} {w.flag}".rstrip())
    buffer = os.path.join(work, f"buffer-{name}")
    cmd = [
        surge,
        "run",
        "--quiet",
        "--no-fuse",
        "--no-stage-out",
        "--daemons",
        str(nprocs),
        "--mount",
        mount,
        "--buffer",
        buffer,
        "--pfs",
        os.path.join(work, "pfs"),
        "--profile",
        profile,
        "--",
        "sh",
        "-c",
        " && ".join(steps),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **MPI_ENV})
    shutil.rmtree(buffer, ignore_errors=True)
    if p.returncode != 0:
        raise TuneError(f"case {name}: `{' '.join(cmd)}` failed ({p.returncode}):\n{p.stderr[-2000:]}")


def public_cases() -> list[Case]:
    reason = missing_reason()
    if reason:
        print(f"surge tune bench accuracy: {reason}; the suite has no public logs", file=sys.stderr)
        return []
    cases = []
    for pattern, cause in PUBLIC:
        for path in sorted(glob.glob(os.path.join(public_logs_dir(), pattern))):
            name = os.path.relpath(path, public_logs_dir()).removesuffix(".darshan")
            cases.append(Case(name, path, cause, "public"))
    return cases


def generate(
    suite: str,
    surge: str | None = None,
    nprocs: int = 4,
    mib: int = 32,
    repeats: int = 2,
    public: bool = True,
    only: tuple[str, ...] = (),
    progress=print,
) -> list[Case]:
    """Run every workload (or those named in `only`) `repeats` times into `suite` and write labels.toml;
    return the cases."""
    if nprocs < 2 or mib < 1 or repeats < 1:
        raise TuneError("the suite needs --nprocs >= 2, --mib >= 1 and --repeats >= 1")
    unknown = set(only) - {w.name for w in WORKLOADS}
    if unknown:
        raise TuneError(
            f"unknown workload(s) {', '.join(sorted(unknown))}; known: {', '.join(w.name for w in WORKLOADS)}"
        )
    workloads = [w for w in WORKLOADS if not only or w.name in only]
    surge = find_surge(surge)
    os.makedirs(os.path.join(suite, "profiles"), exist_ok=True)
    cases = []
    with tempfile.TemporaryDirectory(prefix="surge-accuracy-") as work:
        binary = compile_workload(work)
        for r in range(1, repeats + 1):
            for w in workloads:
                name = f"{w.name}-{r}"
                relative = os.path.join("profiles", f"{name}.jsonl")
                profile = os.path.join(suite, relative)
                for stale in (profile, profile + ".writers"):
                    if os.path.exists(stale):
                        os.remove(stale)  # surge run appends: a rerun must not mix two jobs
                progress(f"running {name} ({w.flag or 'clean'}) through surge run")
                _run_case(w, name, surge, binary, work, profile, nprocs, mib)
                cases.append(Case(name, relative, w.cause, "generated"))
    if public:
        cases += public_cases()
    header = (
        f"Accuracy suite: pathologies.c through `surge run` ({nprocs} ranks, {mib} MiB per rank, {repeats} "
        "repeats) and documented public logs.\nWritten by `surge tune bench accuracy --generate`; causes are "
        "listed in surge_tune/accuracy/causes.py."
    )
    write_labels(suite, cases, header)
    return cases
