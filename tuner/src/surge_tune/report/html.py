"""Self-contained HTML report: no external assets, figures inlined as base64 PNG."""

from __future__ import annotations

import html

from surge_tune.analyze import Analysis
from surge_tune.features import JOB_OVERVIEW
from surge_tune.report import plots

_STYLE = """body{font-family:sans-serif;max-width:70em;margin:1em auto;color:#222}
.high{border-left:6px solid #c0392b}.warn{border-left:6px solid #e67e22}.info{border-left:6px solid #7f8c8d}
.finding{padding:.3em 1em;margin:1em 0;background:#fafafa}code{background:#eee;padding:1px 4px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}
img{max-width:32%;margin:2px}"""


def _job_section(a: Analysis) -> str:
    r, e = a.summary.row, html.escape
    parts = [
        f"<h2>{e(r['app'])} &mdash; {e(r['input_path'])}</h2>",
        "<table>" + "".join(f"<tr><th>{k}</th><td>{e(str(r[k]))}</td></tr>" for k in JOB_OVERVIEW) + "</table>",
        "<div>"
        + "".join(
            f'<img alt="{name}" src="data:image/png;base64,{fn(a.summary)}">'
            for name, fn in (
                ("access sizes", plots.access_sizes),
                ("I/O over time", plots.io_over_time),
                ("per-rank balance", plots.rank_balance),
            )
        )
        + "</div>",
    ]
    parts += [f"<p><b>Warning:</b> {e(w)}</p>" for w in a.summary.job.warnings]
    parts.append(f"<p><b>Verdict:</b> {e(a.verdict)}</p>")
    for f in a.findings:
        ev = "".join(f"<tr><td>{e(k)}</td><td>{e(str(v))}</td></tr>" for k, v in f.evidence.items())
        fixes = "".join(f"<li><b>{e(x.kind)}</b>: <code>{e(x.command)}</code> &mdash; {e(x.why)}</li>" for x in f.fixes)
        caveats = "".join(f"<p><i>Caveat:</i> {e(c)}</p>" for c in f.caveats)
        parts.append(
            f'<div class="finding {f.severity}"><h3>{e(f.title)} <small>({e(f.code)}, '
            f"{f.severity})</small></h3><p>{e(f.summary)}</p><table>{ev}</table>"
            f"<p><b>Expected gain:</b> {e(f.gain)}</p>{caveats}<ul>{fixes}</ul></div>"
        )
    return "\n".join(parts)


def render_html(analyses: list[Analysis], errors: list[dict]) -> str:
    body = "\n".join(_job_section(a) for a in analyses)
    if errors:
        body += (
            "<h2>Unreadable inputs</h2><ul>"
            + "".join(f"<li>{html.escape(x['path'])}: {html.escape(x['reason'])}</li>" for x in errors)
            + "</ul>"
        )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Surge tune report</title>"
        f"<style>{_STYLE}</style></head><body><h1>Surge I/O analysis</h1>{body}</body></html>"
    )
