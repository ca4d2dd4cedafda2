"""The DCA-IO history database (SQLite): one row per run, Table 1 of the paper plus the file-sharing mode.

Application identity is the program name, as in the paper. Throughput is IOThroughputTotal =
IOBytesTotal / IOTimeTotal, IOTimeTotal being the longest per-process I/O time (features.py).

Each run also records its I/O direction (`write` or `read`, whichever moved more bytes): a read run and a
write run of one program are not comparable throughputs, so the procedures only compare runs of one
direction (engine.py). Databases written before the column existed are upgraded in place (their runs
count as write runs, the case DCA-IO was built for).
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass

from surge_tune.errors import TuneError
from surge_tune.features import JobSummary

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app TEXT NOT NULL,            -- ProgName
    user TEXT NOT NULL DEFAULT '',-- UserName
    run_time REAL NOT NULL,       -- RunTime, s
    nprocs INTEGER NOT NULL,      -- NumProcs
    stripe_count INTEGER NOT NULL,-- StripeCount (targets used by the main file)
    stripe_size INTEGER NOT NULL, -- StripeSize, bytes
    num_files INTEGER NOT NULL,   -- NumFile
    seq_io_pct REAL NOT NULL,     -- SeqIOPct
    io_less_1k INTEGER NOT NULL,  -- IOLess1K
    io_1k_to_100k INTEGER NOT NULL, -- IO1Kto100K
    read_requests INTEGER NOT NULL, -- IOReadRequest
    write_requests INTEGER NOT NULL,-- IOWriteRequest
    io_bytes_total INTEGER NOT NULL,-- IOBytesTotal
    io_time_total REAL NOT NULL,    -- IOTimeTotal, s
    throughput_mib_s REAL NOT NULL, -- IOThroughputTotal, MiB/s
    shared_file INTEGER NOT NULL,   -- 1 = one shared file, 0 = file-per-process
    num_io_procs INTEGER NOT NULL,  -- ranks doing I/O on the shared file (numIOProcs)
    source TEXT NOT NULL DEFAULT '',
    recorded_at REAL NOT NULL,
    direction TEXT NOT NULL DEFAULT 'write' -- write | read: the direction that moved more bytes
);
CREATE INDEX IF NOT EXISTS runs_app ON runs(app, id);
CREATE INDEX IF NOT EXISTS runs_nprocs ON runs(nprocs);
"""

DEFAULT_STRIPE_SIZE = 1 << 20


@dataclass
class Run:
    app: str
    nprocs: int
    stripe_count: int
    stripe_size: int
    throughput_mib_s: float
    shared_file: bool
    num_io_procs: int
    run_time: float = 0.0
    num_files: int = 0
    seq_io_pct: float = 0.0
    io_less_1k: int = 0
    io_1k_to_100k: int = 0
    read_requests: int = 0
    write_requests: int = 0
    io_bytes_total: int = 0
    io_time_total: float = 0.0
    user: str = ""
    source: str = ""
    direction: str = "write"  # write | read


def run_from_summary(s: JobSummary, app: str | None = None) -> Run:
    r = s.row
    data = s.files[(s.files["bytes_read"] + s.files["bytes_written"]) > 0]
    shared = data[data["shared"]]
    # Unknown layouts (plain directories, logs without the LUSTRE module) are the defaults of the paper.
    return Run(
        app=app or r["app"],
        nprocs=r["nprocs"],
        stripe_count=r["stripe_count"] if r["stripe_count"] > 0 else 1,
        stripe_size=r["stripe_size"] if r["stripe_size"] > 0 else DEFAULT_STRIPE_SIZE,
        throughput_mib_s=r["throughput_mib_s"],
        shared_file=len(shared) > 0,
        num_io_procs=int(shared["n_ranks"].max()) if len(shared) else r["nprocs"],
        run_time=r["run_time"],
        num_files=r["num_files"],
        seq_io_pct=r["seq_io_pct"],
        io_less_1k=r["read_0_100"] + r["read_100_1k"] + r["write_0_100"] + r["write_100_1k"],
        io_1k_to_100k=r["read_1k_10k"] + r["read_10k_100k"] + r["write_1k_10k"] + r["write_10k_100k"],
        read_requests=r["posix_reads"],
        write_requests=r["posix_writes"],
        io_bytes_total=r["bytes_read"] + r["bytes_written"],
        io_time_total=r["io_time"],
        source=r["input_path"],
        direction=io_direction(r["bytes_read"], r["bytes_written"]),
    )


def io_direction(bytes_read: float, bytes_written: float) -> str:
    return "read" if bytes_read > bytes_written else "write"


_COLUMNS = list(Run.__dataclass_fields__)


class History:
    def __init__(self, path: str):
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            self.db = sqlite3.connect(path)
            self.db.executescript(_SCHEMA)
            columns = {row[1] for row in self.db.execute("PRAGMA table_info(runs)")}
            if "direction" not in columns:
                with self.db:
                    self.db.execute("ALTER TABLE runs ADD COLUMN direction TEXT NOT NULL DEFAULT 'write'")
        except sqlite3.DatabaseError as e:
            raise TuneError(f"{path}: not a usable history database: {e}") from None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc) -> None:
        self.db.close()

    def add(self, run: Run) -> Run:
        with self.db:  # one transaction per run: an interrupted batch keeps what it recorded
            self.db.execute(
                f"INSERT INTO runs ({', '.join(_COLUMNS)}, recorded_at) VALUES ({', '.join('?' * len(_COLUMNS))}, ?)",
                [getattr(run, c) for c in _COLUMNS] + [time.time()],
            )
        return run

    def record(self, summary: JobSummary, app: str | None = None) -> Run:
        return self.add(run_from_summary(summary, app))

    def _select(self, where: str = "", params: tuple = ()) -> list[Run]:
        rows = self.db.execute(f"SELECT {', '.join(_COLUMNS)} FROM runs {where} ORDER BY id", params).fetchall()
        return [
            Run(**{**dict(zip(_COLUMNS, row, strict=False)), "shared_file": bool(row[_COLUMNS.index("shared_file")])})
            for row in rows
        ]

    def runs(self, app: str, direction: str | None = None) -> list[Run]:
        if direction:
            return self._select("WHERE app = ? AND direction = ?", (app, direction))
        return self._select("WHERE app = ?", (app,))

    def all_runs(self, direction: str | None = None) -> list[Run]:
        return self._select("WHERE direction = ?", (direction,)) if direction else self._select()

    def runs_with_nprocs(self, nprocs: int) -> list[Run]:
        return self._select("WHERE nprocs = ?", (nprocs,))

    def apps(self) -> list[str]:
        return [a for (a,) in self.db.execute("SELECT DISTINCT app FROM runs ORDER BY app")]
