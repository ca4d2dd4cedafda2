#!/usr/bin/env python3
"""Collective I/O benchmark: libsurge_mpiio against Open MPI's own MPI-IO
(OMPIO with fcoll vulcan, dynamic_gen2, two_phase, and ROMIO romio321) on
tmpfs and on disk, for IOR-, Tile-IO- and FLASH-IO-like patterns; and the
Build-IO micro-benchmark of threaded individual I/O.

Measurement design, for a shared 2-core machine whose speed drifts by tens of
per cent within a minute:
  * every built-in component runs in its own mpirun (Open MPI picks the io
    component per process), and inside that process surge/auto alternates
    with it call by call (surge_mpiio=disable serves a file by PMPI alone);
    so surge/auto is compared with each component over that same component,
    under the same conditions;
  * the figure of merit is the median of the paired ratios
    surge time / built-in time taken side by side, which cancels the drift
    that medians of separate runs keep;
  * the named surge variants (each algorithm and primitive, two-phase forced)
    run in the ROMIO process, paired with surge/auto there.
Bandwidths are MiB/s, medians; write and read include open..close minus open."""
import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "build", "bench_mpiio")
BASE_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

BUILTIN = {
    "ompio/vulcan": ["--mca", "io", "ompio", "--mca", "fcoll", "vulcan"],
    "ompio/dynamic_gen2": ["--mca", "io", "ompio", "--mca", "fcoll", "dynamic_gen2"],
    "ompio/two_phase": ["--mca", "io", "ompio", "--mca", "fcoll", "two_phase"],
    "romio321": ["--mca", "io", "romio321"],
}
ALGOS = ["no_overlap", "comm", "write", "write_comm", "write_comm2"]
PMPI = "surge_mpiio=disable"
AUTO = "surge/auto"


def named_variants(full):
    """Two-phase forced (surge_cb=enable), so that the algorithm really runs."""
    v = {}
    for a in ALGOS if full else ["no_overlap", "write_comm2"]:
        v[f"surge/{a}"] = f"surge_cb=enable,surge_algorithm={a},surge_primitive=isend"
    for p in ["put_fence", "put_lock"] if full else []:
        v[f"surge/write_comm2+{p}"] = (f"surge_cb=enable,surge_algorithm=write_comm2,"
                                       f"surge_primitive={p}")
    return v


def spec(label, hints):
    return f"{label}:{hints}" if hints else label


def run_bench(np, mca, pattern, path, mib, reps, variants):
    """variants: label -> hints. Returns {label: {op: [seconds per rep]}}."""
    cmd = (["mpirun", "--oversubscribe", "-np", str(np)] + mca +
           [BENCH, pattern, path, str(mib), str(reps)] +
           [spec(label, hints) for label, hints in variants.items()])
    p = subprocess.run(cmd, env=BASE_ENV, capture_output=True, text=True, timeout=1200)
    out = collections.defaultdict(lambda: collections.defaultdict(list))
    if p.returncode != 0:
        print(f"  failed: {' '.join(cmd)}\n{p.stderr[-600:]}", file=sys.stderr)
        return out
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 5:
            out[f[0]][f[2]].append((float(f[3]), int(f[4])))
    return out


def mibs(samples):
    return [b / t / 2**20 for t, b in samples]


def paired_ratios(ref, x):
    """Speed of x relative to ref, repetition by repetition: time(ref)/time(x)
    of repetitions run side by side; > 1 means x is faster."""
    return [tr / tx for (tr, _), (tx, _) in zip(ref, x)]


def paired(ref, x):
    """The median of the paired ratios."""
    return statistics.median(paired_ratios(ref, x))


