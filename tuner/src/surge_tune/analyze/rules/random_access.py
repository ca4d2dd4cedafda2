"""Random access: requests at shuffled offsets, told apart from strided and first accesses by Darshan's counters.

Darshan counts a request as sequential (POSIX_SEQ_READS/WRITES) when it starts past the end of the
previous one and consecutive (POSIX_CONSEC_*, a subset) when it starts right there; a record's first
request at offset 0 is neither. So per record, the requests that jump back are requests - SEQ - first
ones, and the forward jumps are SEQ - CONSEC. A strided pattern (ranks interleaving blocks of a shared
file) jumps forward only, and a file written once (many small files) has only its first request: neither
is random. Shuffled offsets jump back about as often as forward (half the time for a random order), so the
random requests are the backward jumps plus as many forward jumps, at most all of them.

Where they cost: on a disk-based file system, or a Lustre OST, each random request pays a seek or a
read-modify-write of a partial stripe, and the client cannot merge neighbours into large RPCs. In Surge's
buffer (memory or flash) it costs about what a sequential request costs, and stage-out (and the drain)
copies every stripe in offset order, so the PFS behind the buffer sees sequential writes. The finding says
which side the profile was measured on. Gain model: on the PFS a random request costs twice a sequential
one (its seek on top of its transfer), so ordering the requests, or the buffer, saves half of the random
requests' share of the data time.
"""

import pandas as pd

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule, data_files


def _shuffled_requests(s) -> pd.Series:
    """Per record id (as in `files.record_id`): the POSIX requests at shuffled offsets (module doc)."""
    job = s.job
    df = job.frame("POSIX")
    if not len(df):
        return pd.Series(dtype=float)
    reads, writes = job.counter("POSIX", "POSIX_READS"), job.counter("POSIX", "POSIX_WRITES")
    seq = job.counter("POSIX", "POSIX_SEQ_READS") + job.counter("POSIX", "POSIX_SEQ_WRITES")
    consec = job.counter("POSIX", "POSIX_CONSEC_READS") + job.counter("POSIX", "POSIX_CONSEC_WRITES")
    # a reduced record (rank -1) sums every rank's counters, so it holds one first request per rank
    ranks = (df["rank"] < 0) * (max(job.nprocs, 1) - 1) + 1
    first = ((reads > 0).astype(int) + (writes > 0).astype(int)) * ranks
    back = (reads + writes - seq - first).clip(lower=0)
    forward = (seq - consec).clip(lower=0)
    shuffled = back + pd.concat([back, forward], axis=1).min(axis=1)
    return shuffled.groupby(df["id"].astype("uint64").astype(str)).sum()


class RandomAccess(Rule):
    code = "random-access"
    title = "Random access pattern"

    def check(self, s, t):
        r = s.row
        requests = r["posix_reads"] + r["posix_writes"]
        files = data_files(s)
        if requests < t.min_requests or not len(files):
            return None
        shuffled = _shuffled_requests(s).reindex(files["record_id"]).fillna(0).to_numpy()
        random_pct = 100.0 * shuffled.sum() / requests
        if random_pct < t.random_pct:
            return None
        data_time = r["read_time"] + r["write_time"]
        io_share = data_time / max(data_time + r["meta_time"], 1e-12)
        share = random_pct / 100 * io_share * 0.5  # half: a random request costs twice a sequential one
        worst = files.iloc[int(shuffled.argmax())]
        consec = int(sum(s.job.counter("POSIX", f"POSIX_CONSEC_{op}").sum() for op in ("READS", "WRITES")))
        if s.job.source == "surge-profile":
            where = (
                "in Surge's buffer, where this profile was measured, they cost about what sequential ones do "
                "and stage-out copies each stripe in offset order; written to the PFS directly, or to a Lustre "
                "OST, each pays a seek or a read-modify-write"
            )
        else:
            where = "so on a disk-based PFS or a Lustre OST each pays a seek or a read-modify-write"
        fx = [
            fixes.burst_buffer(r["exe"], "the Surge buffer takes them without a seek and stages the file out in order"),
            fixes.mpi_hints(
                {"romio_ds_read": "enable", "romio_ds_write": "enable", "romio_cb_read": "enable"},
                "data sieving / collective reads turn scattered requests into contiguous ones",
            ),
            fixes.code(
                "sort or batch offsets before reading or writing (e.g. one MPI_File_write_all with a file view)",
                "sequential requests stream",
            ),
        ]
        return self.finding(
            f"{random_pct:.0f}% of {requests:.0f} POSIX requests land at shuffled offsets (they jump back as "
            f"often as forward: POSIX_SEQ_READS+POSIX_SEQ_WRITES = {r['seq_io_pct']:.0f}% of requests, "
            f"POSIX_CONSEC_READS+POSIX_CONSEC_WRITES = {consec}), most on {worst['path']}; {where}",
            {
                "POSIX_SEQ_READS+POSIX_SEQ_WRITES_pct": round(r["seq_io_pct"], 1),
                "POSIX_CONSEC_READS+POSIX_CONSEC_WRITES": consec,
                "random_pct": round(random_pct, 1),
                "POSIX_READS": r["posix_reads"],
                "POSIX_WRITES": r["posix_writes"],
                "file": worst["path"],
            },
            share,
            "a random request costs 2x a sequential one on the PFS and they are ordered (or buffered)",
            fx,
        )
