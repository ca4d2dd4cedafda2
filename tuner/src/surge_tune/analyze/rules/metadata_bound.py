"""Metadata-bound phases: opens, stats and seeks take a large share of the I/O time of a rank.

Darshan sums metadata time over ranks; ranks run in parallel, so the share that matters is the mean
per-rank metadata time over the job's I/O time (the slowest rank's), not the summed share: 65536 ranks
opening one file for 0.5 s each is not 99% of a 264 s write.
"""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule, data_files


class MetadataBound(Rule):
    code = "metadata-bound"
    title = "Metadata-bound I/O"

    def check(self, s, t):
        r = s.row
        per_rank = r["meta_time"] / max(r["nprocs"], 1)
        if per_rank < t.metadata_min_seconds or r["io_time"] <= 0:
            return None
        share = min(per_rank / r["io_time"], 1.0)
        files = data_files(s)
        if share < t.metadata_share or not len(files):
            return None
        worst = files.sort_values("meta_time", ascending=False).iloc[0]
        fx = [
            fixes.burst_buffer(r["exe"], "Surge daemons serve opens/stats from memory instead of the PFS MDS"),
            fixes.code(
                "open each file once, cache stat() results, drop repeated seeks",
                "each removed call is a metadata round trip",
            ),
        ]
        return self.finding(
            f"each rank spends {per_rank:.2f} s in metadata calls (POSIX_F_META_TIME {r['meta_time']:.2f} s over "
            f"{r['nprocs']} ranks), {share:.0%} of the {r['io_time']:.2f} s I/O time, for "
            f"{r['posix_opens']:.0f} opens, {r['posix_stats']:.0f} stats and {r['posix_seeks']:.0f} seeks; "
            f"worst file {worst['path']}",
            {
                "POSIX_F_META_TIME": round(r["meta_time"], 3),
                "per_rank_meta_time": round(per_rank, 3),
                "meta_share": round(share, 3),
                "POSIX_OPENS": r["posix_opens"],
                "POSIX_STATS": r["posix_stats"],
                "POSIX_SEEKS": r["posix_seeks"],
                "STDIO_OPENS": r["stdio_opens"],
            },
            share * 0.8,
            "80% of metadata calls are avoided or absorbed",
            fx,
        )
