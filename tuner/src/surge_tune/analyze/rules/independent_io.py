"""Independent I/O where collective would win: ranks issue small independent requests to one shared file.

Collective two-phase I/O gathers those requests on a few aggregators that write large contiguous blocks.
It wins when requests are small or interleaved; with large contiguous per-rank blocks it does not. So the
rule counts bytes, not operations: the small requests must carry a real share of the file's bytes
(small_request_pct), not be a few header reads next to gigabytes moved collectively, and the file must be
large enough to matter (shared_file_min_bytes), not a small input file. The gain is the small requests'
latency share of the file's transfer cost (analyze/costs.py).
"""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule, data_files
from surge_tune.analyze.costs import latency_share

MIB = 1 << 20


class IndependentInsteadOfCollective(Rule):
    code = "independent-io"
    title = "Independent I/O where collective would win"

    def check(self, s, t):
        r = s.row
        files = data_files(s)
        nbytes = files["bytes_read"] + files["bytes_written"]
        files = files[files["shared"] & (nbytes >= t.shared_file_min_bytes)]
        summed = r["read_time"] + r["write_time"] + r["meta_time"]
        best, best_gain = None, 0.0
        for _, f in files.iterrows():
            ops = f["reads"] + f["writes"]
            mpiio_ops = f["mpiio_indep_ops"] + f["mpiio_coll_ops"]
            indep_share = f["mpiio_indep_ops"] / mpiio_ops if mpiio_ops else 1.0
            nbytes = f["bytes_read"] + f["bytes_written"]
            small_bytes_share = f["small_bytes"] / nbytes
            if (
                ops < t.min_requests
                or indep_share < t.independent_share
                or small_bytes_share < t.small_request_pct / 100
            ):
                continue
            cost = latency_share(f["small_requests"], ops, nbytes)
            gain = cost * 0.8 * (f["io_time"] / summed if summed > 0 else 1.0)
            if gain > best_gain:
                best, best_gain, best_cost, best_bytes_share = f, gain, cost, small_bytes_share
        if best is None:
            return None
        f = best
        aggregators = max(1, min(int(f["n_ranks"]) // 4 or 1, 16))
        api = (
            f"{int(f['mpiio_indep_ops'])} independent MPI-IO calls ({int(f['mpiio_small_ops'])} of at most 100 KiB)"
            if f["mpiio_indep_ops"] + f["mpiio_coll_ops"]
            else "POSIX calls without MPI-IO"
        )
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
            f"{int(f['n_ranks'])} ranks access {f['path']} ({(f['bytes_read'] + f['bytes_written']) / MIB:.0f} MiB) "
            f"with {api}, so each becomes its own POSIX request ({int(f['small_requests'])} of "
            f"{int(f['reads'] + f['writes'])} at most 100 KiB, carrying ~{best_bytes_share:.0%} of the bytes and "
            f"{best_cost:.0%} of the transfer cost in latency); collective buffering would merge them into "
            "large blocks",
            {
                "file": f["path"],
                "ranks": int(f["n_ranks"]),
                "bytes": int(f["bytes_read"] + f["bytes_written"]),
                "MPIIO_INDEP_OPS": int(f["mpiio_indep_ops"]),
                "MPIIO_COLL_OPS": int(f["mpiio_coll_ops"]),
                "MPIIO_small_accesses": int(f["mpiio_small_ops"]),
                "posix_requests": int(f["reads"] + f["writes"]),
                "posix_small_requests": int(f["small_requests"]),
                "small_bytes_share": round(best_bytes_share, 3),
                "latency_share": round(best_cost, 3),
            },
            best_gain,
            "aggregation removes 80% of the small requests' latency",
            fx,
        )
