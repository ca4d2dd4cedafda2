"""Ingest a corpus of logs/profiles into jobs.parquet + files.parquet with bounded memory.

Readers run in isolated worker processes (ingest.isolate); the parent keeps at most one row group of
rows in memory and writes it with pyarrow's ParquetWriter. Unreadable inputs go to errors.jsonl with
their reason and the batch continues.
"""

from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from surge_tune.features import FILE_SCHEMA, JOB_SCHEMA, arrow_schema, summarize
from surge_tune.ingest import read_job
from surge_tune.ingest.isolate import imap_isolated

INPUT_SUFFIXES = (".darshan", ".jsonl")


@dataclass
class IngestStats:
    jobs: int = 0
    files: int = 0
    errors: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    peak_rss_parent_mib: float = 0.0
    peak_rss_worker_mib: float = 0.0


def discover_inputs(paths: list[str]) -> list[str]:
    """Files as given; directories searched recursively for *.darshan and *.jsonl."""
    found = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                found += [os.path.join(root, n) for n in sorted(names) if n.endswith(INPUT_SUFFIXES)]
        else:
            found.append(p)
    return sorted(found)


def summarize_path(path: str) -> tuple[dict, dict]:
    """Worker side: one input -> (job row, file rows as columns). DXT is not needed for the table."""
    s = summarize(read_job(path, with_dxt=False), key=_job_key(path))
    return s.row, {c: s.files[c].tolist() for c in s.files.columns}


def _job_key(path: str) -> str:
    # The file name is unique within a Darshan corpus; keep the parent too so two corpora can merge.
    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))


class _TableWriter:
    def __init__(self, path: str, schema):
        self.schema = arrow_schema(schema)
        self.columns = {f.name: [] for f in self.schema}
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")
        self.rows = 0

    def add_columns(self, cols: dict) -> None:
        for name in self.columns:
            self.columns[name].extend(cols[name])

    def add_row(self, row: dict) -> None:
        for name in self.columns:
            self.columns[name].append(row[name])

    def pending(self) -> int:
        return len(next(iter(self.columns.values())))

    def flush(self) -> None:
        if self.pending():
            self.writer.write_table(pa.table(self.columns, schema=self.schema))
            self.rows += self.pending()
            self.columns = {name: [] for name in self.columns}

    def close(self) -> None:
        self.flush()
        self.writer.close()


def ingest(
    paths: list[str],
    out_dir: str,
    workers: int = 2,
    row_group_jobs: int = 256,
    progress: bool = True,
    timeout: float = 300.0,
) -> IngestStats:
    from tqdm import tqdm

    inputs = discover_inputs(paths)
    os.makedirs(out_dir, exist_ok=True)
    stats = IngestStats()
    started = time.monotonic()
    jobs = _TableWriter(os.path.join(out_dir, "jobs.parquet"), JOB_SCHEMA)
    files = _TableWriter(os.path.join(out_dir, "files.parquet"), FILE_SCHEMA)
    with (
        open(os.path.join(out_dir, "errors.jsonl"), "w") as errlog,
        tqdm(total=len(inputs), unit="log", disable=not progress, desc="ingest") as bar,
    ):
        for outcome in imap_isolated(summarize_path, inputs, workers=workers, timeout=timeout):
            bar.update()
            if not outcome.ok:
                err = {"path": outcome.item, "reason": outcome.reason}
                stats.errors.append(err)
                errlog.write(json.dumps(err) + "\n")
                bar.write(f"skipped {outcome.item}: {outcome.reason}")
                continue
            row, file_cols = outcome.value
            jobs.add_row(row)
            files.add_columns(file_cols)
            if jobs.pending() >= row_group_jobs or files.pending() >= 64 * row_group_jobs:
                jobs.flush()
                files.flush()
    jobs.close()
    files.close()
    stats.jobs, stats.files = jobs.rows, files.rows
    stats.seconds = time.monotonic() - started
    stats.peak_rss_parent_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats.peak_rss_worker_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return stats
