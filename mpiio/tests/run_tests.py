#!/usr/bin/env python3
"""Runs the libsurge_mpiio test programs under mpirun with timeouts.

Exit status is nonzero if any program fails or times out. Sized to finish in
about half a minute on a 2-core machine (8 ranks run oversubscribed).
--mpi mpich runs the same programs, built with mpicc.mpich, under MPICH's
launcher: the reference files are then written by MPICH's ROMIO."""
import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# How each MPI launches: Open MPI's mpirun forwards only the variables named
# with -x; MPICH's Hydra forwards the whole environment and oversubscribes
# without being asked.
LAUNCHERS = {
    "openmpi": (["mpirun", "--oversubscribe"], "-x"),
    "mpich": (["mpiexec.mpich"], None),
}
ENV = dict(os.environ,
           OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")

# What runs, per MPI. test_views: (ranks, seed, cases), many small cases at
# low rank counts, fewer at 8. MPICH (ch4) busy-polls without yielding, so an
# oversubscribed run is about ten times slower there: fewer ranks and cases.
PLANS = {
    "openmpi": {"views": [(1, 101, 25), (2, 102, 40), (3, 103, 30), (4, 104, 30),
                          (5, 105, 15), (6, 106, 12), (7, 107, 10), (8, 108, 15)],
                "disk": (4, 10), "semantics": (1, 3, 8), "inject": (2, 5),
                "multiple": (3, 20)},
    "mpich": {"views": [(1, 101, 25), (2, 102, 30), (3, 103, 3), (4, 104, 2)],
              "disk": (2, 10), "semantics": (1, 3), "inject": (2,), "multiple": (2, 6)},
}


def run_one(mpi, name, np, args, timeout, extra_env=None):
    launcher, forward_flag = LAUNCHERS[mpi]
    env = dict(ENV, **(extra_env or {}))
    cmd = launcher + ["-np", str(np)]
    for key in (extra_env or {}) if forward_flag else []:
        cmd += [forward_flag, key]
    cmd += args
    start = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        ok, out = p.returncode == 0, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        ok = False
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += f"\nTIMEOUT after {timeout}s (a hang is a failure)"
    took = time.time() - start
    print(f"{'ok  ' if ok else 'FAIL'} {name:<42} np={np} {took:6.1f}s", flush=True)
    if not ok:
        print("\n".join("    " + l for l in out.strip().splitlines()[-40:]))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mpi", choices=sorted(LAUNCHERS), default="openmpi")
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"),
                    help="directory holding the test programs and the library")
    args = ap.parse_args()
    BUILD = args.build
    run = functools.partial(run_one, args.mpi)
    tmp = tempfile.mkdtemp(prefix="surge_mpiio_test_", dir="/dev/shm")
    disk = tempfile.mkdtemp(prefix="surge_mpiio_test_", dir="/tmp")
    results = []
    plan = PLANS[args.mpi]
    try:
        for np, seed, cases in plan["views"]:
            results.append(run(f"test_views seed={seed} cases={cases}", np,
                               [f"{BUILD}/test_views", tmp, str(seed), str(cases)], 150))
        np, cases = plan["disk"]
        results.append(run("test_views on disk (/tmp)", np,
                           [f"{BUILD}/test_views", disk, "109", str(cases)], 150))
        for np in plan["semantics"]:
            results.append(run("test_semantics", np, [f"{BUILD}/test_semantics", tmp], 120))
        for np in plan["inject"]:
            results.append(run("test_semantics inject (fault on rank 0)", np,
                               [f"{BUILD}/test_semantics", tmp, "inject"], 120,
                               {"SURGE_MPIIO_TEST_FAIL_WRITE": "3",
                                "SURGE_MPIIO_TEST_FAIL_RANK": "0"}))
        multiple = {"TEST_THREAD_MULTIPLE": "1"}
        np, cases = plan["multiple"]
        results.append(run("test_views, MPI_THREAD_MULTIPLE (background)", np,
                           [f"{BUILD}/test_views", tmp, "110", str(cases)], 150, multiple))
        results.append(run("test_semantics overlap (MPI_THREAD_MULTIPLE)", np,
                           [f"{BUILD}/test_semantics", tmp, "overlap"], 120, multiple))
        lib = os.path.abspath(f"{BUILD}/libsurge_mpiio.so")
        results.append(run("test_preload (LD_PRELOAD)", 3,
                           [f"{BUILD}/test_preload", f"{tmp}/preload", "1"], 60,
                           {"LD_PRELOAD": lib}))
        results.append(run("test_preload (LD_PRELOAD, SURGE_MPIIO_DISABLE=1)", 3,
                           [f"{BUILD}/test_preload", f"{tmp}/preload", "0"], 60,
                           {"LD_PRELOAD": lib, "SURGE_MPIIO_DISABLE": "1"}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(disk, ignore_errors=True)
    failed = results.count(False)
    print(f"{len(results) - failed}/{len(results)} test runs passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
