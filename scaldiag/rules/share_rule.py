"""The common shape of rules that fire on one category's exclusive share.

Decided from the share's 95% range (``base.share_severity``): a finding where its low end reaches
``moderate_pct``, a borderline one (severity ``borderline``, fixed words in its summary) where the
range straddles it, none where its high end is below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scaldiag.analyze.profile import ProfileAnalysis
from scaldiag.rules.base import (
    Finding,
    removal_speedup,
    seen_speedup,
    share_evidence,
    share_severity,
    spread_note,
    worst_unit,
)


@dataclass(frozen=True)
class ShareRule:
    id: str
    title: str
    category: str
    what: str  # how the category reads in a sentence
    moderate_pct: float
    high_pct: float
    fix: dict[str, str]
    fraction_removed: float = 1.0  # how much of the share the fix is expected to remove
    # (analysis, unit) -> (fix, notes): the fix conditioned on what the trace shows (backend,
    # device kind, what the pipeline already does); None: ``fix`` as it is.
    advise: Callable | None = None
    # (analysis, unit) -> Speedup of kind "forecast", or None: what the fix should give, from a
    # model.
    forecast: Callable | None = None

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
        speedup = removal_speedup(pct, spread, self.category, self.fraction_removed)
        fix, notes = self.advise(analysis, unit) if self.advise else (self.fix, [])
        return Finding(
            id=self.id,
            title=self.title,
            severity=grade,
            category=self.category,
            summary=(
                f"{unit.name}: {self.what} {pct:.1f}% of step time "
                f"({share.exclusive_ms:.2f} ms of {unit.step_time_ms.mean:.2f} ms per step)" + tail
            ),
            evidence=[share_evidence(unit, self.category, self.moderate_pct)],
            fix=fix,
            predicted_speedup=speedup,
            notes=spread_note(spread) + notes,
            forecast=self.forecast(analysis, unit) if self.forecast else None,
            seen_speedup=seen_speedup(pct, share.beyond_trace_pct),
        )
