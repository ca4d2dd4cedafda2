"""fsync after every write: each write waits until the device has persisted it.

Darshan counts the time of fsync/fdatasync in POSIX_F_WRITE_TIME, so the cost hides inside write time;
the evidence is the count, POSIX_FSYNCS (+ POSIX_FDSYNCS) close to POSIX_WRITES on one file. Gain model:
syncing once at the end of the phase leaves one device flush, and the flushes are assumed to dominate
the synced writes' time (80%).
"""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule, data_files

MIB = 1 << 20


class FsyncPerWrite(Rule):
    code = "fsync-per-write"
    title = "fsync after every write"

    def check(self, s, t):
        r = s.row
        files = data_files(s)
        synced = files[
            (files["writes"] >= t.fsync_min_writes) & (files["fsyncs"] >= t.fsync_per_write * files["writes"])
        ]
        if not len(synced):
            return None
        f = synced.loc[synced["fsyncs"].idxmax()]
        write_time = r["write_time"]
        total = r["read_time"] + r["write_time"] + r["meta_time"]
        share = (write_time / total if total > 0 else 0.0) * 0.8
        per_write = f["bytes_written"] / max(f["writes"], 1)
        fx = [
            fixes.code(
                "call fsync/fdatasync once at the end of the write phase (or per checkpoint), not after each write",
                "one device flush instead of one per write",
            ),
            fixes.burst_buffer(r["exe"], "the Surge daemon acknowledges writes from memory and drains them later"),
        ]
        return self.finding(
            f"{f['path']} gets {f['fsyncs']:.0f} fsyncs for {f['writes']:.0f} writes (POSIX_FSYNCS/POSIX_WRITES = "
            f"{f['fsyncs'] / f['writes']:.2f}), so each {per_write / 1024:.0f} KiB write waits for the device; "
            f"Darshan counts that wait in POSIX_F_WRITE_TIME ({write_time:.2f} s over all ranks, "
            f"{r['bytes_written'] / MIB / max(write_time, 1e-9):.1f} MiB/s)",
            {
                "file": f["path"],
                "POSIX_WRITES": int(f["writes"]),
                "POSIX_FSYNCS": int(f["fsyncs"]),
                "fsyncs_per_write": round(f["fsyncs"] / f["writes"], 2),
                "POSIX_F_WRITE_TIME": round(write_time, 3),
                "mean_write_bytes": int(per_write),
            },
            share,
            "one sync per phase replaces one per write (flushes assumed 80% of the write time)",
            fx,
        )
