"""The three report figures as base64 PNGs (matplotlib Agg, imported only when a figure is drawn)."""

from __future__ import annotations

import base64
import io

import numpy as np

from surge_tune.features import JobSummary
from surge_tune.ingest.job import SIZE_BUCKETS


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _figure(title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    ax.set_title(title, fontsize=10)
    return fig, ax


def access_sizes(s: JobSummary) -> str:
    fig, ax = _figure("POSIX access sizes")
    x = np.arange(len(SIZE_BUCKETS))
    reads = [s.row[f"read_{b.lower()}"] for b in SIZE_BUCKETS]
    writes = [s.row[f"write_{b.lower()}"] for b in SIZE_BUCKETS]
    ax.bar(x - 0.2, reads, 0.4, label="reads")
    ax.bar(x + 0.2, writes, 0.4, label="writes")
    ax.set_xticks(x, [b.replace("_", "-") for b in SIZE_BUCKETS], rotation=45, fontsize=7)
    ax.set_ylabel("requests")
    ax.legend(fontsize=8)
    return _png(fig)


def io_over_time(s: JobSummary) -> str:
    """DXT segments when the log has them; else each record's first-to-last read/write interval."""
    fig, ax = _figure("I/O over time (per rank)")
    job = s.job
    if len(job.dxt):
        for op, color in (("read", "tab:blue"), ("write", "tab:orange")):
            seg = job.dxt[job.dxt["op"] == op]
            ax.hlines(seg["rank"], seg["start_time"], seg["end_time"], colors=color, lw=4, label=op)
    else:
        for module, prefix in (("POSIX", "POSIX"), ("STDIO", "STDIO")):
            df = job.frame(module)
            for op, color in (("READ", "tab:blue"), ("WRITE", "tab:orange")):
                start, end = f"{prefix}_F_{op}_START_TIMESTAMP", f"{prefix}_F_{op}_END_TIMESTAMP"
                if start in df.columns:
                    active = df[df[end] > 0]
                    ax.hlines(
                        active["rank"], active[start], active[end], colors=color, lw=4, label=f"{op.lower()} ({module})"
                    )
    ax.set_xlabel("seconds since job start")
    ax.set_ylabel("rank (-1 = shared record)")
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(
            dict(zip(labels, handles, strict=False)).values(),
            dict(zip(labels, handles, strict=False)).keys(),
            fontsize=8,
        )
    return _png(fig)


def rank_balance(s: JobSummary) -> str:
    fig, ax = _figure("Per-rank I/O time")
    ranks = s.ranks.sort_values("rank")
    if len(ranks):
        ax.bar(ranks["rank"].astype(int), ranks["io_time"], width=1.0)
        ax.axhline(ranks["io_time"].mean(), color="k", ls="--", lw=1, label="mean")
        ax.legend(fontsize=8)
    shared = s.files[s.files["shared"]]
    if not len(ranks) and len(shared):
        ax.barh(["fastest", "slowest"], [shared["fastest_rank_time"].max(), shared["slowest_rank_time"].max()])
    ax.set_xlabel("rank")
    ax.set_ylabel("I/O time (s)")
    return _png(fig)
