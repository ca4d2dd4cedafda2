"""Root-cause analysis: run every rule over a job summary, strongest expected gain first."""

from __future__ import annotations

from dataclasses import dataclass

from surge_tune.analyze.base import Finding, Thresholds
from surge_tune.features import JOB_IDENTITY, JOB_OVERVIEW, JobSummary


@dataclass
class Analysis:
    summary: JobSummary
    findings: list[Finding]

    def to_dict(self) -> dict:
        r = self.summary.row
        job = {k: r[k] for k in (*JOB_IDENTITY, *JOB_OVERVIEW)}
        return {"job": job, "findings": [f.to_dict() for f in self.findings]}


def analyze(summary: JobSummary, thresholds: Thresholds | None = None) -> Analysis:
    from surge_tune.analyze.rules import ALL_RULES

    t = thresholds or Thresholds()
    findings = [f for rule in ALL_RULES if (f := rule.check(summary, t)) is not None and f.gain_fraction >= t.min_gain]
    findings.sort(key=lambda f: -f.gain_fraction)
    return Analysis(summary, findings)
