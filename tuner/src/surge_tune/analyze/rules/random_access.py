"""Random access: a large share of requests neither sequential nor consecutive in the file.

Gain model: random requests pay a seek or a read-modify-write on the servers; reordering or
flash absorbs it. The saving is bounded by the random requests' share of request time.
"""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule, data_files


class RandomAccess(Rule):
    code = "random-access"
    title = "Random access pattern"

    def check(self, s, t):
        r = s.row
        requests = r["posix_reads"] + r["posix_writes"]
        if requests < t.min_requests:
            return None
        random_pct = 100.0 - r["seq_io_pct"]
        files = data_files(s)
        if random_pct < t.random_pct or not len(files):
            return None
        data_time = r["read_time"] + r["write_time"]
        io_share = data_time / max(data_time + r["meta_time"], 1e-12)
        share = random_pct / 100 * io_share * 0.5  # half: random I/O costs roughly twice sequential on flash
        worst = files.loc[(files["reads"] + files["writes"] - files["seq_requests"]).idxmax()]
        fx = [
            fixes.burst_buffer(r["exe"], "flash in the Surge buffer has no seek penalty"),
            fixes.mpi_hints(
                {"romio_ds_read": "enable", "romio_ds_write": "enable", "romio_cb_read": "enable"},
                "data sieving / collective reads turn scattered requests into contiguous ones",
            ),
            fixes.code(
                "sort or batch offsets before reading (e.g. one MPI_File_read_all with a file view)",
                "sequential requests stream",
            ),
        ]
        return self.finding(
            f"{random_pct:.0f}% of {requests:.0f} POSIX requests are non-sequential "
            f"(POSIX_SEQ_READS+POSIX_SEQ_WRITES = {r['seq_io_pct']:.0f}%), most on {worst['path']}, "
            "so each pays a seek or a read-modify-write on the servers",
            {
                "POSIX_SEQ_READS+POSIX_SEQ_WRITES_pct": round(r["seq_io_pct"], 1),
                "random_pct": round(random_pct, 1),
                "POSIX_READS": r["posix_reads"],
                "POSIX_WRITES": r["posix_writes"],
                "file": worst["path"],
            },
            share,
            "random requests cost 2x sequential ones and are reordered",
            fx,
        )
