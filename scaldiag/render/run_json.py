"""A captured run as JSON: the record's summaries and the trace report."""

from __future__ import annotations

from dataclasses import asdict

from scaldiag.analyze.report import Report
from scaldiag.analyze.run import RunAnalysis
from scaldiag.record.rundir import SCHEMA_VERSION
from scaldiag.render.json_report import dumps, to_dict


def render(run_dir: str, a: RunAnalysis, findings: list, trace_report: Report | None) -> str:
    data = {
        "schema_version": SCHEMA_VERSION,
        "run_dir": run_dir,
        "run": a.run,
        "training": a.training,
        "inventory": a.inventory,
        "steps": asdict(a.steps) if a.steps else None,
        "gpus": [asdict(g) for g in a.gpus],
        "host": asdict(a.host) if a.host else None,
        "missing": a.missing,
        "findings": [asdict(f) for f in findings],
        "trace_report": to_dict(trace_report) if trace_report else None,
    }
    return dumps(data)
