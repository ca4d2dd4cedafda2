"""Root-cause analysis: run every rule over a job summary, weigh each finding by the job's time it can save,
reconcile their fixes, fold a symptom into the finding naming its cause, and state a verdict first.

Severity comes from impact, not from a pattern's frequency: a finding's gain is a share of the job's I/O
time (the rule's cost model), turned into seconds and into a share of the run. A run whose I/O is fast in
absolute terms or a small share of its run time is healthy: "no significant I/O problem" comes first and no
finding is HIGH. Layout fixes are reconciled so one report never recommends two layouts for a directory.
"""

from __future__ import annotations

from dataclasses import dataclass

from surge_tune.analyze.base import Finding, Fix, Thresholds
from surge_tune.features import JOB_IDENTITY, JOB_OVERVIEW, JobSummary


@dataclass
class Analysis:
    summary: JobSummary
    findings: list[Finding]
    healthy: bool
    verdict: str  # one sentence, printed before any finding

    def to_dict(self) -> dict:
        r = self.summary.row
        job = {k: r[k] for k in (*JOB_IDENTITY, *JOB_OVERVIEW)}
        return {
            "job": job,
            "healthy": self.healthy,
            "verdict": self.verdict,
            "warnings": list(self.summary.job.warnings),
            "findings": [f.to_dict() for f in self.findings],
        }


def _io_times(r: dict) -> tuple[float, float]:
    """(I/O time, run time) in seconds; a run time shorter than the I/O (clock skew, profiles) is the I/O time."""
    io = max(float(r["io_time"]), 0.0)
    return io, max(float(r["run_time"]), io)


def _weigh(f: Finding, io: float, run: float) -> None:
    f.saves_seconds = round(f.gain_fraction * io, 3)
    f.job_share = round(f.saves_seconds / run, 3) if run > 0 else 0.0
    f.gain = (
        f"up to {f.gain_fraction:.0%} of I/O time (~{f.saves_seconds:.3g} s, {f.job_share:.0%} of the "
        f"{run:.3g} s run) if {f.assumption}"
    )


def _verdict(r: dict, findings: list[Finding], t: Thresholds) -> tuple[bool, str]:
    io, run = _io_times(r)
    share = io / run if run > 0 else 1.0
    where = f"I/O takes {io:.3g} s ({share:.0%} of the {run:.3g} s run)"
    if io < t.healthy_io_seconds or share < t.healthy_io_share:
        why = "fast in absolute terms" if io < t.healthy_io_seconds else "a small share of the run"
        saved = max((f.saves_seconds for f in findings), default=0.0)
        tail = f"; the patterns below could save at most {saved:.3g} s" if findings else ""
        return True, f"no significant I/O problem: {where}, {why}{tail}"
    if not findings:
        return False, f"no known cause of slow I/O found: {where}"
    top = findings[0]
    return False, f"{where}; the main cause ({top.code}) can save ~{top.saves_seconds:.3g} s ({top.job_share:.0%})"


# symptom rule -> the rule naming its cause, when both point at the same file: small independent requests
# to a shared file are small transfers because no collective buffering merges them, and the fix is
# collective I/O, not buffering inside each rank (which cannot merge the ranks' interleaved pieces).
SYMPTOM_OF = {"small-transfers": "independent-io"}


def _fold_symptoms(findings: list[Finding]) -> list[Finding]:
    """Fold a finding another one explains on the same file into that one: the cause's finding takes the
    symptom's fixes it lacks (so no fix is lost) and says so in a caveat."""
    by_code = {f.code: f for f in findings}
    kept = []
    for f in findings:
        cause = by_code.get(SYMPTOM_OF.get(f.code, ""))
        if cause is not None and cause.evidence.get("file") == f.evidence.get("busiest_file"):
            have = {fix.command for fix in cause.fixes}
            cause.fixes += [fix for fix in f.fixes if fix.command not in have]
            cause.caveats.append(f"{f.code} on this file is a symptom of this cause, folded in with its fixes")
            continue
        kept.append(f)
    return kept


def _reconcile_layouts(findings: list[Finding]) -> None:
    """One layout per directory. The stripe count comes from the strongest finding that sets one (findings
    are sorted), the stripe size is the largest any finding asks for; that finding carries the merged fixes
    and the others point to it."""
    from surge_tune.analyze.fixes import restripe

    wanted: dict[str, list[tuple[Finding, Fix]]] = {}
    for f in findings:
        for fix in f.fixes:
            if fix.layout_of:
                wanted.setdefault(fix.layout_of, []).append((f, fix))
    for directory, entries in wanted.items():
        setters = [(f, fix) for f, fix in entries if not fix.keeps_count] or entries
        owner, count = setters[0][0], setters[0][1].stripe_count
        size = max(fix.stripe_size for _, fix in entries)
        for f in {id(f): f for f, _ in entries}.values():
            mine = [fix for fix in f.fixes if fix.layout_of == directory]
            rest = [fix for fix in f.fixes if fix.layout_of != directory]
            if f is owner:
                f.fixes = [restripe(fix, count, size) for fix in mine] + rest
            else:
                f.fixes = rest
                f.caveats.append(f"layout of {directory}: see {owner.code} (one layout per directory)")


def analyze(summary: JobSummary, thresholds: Thresholds | None = None) -> Analysis:
    from surge_tune.analyze.rules import ALL_RULES

    t = thresholds or Thresholds()
    r = summary.row
    io, run = _io_times(r)
    findings = [f for rule in ALL_RULES if (f := rule.check(summary, t)) is not None and f.gain_fraction >= t.min_gain]
    findings = _fold_symptoms(findings)
    for f in findings:
        _weigh(f, io, run)
    findings.sort(key=lambda f: -f.gain_fraction)
    healthy, verdict = _verdict(r, findings, t)
    for f in findings:
        f.severity = "info" if healthy else "high" if f.job_share >= t.high_share else "warn"
        if r["partial"]:
            f.caveats.append("partial log: counters are lower bounds, so shares and counts here may be off")
    _reconcile_layouts(findings)
    return Analysis(summary, findings, healthy, verdict)