def collective(args, full, dirs):
    named = named_variants(full)
    summary, wins = [], collections.Counter()
    for storage in args.storage:
        d = tempfile.mkdtemp(prefix="surge_bench_", dir=dirs[storage])
        for np in args.np:
            for pattern in [p for p in args.patterns if p != "buildio"]:
                # samples[underlying component][label][op] -> [(seconds, bytes)]
                samples = collections.defaultdict(
                    lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
                for _ in range(args.rounds):
                    for name, mca in BUILTIN.items():
                        variants = {name: PMPI, AUTO: ""}
                        if name == "romio321":
                            variants.update(named)
                        r = run_bench(np, mca, pattern, f"{d}/f", args.mib, args.reps, variants)
                        for label, ops in r.items():
                            for op, s in ops.items():
                                samples[name][label][op] += s
                for op in ["write", "read"]:
                    rows = []
                    for name in BUILTIN:
                        s = samples[name]
                        if s[name][op] and s[AUTO][op]:
                            rows.append((name, statistics.median(mibs(s[name][op])),
                                         statistics.median(mibs(s[AUTO][op])),
                                         paired(s[name][op], s[AUTO][op]),
                                         paired_ratios(s[name][op], s[AUTO][op])))
                    if not rows:
                        continue
                    best = max(rows, key=lambda r: r[1])
                    print(f"\n## {pattern} {op} on {storage}, np={np}")
                    print(f"  {'component':<20} {'built-in':>9} {'surge/auto':>11}  paired ratio")
                    for name, b, a, ratio, _ in rows:
                        mark = "  <- best built-in" if name == best[0] else ""
                        print(f"  {name:<20} {b:9.0f} {a:11.0f}  {ratio:5.2f}{mark}")
                    rs = samples["romio321"]
                    if rs[AUTO][op]:
                        print(f"  named surge variants (over romio321; ratio = variant vs "
                              f"surge/auto, paired):")
                        vs = [(label, statistics.median(mibs(rs[label][op])),
                               paired(rs[AUTO][op], rs[label][op]))
                              for label in named if rs[label][op]]
                        for label, v, ratio in sorted(vs, key=lambda x: -x[1]):
                            print(f"    {label:<28} {v:8.0f} MiB/s  x{ratio:5.2f}")
                        if vs:
                            wins[max(vs, key=lambda x: x[1])[0]] += 1
                    summary.append((pattern, op, storage, np, best[2], best[0], best[1], best[3],
                                    min(best[4]), max(best[4])))
        if not os.listdir(d):
            os.rmdir(d)
    print("\n# surge/auto vs the best built-in component "
          "(ratio: median (min-max) of the paired ratios)")
    print("| pattern | op | storage | np | surge/auto MiB/s | best built-in | MiB/s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for pattern, op, storage, np, auto, bname, best, ratio, lo, hi in summary:
        flag = " (median >5% behind)" if ratio < 0.95 else ""
        print(f"| {pattern} | {op} | {storage} | {np} | {auto:.0f} | {bname} | {best:.0f} | "
              f"{ratio:.2f} ({lo:.2f}-{hi:.2f}){flag} |")
    ratios = [s[7] for s in summary]
    if ratios:
        cleared = sum(s[8] >= 0.95 for s in summary)
        print(f"\ngeometric-mean ratio {statistics.geometric_mean(ratios):.2f}, "
              f"worst median {min(ratios):.2f}, {sum(r < 0.95 for r in ratios)} of {len(ratios)} "
              f"configurations more than 5% behind by the median; in {cleared} of {len(ratios)} "
              f"every paired ratio clears 0.95")
    if wins:
        print("fastest named surge variant per configuration: " +
              ", ".join(f"{k} {v}" for k, v in wins.most_common()))


def buildio(args, full):
    """Build-IO of [Feki22, ch. 4] (docs/references.md): 1 rank, individual write_at of a
    strided buffer.
    The thesis's 1-4 GB files and 0.5-32 MB cycles are scaled down together,
    so that there are still 4-32 cycles for the threads to share."""
    elems = [1, 4, 16] if full else [4, 16]
    cycles = ["256k", "1m", "2m"] if full else ["256k", "2m"]
    threads = [1, 2, 4]
    mib = args.buildio_mib
    d = tempfile.mkdtemp(prefix="surge_bench_", dir="/dev/shm")
    print(f"\n# Build-IO (1 rank, tmpfs, {mib} MiB of E-byte elements each followed by a "
          f"4-byte gap, individual write_at / read_at; MiB/s of file data, median; "
          f"(x) = paired ratio to 1 thread)")
    print("| element | cycle | op | OMPIO (realloc) | 1 thread | 2 threads | 4 threads |")
    print("|---|---|---|---|---|---|---|")
    for e in elems:
        for c in cycles:
            variants = {"ompio": PMPI}
            for t in threads:
                variants[f"t{t}"] = f"surge_io_threads={t},surge_ind_cycle_size={c}"
            s = collections.defaultdict(lambda: collections.defaultdict(list))
            for _ in range(args.rounds):
                r = run_bench(1, [], f"buildio:{e}", f"{d}/f", mib, args.reps, variants)
                for label in variants:
                    for op in ["write", "read"]:
                        s[op][label] += r[label][op]
            for op in ["write", "read"]:
                t1 = s[op]["t1"]
                if not t1:
                    continue
                cell = lambda label: (f"{statistics.median(mibs(s[op][label])):.0f} "
                                      f"(x{paired(t1, s[op][label]):.2f})")
                print(f"| {e} B | {c} | {op} | {cell('ompio')} | "
                      f"{statistics.median(mibs(t1)):.0f} | {cell('t2')} | {cell('t4')} |")
    os.rmdir(d) if not os.listdir(d) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer variants, sizes and rounds")
    ap.add_argument("--np", type=int, nargs="+", help="rank counts (default 2; full adds 4)")
    ap.add_argument("--rounds", type=int, help="mpirun launches per component")
    ap.add_argument("--reps", type=int, help="paired repetitions per launch")
    ap.add_argument("--mib", type=int, help="MiB per rank")
    ap.add_argument("--buildio-mib", type=int, default=8, help="Build-IO file size, MiB")
    ap.add_argument("--patterns", nargs="+", default=["ior", "tile", "flash", "buildio"])
    ap.add_argument("--storage", nargs="+", default=["tmpfs", "disk"])
    args = ap.parse_args()
    full = not args.quick
    args.np = args.np or ([2, 4] if full else [2])
    args.rounds = args.rounds or 2
    args.reps = args.reps or (5 if full else 3)
    args.mib = args.mib or (32 if full else 16)
    dirs = {"tmpfs": "/dev/shm", "disk": os.environ.get("SURGE_BENCH_DISK_DIR", "/tmp")}
    print(f"# rounds={args.rounds} x reps={args.reps} per component, {args.mib} MiB/rank, "
          f"np={args.np}")
    if set(args.patterns) - {"buildio"}:
        collective(args, full, dirs)
    if "buildio" in args.patterns:
        buildio(args, full)


if __name__ == "__main__":
    main()
