"""STDIO used for bulk data: fread/fwrite carry a large share of the bytes through small libc buffers."""

from surge_tune.analyze import fixes
from surge_tune.analyze.base import Rule


class StdioBulkData(Rule):
    code = "stdio-bulk"
    title = "STDIO used for bulk data"

    def check(self, s, t):
        r = s.row
        total = r["bytes_read"] + r["bytes_written"]
        if r["stdio_bytes"] < t.stdio_min_bytes or total <= 0:
            return None
        share = r["stdio_bytes"] / total
        if share < t.stdio_share:
            return None
        files = s.files[s.files["stdio_bytes"] > 0].sort_values("stdio_bytes", ascending=False)
        top = files.iloc[0]
        ops = r["stdio_reads"] + r["stdio_writes"]
        fx = [
            fixes.code(
                "write bulk data with POSIX write()/MPI-IO (or HDF5); keep STDIO for text logs",
                "no 4 KiB libc buffer between the app and the file system",
            ),
            fixes.code("if STDIO must stay: setvbuf(f, NULL, _IOFBF, 4 << 20)", "4 MiB buffer = 1000x fewer syscalls"),
            fixes.burst_buffer(r["exe"], "the interposer also catches STDIO and lands it on flash"),
        ]
        gain = share * 0.5
        return self.finding(
            f"STDIO moves {share:.0%} of the job's bytes ({r['stdio_bytes'] / (1 << 20):.0f} MiB in {ops:.0f} calls); "
            f"top file {top['path']}",
            {
                "STDIO_BYTES": r["stdio_bytes"],
                "stdio_share": round(share, 3),
                "STDIO_READS": r["stdio_reads"],
                "STDIO_WRITES": r["stdio_writes"],
                "STDIO_OPENS": r["stdio_opens"],
                "mean_stdio_request": int(r["stdio_bytes"] / max(ops, 1)),
            },
            gain,
            "STDIO runs at half the speed of large POSIX I/O and is replaced",
            fx,
        )
