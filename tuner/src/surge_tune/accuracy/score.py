"""Scoring: per-cause precision and recall of each tool's top answer, and its false-HIGH rate on controls.

A tool's answer on one input is its top cause ("none" when it names none) and whether it raised anything
at HIGH. For a cause c: precision = cases answered c that are labelled c / cases answered c, recall =
cases labelled c answered c / cases labelled c (None when the denominator is 0: nothing to divide). Over
all pathological cases, recall is the share whose top answer is their label (and, more leniently, the share
whose label the tool names anywhere in its answer, at any level). A control (label "none")
with any HIGH answer is a false HIGH. A tool that failed on an input answers nothing: a miss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from surge_tune.accuracy.causes import NONE
from surge_tune.accuracy.labels import Case


@dataclass
class Answer:
    cause: str  # the top answer's cause, or "none"
    high: bool  # anything at HIGH
    error: str = ""  # why the tool gave no answer ("" = it did)
    named: tuple[str, ...] = ()  # every cause the tool named, at any level (the top one included)


@dataclass
class Score:
    per_cause: dict[str, dict] = field(default_factory=dict)  # cause -> n, hits, answered, precision, recall
    recall: float | None = None  # over every pathological case
    recall_named: float | None = None  # the same, counting a label named anywhere in the answer as found
    pathological: int = 0
    controls: int = 0
    false_high: int = 0
    failed: int = 0

    @property
    def false_high_rate(self) -> float | None:
        return self.false_high / self.controls if self.controls else None


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def score(cases: list[Case], answers: dict[str, Answer]) -> Score:
    """`answers` maps case name to the tool's answer; a case without one counts as a failure."""
    s = Score()
    causes = sorted({c.cause for c in cases if c.cause != NONE} | {a.cause for a in answers.values()} - {NONE})
    given = {c.name: answers.get(c.name, Answer(NONE, False, "no answer")) for c in cases}
    for cause in causes:
        n = sum(c.cause == cause for c in cases)
        answered = sum(given[c.name].cause == cause and not given[c.name].error for c in cases)
        hits = sum(c.cause == cause and given[c.name].cause == cause and not given[c.name].error for c in cases)
        s.per_cause[cause] = {
            "n": n,
            "hits": hits,
            "answered": answered,
            "precision": _ratio(hits, answered),
            "recall": _ratio(hits, n),
        }
    sick = [c for c in cases if c.cause != NONE]
    s.pathological = len(sick)
    s.recall = _ratio(sum(given[c.name].cause == c.cause and not given[c.name].error for c in sick), len(sick))
    s.recall_named = _ratio(sum(c.cause in given[c.name].named for c in sick), len(sick))
    controls = [c for c in cases if c.cause == NONE]
    s.controls = len(controls)
    s.false_high = sum(given[c.name].high for c in controls)
    s.failed = sum(bool(a.error) for a in given.values())
    return s


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def table(cases: list[Case], scores: dict[str, Score]) -> str:
    """Markdown: one row per cause, then all causes together, then the controls."""
    tools = list(scores)
    head = "| cause | n | " + " | ".join(f"{t} precision | {t} recall" for t in tools) + " |"
    rows = [head, "|---|---:|" + "---:|---:|" * len(tools)]
    causes = sorted({c for s in scores.values() for c in s.per_cause})
    for cause in causes:
        n = sum(c.cause == cause for c in cases)
        cells = []
        for t in tools:
            p = scores[t].per_cause.get(cause, {})
            cells += [_fmt(p.get("precision")), _fmt(p.get("recall"))]
        rows.append(f"| {cause} | {n} | " + " | ".join(cells) + " |")
    first = next(iter(scores.values()))
    cells = []
    for t in tools:
        cells += ["", _fmt(scores[t].recall)]
    rows.append(f"| **all causes** | {first.pathological} | " + " | ".join(cells) + " |")
    cells = []
    for t in tools:
        cells += ["", _fmt(scores[t].recall_named)]
    rows.append(f"| all causes, named anywhere in the answer | {first.pathological} | " + " | ".join(cells) + " |")
    highs = " | ".join(
        f"false HIGH {scores[t].false_high}/{scores[t].controls} | {_fmt(scores[t].false_high_rate)}" for t in tools
    )
    rows.append(f"| **controls** (none) | {first.controls} | {highs} |")
    return "\n".join(rows)
