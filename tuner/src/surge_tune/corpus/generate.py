"""Generate a real training corpus on this machine: fio and an MPI-IO program, swept over their settings.

Darshan's runtime library is not available here, so each run writes a Surge profile (surge-profile/1)
itself, built from what is known exactly and what was measured:
  - known from the configuration: request counts and sizes (size buckets), bytes, sequential counts,
    file-per-process vs shared, collective vs independent, hints, process count;
  - measured by fio (--output-format=json): per-job write/read time (`runtime`), fsync time (`sync`);
  - measured by the MPI-IO program (MPI_Wtime per rank): open, write (incl. MPI_File_sync), close times.
Every run goes through Surge (`surge_job.py`): a job-scoped cluster of several daemons whose data
directory gets one layout of the sweep (`surge setstripe -c COUNT -S SIZE`), so each file of a profile
carries the stripe count and size Surge reports for it (`surge getstripe`), and the models can learn layout
effects. Every profile then goes through the normal ingestion path.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

from surge_tune.corpus.surge_job import JobDirs, Layout, run_in_surge
from surge_tune.dcaio.apply import surge_binary
from surge_tune.errors import TuneError
from surge_tune.ingest.batch import ingest

MIB = 1 << 20
_BUCKETS = [
    ("0_100", 100),
    ("100_1K", 1024),
    ("1K_10K", 10240),
    ("10K_100K", 102400),
    ("100K_1M", MIB),
    ("1M_4M", 4 * MIB),
    ("4M_10M", 10 * MIB),
    ("10M_100M", 100 * MIB),
    ("100M_1G", 1 << 30),
    ("1G_PLUS", 1 << 62),
]
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}  # containers often forbid CMA

# (quick, default) sweeps. Sizes are per process. Every workload runs once per layout of LAYOUT_SWEEP.
FIO_SWEEP = {
    "quick": dict(rw=["write", "read"], bs=[4096, MIB], numjobs=[2], mode=["fpp", "shared"], size=4 * MIB),
    "default": dict(
        rw=["write", "randwrite", "read", "randread"],
        bs=[4096, 65536, MIB],
        numjobs=[1, 4],
        mode=["fpp", "shared"],
        size=16 * MIB,
    ),
}
MPI_SWEEP = {
    "quick": dict(nprocs=[2], xfer=[4096, MIB], mode=[("fpp", "indep"), ("shared", "coll")], bytes=4 * MIB),
    "default": dict(
        nprocs=[2, 4],
        xfer=[4096, 65536, MIB],
        mode=[("fpp", "indep"), ("shared", "indep"), ("shared", "coll")],
        bytes=16 * MIB,
    ),
}
LAYOUT_SWEEP = {
    "quick": dict(stripe_count=[1, 4], stripe_size=[65536, MIB]),
    "default": dict(stripe_count=[1, 2, 4], stripe_size=[65536, MIB, 4 * MIB]),
}
DAEMONS = 4  # daemons of each job's cluster: the widest stripe count of the sweep

def _bucket(size: int) -> str:
    return next(name for name, upper in _BUCKETS if size <= upper)  # Darshan: a bucket includes its upper bound


def _posix_counters(op: str, requests: int, xfer: int, sequential: bool, opens: int = 1) -> dict:
    """POSIX counters of `requests` requests of `xfer` bytes, as Darshan would count them."""
    seq = max(requests - 1, 0) if sequential else 0
    c = {
        "POSIX_OPENS": opens,
        "POSIX_READS": 0,
        "POSIX_WRITES": 0,
        "POSIX_SEEKS": 0,
        "POSIX_STATS": 0,
        "POSIX_FSYNCS": 1 if op == "WRITE" else 0,
        "POSIX_BYTES_READ": 0,
        "POSIX_BYTES_WRITTEN": 0,
        f"POSIX_{op}S": requests,
        f"POSIX_BYTES_{'READ' if op == 'READ' else 'WRITTEN'}": requests * xfer,
        f"POSIX_CONSEC_{op}S": seq,
        f"POSIX_SEQ_{op}S": seq,
        "POSIX_RW_SWITCHES": 0,
        "POSIX_FILE_NOT_ALIGNED": 0 if xfer % 4096 == 0 else requests,
    }
    for o in ("READ", "WRITE"):
        for name, _ in _BUCKETS:
            c[f"POSIX_SIZE_{o}_{name}"] = requests if (o == op and name == _bucket(xfer)) else 0
    return c


def _profile_line(
    job_id: str, exe: str, rank: int, nprocs: int, start: float, files: list[dict], generator: str, config: dict
) -> dict:
    end = start + max(sum(v for k, v in f["fcounters"].items() if k.endswith("_TIME")) for f in files)
    return {
        "schema": "surge-profile/1",
        "job_id": job_id,
        "exe": exe,
        "argv0": os.path.basename(exe),
        "host": os.uname().nodename,
        "pid": 0,
        "rank": rank,
        "nprocs": nprocs,
        "job_start": time.time(),
        "start": start,
        "end": end,
        "files": files,
        "generator": generator,
        "config": config,
    }


def _fcounters(op: str, start: float, data_time: float, meta_time: float) -> dict:
    f = {
        "POSIX_F_READ_TIME": 0.0,
        "POSIX_F_WRITE_TIME": 0.0,
        "POSIX_F_META_TIME": meta_time,
        "POSIX_F_OPEN_START_TIMESTAMP": start,
        f"POSIX_F_{op}_START_TIMESTAMP": start,
        f"POSIX_F_{op}_END_TIMESTAMP": start + data_time,
        "POSIX_F_CLOSE_END_TIMESTAMP": start + data_time + meta_time,
    }
    f[f"POSIX_F_{op}_TIME"] = data_time
    return f


def run_fio(
    dirs: JobDirs, rw: str, bs: int, numjobs: int, mode: str, size: int, layout: Layout, daemons: int = DAEMONS
) -> list[dict]:
    app = f"fio-{rw}-{mode}"
    names = [f"{app}.shared"] if mode == "shared" else [f"{app}.{rank}.0" for rank in range(numjobs)]
    cmd = [
        "fio",
        f"--name={app}",
        f"--directory={dirs.data}",
        f"--rw={rw}",
        f"--bs={bs}",
        f"--size={size}",
        f"--numjobs={numjobs}",
        "--ioengine=psync",
        "--end_fsync=1",
        "--output-format=json",
        f"--randseed={zlib.crc32(dirs.tag.encode())}",
    ]
    if mode == "shared":
        cmd.append(f"--filename={names[0]}")  # every job works on the same file
    out, layouts = run_in_surge(dirs, cmd, layout, [os.path.join(dirs.data, n) for n in names], daemons)
    try:
        report = json.loads(out[out.index("{") :])
    except ValueError:
        raise TuneError(f"fio printed no JSON report: {out.strip()[:300]}") from None
    op = "READ" if "read" in rw else "WRITE"
    lines = []
    for rank, job in enumerate(report["jobs"]):
        stats = job["read" if op == "READ" else "write"]
        # Sum of per-request latencies (ns resolution); fio's `runtime` is whole milliseconds.
        data_time = stats["total_ios"] * stats["lat_ns"]["mean"] / 1e9 if stats.get("total_ios") else 0.0
        data_time = data_time or stats["runtime"] / 1000.0
        sync = job.get("sync", {})
        meta = sync.get("total_ios", 0) * sync.get("lat_ns", {}).get("mean", 0.0) / 1e9
        path = os.path.join(dirs.data, names[0] if mode == "shared" else names[rank])
        files = [
            {
                "path": path,
                **_layout_fields(layouts[path]),
                "counters": _posix_counters(op, stats["total_ios"], bs, not rw.startswith("rand")),
                "fcounters": _fcounters(op, 0.0, data_time, meta),
            }
        ]
        config = {
            "tool": "fio",
            "rw": rw,
            "bs": bs,
            "numjobs": numjobs,
            "mode": mode,
            "size": size,
            "layout_requested": [layout.stripe_count, layout.stripe_size],
            "fio_bw_kib_s": stats["bw"],
        }
        lines.append(_profile_line(dirs.tag, f"/usr/bin/{app}", -1, numjobs, 0.0, files, "corpus-fio", config))
    return lines


def _layout_fields(layout: Layout) -> dict:
    return {"stripe_count": layout.stripe_count, "stripe_size": layout.stripe_size}


def build_mpiio(workdir: str) -> str:
    if not shutil.which("mpicc"):
        raise TuneError("mpicc not found: install Open MPI (libopenmpi-dev) or use --tools fio")
    src = os.path.join(os.path.dirname(__file__), "mpiio_bench.c")
    exe = os.path.join(workdir, "mpiio_bench")
    proc = subprocess.run(["mpicc", "-O2", "-o", exe, src], capture_output=True, text=True)
    if proc.returncode != 0:
        raise TuneError(f"mpicc failed: {proc.stderr.strip()[:300]}")
    return exe


def run_mpiio(
    exe: str,
    dirs: JobDirs,
    nprocs: int,
    xfer: int,
    mode: tuple[str, str],
    total: int,
    layout: Layout,
    daemons: int = DAEMONS,
) -> list[dict]:
    sharing, access = mode
    app = f"mpiio-{sharing}-{access}"
    count = max(total // xfer, 1)
    path = os.path.join(dirs.data, f"{app}.dat")
    files = [path] if sharing == "shared" else [f"{path}.{rank}" for rank in range(nprocs)]
    hints = ["romio_cb_write=enable", f"cb_nodes={max(nprocs // 2, 1)}"] if access == "coll" else []
    cmd = ["mpirun", "--oversubscribe", "-np", str(nprocs), exe, path, str(xfer), str(count), sharing, access, *hints]
    out, layouts = run_in_surge(dirs, cmd, layout, files, daemons, env=MPI_ENV)
    lines = []
    for rank_line in (line for line in out.splitlines() if line.startswith("{")):
        r = json.loads(rank_line)
        rank_path = path if sharing == "shared" else f"{path}.{r['rank']}"
        # Interleaved blocks in a shared file are sequential (increasing offsets) but not consecutive.
        counters = _posix_counters("WRITE", r["ops"], xfer, sequential=True)
        if sharing == "shared":
            counters["POSIX_CONSEC_WRITES"] = 0
        counters["MPIIO_COLL_WRITES" if access == "coll" else "MPIIO_INDEP_WRITES"] = r["ops"]
        counters["MPIIO_COLL_OPENS" if sharing == "shared" else "MPIIO_INDEP_OPENS"] = 1
        counters["MPIIO_BYTES_WRITTEN"] = r["bytes"]
        f = _fcounters("WRITE", r["start_s"], r["write_s"], r["open_s"] + r["close_s"])
        f["MPIIO_F_WRITE_TIME"], f["MPIIO_F_META_TIME"] = r["write_s"], r["open_s"] + r["close_s"]
        config = {
            "tool": "mpiio",
            "nprocs": nprocs,
            "xfer": xfer,
            "sharing": sharing,
            "access": access,
            "hints": ";".join(hints),
            "layout_requested": [layout.stripe_count, layout.stripe_size],
        }
        file_entry = {"path": rank_path, **_layout_fields(layouts[rank_path]), "counters": counters, "fcounters": f}
        lines.append(
            _profile_line(
                dirs.tag, f"/usr/bin/{app}", r["rank"], nprocs, r["start_s"], [file_entry], "corpus-mpiio", config
            )
        )
    if len(lines) != nprocs:
        raise TuneError(f"{app}: expected {nprocs} rank reports, got {len(lines)}")
    return lines


def plan_runs(level: str, tools: set[str], repeats: int, seed: int) -> list[tuple[str, tuple, Layout, int]]:
    """Every workload of the sweep once per layout and repeat, shuffled (seeded) so that machine noise is not
    confounded with a configuration."""
    workloads: list[tuple[str, tuple]] = []
    if "fio" in tools:
        s = FIO_SWEEP[level]
        workloads += [("fio", c) for c in itertools.product(s["rw"], s["bs"], s["numjobs"], s["mode"])]
    if "mpiio" in tools:
        s = MPI_SWEEP[level]
        workloads += [("mpiio", c) for c in itertools.product(s["nprocs"], s["xfer"], s["mode"])]
    s = LAYOUT_SWEEP[level]
    layouts = [Layout(c, size) for c, size in itertools.product(s["stripe_count"], s["stripe_size"])]
    plan = [(tool, c, layout, rep) for rep in range(repeats) for tool, c in workloads for layout in layouts]
    random.Random(seed).shuffle(plan)
    return plan


def _run_tag(tool: str, config: tuple, layout: Layout, rep: int) -> str:
    parts = ["-".join(x) if isinstance(x, tuple) else str(x) for x in config]
    return f"{tool}-{'-'.join(parts)}-{layout.tag()}-r{rep}"


def generate(
    out: str,
    quick: bool = False,
    repeats: int = 1,
    seed: int = 0,
    workdir: str | None = None,
    tools: str = "fio,mpiio",
    daemons: int = DAEMONS,
) -> dict:
    from tqdm import tqdm

    wanted = {t.strip() for t in tools.split(",") if t.strip()}
    if not wanted <= {"fio", "mpiio"}:
        raise TuneError(f"unknown tool(s) {sorted(wanted - {'fio', 'mpiio'})}: use fio, mpiio")
    if "fio" in wanted and not shutil.which("fio"):
        raise TuneError("fio not found: install it (apt-get install fio) or use --tools mpiio")
    level = "quick" if quick else "default"
    widest = max(LAYOUT_SWEEP[level]["stripe_count"])
    if daemons < widest:
        raise TuneError(f"--daemons {daemons}: the layout sweep stripes over up to {widest} daemons; give as many")
    surge_binary()  # fail before any run when Surge is missing
    profiles = os.path.join(out, "profiles")
    os.makedirs(profiles, exist_ok=True)
    scratch = workdir or tempfile.mkdtemp(prefix="work-", dir=out)
    shm_root = tempfile.mkdtemp(prefix="surge-corpus-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    plan = plan_runs(level, wanted, repeats, seed)
    mpi_exe = build_mpiio(scratch) if "mpiio" in wanted else None
    failures, started = [], time.monotonic()
    for tool, c, layout, rep in tqdm(plan, desc="corpus", unit="run", file=sys.stderr):
        dirs = JobDirs(scratch, _run_tag(tool, c, layout, rep), shm_root)
        dirs.create()
        try:
            if tool == "fio":
                lines = run_fio(dirs, *c, size=FIO_SWEEP[level]["size"], layout=layout, daemons=daemons)
            else:
                lines = run_mpiio(mpi_exe, dirs, *c, total=MPI_SWEEP[level]["bytes"], layout=layout, daemons=daemons)
        except (TuneError, subprocess.TimeoutExpired) as e:
            failures.append({"run": dirs.tag, "reason": str(e)})
            continue
        finally:
            dirs.remove()  # keep the disk and /dev/shm footprint flat
        with open(os.path.join(profiles, f"{dirs.tag}.jsonl"), "w") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)
    shutil.rmtree(shm_root, ignore_errors=True)
    if not workdir:
        shutil.rmtree(scratch, ignore_errors=True)
    stats = ingest([profiles], os.path.join(out, "table"), workers=2, progress=False)
    summary = {
        "runs": len(plan) - len(failures),
        "failed": failures,
        "seconds": round(time.monotonic() - started, 1),
        "profiles": profiles,
        "table": os.path.join(out, "table"),
        "jobs": stats.jobs,
        "ingest_errors": stats.errors,
    }
    with open(os.path.join(out, "corpus.json"), "w") as f:
        json.dump(
            {
                **summary,
                "level": level,
                "repeats": repeats,
                "seed": seed,
                "daemons": daemons,
                "fio_sweep": FIO_SWEEP[level] if "fio" in wanted else None,
                "mpiio_sweep": MPI_SWEEP[level] if "mpiio" in wanted else None,
                "layout_sweep": LAYOUT_SWEEP[level],
            },
            f,
            indent=2,
        )
    return summary
