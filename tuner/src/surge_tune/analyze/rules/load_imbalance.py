"""A time spread between ranks, and what it is: an uneven data decomposition or a straggler.

Two views of the spread: across ranks (per-process I/O time and bytes over the files each rank owns) and
within shared files (Darshan's slowest and fastest rank: POSIX_F_SLOWEST/FASTEST_RANK_TIME with
POSIX_SLOWEST/FASTEST_RANK_BYTES). The bytes, not the time, say what a spread is:

- `load-imbalance` (rule LoadImbalance): the ranks move unequal bytes, the most a rank moves over the mean
  at least 1 + balanced_bytes, or a shared file's slowest and fastest rank bytes further apart than that
  (Drishti flags 15% of a shared file's bytes, P18, and 30% between the ranks of a file, P21/P22). Gain:
  the time rebalancing saves when every rank moves the mean bytes at its own observed rate (a rank that
  moved nothing at the median rate): the phase then ends when the slowest of those finishes. Equal bytes
  give 0 by construction, so a time spread alone never sizes this finding.
- `straggler` (rule Straggler): the ranks move equal bytes but some take longer, so a slow storage
  target, server or node holds them up, not the decomposition. Scheduling noise does the same on a
  small scale (4 ranks and 4 daemons on 2 cores spread 23-34% over I/O phases of 0.2-0.4 s), so a
  straggler is stated only when the slow ranks lose at least straggler_min_seconds and at least
  `imbalance` of the I/O: per rank (max - mean) / max; on a shared file Drishti's P19 test,
  (slowest - fastest) / the file's I/O time summed over its ranks. Gain: the slow ranks finishing with
  the others (at the mean; on a shared file halfway between the fastest and the slowest rank).

A shared file must matter by its bytes (at least imbalance_min_bytes and 1% of the job's), and the file
that loses most seconds is named, not the one with the largest relative spread. A file whose MPI-IO bytes
per rank are balanced while one rank does its POSIX I/O is collective buffering's doing (rule
few-aggregators), not the application's, and is left to it. Per-rank figures are used only when the
per-rank table sees most bytes (not when Darshan reduced the records).
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


def _file_bytes(files):
    return files["bytes_read"] + files["bytes_written"]


def _rank_view(s, t):
    """Per-rank time and bytes when they describe the job's data, else None: not when reduced records
    carry most bytes (rank_time_imbalance -1), nor when collective buffering placed most of them."""
    r = s.row
    files = data_files(s)
    aggregated = float(_file_bytes(files)[files["shared"] & _aggregation_made(files, t)].sum())
    if r["rank_time_imbalance"] < 0 or aggregated >= (r["bytes_read"] + r["bytes_written"]) / 2:
        return None
    ranks = _job_ranks(s)
    if len(ranks) < 2 or ranks["io_time"].max() < t.imbalance_min_seconds:
        return None
    return ranks


def _shared_files(s, t):
    """Shared files that matter by their bytes and their slowest rank's time, collective buffering's
    placement left out."""
    files = data_files(s)
    job_bytes = s.row["bytes_read"] + s.row["bytes_written"]
    shared = files[
        files["shared"]
        & (files["slowest_rank_time"] >= t.imbalance_min_seconds)
        & (_file_bytes(files) >= max(t.imbalance_min_bytes, 0.01 * job_bytes))
    ]
    return shared[~_aggregation_made(shared, t)]


def _bytes_over_mean(ranks) -> float:
    return float(ranks["bytes"].max() / max(ranks["bytes"].mean(), 1))


def _rebalanced_saving(ranks) -> float:
    """Seconds saved if every rank moved the mean bytes at its own rate (a rank that moved nothing at the
    median rate of those that did): the phase ends when the slowest rebalanced rank finishes."""
    moving = (ranks["bytes"] > 0) & (ranks["io_time"] > 0)
    if not moving.any():
        return 0.0
    rate = (ranks["bytes"] / ranks["io_time"].where(moving, 1.0)).where(moving)
    rate = rate.fillna(rate[moving].median())
    after = ranks["bytes"].mean() / rate
    return max(0.0, float(ranks["io_time"].max() - after.max()))


def _shared_file_words(f) -> str:
    return (
        f"on shared file {f['path']} the slowest rank takes {f['slowest_rank_time']:.2f} s for "
        f"{int(f['slowest_rank_bytes'])} bytes (SLOWEST_RANK_BYTES), the fastest "
        f"{f['fastest_rank_time']:.2f} s for {int(f['fastest_rank_bytes'])} (FASTEST_RANK_BYTES)"
    )


def _shared_file_evidence(f) -> dict:
    return {
        "file": f["path"],
        "F_SLOWEST_RANK_TIME": round(f["slowest_rank_time"], 3),
        "F_FASTEST_RANK_TIME": round(f["fastest_rank_time"], 3),
        "SLOWEST_RANK_BYTES": int(f["slowest_rank_bytes"]),
        "FASTEST_RANK_BYTES": int(f["fastest_rank_bytes"]),
    }


def _rank_evidence(ranks) -> dict:
    return {
        "ranks_with_io": int((ranks["io_time"] > 0).sum()),
        "max_rank_io_time": round(ranks["io_time"].max(), 3),
        "mean_rank_io_time": round(ranks["io_time"].mean(), 3),
        "slowest_rank": int(ranks.loc[ranks["io_time"].idxmax(), "rank"]),
        "bytes_max_over_mean": round(_bytes_over_mean(ranks), 2),
    }


def _placement_fixes(r):
    return [
        fixes.burst_buffer(r["exe"], "a straggler caused by a loaded storage target is hidden by the buffer"),
        fixes.code(
            f"surge tune layout {r['app']} --loads LOADS.toml",
            "moves stripes off loaded targets (DCA-IO interference adjustment)",
        ),
    ]


class LoadImbalance(Rule):
    code = "load-imbalance"
    title = "Load imbalance: uneven data decomposition"

    def check(self, s, t):
        r = s.row
        if r["io_time"] <= 0:
            return None
        evidence, saved, where = {}, 0.0, []
        ranks = _rank_view(s, t)
        if ranks is not None and _bytes_over_mean(ranks) >= 1 + t.balanced_bytes:
            rebalanced = _rebalanced_saving(ranks)
            if rebalanced >= t.imbalance * ranks["io_time"].max():
                evidence.update(_rank_evidence(ranks))
                evidence["rebalanced_saving_s"] = round(rebalanced, 3)
                saved = rebalanced
                where.append(
                    f"rank {evidence['slowest_rank']} takes {evidence['max_rank_io_time']:.2f} s vs "
                    f"{evidence['mean_rank_io_time']:.2f} s on average, and the busiest rank moves "
                    f"{evidence['bytes_max_over_mean']:.2f}x the mean bytes"
                )
        shared = _shared_files(s, t)
        shared = shared[~balanced(shared["slowest_rank_bytes"], shared["fastest_rank_bytes"], t.balanced_bytes)]
        # the slowest rank moving the file's mean bytes (bytes / ranks) at its own rate
        per_rank = _file_bytes(shared) / shared["n_ranks"]
        share = (per_rank / shared["slowest_rank_bytes"].where(shared["slowest_rank_bytes"] > 0)).fillna(1.0)
        lost = (shared["slowest_rank_time"] * (1 - share)).clip(lower=0)
        if len(shared) and lost.max() >= t.imbalance * shared["slowest_rank_time"][lost.idxmax()]:
            f = shared.loc[lost.idxmax()]
            evidence.update(_shared_file_evidence(f))
            saved = max(saved, float(lost.max()))
            where.append(_shared_file_words(f))
        if not where:
            return None
        where.append("the slow ranks move more bytes, so the data decomposition is uneven")
        rebalance = [
            fixes.code("balance the data decomposition so every rank moves the same bytes", "removes the tail"),
            fixes.mpi_hints(
                {"romio_cb_write": "enable", "cb_nodes": max(2, min(r["nprocs"], 16))},
                "collective I/O lets aggregators even out per-rank volumes",
            ),
        ]
        return self.finding(
            "; ".join(where),
            evidence,
            saved / r["io_time"],
            "every rank moved the mean bytes at its own rate",
            rebalance + _placement_fixes(r),
        )


class Straggler(Rule):
    code = "straggler"
    title = "Straggler: a slow storage target, server or node"

    def check(self, s, t):
        r = s.row
        if r["io_time"] <= 0:
            return None
        evidence, saved, where = {}, 0.0, []
        ranks = _rank_view(s, t)
        if ranks is not None and _bytes_over_mean(ranks) < 1 + t.balanced_bytes:
            slowest, mean = ranks["io_time"].max(), ranks["io_time"].mean()
            lost = slowest - mean
            if lost >= t.straggler_min_seconds and lost >= t.imbalance * slowest:
                evidence.update(_rank_evidence(ranks))
                saved = lost
                where.append(f"rank {evidence['slowest_rank']} takes {slowest:.2f} s vs {mean:.2f} s on average")
        shared = _shared_files(s, t)
        shared = shared[balanced(shared["slowest_rank_bytes"], shared["fastest_rank_bytes"], t.balanced_bytes)]
        spread = shared["slowest_rank_time"] - shared["fastest_rank_time"]
        # Drishti's P19: the spread over the file's I/O time summed over its ranks
        slow = (spread >= t.imbalance * shared["io_time"]) & (spread / 2 >= t.straggler_min_seconds)
        shared, lost = shared[slow], spread[slow] / 2
        if len(shared):
            f = shared.loc[lost.idxmax()]
            evidence.update(_shared_file_evidence(f))
            saved = max(saved, float(lost.max()))  # balanced ranks meet halfway between fastest and slowest
            where.append(_shared_file_words(f))
        if not where or saved < t.imbalance * r["io_time"]:
            return None
        where.append("ranks move equal bytes, so the slow ones wait on a storage target, server or their node")
        return self.finding(
            "; ".join(where), evidence, saved / r["io_time"], "ranks finished together", _placement_fixes(r)
        )
