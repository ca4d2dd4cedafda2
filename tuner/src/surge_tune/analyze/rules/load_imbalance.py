"""Load imbalance and stragglers: some ranks spend much longer in I/O than others.

Two views: across ranks (per-process I/O time over files each rank owns) and within shared files
(Darshan's slowest vs fastest rank). A shared file must matter by its bytes (at least imbalance_min_bytes
and 1% of the job's), and the file that costs most seconds is named, not the one with the largest
relative spread. A file whose MPI-IO bytes per rank are balanced while one rank does its POSIX I/O is
not the application's imbalance but collective buffering's (rule few-aggregators), and is left to it.

"Ranks move equal bytes" is claimed only from evidence that covers the data: per-rank bytes when the
per-rank table sees most bytes (not when Darshan reduced the records), or the file's slowest and fastest
rank bytes. Gain model: with balance the phase ends at the mean rank time (or halfway between the
fastest and the slowest rank on the file).
"""

import pandas as pd

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule, balanced, data_files


def _aggregation_made(files, t):
    """Balanced at MPI-IO under collective calls: collective buffering placed the POSIX I/O, not the
    application's decomposition (element-wise over files)."""
    return (files["mpiio_coll_ops"] > 0) & balanced(
        files["mpiio_slowest_rank_bytes"], files["mpiio_fastest_rank_bytes"], t.balanced_bytes
    )


def _job_ranks(s):
    """The ranks the decomposition spreads work over: the job's MPI ranks, not the helper processes a
    profile gives pseudo-ranks from nprocs on (a launcher's shell). When no reduced record hides where a
    rank's bytes went, a rank without a per-rank row did no I/O and counts as 0 s and 0 bytes; otherwise
    only ranks seen doing I/O count."""
    ranks, nprocs = s.ranks, int(s.row["nprocs"])
    ranks = ranks[(ranks["rank"] >= 0) & (ranks["rank"] < nprocs)]
    if s.files["reduced"].any():
        return ranks[ranks["io_time"] > 0]
    every = pd.DataFrame({"rank": range(nprocs)})
    return every.merge(ranks, on="rank", how="left").fillna({"io_time": 0.0, "bytes": 0})


class LoadImbalance(Rule):
    code = "load-imbalance"
    title = "Load imbalance / stragglers"

    def check(self, s, t):
        r = s.row
        evidence, saved, where, equal_bytes = {}, 0.0, [], []
        files = data_files(s)
        ranks = _job_ranks(s)
        active = ranks[ranks["io_time"] > 0]
        job_bytes = r["bytes_read"] + r["bytes_written"]
        nbytes = files["bytes_read"] + files["bytes_written"]
        # Per-rank spread on data that collective buffering placed says nothing of the decomposition.
        aggregated = float(nbytes[files["shared"] & _aggregation_made(files, t)].sum())
        per_rank_known = r["rank_time_imbalance"] >= 0 and aggregated < job_bytes / 2
        if per_rank_known and len(ranks) >= 2 and active["io_time"].max() >= t.imbalance_min_seconds:
            slowest, mean = ranks["io_time"].max(), ranks["io_time"].mean()
            if (slowest - mean) / slowest >= t.imbalance:
                straggler = int(ranks.loc[ranks["io_time"].idxmax(), "rank"])
                over_mean = ranks["bytes"].max() / max(ranks["bytes"].mean(), 1)
                evidence.update(
                    {
                        "ranks_with_io": len(active),
                        "max_rank_io_time": round(slowest, 3),
                        "mean_rank_io_time": round(mean, 3),
                        "slowest_rank": straggler,
                        "bytes_max_over_mean": round(over_mean, 2),
                    }
                )
                saved = slowest - mean
                where.append(f"rank {straggler} takes {slowest:.2f} s vs {mean:.2f} s on average")
                equal_bytes.append(bool(over_mean < 1 + t.balanced_bytes))
        shared = files[
            files["shared"]
            & (files["slowest_rank_time"] >= t.imbalance_min_seconds)
            & (nbytes >= max(t.imbalance_min_bytes, 0.01 * job_bytes))
        ]
        shared = shared[~_aggregation_made(shared, t)]
        spread = (shared["slowest_rank_time"] - shared["fastest_rank_time"]) / shared["slowest_rank_time"]
        shared = shared[spread >= t.imbalance]
        if len(shared):
            lost = shared["slowest_rank_time"] - shared["fastest_rank_time"]
            f = shared.loc[lost.idxmax()]
            evidence.update(
                {
                    "file": f["path"],
                    "F_SLOWEST_RANK_TIME": round(f["slowest_rank_time"], 3),
                    "F_FASTEST_RANK_TIME": round(f["fastest_rank_time"], 3),
                    "SLOWEST_RANK_BYTES": int(f["slowest_rank_bytes"]),
                    "FASTEST_RANK_BYTES": int(f["fastest_rank_bytes"]),
                }
            )
            saved = max(saved, lost.max() / 2)  # balanced ranks meet halfway between fastest and slowest
            where.append(
                f"on shared file {f['path']} the slowest rank takes {f['slowest_rank_time']:.2f} s for "
                f"{int(f['slowest_rank_bytes'])} bytes (SLOWEST_RANK_BYTES), the fastest "
                f"{f['fastest_rank_time']:.2f} s for {int(f['fastest_rank_bytes'])} (FASTEST_RANK_BYTES)"
            )
            equal_bytes.append(bool(balanced(f["slowest_rank_bytes"], f["fastest_rank_bytes"], t.balanced_bytes)))
        if not where or r["io_time"] <= 0:
            return None
        # Equal bytes but unequal time: the straggler is slowed by its storage target or node, not its share.
        bytes_balanced = all(equal_bytes)
        rebalance = [
            fixes.code("balance the data decomposition so every rank moves the same bytes", "removes the tail"),
            fixes.mpi_hints(
                {"romio_cb_write": "enable", "cb_nodes": max(2, min(r["nprocs"], 16))},
                "collective I/O lets aggregators even out per-rank volumes",
            ),
        ]
        placement = [
            fixes.burst_buffer(r["exe"], "a straggler caused by a loaded storage target is hidden by the buffer"),
            fixes.code(
                f"surge tune layout {r['app']} --loads LOADS.toml",
                "moves stripes off loaded targets (DCA-IO interference adjustment)",
            ),
        ]
        if bytes_balanced:
            where.append("ranks move equal bytes, so the slow ones wait on storage or their node")
            fx = placement
        else:
            where.append("the slow ranks move more bytes, so the data decomposition is uneven")
            fx = rebalance + placement
        return self.finding("; ".join(where), evidence, saved / r["io_time"], "ranks finished together", fx)
