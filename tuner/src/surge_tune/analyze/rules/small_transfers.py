"""Small or unaligned transfers: many requests of at most 100 KiB, or requests not aligned to the file
system block, and the layer that issued them.

Gain model (analyze/costs.py): merging the small requests removes their latencies, a share of the data
time weighted by the bytes around them; an unaligned request pays one extra round trip (read-modify-write).
Darshan's 100K_1M bucket includes 1 MiB, so it never counts as small.

The cause layer: on a file opened through MPI-IO (or HDF5 over MPI-IO) whose MPI-IO accesses are small too
(MPIIO_SIZE_*_AGG_ buckets), the application asks for small pieces; if its MPI-IO accesses are large, the
MPI-IO layer splits them (data sieving, a small cb_buffer_size); STDIO files are split by libc; otherwise
the application's own POSIX calls are small.
"""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule, data_files
from surge_tune.analyze.costs import latency_share
from surge_tune.ingest.job import SMALL_BUCKETS

MIB = 1 << 20


def cause_layer(f) -> tuple[str, dict]:
    """Which layer issued a file's small POSIX requests, with the counters that show it."""
    api = "HDF5 over MPI-IO" if f["interface"] == "hdf5" else "MPI-IO"
    if f["interface"] in ("mpiio", "hdf5") and f["mpiio_indep_ops"] + f["mpiio_coll_ops"] > 0:
        evidence = {"MPIIO_small_accesses": int(f["mpiio_small_ops"])}
        if f["mpiio_small_ops"] >= 0.5 * f["small_requests"]:
            return f"the application's small {api} calls", evidence
        return "the MPI-IO layer splitting large calls (data sieving or a small cb_buffer_size)", evidence
    if f["stdio_bytes"] > 0:
        return "libc's STDIO buffering", {"STDIO_BYTES": int(f["stdio_bytes"])}
    return "the application's own POSIX calls", {}


class SmallOrUnalignedTransfers(Rule):
    code = "small-transfers"
    title = "Small or unaligned transfers"

    def check(self, s, t):
        r = s.row
        requests = r["posix_reads"] + r["posix_writes"]
        if requests < t.min_requests:
            return None
        small = sum(r[f"{op}_{b.lower()}"] for op in ("read", "write") for b in SMALL_BUCKETS)
        unaligned = r["unaligned_pct"] / 100 * requests
        total_bytes = r["bytes_read"] + r["bytes_written"]
        small_share = (
            latency_share(small, requests, total_bytes) if r["small_request_pct"] >= t.small_request_pct else 0
        )
        unaligned_share = (
            latency_share(unaligned, requests, total_bytes) if r["unaligned_pct"] >= t.unaligned_pct else 0
        )
        data_time = r["read_time"] + r["write_time"]
        share = max(small_share, unaligned_share) * data_time / max(data_time + r["meta_time"], 1e-12)
        if share <= 0:
            return None
        files = data_files(s)
        if not len(files):
            return None
        busiest = files.loc[(files["small_requests"] + files["unaligned_requests"]).idxmax()]
        layer, layer_evidence = cause_layer(busiest)
        evidence = {
            f"POSIX_SIZE_{op.upper()}_{b}": r[f"{op}_{b.lower()}"]
            for op in ("read", "write")
            for b in SMALL_BUCKETS
            if r[f"{op}_{b.lower()}"]
        }
        evidence.update(
            {
                "small_request_pct": round(r["small_request_pct"], 1),
                "POSIX_FILE_NOT_ALIGNED_pct": round(r["unaligned_pct"], 1),
                "POSIX_READS": r["posix_reads"],
                "POSIX_WRITES": r["posix_writes"],
                "bytes": total_bytes,
                "latency_share": round(max(small_share, unaligned_share), 3),
                "pattern": "small" if small_share >= unaligned_share else "unaligned",
                "busiest_file": busiest["path"],
                **layer_evidence,
            }
        )
        fx = []
        if r["collective"] or r["mpiio_indep_reads"] + r["mpiio_indep_writes"]:
            fx.append(
                fixes.mpi_hints(
                    {"romio_cb_write": "enable", "romio_cb_read": "enable", "cb_buffer_size": 16 << 20},
                    "collective buffering turns many small requests into few 16 MiB ones",
                )
            )
        if 0 < busiest["stripe_size"] < MIB:
            fx += fixes.layout(
                int(busiest["stripe_count"]),
                MIB,
                busiest["path"],
                "1 MiB stripes: aggregated requests land aligned on stripe boundaries",
                keeps_count=True,
            )
        fx.append(fixes.burst_buffer(r["exe"], "the Surge burst buffer absorbs small writes at flash latency"))
        fx.append(
            fixes.code(
                "buffer writes to >= 1 MiB before issuing them (setvbuf / an app-level buffer)",
                "fewer, larger requests",
            )
        )
        what = (
            f"{small:.0f} of {requests:.0f} POSIX requests are at most 100 KiB ({r['small_request_pct']:.0f}%)"
            if small_share >= unaligned_share
            else f"{unaligned:.0f} of {requests:.0f} POSIX requests are unaligned ({r['unaligned_pct']:.0f}%)"
        )
        return self.finding(
            f"{what}, issued by {layer} on {busiest['path']}; each pays a full request latency, "
            f"{max(small_share, unaligned_share):.0%} of the transfer cost next to "
            f"{total_bytes / MIB:.0f} MiB moved",
            evidence,
            share,
            "merging the small requests removes their latency (1 latency = 1 MiB of transfer)",
            fx,
        )
