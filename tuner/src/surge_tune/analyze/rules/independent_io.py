"""Independent I/O where collective would win: many ranks issue small independent requests to one shared file.

Collective two-phase I/O gathers those requests on a few aggregators that write large contiguous stripe-sized
blocks. It wins when requests are small or interleaved; with large contiguous per-rank blocks it does not,
so the rule requires small requests on the file (or no MPI-IO at all on a shared file).
"""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule


class IndependentInsteadOfCollective(Rule):
    code = "independent-io"
    title = "Independent I/O where collective would win"

    def check(self, s, t):
        r = s.row
        files = s.files[s.files["shared"] & ((s.files["reads"] + s.files["writes"]) >= t.min_requests)]
        for _, f in files.sort_values("bytes_written", ascending=False).iterrows():
            ops = f["reads"] + f["writes"]
            small_pct = 100 * f["small_requests"] / max(ops, 1)
            mpiio_ops = f["mpiio_indep_ops"] + f["mpiio_coll_ops"]
            indep_share = f["mpiio_indep_ops"] / mpiio_ops if mpiio_ops else 1.0
            if indep_share < t.independent_share or small_pct < t.small_request_pct:
                continue
            aggregators = max(1, min(int(f["n_ranks"]) // 4 or 1, 16))
            gain = small_pct / 100 * 0.8
            api = "MPI-IO independent" if mpiio_ops else "POSIX (no MPI-IO)"
            fx = [
                fixes.code(
                    "use MPI_File_write_all / MPI_File_read_all with a file view instead of "
                    "MPI_File_write_at / POSIX write",
                    "lets MPI-IO aggregate the ranks' requests",
                ),
                fixes.mpi_hints(
                    {
                        "romio_cb_write": "enable",
                        "romio_cb_read": "enable",
                        "cb_nodes": aggregators,
                        "cb_buffer_size": 16 << 20,
                    },
                    f"{aggregators} aggregators writing 16 MiB blocks",
                ),
                fixes.burst_buffer(r["exe"], "Surge's collective layer overlaps aggregation and file I/O"),
            ]
            return self.finding(
                t,
                f"{int(f['n_ranks'])} ranks access {f['path']} through {api} with {small_pct:.0f}% small requests",
                {
                    "file": f["path"],
                    "ranks": int(f["n_ranks"]),
                    "MPIIO_INDEP_OPS": int(f["mpiio_indep_ops"]),
                    "MPIIO_COLL_OPS": int(f["mpiio_coll_ops"]),
                    "posix_requests": int(ops),
                    "small_request_pct": round(small_pct, 1),
                },
                gain,
                f"up to {gain:.0%} of I/O time if aggregation removes most per-request cost",
                fx,
            )
        return None
