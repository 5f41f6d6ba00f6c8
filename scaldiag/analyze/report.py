"""The report: one profile's analysis, its findings and a one-line verdict."""

from __future__ import annotations

from dataclasses import dataclass

from scaldiag.analyze.profile import ProfileAnalysis
from scaldiag.rules import Finding, run_rules

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Report:
    analysis: ProfileAnalysis
    findings: list[Finding]
    verdict: str


def build_report(analysis: ProfileAnalysis) -> Report:
    findings = run_rules(analysis)
    return Report(analysis=analysis, findings=findings, verdict=verdict(analysis, findings))


def verdict(analysis: ProfileAnalysis, findings: list[Finding]) -> str:
    """What bounds this run, by how much."""
    causes = [f for f in findings if f.category != "idle"]
    if causes:
        top = causes[0]
        gain = f"; fixing it: up to {top.predicted_speedup.value:.2f}x" if top.predicted_speedup else ""
        return f"{top.title}. {top.summary}{gain}."
    if not analysis.units:
        return "Nothing to analyse: the trace has no host or device activity."
    unit = max(analysis.units, key=lambda u: u.categories["compute"].exclusive_pct)
    compute = unit.categories["compute"]
    where = "device" if unit.kind == "gpu" else "host"
    return (f"Compute-bound: {unit.name} computes {compute.exclusive_pct:.1f}% of step time "
            f"({where} busy {unit.busy_pct:.1f}%); no input, copy, collective, layout or host "
            "bottleneck clears its threshold beyond the noise.")
