"""Metadata-bound phases: opens, stats, seeks and syncs take a large share of the I/O time."""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule


class MetadataBound(Rule):
    code = "metadata-bound"
    title = "Metadata-bound I/O"

    def check(self, s, t):
        r = s.row
        total = r["read_time"] + r["write_time"] + r["meta_time"]
        if r["meta_time"] < t.metadata_min_seconds or total <= 0:
            return None
        share = r["meta_time"] / total
        if share < t.metadata_share:
            return None
        worst = s.files.sort_values("meta_time", ascending=False).iloc[0]
        fx = [
            fixes.burst_buffer(r["exe"], "Surge daemons serve opens/stats from memory instead of the PFS MDS"),
            fixes.code(
                "open each file once, cache stat() results, drop per-write fsync (sync at phase end)",
                "each removed call is a metadata round trip",
            ),
        ]
        return self.finding(
            t,
            f"metadata takes {share:.0%} of I/O time ({r['meta_time']:.2f} s over all ranks); "
            f"worst file {worst['path']}",
            {
                "POSIX_F_META_TIME": round(r["meta_time"], 3),
                "meta_share": round(share, 3),
                "POSIX_OPENS": r["posix_opens"],
                "POSIX_STATS": r["posix_stats"],
                "POSIX_SEEKS": r["posix_seeks"],
                "POSIX_FSYNCS": r["posix_fsyncs"],
                "STDIO_OPENS": r["stdio_opens"],
            },
            share * 0.8,
            f"up to {share * 0.8:.0%} of I/O time if 80% of metadata calls are avoided or absorbed",
            fx,
        )
