"""The common shape of rules that fire on one category's exclusive share.

Decided from the share's 95% range (``base.share_severity``): a finding where its low end reaches
``moderate_pct``, a borderline one (severity ``borderline``, fixed words in its summary) where the
range straddles it, none where its high end is below.
"""

from __future__ import annotations

from scaldiag.analyze.profile import ProfileAnalysis, UnitAnalysis
from scaldiag.rules.base import (
    Finding,
    RuleFacts,
    Speedup,
    removal_speedup,
    seen_speedup,
    share_evidence,
    share_severity,
    spread_note,
    worst_unit,
)


class ShareRule(RuleFacts):
    """A rule on one category's exclusive share: a subclass declares its facts (``id``, ``title``,
    ``category``: RuleFacts), how the share reads in a sentence, its thresholds and its fix, and
    may condition the fix on the trace (``advise``) or forecast it (``forecast``)."""

    what: str  # how the category reads in a sentence
    moderate_pct: float
    high_pct: float
    fix: dict[str, str]
    fraction_removed = 1.0  # how much of the share the fix is expected to remove

    def advise(
        self, analysis: ProfileAnalysis, unit: UnitAnalysis
    ) -> tuple[dict[str, str], list[str]]:
        """The fix and notes conditioned on what the trace shows (backend, device kind, what the
        pipeline already does); here ``fix`` as it is."""
        return self.fix, []

    def forecast(self, analysis: ProfileAnalysis, unit: UnitAnalysis) -> Speedup | None:
        """What the fix should give, from a model (a Speedup of kind "forecast"); here none."""
        return None

    def check(self, analysis: ProfileAnalysis) -> Finding | None:
        unit = worst_unit(analysis, self.category)
        if unit is None:
            return None
        share = unit.categories[self.category]
        pct, spread = share.exclusive_pct, share.exclusive_pct_ci95
        graded = share_severity(pct, spread, self.moderate_pct, self.high_pct)
        if graded is None:
            return None
        grade, tail = graded
        fix, notes = self.advise(analysis, unit)
        return self.finding(
            severity=grade,
            summary=(
                f"{unit.name}: {self.what} {pct:.1f}% of step time "
                f"({share.exclusive_ms:.2f} ms of {unit.step_time_ms.mean:.2f} ms per step)" + tail
            ),
            evidence=[share_evidence(unit, self.category, self.moderate_pct)],
            fix=fix,
            predicted_speedup=removal_speedup(pct, spread, self.category, self.fraction_removed),
            notes=spread_note(spread) + notes,
            forecast=self.forecast(analysis, unit),
            seen_speedup=seen_speedup(pct, share.beyond_trace_pct),
        )
