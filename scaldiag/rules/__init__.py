"""Single-run rules: one module each, ``RULE.check(analysis) -> Finding | None``."""

from __future__ import annotations

from scaldiag.analyze.profile import ProfileAnalysis
from scaldiag.rules import (sd101_input_bound, sd102_host_to_device, sd103_collective_bound, sd104_layout,
                            sd105_host_bound, sd106_low_utilisation)
from scaldiag.rules.base import Evidence, Finding, Speedup

RULES = [m.RULE for m in (sd101_input_bound, sd102_host_to_device, sd103_collective_bound, sd104_layout,
                          sd105_host_bound, sd106_low_utilisation)]

__all__ = ["RULES", "Evidence", "Finding", "Speedup", "run_rules"]


def run_rules(analysis: ProfileAnalysis) -> list[Finding]:
    """Findings ranked by predicted speedup, causes before the utilisation symptom."""
    findings = [f for rule in RULES if (f := rule.check(analysis)) is not None]
    return sorted(findings, key=lambda f: (f.category == "idle",
                                           -(f.predicted_speedup.value if f.predicted_speedup else 1.0)))
