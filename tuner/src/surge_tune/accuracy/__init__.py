"""`surge tune bench accuracy`: how often the tuner names the right cause, against Drishti, on labelled runs.

How it works: a suite (suite.py) is a directory of inputs with labels.toml (labels.py): Surge profiles of
pathologies.c run through `surge run`, one injected pathology or a clean control each, plus public Darshan
logs whose behaviour is documented. Each tool answers every input (its top cause, and whether it raised a
HIGH; causes.py maps both vocabularies onto the labels' causes); score.py turns answers into per-cause
precision and recall and the false-HIGH rate on controls. The tuner reads profiles and logs itself.
Drishti (drishti.py, its own virtual environment) reads Darshan logs only, so each profile is first
exported with darshan_export.py, the same export `surge tune export` writes.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict

from surge_tune.accuracy.causes import NONE, drishti_cause, tuner_cause
from surge_tune.accuracy.labels import Case, read_labels
from surge_tune.accuracy.score import Answer, score, table
from surge_tune.errors import TuneError


def tuner_answer(path: str) -> Answer:
    """The top finding (the largest gain), also when the verdict calls the run healthy: the label says
    which pattern was injected, the verdict whether it mattered; HIGH is what a healthy run must not get."""
    from surge_tune.analyze import analyze
    from surge_tune.features import summarize
    from surge_tune.ingest import read_job

    try:
        a = analyze(summarize(read_job(path, with_dxt=False)))
    except TuneError as e:
        return Answer(NONE, False, str(e))
    named = tuple(c for f in a.findings if (c := tuner_cause(f)))
    top = tuner_cause(a.findings[0]) or NONE if a.findings else NONE
    return Answer(top, any(f.severity == "high" for f in a.findings), named=named)


def drishti_answer(python: str, log: str) -> Answer:
    """Drishti's first HIGH insight that names a cause, else its first WARN one, else its first INFO one."""
    from surge_tune.accuracy.drishti import insights

    try:
        found = insights(python, log)
    except TuneError as e:
        return Answer(NONE, False, str(e))
    named = [(i.level, drishti_cause(i.code)) for i in found if drishti_cause(i.code)]
    top = next((c for level in ("high", "warn", "info") for lv, c in named if lv == level), NONE)
    return Answer(top, any(i.level == "high" for i in found), named=tuple(c for _, c in named))


def _as_darshan(case: Case, suite: str, tmp: str) -> str:
    from surge_tune.darshan_export import export
    from surge_tune.ingest import is_darshan_header

    path = case.path(suite)
    with open(path, "rb") as f:
        if is_darshan_header(f.read(16)):
            return path
    out = os.path.join(tmp, f"{case.name.replace('/', '_')}.darshan")
    export(path, out)
    return out


def run_accuracy(suite: str, drishti: bool = True, drishti_env: str | None = None, progress=print) -> dict:
    """Score the tuner (and Drishti) on `suite`; the result holds the cases, answers, scores and table."""
    cases = read_labels(suite)
    tools = {"tuner": {}}
    for c in cases:
        tools["tuner"][c.name] = tuner_answer(c.path(suite))
    if drishti:
        from surge_tune.accuracy.drishti import ensure_drishti

        python = ensure_drishti(drishti_env, progress=progress)
        tools["Drishti"] = {}
        with tempfile.TemporaryDirectory(prefix="surge-accuracy-logs-") as tmp:
            for c in cases:
                progress(f"Drishti on {c.name}")
                try:
                    log = _as_darshan(c, suite, tmp)
                except TuneError as e:
                    tools["Drishti"][c.name] = Answer(NONE, False, f"export failed: {e}")
                    continue
                tools["Drishti"][c.name] = drishti_answer(python, log)
    scores = {t: score(cases, answers) for t, answers in tools.items()}
    return {
        "suite": suite,
        "cases": [{**asdict(c), **{t: asdict(tools[t][c.name]) for t in tools}} for c in cases],
        "scores": {t: asdict(s) | {"false_high_rate": s.false_high_rate} for t, s in scores.items()},
        "table": table(cases, scores),
    }


def format_cases(result: dict) -> str:
    """One line per case: its label and each tool's answer (HIGH marked, failures said)."""
    tools = [t for t in result["scores"]]
    lines = ["| case | label | " + " | ".join(tools) + " |", "|---|---|" + "---|" * len(tools)]
    for c in result["cases"]:
        cells = []
        for t in tools:
            a = c[t]
            cells.append(f"error: {a['error']}" if a["error"] else a["cause"] + (" (HIGH)" if a["high"] else ""))
        lines.append(f"| {c['name']} | {c['cause']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
