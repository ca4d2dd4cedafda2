"""A shared file striped over too few storage targets for the ranks writing it independently.

DCA-IO's rule (and T3PIO's finding) for a shared file: stripe count = number of I/O processes, capped by
the targets available (analyze/targets.py). With fewer stripes the writers queue on the same targets.
A file written collectively through few aggregators is rule few-aggregators' case (the stripe count sets
the aggregator count there), so only files whose POSIX writes are spread over the ranks count here.
Gain model: bandwidth grows with the targets in use, so the write time shrinks by used/recommended targets.
"""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule, data_files
from surge_tune.analyze.targets import target_cap

MIB = 1 << 20


class SharedFileLayout(Rule):
    code = "shared-file-layout"
    title = "Shared file striped over too few targets for its writers"

    def check(self, s, t):
        r = s.row
        files = data_files(s)
        files = files[
            files["shared"] & (files["bytes_written"] >= t.shared_file_min_bytes) & (files["stripe_count"] > 0)
        ]
        # POSIX writes spread over the ranks (not funnelled through a few aggregators)
        files = files[files["fastest_rank_bytes"] > t.balanced_bytes * files["slowest_rank_bytes"]]
        cap = target_cap(s, t.max_targets)
        total = r["read_time"] + r["write_time"] + r["meta_time"]
        worst, worst_gain = None, 0.0
        for _, f in files.iterrows():
            wanted = min(int(f["n_ranks"]), cap.count)
            used = int(f["stripe_count"])
            if used >= wanted:
                continue
            gain = (1 - used / wanted) * (r["write_time"] / max(total, 1e-12))
            if gain > worst_gain:
                worst, worst_gain, count = f, gain, wanted
        if worst is None:
            return None
        evidence = {
            "file": worst["path"],
            "writers": int(worst["n_ranks"]),
            "stripe_count": int(worst["stripe_count"]),
            "stripe_size": int(worst["stripe_size"]),
            "bytes_written": int(worst["bytes_written"]),
            "target_cap": cap.how,
        }
        fx = fixes.layout(count, MIB, worst["path"], f"one stripe per writer, {count} ({cap.how})")
        fx.append(
            fixes.mpi_hints(
                {"striping_factor": count, "striping_unit": MIB},
                "sets the layout at MPI_File_open",
                layout_of=worst["path"],
            )
        )
        fx.append(
            fixes.code(
                f"surge run --autotune -- mpirun ... {r['app']}",
                "let DCA-IO pick and grow the layout from this app's history",
            )
        )
        return self.finding(
            f"{worst['path']} is written by {int(worst['n_ranks'])} ranks, each doing its own POSIX writes "
            f"(SLOWEST_RANK_BYTES {int(worst['slowest_rank_bytes'])}, FASTEST_RANK_BYTES "
            f"{int(worst['fastest_rank_bytes'])}), but striped over {int(worst['stripe_count'])} target(s), so the "
            "writers queue on the same targets",
            evidence,
            worst_gain,
            f"write bandwidth scales with the {count} targets",
            fx,
        )
