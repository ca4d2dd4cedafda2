"""Curves for Surge's benchmarks, drawn from the JSON they write.

``python3 -m surge_tune.benchplot conns IN.json OUT.png`` draws ``surge bench
conns``: throughput against connections per daemon, one panel for writes and
one for reads, a line per policy with the cap on (solid) and off (dashed),
and the capped target 0.9 x min(N x cap, uncapped rate) dotted; log scales.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def plot_conns(data: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for p in data["points"] if p["conns"].isdigit()]
    policies = list(dict.fromkeys(p["policy"] for p in points))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for ax, kind in zip(axes, ("write", "read"), strict=True):
        for i, policy in enumerate(policies):
            color = f"C{i}"
            for capped, style in ((True, "-"), (False, "--")):
                mine = sorted((int(p["conns"]), p) for p in points if p["policy"] == policy and p["capped"] == capped)
                if not mine:
                    continue
                label = f"{policy}, cap {'on' if capped else 'off'}"
                ax.plot(
                    [n for n, _ in mine], [p[kind] / 1e6 for _, p in mine], style, marker="o", color=color, label=label
                )
                targets = [(n, p[f"{kind}_target"]) for n, p in mine if p.get(f"{kind}_target")]
                if capped and targets and i == 0:
                    xs, ys = [n for n, _ in targets], [t / 1e6 for _, t in targets]
                    ax.plot(xs, ys, ":", color="grey", label="target (cap on)")
        ax.set_title(f"{data['threads']} threads, synchronous {kind}s")
        ax.set_xlabel("connections per daemon")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({int(p["conns"]) for p in points}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_ylabel("MB/s (log scale)")
        # Log scale: the capped curves (tens of MB/s) and the uncapped ones
        # (hundreds) both stay readable.
        ax.set_yscale("log")
        ax.get_yaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"surge bench conns: per-connection cap {data['cap'] / 1e6:.0f} MB/s, medians of {data['runs']} runs")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "conns":
        print("usage: python3 -m surge_tune.benchplot conns IN.json OUT.png", file=sys.stderr)
        return 2
    source, out = Path(argv[1]), Path(argv[2])
    try:
        data = json.loads(source.read_text())
        plot_conns(data, out)
    except (OSError, ValueError, KeyError) as e:
        print(f"benchplot: cannot draw {out} from {source}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
