"""Load imbalance and stragglers: some ranks spend much longer in I/O than others.

Two views: across ranks (per-process I/O time over files each rank owns) and within shared files
(Darshan's slowest vs fastest rank). Gain model: with perfect balance the I/O phase ends at the mean
rank time instead of the maximum.
"""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule


class LoadImbalance(Rule):
    code = "load-imbalance"
    title = "Load imbalance / stragglers"

    def check(self, s, t):
        r, ranks, files = s.row, s.ranks, s.files
        evidence, gain, where = {}, 0.0, []
        active = ranks[ranks["io_time"] > 0]
        if len(active) >= 2 and active["io_time"].max() >= t.imbalance_min_seconds:
            slowest = active["io_time"].max()
            spread = (slowest - active["io_time"].mean()) / slowest
            if spread >= t.imbalance:
                straggler = int(active.loc[active["io_time"].idxmax(), "rank"])
                evidence.update(
                    {
                        "ranks_with_io": len(active),
                        "max_rank_io_time": round(slowest, 3),
                        "mean_rank_io_time": round(active["io_time"].mean(), 3),
                        "slowest_rank": straggler,
                        "bytes_max_over_mean": round(active["bytes"].max() / max(active["bytes"].mean(), 1), 2),
                    }
                )
                gain = max(gain, spread)
                where.append(f"rank {straggler} takes {slowest:.2f} s vs {active['io_time'].mean():.2f} s on average")
        shared = files[files["shared"] & (files["slowest_rank_time"] >= t.imbalance_min_seconds)]
        if len(shared):
            spread = (shared["slowest_rank_time"] - shared["fastest_rank_time"]) / shared["slowest_rank_time"]
            worst = spread.idxmax()
            if spread[worst] >= t.imbalance:
                f = shared.loc[worst]
                evidence.update(
                    {
                        "file": f["path"],
                        "F_SLOWEST_RANK_TIME": round(f["slowest_rank_time"], 3),
                        "F_FASTEST_RANK_TIME": round(f["fastest_rank_time"], 3),
                        "SLOWEST_RANK_BYTES": int(f["slowest_rank_bytes"]),
                        "FASTEST_RANK_BYTES": int(f["fastest_rank_bytes"]),
                    }
                )
                gain = max(gain, spread[worst] / 2)  # balanced ranks meet halfway between fastest and slowest
                where.append(
                    f"on shared file {f['path']} the slowest rank takes {f['slowest_rank_time']:.2f} s, "
                    f"the fastest {f['fastest_rank_time']:.2f} s"
                )
        if not where:
            return None
        # Equal bytes but unequal time: the straggler is slowed by its storage target or node, not its share.
        bytes_balanced = evidence.get("bytes_max_over_mean", 1.0) < 1.1 and evidence.get(
            "SLOWEST_RANK_BYTES", 0
        ) == evidence.get("FASTEST_RANK_BYTES", 0)
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
        fx = placement + rebalance if bytes_balanced else rebalance + placement
        if bytes_balanced:
            where.append("ranks move equal bytes, so the slow ones wait on storage or their node")
        return self.finding(
            t, "; ".join(where), evidence, gain, f"up to {gain:.0%} of I/O time if ranks finished together", fx
        )
