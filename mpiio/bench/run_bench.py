#!/usr/bin/env python3
"""Collective I/O benchmark: libsurge_mpiio variants against Open MPI's own
OMPIO (fcoll vulcan, dynamic_gen2, two_phase) and ROMIO (romio321), on tmpfs
and on disk, for IOR-, Tile-IO- and FLASH-IO-like patterns.

Variants are interleaved round by round (the machine is shared and noisy) and
the median over all repetitions is reported. Every variant runs the same
binary; the built-in components are reached with SURGE_MPIIO_DISABLE=1."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "build", "bench_mpiio")
BASE_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

ALGOS = ["no_overlap", "comm", "write", "write_comm", "write_comm2"]
BUILTIN = {
    "ompio/vulcan": ["--mca", "io", "ompio", "--mca", "fcoll", "vulcan"],
    "ompio/dynamic_gen2": ["--mca", "io", "ompio", "--mca", "fcoll", "dynamic_gen2"],
    "ompio/two_phase": ["--mca", "io", "ompio", "--mca", "fcoll", "two_phase"],
    "romio321": ["--mca", "io", "romio321"],
}


def variants(full):
    # Named variants force two-phase (SURGE_MPIIO_CB=enable) so that the
    # algorithm is really exercised; surge/auto may go direct when ranks'
    # ranges do not interleave.
    v = {"surge/auto": {}}
    for a in ALGOS if full else ["no_overlap", "write_comm", "write_comm2"]:
        v[f"surge/{a}"] = {"SURGE_MPIIO_ALGO": a, "SURGE_MPIIO_PRIMITIVE": "isend",
                           "SURGE_MPIIO_CB": "enable"}
    for p in ["put_fence", "put_lock"]:
        v[f"surge/write_comm2+{p}"] = {"SURGE_MPIIO_ALGO": "write_comm2",
                                       "SURGE_MPIIO_PRIMITIVE": p, "SURGE_MPIIO_CB": "enable"}
    for name in BUILTIN:
        v[name] = {"SURGE_MPIIO_DISABLE": "1"}
    return v


def run_one(name, env_extra, np, pattern, path, mib, reps):
    env = dict(BASE_ENV, **env_extra)
    cmd = ["mpirun", "--oversubscribe", "-np", str(np)] + BUILTIN.get(name, [])
    for k in env_extra:
        cmd += ["-x", k]
    cmd += [BENCH, pattern, path, str(mib), str(reps)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        print(f"  {name}: failed\n{p.stderr[-400:]}", file=sys.stderr)
        return {}
    out = {"write": [], "read": []}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 4 and f[1] in out:
            out[f[1]].append(int(f[3]) / float(f[2]) / 2**20)  # MiB/s
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer variants, sizes and rounds")
    ap.add_argument("--np", type=int, nargs="+", help="rank counts (default 2; full adds 4)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds per variant")
    ap.add_argument("--mib", type=int, help="MiB per rank")
    ap.add_argument("--patterns", nargs="+", default=["ior", "tile", "flash"])
    ap.add_argument("--storage", nargs="+", default=["tmpfs", "disk"])
    args = ap.parse_args()
    full = not args.quick
    nps = args.np or ([2, 4] if full else [2])
    rounds = args.rounds or (2 if full else 1)
    mib = args.mib or (32 if full else 16)
    reps = 2
    dirs = {"tmpfs": "/dev/shm", "disk": os.environ.get("SURGE_BENCH_DISK_DIR", "/tmp")}
    var = variants(full)
    print(f"# {len(var)} variants, rounds={rounds} x reps={reps}, {mib} MiB/rank, "
          f"np={nps}; MiB/s, median; write and read include open..close")
    summary = []
    for storage in args.storage:
        d = tempfile.mkdtemp(prefix="surge_bench_", dir=dirs[storage])
        for np in nps:
            for pattern in args.patterns:
                samples = {n: {"write": [], "read": []} for n in var}
                for _ in range(rounds):
                    for name, env in var.items():
                        r = run_one(name, env, np, pattern, f"{d}/f", mib, reps)
                        for op in r:
                            samples[name][op] += r[op]
                for op in ["write", "read"]:
                    med = {n: statistics.median(s[op]) for n, s in samples.items() if s[op]}
                    builtin = {n: v for n, v in med.items() if not n.startswith("surge")}
                    best_name = max(builtin, key=builtin.get)
                    best = builtin[best_name]
                    auto = med.get("surge/auto", 0)
                    print(f"\n## {pattern} {op} on {storage}, np={np} "
                          f"(best built-in: {best_name} {best:.0f} MiB/s)")
                    for n, v in sorted(med.items(), key=lambda kv: -kv[1]):
                        print(f"  {n:<26} {v:8.0f} MiB/s  x{v / best:5.2f}")
                    summary.append((pattern, op, storage, np, auto, best_name, best))
        os.rmdir(d) if not os.listdir(d) else None
    print("\n# surge/auto vs best built-in component")
    print("| pattern | op | storage | np | surge/auto MiB/s | best built-in | MiB/s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    for pattern, op, storage, np, auto, bname, best in summary:
        ratio = auto / best if best else 0
        ratios.append(ratio)
        flag = " (miss >5%)" if ratio < 0.95 else ""
        print(f"| {pattern} | {op} | {storage} | {np} | {auto:.0f} | {bname} | {best:.0f} | "
              f"{ratio:.2f}{flag} |")
    if ratios:
        print(f"\ngeometric-mean ratio {statistics.geometric_mean(ratios):.2f}, "
              f"worst {min(ratios):.2f}, configurations {len(ratios)}")


if __name__ == "__main__":
    main()
