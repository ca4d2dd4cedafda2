"""JSON report: the Analysis as plain data (numpy scalars converted)."""

from __future__ import annotations

import json

from surge_tune.analyze import Analysis


def _plain(o):
    if hasattr(o, "item"):  # numpy scalar
        return o.item()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def render_json(analyses: list[Analysis], errors: list[dict]) -> str:
    return json.dumps({"jobs": [a.to_dict() for a in analyses], "errors": errors}, indent=2, default=_plain)
