"""A shared file whose layout leaves too few storage targets, or too few writers, for its writers.

DCA-IO's rule (and T3PIO's finding) for a shared file: stripe count = number of I/O processes (capped by
the targets available). With fewer stripes the writers queue on the same targets; with collective I/O,
fewer aggregators (cb_nodes) than stripes leaves targets idle. Gain model: bandwidth grows with the
targets in use, so the write time shrinks by used/recommended targets.
"""

import re

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule

MIB = 1 << 20


def _cb_nodes(hints: str) -> int:
    m = re.search(r"cb_nodes=(\d+)", hints)
    return int(m.group(1)) if m else 0


class SharedFileLayout(Rule):
    code = "shared-file-layout"
    title = "Shared file striped over too few targets for its writers"

    def check(self, s, t):
        r = s.row
        files = s.files[
            s.files["shared"] & (s.files["bytes_written"] >= t.shared_file_min_bytes) & (s.files["stripe_count"] > 0)
        ]
        cb_nodes = _cb_nodes(s.job.hints)
        worst, worst_gain = None, 0.0
        for _, f in files.iterrows():
            writers = int(f["n_ranks"])
            wanted = min(writers, t.max_targets) if t.max_targets else writers
            used = int(f["stripe_count"])
            if r["collective"] and cb_nodes:
                used = min(used, cb_nodes)  # only aggregators touch the file in two-phase I/O
            if used >= wanted:
                continue
            gain = (1 - used / wanted) * (
                r["write_time"] / max(r["read_time"] + r["write_time"] + r["meta_time"], 1e-12)
            )
            if gain > worst_gain or worst is None:
                worst, worst_gain, worst_wanted = f, gain, wanted
        if worst is None:
            return None
        count = worst_wanted
        size = 1 << 20  # DCA-IO's rule-based phase: start at 1 MiB, grow in later runs
        evidence = {
            "file": worst["path"],
            "writers": int(worst["n_ranks"]),
            "stripe_count": int(worst["stripe_count"]),
            "stripe_size": int(worst["stripe_size"]),
            "bytes_written": int(worst["bytes_written"]),
        }
        if cb_nodes:
            evidence["cb_nodes"] = cb_nodes
        fx = fixes.layout(count, size, worst["path"], f"one stripe per writer ({count} writers)")
        hints = {"striping_factor": count, "striping_unit": size}
        if r["collective"]:
            hints.update({"cb_nodes": count, "romio_cb_write": "enable"})
        fx.append(fixes.mpi_hints(hints, "sets the layout at MPI_File_open and one aggregator per stripe"))
        fx.append(
            fixes.code(
                f"surge run --autotune -- mpirun ... {r['app']}",
                "let DCA-IO pick and grow the layout from this app's history",
            )
        )
        return self.finding(
            t,
            f"{worst['path']} is written by {int(worst['n_ranks'])} ranks but striped over "
            f"{int(worst['stripe_count'])} target(s)" + (f" with {cb_nodes} aggregator(s)" if cb_nodes else ""),
            evidence,
            worst_gain,
            f"up to {worst_gain:.0%} of I/O time if write bandwidth scales with the {count} targets",
            fx,
        )
