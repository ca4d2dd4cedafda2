"""File-per-process metadata storm: thousands of files, one per rank, created and opened at once.

Every create hits the metadata server in the same instant. Gain model: the metadata share of I/O time,
which one shared file (or the burst buffer absorbing the creates) would mostly remove.
"""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule


class FilePerProcessMetadataStorm(Rule):
    code = "fpp-metadata-storm"
    title = "File-per-process metadata storm"

    def check(self, s, t):
        r = s.row
        per_rank = s.files[(~s.files["shared"]) & ((s.files["bytes_read"] + s.files["bytes_written"]) > 0)]
        if len(per_rank) < t.fpp_min_files:
            return None
        total = r["read_time"] + r["write_time"] + r["meta_time"]
        share = r["meta_time"] / total if total > 0 else 0.0
        if share < t.fpp_metadata_share:
            return None
        sample = per_rank.iloc[0]["path"]
        fx = [
            fixes.code(
                "write one shared file with collective MPI-IO (or HDF5/ADIOS2 subfiling: a few files per node)",
                "1 create instead of one per rank",
            ),
            *fixes.layout(
                1, 1 << 20, sample, "DCA-IO rule for file-per-process: one stripe per file, no cross-target locking"
            ),
            fixes.burst_buffer(r["exe"], "creates are absorbed by the node-local Surge daemon, drained later"),
        ]
        gain = share * 0.8
        return self.finding(
            f"{len(per_rank)} per-process files; metadata takes {share:.0%} of I/O time "
            f"({r['posix_opens']:.0f} opens, {r['posix_stats']:.0f} stats)",
            {
                "per_process_files": len(per_rank),
                "nprocs": r["nprocs"],
                "POSIX_OPENS": r["posix_opens"],
                "POSIX_STATS": r["posix_stats"],
                "POSIX_F_META_TIME": round(r["meta_time"], 3),
                "meta_share": round(share, 3),
            },
            gain,
            "most creates/opens disappear",
            fx,
        )
