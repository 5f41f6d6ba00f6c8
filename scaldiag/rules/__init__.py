"""Rules: one module each, a ``RULE`` with an ``id`` and ``check(x) -> Finding | None``
(``base.Rule``).

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
    sd209_internode_link,
    sd210_straggler_node,
    sd211_cpu_oversubscribed,
)
from scaldiag.rules.base import BORDERLINE, Evidence, Finding, Rule, Speedup, graded

RULES: list[Rule[ProfileAnalysis]] = [
    sd101_input_bound.RULE,
    sd102_host_to_device.RULE,
    sd103_collective_bound.RULE,
    sd104_layout.RULE,
    sd105_host_bound.RULE,
    sd106_low_utilisation.RULE,
    sd206_straggler.RULE,
]
# SD211 before SD207: oversubscription slows this run's step (a cause, its fix shown first), the
# input ceiling bounds what more devices could give (issue 35: SD207's fix was printed first,
# SD211's not at all).
RUN_RULES: list[Rule[RunAnalysis]] = [
    sd202_logical_devices.RULE,
    sd204_throttled_clocks.RULE,
    sd211_cpu_oversubscribed.RULE,
    sd207_input_ceiling.RULE,
    sd208_pcie_link.RULE,
]
# a job over nodes (analyze/job.py)
JOB_RULES = [sd209_internode_link.RULE, sd210_straggler_node.RULE]
SWEEP_RULES: list[Rule[ScalingAnalysis]] = [
    sd201_per_replica_batch.RULE,
    sd203_collective_growth.RULE,
    sd205_host_growth.RULE,
]

__all__ = [
    "RULES",
    "RUN_RULES",
    "SWEEP_RULES",
    "JOB_RULES",
    "Evidence",
    "Finding",
    "Rule",
    "Speedup",
    "run_rules",
    "check_all",
    "rank",
]


def check_all(rules, subject) -> list[Finding]:
    """Every rule's finding, its severity set by the gain its range allows (``base.graded``)."""
    return [graded(f) for rule in rules if (f := rule.check(subject)) is not None]


def run_rules(analysis: ProfileAnalysis) -> list[Finding]:
    """Findings ranked (``rank``), causes before the utilisation symptom."""
    return rank(check_all(RULES, analysis))


def rank(findings: list[Finding]) -> list[Finding]:
    """Causes by predicted speedup, then the utilisation symptom, then the borderline findings
    (their ranges straddle their thresholds), never ordered on noise.

    Two causes whose ceilings' ranges (from their shares' 95% intervals) overlap are not ordered by
    the measurement; between them the one whose share the trace itself shows larger comes first
    (``Finding.seen_speedup``: a share raised by the input-free step is seen only in part). Swaps of
    neighbours only, each one putting two findings in the order of what the trace shows, so it ends.
    Found on the H200 (bench/results/gpu_h200/accuracy run 6, host_launch round 2): input measured
    at 50.2% +-5.0 ranked above host overhead's 44.0% +-4.7, where the trace showed host overhead.
    """
    ordered = sorted(findings, key=lambda f: (_borderline(f), f.category == "idle", -_value(f)))
    swapped = True
    while swapped:
        swapped = False
        for i in range(len(ordered) - 1):
            a, b = ordered[i], ordered[i + 1]
            if "idle" in (a.category, b.category) or _borderline(a) != _borderline(b):
                continue
            if not _overlap(a, b):
                continue
            if _seen(b) > _seen(a):
                ordered[i], ordered[i + 1] = b, a
                swapped = True
    return ordered


def _borderline(f: Finding) -> bool:
    return f.severity == BORDERLINE


def _value(f: Finding) -> float:
    return f.predicted_speedup.value if f.predicted_speedup else 1.0


def _seen(f: Finding) -> float:
    return f.seen_speedup if f.seen_speedup is not None else _value(f)


def _overlap(a: Finding, b: Finding) -> bool:
    """The ranges of the two ceilings meet: the measurement does not say which is larger."""
    if a.predicted_speedup is None or b.predicted_speedup is None:
        return False
    return (
        a.predicted_speedup.low <= b.predicted_speedup.high
        and b.predicted_speedup.low <= a.predicted_speedup.high
    )
