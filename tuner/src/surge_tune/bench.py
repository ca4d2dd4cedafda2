"""`surge tune bench`: analyze latency, ingestion rate and memory over the public logs, and the
prediction-accuracy table on a generated corpus. Medians of several runs (the machine is shared)."""

from __future__ import annotations

import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from .public_logs import missing_reason, public_logs_dir

# Cold-start CLI timings on a few representative logs (each run pays interpreter + imports).
REPRESENTATIVE = (
    "mpi-io-test-x86_64-3.5.0.darshan",
    "example.darshan",
    "sample-badost.darshan",
    "partial_data_stdio.darshan",
    "hdf5_diagonal_write_1_byte_dxt.darshan",
)


def default_logs() -> list[str]:
    import darshan

    reason = missing_reason()
    if reason:
        print(f"surge tune bench: {reason}; timing the pydarshan example logs only", file=sys.stderr)
    logs = sorted(glob.glob(os.path.join(public_logs_dir(), "**", "*.darshan"), recursive=True))
    return logs + sorted(
        glob.glob(os.path.join(os.path.dirname(darshan.__file__), "examples", "example_logs", "*.darshan"))
    )


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "surge_tune", *args], capture_output=True, text=True)


def analyze_latency(logs: list[str], runs: int) -> dict:
    from surge_tune.analyze import analyze
    from surge_tune.features import summarize
    from surge_tune.ingest import read_job

    warm = []
    for path in logs:
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            analyze(summarize(read_job(path)))
            times.append(time.perf_counter() - t)
        warm.append((statistics.median(times), os.path.basename(path)))
    cold = []
    for path in [p for p in logs if os.path.basename(p) in REPRESENTATIVE]:
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            _cli("analyze", "--json", path)
            times.append(time.perf_counter() - t)
        cold.append((statistics.median(times), os.path.basename(path)))
    return {"warm": sorted(warm), "cold": sorted(cold)}


def ingest_rate(logs: list[str], runs: int) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        listing = os.path.join(tmp, "inputs")
        os.makedirs(listing)
        for i, p in enumerate(logs):  # one flat directory of links: the CLI takes directories
            os.symlink(p, os.path.join(listing, f"{i:04d}_{os.path.basename(p)}"))
        for r in range(runs):
            p = _cli("ingest", listing, "--out", os.path.join(tmp, f"out{r}"), "--quiet")
            if p.returncode != 0:
                raise RuntimeError(p.stderr)
            results.append(json.loads(p.stdout))
    return results


def run_bench(logs: list[str] | None, runs: int = 5, out: str | None = None, corpus: str | None = None) -> str:
    logs = logs or default_logs()
    lat = analyze_latency(logs, runs)
    ing = ingest_rate(logs, runs)
    warm = [t for t, _ in lat["warm"]]
    md = [
        f"Inputs: {len(logs)} logs; medians of {runs} runs; {os.cpu_count()} cores, shared machine.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| analyze in process (read + features + rules), median log | {statistics.median(warm) * 1000:.0f} ms |",
        f"| analyze, in process, slowest log ({lat['warm'][-1][1]}) | {lat['warm'][-1][0] * 1000:.0f} ms |",
    ]
    md += [f"| `surge tune analyze --json` cold CLI, {name} | {t * 1000:.0f} ms |" for t, name in lat["cold"]]
    rate = statistics.median(r["logs_per_second"] for r in ing)
    md += [
        f"| ingest {len(logs)} logs (2 isolated workers), rate | {rate:.1f} logs/s |",
        f"| ingest wall time | {statistics.median(r['seconds'] for r in ing):.2f} s |",
        f"| ingest peak RSS, parent / largest worker | {max(r['peak_rss_parent_mib'] for r in ing):.0f} MiB / "
        f"{max(r['peak_rss_worker_mib'] for r in ing):.0f} MiB |",
        f"| logs skipped as unreadable | {ing[0]['skipped']} |",
    ]
    if corpus:
        from surge_tune.ml.evaluate import evaluate, format_report

        md += ["", f"Prediction accuracy on `{corpus}`:", "", format_report(evaluate([corpus]))]
    text = "\n".join(md) + "\n"
    if out:
        with open(out, "w") as f:
            f.write(text)
    return text
