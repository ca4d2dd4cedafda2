#!/usr/bin/env python3
"""Runs the libsurge_mpiio test programs under mpirun with timeouts.

Exit status is nonzero if any program fails or times out. Sized to finish in
about three minutes on a 2-core machine (8 ranks run oversubscribed)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "..", "build")

ENV = dict(os.environ,
           OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")

# (ranks, seed, cases): many small cases at low rank counts, fewer at 8.
VIEW_RUNS = [(1, 101, 25), (2, 102, 40), (3, 103, 30), (4, 104, 30),
             (5, 105, 15), (6, 106, 12), (7, 107, 10), (8, 108, 15)]


def run(name, np, args, timeout, extra_env=None):
    env = dict(ENV, **(extra_env or {}))
    cmd = ["mpirun", "--oversubscribe", "-np", str(np)]
    for key in (extra_env or {}):
        cmd += ["-x", key]
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
    tmp = tempfile.mkdtemp(prefix="surge_mpiio_test_", dir="/dev/shm")
    disk = tempfile.mkdtemp(prefix="surge_mpiio_test_", dir="/tmp")
    results = []
    try:
        for np, seed, cases in VIEW_RUNS:
            results.append(run(f"test_views seed={seed} cases={cases}", np,
                               [f"{BUILD}/test_views", tmp, str(seed), str(cases)], 150))
        results.append(run("test_views on disk (/tmp)", 4,
                           [f"{BUILD}/test_views", disk, "109", "10"], 150))
        for np in (1, 3, 8):
            results.append(run("test_semantics", np, [f"{BUILD}/test_semantics", tmp], 120))
        for np in (2, 5):
            results.append(run("test_semantics inject (fault on rank 0)", np,
                               [f"{BUILD}/test_semantics", tmp, "inject"], 120,
                               {"SURGE_MPIIO_TEST_FAIL_WRITE": "3",
                                "SURGE_MPIIO_TEST_FAIL_RANK": "0"}))
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
