"""Rules: one module each, a ``RULE`` with an ``id`` and ``check(x) -> Finding | None`` (``base.Rule``).

``RULES`` read a trace analysis (ProfileAnalysis), ``RUN_RULES`` a captured
run (RunAnalysis: samples, inventory), ``SWEEP_RULES`` a sweep (ScalingAnalysis).
"""

from __future__ import annotations

from scaldiag.analyze.profile import ProfileAnalysis
from scaldiag.analyze.run import RunAnalysis
from scaldiag.analyze.scaling import ScalingAnalysis
from scaldiag.rules import (
    sd101_input_bound,
    sd102_host_to_device,
    sd103_collective_bound,
    sd104_layout,
    sd105_host_bound,
    sd106_low_utilisation,
    sd201_per_replica_batch,
    sd202_logical_devices,
    sd203_collective_growth,
    sd204_throttled_clocks,
    sd205_host_growth,
    sd206_straggler,
    sd207_input_ceiling,
    sd208_pcie_link,
)
from scaldiag.rules.base import Evidence, Finding, Rule, Speedup

RULES: list[Rule[ProfileAnalysis]] = [
    m.RULE for m in (sd101_input_bound, sd102_host_to_device, sd103_collective_bound, sd104_layout,
                     sd105_host_bound, sd106_low_utilisation, sd206_straggler)]
RUN_RULES: list[Rule[RunAnalysis]] = [
    sd202_logical_devices.RULE, sd204_throttled_clocks.RULE, sd207_input_ceiling.RULE, sd208_pcie_link.RULE]
SWEEP_RULES: list[Rule[ScalingAnalysis]] = [
    sd201_per_replica_batch.RULE, sd203_collective_growth.RULE, sd205_host_growth.RULE]

__all__ = ["RULES", "RUN_RULES", "SWEEP_RULES", "Evidence", "Finding", "Rule", "Speedup", "run_rules", "check_all"]


def check_all(rules, subject) -> list[Finding]:
    return [f for rule in rules if (f := rule.check(subject)) is not None]


def run_rules(analysis: ProfileAnalysis) -> list[Finding]:
    """Findings ranked by predicted speedup, causes before the utilisation symptom."""
    findings = check_all(RULES, analysis)
    return sorted(findings, key=lambda f: (f.category == "idle",
                                           -(f.predicted_speedup.value if f.predicted_speedup else 1.0)))
