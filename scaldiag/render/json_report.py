"""The report as JSON (schema in docs/analyze.md). NaN and infinity become null."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

from scaldiag.analyze.profile import UnitAnalysis
from scaldiag.analyze.report import SCHEMA_VERSION, Report


def to_dict(report: Report) -> dict:
    a = report.analysis
    return clean({
        "schema_version": SCHEMA_VERSION,
        "run": a.run,
        "sources": a.sources,
        "hosts": a.hosts,
        "framework": a.framework,
        "event_count": a.event_count,
        "steps": {"method": a.steps_method, "description": a.steps_description,
                  "count": a.units[0].steps if a.units else 0},
        "verdict": report.verdict,
        "devices": [_unit(u) for u in a.units],
        "findings": [asdict(f) for f in report.findings],
        "notes": a.notes,
    })


def render(report: Report) -> str:
    return dumps(to_dict(report))


def dumps(data: dict) -> str:
    """Every JSON document scaldiag writes: NaN and infinity as null, indented."""
    return json.dumps(clean(data), indent=2, allow_nan=False) + "\n"


def _unit(u: UnitAnalysis) -> dict:
    return {
        "name": u.name,
        "kind": u.kind,
        "steps": u.steps,
        "step_time_ms": asdict(u.step_time_ms),
        "busy_pct": u.busy_pct,
        "categories": {c: asdict(t) for c, t in u.categories.items()},
        "h2d_bytes_per_step": u.h2d.bytes_per_step if u.h2d else None,
        "d2h_bytes_per_step": u.d2h.bytes_per_step if u.d2h else None,
        "h2d": asdict(u.h2d) if u.h2d else None,
        "d2h": asdict(u.d2h) if u.d2h else None,
        "collective": {"count_per_step": u.collective_count_per_step,
                       "time_ms_per_step": u.categories["collective"].busy_ms},
        "input_pipeline_busy_ms": u.input_pipeline_busy_ms,
        "host_activity_while_idle": [asdict(h) for h in u.host_activity_while_idle],
    }


def clean(value):
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value
