"""Read a Darshan log (format 3.0 to 3.5) through pydarshan into a Job.

libdarshan-util reports a truncated or corrupt module on stderr and returns what it could read, so the
reader captures file descriptor 2 around the parse and rejects the log when the library complained.
It can also abort the process outright on some corrupt logs: callers that must survive that use
`ingest.isolate` (one forked reader per log).
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager

import numpy as np
import pandas as pd

from surge_tune.errors import TuneError
from surge_tune.ingest.job import IO_MODULES, Job

# DXT traces can be gigabytes once decompressed (darshan#779); above this compressed size we skip them.
DXT_MAX_COMPRESSED_BYTES = 32 << 20
DXT_MODULES = ("DXT_POSIX", "DXT_MPIIO")


@contextmanager
def _captured_stderr():
    """Collect what C code writes to fd 2 (Python's sys.stderr redirection does not see it)."""
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        captured: list[str] = []
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode(errors="replace"))


def _module_frame(report, module: str) -> pd.DataFrame:
    frames = report.records[module].to_df()
    counters, fcounters = frames["counters"], frames.get("fcounters")
    df = counters.reset_index(drop=True)
    if fcounters is not None and len(fcounters):
        df = pd.concat([df, fcounters.drop(columns=["id", "rank"]).reset_index(drop=True)], axis=1)
    df["path"] = df["id"].map(report.name_records).fillna("")
    return df


def _layout_frame(report) -> pd.DataFrame:
    """Per-file layout from the LUSTRE module; pydarshan presents every version as PFL components."""
    comps = report.records["LUSTRE"].to_df()["components"]
    if comps is None or not len(comps):
        return pd.DataFrame()
    rows = []
    for rec_id, grp in comps.groupby("id", sort=False):
        widest = grp.loc[grp["LUSTRE_COMP_STRIPE_COUNT"].idxmax()]
        osts = set()
        for ids in grp["LUSTRE_OST_IDS"]:
            osts.update(int(i) for i in np.atleast_1d(ids) if int(i) >= 0)
        rows.append(
            {
                "id": rec_id,
                "path": report.name_records.get(rec_id, ""),
                "stripe_count": int(widest["LUSTRE_COMP_STRIPE_COUNT"]),
                "stripe_size": int(widest["LUSTRE_COMP_STRIPE_SIZE"]),
                "ost_count": len(osts) if osts else -1,
                "ost_ids": tuple(sorted(osts)),
            }
        )
    return pd.DataFrame(rows)


def _dxt_frame(report) -> pd.DataFrame:
    parts = []
    for module in DXT_MODULES:
        if module not in report.records:
            continue
        for rec in report.records[module].to_df():
            for op in ("read", "write"):
                seg = rec[f"{op}_segments"]
                if len(seg):
                    parts.append(
                        seg.assign(
                            module=module, id=rec["id"], rank=rec["rank"], op=op, hostname=rec.get("hostname", "")
                        )
                    )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _complaint(captured: str) -> str:
    return " ".join(line.strip() for line in captured.splitlines() if "rror" in line)


def _read_dxt_modules(report) -> list[str]:
    """Read the DXT traces module by module. DXT is optional: a module this libdarshan-util cannot read
    (e.g. written by a newer Darshan) is dropped with a warning instead of rejecting the whole log."""
    warnings = []
    for module in DXT_MODULES:
        if module not in report.modules:
            continue
        with _captured_stderr() as errors:
            try:
                report.mod_read_all_dxt_records(module, warnings=False)
                failure = ""
            except RuntimeError as e:
                failure = str(e)
        failure = _complaint(errors[0]) or failure
        if failure:
            report.records.pop(module, None)
            warnings.append(f"{module} trace skipped ({failure}); the log is read without it")
    return warnings


def read_darshan_log(path: str, with_dxt: bool = True) -> Job:
    import darshan  # heavy (pandas + cffi): imported only when a log is actually read

    with _captured_stderr() as errors:
        try:
            report = darshan.DarshanReport(path, read_all=False)
            for module in report.modules:
                if module in IO_MODULES:
                    report.mod_read_all_records(module, warnings=False)
            if "LUSTRE" in report.modules:
                report.mod_read_all_lustre_records(warnings=False)
        except RuntimeError as e:
            raise TuneError(f"{path}: unreadable Darshan log: {e}") from None
    complaint = _complaint(errors[0])
    if complaint:
        raise TuneError(f"{path}: corrupt or truncated Darshan log: {complaint}")
    partial = [m for m, v in report.modules.items() if v.get("partial_flag")]
    warnings = []
    if partial:
        warnings.append(f"Darshan ran out of memory in module(s) {', '.join(partial)}: their counters are lower bounds")
    dxt_bytes = sum(report.modules[m]["len"] for m in DXT_MODULES if m in report.modules)
    read_dxt = with_dxt and 0 < dxt_bytes <= DXT_MAX_COMPRESSED_BYTES
    if read_dxt:
        warnings += _read_dxt_modules(report)

    # Metadata key "h" holds the hints Darshan used to write its own log (DARSHAN_LOGHINTS, by default
    # "romio_no_indep_rw=true;cb_nodes=4"), not the application's: the log records no application hints.
    meta = report.metadata["job"]
    modules = {m: _module_frame(report, m) for m in IO_MODULES if m in report.records}
    dxt = _dxt_frame(report) if read_dxt else pd.DataFrame()
    job = Job(
        source="darshan",
        input_path=path,
        job_id=str(meta.get("jobid", "")),
        exe=report.metadata.get("exe", "") or "",
        nprocs=int(meta.get("nprocs", 1)),
        start_time=float(meta.get("start_time_sec", 0)) + float(meta.get("start_time_nsec", 0)) * 1e-9,
        run_time=float(meta.get("run_time") or 0.0),
        format_version=str((meta.get("metadata") or {}).get("lib_ver", meta.get("log_ver", ""))),
        partial=bool(partial),
        warnings=warnings,
        modules=modules,
        layouts=_layout_frame(report) if "LUSTRE" in report.records else pd.DataFrame(),
        dxt=dxt,
    )
    if len(dxt) and "hostname" in dxt.columns:
        job.num_hosts = int(dxt["hostname"].nunique())
    return job
