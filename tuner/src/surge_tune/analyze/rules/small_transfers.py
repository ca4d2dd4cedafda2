"""Small or unaligned transfers: many requests below 1 MiB, or requests not aligned to the file system block.

Gain model: a request costs a fixed latency plus bytes / bandwidth. Aggregating small requests into
large ones removes the fixed part; its share of I/O time is at most the small requests' share of
requests minus their (small) share of bytes.
"""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule
from surge_tune.ingest.job import BUCKET_TYPICAL_BYTES, SIZE_BUCKETS

SMALL = [b.lower() for b in SIZE_BUCKETS[:5]]


class SmallOrUnalignedTransfers(Rule):
    code = "small-transfers"
    title = "Small or unaligned transfers"

    def check(self, s, t):
        r = s.row
        requests = r["posix_reads"] + r["posix_writes"]
        if requests < t.min_requests:
            return None
        small = sum(r[f"{op}_{b}"] for op in ("read", "write") for b in SMALL)
        unaligned = r["unaligned_pct"]
        if r["small_request_pct"] < t.small_request_pct and unaligned < t.unaligned_pct:
            return None
        total_bytes = max(r["bytes_read"] + r["bytes_written"], 1)
        small_bytes = sum(
            r[f"{op}_{b.lower()}"] * size
            for op in ("read", "write")
            for b, size in zip(SIZE_BUCKETS[:5], BUCKET_TYPICAL_BYTES[:5], strict=False)
        )
        share = max(small / requests - min(small_bytes / total_bytes, 1.0), 0.0)
        if unaligned >= t.unaligned_pct:
            share = max(share, 0.5 * unaligned / 100)  # read-modify-write doubles an unaligned request
        evidence = {
            f"POSIX_SIZE_{op.upper()}_{b.upper()}": r[f"{op}_{b}"]
            for op in ("read", "write")
            for b in SMALL
            if r[f"{op}_{b}"]
        }
        evidence.update(
            {
                "small_request_pct": round(r["small_request_pct"], 1),
                "POSIX_FILE_NOT_ALIGNED_pct": round(unaligned, 1),
                "POSIX_READS": r["posix_reads"],
                "POSIX_WRITES": r["posix_writes"],
                "transfer_size": r["transfer_size"],
            }
        )
        busiest = s.files.sort_values("small_requests", ascending=False).iloc[0]
        fx = []
        if r["collective"] or r["mpiio_indep_reads"] + r["mpiio_indep_writes"]:
            fx.append(
                fixes.mpi_hints(
                    {"romio_cb_write": "enable", "romio_cb_read": "enable", "cb_buffer_size": 16 << 20},
                    "collective buffering turns many small requests into few 16 MiB ones",
                )
            )
        fx += fixes.layout(
            max(r["stripe_count"], 1),
            1 << 20,
            busiest["path"],
            "1 MiB stripes: aggregated requests land aligned on stripe boundaries",
        )
        fx.append(fixes.burst_buffer(r["exe"], "the Surge burst buffer absorbs small writes at flash latency"))
        fx.append(
            fixes.code(
                "buffer writes to >= 1 MiB before issuing them (setvbuf / an app-level buffer)",
                "fewer, larger requests",
            )
        )
        return self.finding(
            t,
            f"{small:.0f} of {requests:.0f} POSIX requests are below 1 MiB ({r['small_request_pct']:.0f}%), "
            f"{unaligned:.0f}% unaligned; busiest file {busiest['path']}",
            evidence,
            share,
            f"up to {share:.0%} of I/O time if per-request latency dominates small requests",
            fx,
        )
