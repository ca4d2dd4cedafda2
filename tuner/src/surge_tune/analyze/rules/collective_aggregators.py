"""Too few collective-buffering aggregators: the ranks share the data evenly at the MPI-IO layer, but a few
of them do all the POSIX I/O on the shared file.

The causal chain (ROMIO's Lustre driver, and Cray MPI-IO, set cb_nodes to the file's stripe count by
default): a shared file on S stripes -> collective buffering picks S aggregators -> S ranks do all POSIX
I/O while the others wait. The counters that prove each link: the file's stripe count (LUSTRE), collective
calls (MPIIO_COLL_*), balanced MPI-IO bytes per rank (MPIIO_SLOWEST/FASTEST_RANK_BYTES), and POSIX bytes
concentrated on one rank (POSIX_SLOWEST_RANK_BYTES = the file's bytes, POSIX_FASTEST_RANK_BYTES = 0).
Gain model: the file's I/O time (its slowest rank) shrinks by aggregators used / aggregators possible.

A file on more stripes than the run had aggregators is not this case: the layout did not cap them, and
fewer aggregators than stripes is MPI-IO's default on few nodes (ROMIO and Open MPI's ompio pick about one
per node), so a layout change would change nothing (the accuracy suite's clean-collective control: 4
stripes, 4 ranks on one node, one aggregator).
"""

import math

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule, balanced, data_files
from surge_tune.analyze.targets import target_cap

MIB = 1 << 20


class FewCollectiveAggregators(Rule):
    code = "few-aggregators"
    title = "Collective I/O funnelled through too few aggregators"

    def check(self, s, t):
        r = s.row
        files = data_files(s)
        files = files[
            files["shared"]
            & (files["mpiio_coll_ops"] > 0)
            & ((files["bytes_read"] + files["bytes_written"]) >= t.shared_file_min_bytes)
        ]
        cap = target_cap(s, t.max_targets)
        best, best_gain = None, 0.0
        for _, f in files.iterrows():
            nbytes = f["bytes_read"] + f["bytes_written"]
            if not balanced(f["mpiio_slowest_rank_bytes"], f["mpiio_fastest_rank_bytes"], t.balanced_bytes):
                continue  # the application itself is unbalanced: load-imbalance's case
            if f["slowest_rank_bytes"] <= 0 or f["fastest_rank_bytes"] > t.balanced_bytes * f["slowest_rank_bytes"]:
                continue  # POSIX I/O is spread over the ranks: aggregation is not the bottleneck
            aggregators = max(1, math.ceil(nbytes / f["slowest_rank_bytes"] - 0.01))
            if f["stripe_count"] > aggregators:
                continue  # the layout allowed more aggregators than MPI-IO chose: not the stripes' doing
            wanted = min(int(f["n_ranks"]), cap.count)
            if aggregators >= wanted or r["io_time"] <= 0:
                continue
            gain = f["slowest_rank_time"] * (1 - aggregators / wanted) / r["io_time"]
            if gain > best_gain:
                best, best_gain, best_aggr, best_wanted = f, gain, aggregators, wanted
        if best is None:
            return None
        f, stripes = best, int(best["stripe_count"])
        chain = (
            f"{f['path']} is on {stripes} stripe(s), so collective buffering picks {best_aggr} aggregator(s)"
            if stripes == best_aggr
            else f"collective buffering on {f['path']} uses {best_aggr} aggregator(s)"
        )
        summary = (
            f"{chain}, so {best_aggr} of {int(f['n_ranks'])} ranks do all the POSIX I/O: MPI-IO bytes per rank are "
            f"balanced (MPIIO_SLOWEST_RANK_BYTES {int(f['mpiio_slowest_rank_bytes'])}, MPIIO_FASTEST_RANK_BYTES "
            f"{int(f['mpiio_fastest_rank_bytes'])}) but POSIX_SLOWEST_RANK_BYTES is {int(f['slowest_rank_bytes'])} "
            f"and POSIX_FASTEST_RANK_BYTES {int(f['fastest_rank_bytes'])}; the slowest rank takes "
            f"{f['slowest_rank_time']:.2f} s"
        )
        evidence = {
            "file": f["path"],
            "LUSTRE_STRIPE_COUNT": stripes,
            "MPIIO_COLL_OPS": int(f["mpiio_coll_ops"]),
            "MPIIO_SLOWEST_RANK_BYTES": int(f["mpiio_slowest_rank_bytes"]),
            "MPIIO_FASTEST_RANK_BYTES": int(f["mpiio_fastest_rank_bytes"]),
            "POSIX_SLOWEST_RANK_BYTES": int(f["slowest_rank_bytes"]),
            "POSIX_FASTEST_RANK_BYTES": int(f["fastest_rank_bytes"]),
            "F_SLOWEST_RANK_TIME": round(f["slowest_rank_time"], 3),
            "aggregators": best_aggr,
            "ranks": int(f["n_ranks"]),
            "target_cap": cap.how,
        }
        n = best_wanted
        fx = fixes.layout(n, MIB, f["path"], f"{n} stripes, so ROMIO picks {n} aggregators ({cap.how})")
        fx.append(
            fixes.mpi_hints(
                {"striping_factor": n, "striping_unit": MIB, "cb_nodes": n, "romio_cb_write": "enable"},
                "the same layout set at MPI_File_open, with one aggregator per stripe",
                layout_of=f["path"],
            )
        )
        return self.finding(
            summary, evidence, best_gain, f"{n} aggregators share the file's I/O instead of {best_aggr}", fx
        )
