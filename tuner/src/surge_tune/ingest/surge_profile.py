"""Read a Surge job profile (JSON Lines, schema "surge-profile/1") into a Job.

One line per process. Counters carry Darshan names, so the module of a counter is its prefix (POSIX_,
MPIIO_, STDIO_, H5F_, H5D_); a writer may add modules without a schema change. Surge's rank -1 means
"not under MPI", while Darshan's rank -1 means "reduced shared record": non-MPI processes therefore get
pseudo-ranks after the MPI ranks (nprocs, nprocs+1, ... in pid order) so the two meanings never mix and
a helper process never shares a rank with an MPI process.

A profile file is appended to, so one reused by several runs holds several jobs (`job_id`). Their
processes are never merged into one job: the reader takes the job asked for, or the only one, and
otherwise stops and names the jobs it holds.

A job launched as `sh -c 'mkdir -p out && mpirun ... app'` records sh, mkdir and mpirun as well as the
ranks of app: the job is named after the MPI program (DCA-IO's application identity), and only when no
process ran under MPI after its first process.
"""

from __future__ import annotations

import json
import zlib

import pandas as pd

from surge_tune.errors import TuneError
from surge_tune.ingest.job import Job

SCHEMA = "surge-profile/1"
_PREFIX_TO_MODULE = {"POSIX_": "POSIX", "MPIIO_": "MPI-IO", "STDIO_": "STDIO", "H5F_": "H5F", "H5D_": "H5D"}
_REQUIRED = ("schema", "job_id", "exe", "pid", "rank", "nprocs", "job_start", "start", "end", "files")


def _module_of(counter: str) -> str | None:
    for prefix, module in _PREFIX_TO_MODULE.items():
        if counter.startswith(prefix):
            return module
    return None


def record_id(path: str) -> int:
    """Stable 63-bit id for a path (Darshan hashes names too; only equality matters here)."""
    return zlib.crc32(path.encode()) | (zlib.adler32(path.encode()) << 31)


def _parse_lines(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise TuneError(f"{path}: cannot read: {e.strerror}") from None
    procs = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise TuneError(f"{path}:{lineno}: malformed profile line: {e.msg}") from None
        if not isinstance(rec, dict):
            raise TuneError(f"{path}:{lineno}: malformed profile line: not a JSON object")
        missing = [k for k in _REQUIRED if k not in rec]
        if missing:
            raise TuneError(f"{path}:{lineno}: profile line lacks {', '.join(missing)}")
        if rec["schema"] != SCHEMA:
            raise TuneError(f"{path}:{lineno}: unsupported schema {rec['schema']!r} (expected {SCHEMA!r})")
        if not isinstance(rec["files"], list):
            raise TuneError(f"{path}:{lineno}: 'files' must be a list")
        rec["_line"] = lineno
        procs.append(rec)
    if not procs:
        raise TuneError(f"{path}: empty profile")
    return procs


def _assign_ranks(procs: list[dict]) -> int:
    """Give non-MPI processes ranks after the MPI ones; return the job's process count: the MPI world size
    when an MPI program ran (launchers and shell helpers do not make it wider), else the processes."""
    mpi = [p for p in procs if int(p["rank"]) >= 0]
    world = max([int(p["nprocs"]) for p in mpi] + [int(p["rank"]) + 1 for p in mpi], default=0)
    non_mpi = sorted((p for p in procs if int(p["rank"]) < 0), key=lambda p: int(p["pid"]))
    for offset, p in enumerate(non_mpi):
        p["rank"] = world + offset
    return world or len(non_mpi)


def _main_process(procs: list[dict]) -> dict:
    """The process that names the job: rank 0 of the MPI program if there is one, else the first line."""
    mpi = [p for p in procs if int(p["rank"]) >= 0]
    return min(mpi, key=lambda p: int(p["rank"])) if mpi else procs[0]


def _one_job(path: str, procs: list[dict], job: str | None) -> list[dict]:
    """The processes of job `job`, or of the file's only job."""
    jobs = list(dict.fromkeys(str(p["job_id"]) for p in procs))
    if job is not None:
        chosen = [p for p in procs if str(p["job_id"]) == job]
        if not chosen:
            raise TuneError(f"{path}: no process of job {job!r} (the file holds job(s) {', '.join(jobs)})")
        return chosen
    if len(jobs) > 1:
        raise TuneError(
            f"{path}: holds the profiles of {len(jobs)} jobs ({', '.join(jobs)}), which are not one run: "
            "pick one with --job ID (give each run a profile of its own: surge run --profile FILE)"
        )
    return procs


def read_surge_profile(path: str, job: str | None = None) -> Job:
    procs = _one_job(path, _parse_lines(path), job)
    main = _main_process(procs)  # before pseudo-ranks are assigned: they would look like MPI ranks
    nprocs = _assign_ranks(procs)
    rows: dict[str, list[dict]] = {}
    layouts: dict[int, dict] = {}
    for p in procs:
        for f in p["files"]:
            if not isinstance(f, dict) or "path" not in f:
                raise TuneError(f"{path}:{p['_line']}: a file entry lacks 'path'")
            rid = record_id(f["path"])
            per_module: dict[str, dict] = {}
            for group in ("counters", "fcounters"):
                values = f.get(group, {})
                if not isinstance(values, dict):
                    raise TuneError(f"{path}:{p['_line']}: '{group}' of {f['path']} must be an object")
                for name, value in values.items():
                    module = _module_of(name)
                    if module is None:
                        continue  # a counter from a module this tuner does not know yet
                    if not isinstance(value, (int, float)):
                        raise TuneError(f"{path}:{p['_line']}: counter {name} of {f['path']} is not a number")
                    per_module.setdefault(module, {"id": rid, "rank": int(p["rank"]), "path": f["path"]})[name] = value
            for module, row in per_module.items():
                rows.setdefault(module, []).append(row)
            if "stripe_count" in f:
                layouts[rid] = {
                    "id": rid,
                    "path": f["path"],
                    "stripe_count": int(f["stripe_count"]),
                    "stripe_size": int(f.get("stripe_size", 0)),
                    "ost_count": int(f["stripe_count"]),
                }
    hosts = {p.get("host", "") for p in procs}
    return Job(
        source=str(main.get("generator", "surge-profile")),  # the corpus generator tags its profiles
        input_path=path,
        job_id=str(main["job_id"]),
        exe=str(main["exe"]),
        nprocs=nprocs,
        start_time=float(main["job_start"]) + min(float(p["start"]) for p in procs),
        run_time=max(float(p["end"]) for p in procs) - min(float(p["start"]) for p in procs),
        format_version=SCHEMA,
        num_hosts=len(hosts - {""}),
        modules={m: pd.DataFrame(r).fillna(0) for m, r in rows.items()},
        layouts=pd.DataFrame(list(layouts.values())),
    )
