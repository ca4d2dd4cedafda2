"""Plain terminal text: the job in two lines, then each cause with evidence, gain and fixes."""

from __future__ import annotations

from surge_tune.analyze import Analysis

MIB = 1 << 20


def render_text(a: Analysis) -> str:
    r = a.summary.row
    out = [
        f"== {r['input_path']}",
        f"   app {r['app']}  job {r['job_id']}  {r['nprocs']} procs  {r['source']} {r['format_version']}"
        + ("  [PARTIAL: counters are lower bounds]" if r["partial"] else ""),
        f"   {(r['bytes_read'] + r['bytes_written']) / MIB:.1f} MiB moved, I/O time {r['io_time']:.3f} s "
        f"(slowest rank), {r['throughput_mib_s']:.1f} MiB/s, {r['num_files']} files "
        f"({r['num_shared_files']} shared), interface {r['interface']}",
    ]
    out += [f"   warning: {w}" for w in a.summary.job.warnings]
    out.append(f"   verdict: {a.verdict}")
    for i, f in enumerate(a.findings, 1):
        out.append(f"\n[{i}] {f.severity.upper()} {f.title} ({f.code})")
        out.append(f"    {f.summary}")
        out.append("    evidence: " + ", ".join(f"{k}={v}" for k, v in f.evidence.items()))
        out.append(f"    expected gain: {f.gain}")
        out += [f"    caveat: {c}" for c in f.caveats]
        for fix in f.fixes:
            out.append(f"    fix [{fix.kind}] {fix.command}")
            out.append(f"        ({fix.why})")
    return "\n".join(out) + "\n"
