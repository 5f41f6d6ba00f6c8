"""What a rule returns, and the arithmetic rules share.

A share rule decides from the share's 95% range, never from its point (``presence``): a finding
when the range's low end reaches the threshold; a *borderline* finding, in fixed words, when the
range straddles it; nothing when its high end is below. With one window the spread is unknown: the
share itself is compared, and the finding says so. Severity follows the gain the range allows
(``graded``): a ceiling under 1.1x at its range's high end is ``low``, whatever the share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from scaldiag.analyze import model_error
from scaldiag.analyze.profile import ProfileAnalysis, UnitAnalysis
from scaldiag.analyze.scaling import Cause

# Sweep rules (SD203, SD205): a lost speedup of at least this fraction of the
# ideal (0.6x of an ideal 2x) is high severity: a third of the devices added
# give nothing back.
HIGH_LOST_FRACTION_OF_IDEAL = 0.3

# A finding whose ceiling, at the high end of its range, is under this gain is low severity: the
# most fixing it could give is a tenth, the smallest gain the sweep rules (SD203, SD205: 0.1x of
# speedup) and the smallest moderate share thresholds (SD103, SD105: 10%, 1.11x) count. SD204 read
# "medium" for "at most 1.02x" (issue 35).
LOW_GAIN = 1.1

# Severities, strongest first. ``borderline``: the range straddles the rule's threshold, so the run
# does not settle whether it is a cause; ranked after the established findings.
SEVERITIES = ("high", "medium", "low", "borderline", "info")
BORDERLINE = "borderline"

Subject = TypeVar("Subject", contravariant=True)


class Rule(Protocol[Subject]):
    """A rule: a stable id and a check of one subject (a trace analysis, a run or a sweep)."""

    id: str

    def check(self, subject: Subject) -> Finding | None: ...


@dataclass(frozen=True)
class Evidence:
    metric: str
    value: float
    unit: str
    threshold: float | None = None
    spread: float | None = None  # 95% CI half-width of value, when known
    device: str | None = None


@dataclass(frozen=True)
class Speedup:
    """The speedup of the step if the finding is fixed.

    ``kind`` says what the number is: a *ceiling* ("at most, if the cost vanished": every rule's
    number today, from removing a measured part) or a *forecast* (what the fix should give, from
    measured points and a stated model, checked against a fixed twin by bench/accuracy).
    """

    value: float
    low: float  # from the low end of the evidence's confidence interval
    high: float
    arithmetic: str
    kind: str = "ceiling"
    # Whether the change fits in device memory, in a few words (a batch forecast: analyze/
    # batch_memory.py ``brief``); said on the number's line, the detail is in ``arithmetic``.
    fits: str = ""


def with_forecast_error(s: Speedup, cap: float = math.inf) -> Speedup:
    """A fix's forecast whose 95% range carries the forecasts' own error on the accuracy zoo
    (analyze/model_error.py): a forecast from one run's measurements was off its twin by up to
    30% (CPU) and 24% (H200), far beyond its measurement's noise. ``cap``: a bound the fix cannot
    pass (the ceiling's top, for a forecast that is the ceiling bounded further)."""
    low, high = model_error.widen_forecast(s.value, s.low, s.high)
    return replace(
        s,
        low=min(low, cap),
        high=max(s.value, min(high, cap)),
        arithmetic=f"{s.arithmetic}; {model_error.describe_forecast()}",
    )


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    severity: str  # one of SEVERITIES
    category: str
    summary: str  # one sentence, with the numbers
    evidence: list[Evidence]
    fix: dict[str, str]  # framework ("tensorflow", "jax") -> what to change, with code
    predicted_speedup: Speedup | None
    notes: list[str] = field(default_factory=list)
    # A second number where a fix can be forecast from the measured parts (kind "forecast").
    forecast: Speedup | None = None
    # The ceiling from the part of the share the trace itself shows (None: all of it): where the
    # measured ceilings of two findings overlap, this orders them (rules/__init__.py ``rank``).
    seen_speedup: float | None = None


class RuleFacts:
    """What every finding of a rule says the same: its stable id, its title and the category of
    step time (or of the machine) it is about, declared once as class attributes. ``finding``
    fills them in; a rule whose title or category follows its evidence (SD210) passes its own."""

    id: str
    title: str
    category: str

    def finding(self, **fields) -> Finding:
        """A finding of this rule; ``fields``: Finding's others (severity, summary, evidence, fix,
        predicted_speedup where there is one, notes, ...); a title or category there replaces the
        rule's."""
        facts = {"id": self.id, "title": self.title, "category": self.category}
        return Finding(**{**facts, "predicted_speedup": None, **fields})


def same_fix(text: str) -> dict[str, str]:
    """The fix of a hardware or system cause: the same words in every framework."""
    return {"tensorflow": text, "jax": text, "pytorch": text}


def lost_speedup_severity(lost: float, ideal: float) -> str:
    return "high" if lost >= HIGH_LOST_FRACTION_OF_IDEAL * ideal else "medium"


def lost_evidence(what: str, gpus: int, cause: Cause, threshold: float) -> Evidence:
    """The speedup ``cause`` lost at ``gpus`` devices, with its spread (SD203, SD205)."""
    return Evidence(
        f"speedup lost to {what} at {gpus} devices",
        round(cause.lost_speedup, 3),
        "x",
        threshold=threshold,
        spread=round(cause.spread, 3),
    )


def ms_evidence(metric: str, ms: float, spread_ms: float | None, device: str | None) -> Evidence:
    """A time in ms with its 95% spread (None: unknown), both to a hundredth of a ms."""
    spread = None if spread_ms is None else round(spread_ms, 2)
    return Evidence(metric, round(ms, 2), "ms", spread=spread, device=device)


def recovery_speedup(measured: float, lost: float, what: str, gpus: int | None = None) -> Speedup:
    """The speedup at ``gpus`` if ``lost`` (in units of speedup) were won back: (S + lost) / S."""
    gain = (measured + lost) / measured
    where = f" at {gpus} devices" if gpus else ""
    return Speedup(
        gain,
        gain,
        gain,
        f"{what}: ({measured:.2f} + {lost:.2f}) / {measured:.2f} = {gain:.2f}x{where}",
    )


def clears(value: float, spread: float, threshold: float) -> bool:
    """True when ``value`` reaches ``threshold`` beyond its 95% CI (noise)."""
    if math.isinf(spread) or math.isnan(spread):
        return value >= threshold
    return value - spread >= threshold


def presence(value: float, spread: float, threshold: float) -> str | None:
    """What the 95% range ``value`` +- ``spread`` says of ``threshold``: ``"clear"`` (its low end
    reaches it), ``BORDERLINE`` (it straddles it) or None (its high end is below). An unknown
    spread (one window) compares the value itself."""
    if clears(value, spread, threshold):
        return "clear"
    if math.isinf(spread) or math.isnan(spread) or not value + spread >= threshold:
        return None
    return BORDERLINE


def share_severity(
    pct: float, spread: float, moderate_pct: float, high_pct: float
) -> tuple[str, str] | None:
    """A share's severity and the words its summary ends with, from its 95% range: None where it is
    below ``moderate_pct``; BORDERLINE and ``borderline_words`` where it straddles it; else its
    severity against ``high_pct``, no words."""
    where = presence(pct, spread, moderate_pct)
    if where is None:
        return None
    if where == BORDERLINE:
        return BORDERLINE, f"; {borderline_words(pct, spread, moderate_pct)}"
    return severity(pct, spread, high_pct), ""


def borderline_words(value: float, spread: float, threshold: float, what: str = "share") -> str:
    """The fixed words of a borderline finding: only the numbers change from run to run."""
    low, high = max(value - spread, 0.0), value + spread
    return (
        f"borderline: the {what}'s 95% range {low:.1f}-{high:.1f}% straddles the {threshold:g}%"
        " threshold, so this run does not settle whether it is a cause"
    )


def graded(finding: Finding) -> Finding:
    """The finding with its severity set by the gain its range allows: ``low`` where its ceiling's
    high end is under LOW_GAIN (a borderline or info finding keeps its word)."""
    s = finding.predicted_speedup
    if finding.severity not in ("high", "medium") or s is None:
        return finding
    if not max(s.value, s.high) < LOW_GAIN:
        return finding
    return replace(finding, severity="low")


def removal_speedup(
    share_pct: float, spread_pct: float, what: str, fraction_removed: float = 1.0
) -> Speedup:
    """Speedup if ``fraction_removed`` of an exclusive share of step time went away.

    Exclusive time is on the critical path by construction, so removing it
    shortens the step by that much at most: S <= 1 / (1 - f).
    """

    def speedup(pct: float) -> float:
        f = min(max(pct, 0.0), 99.0) / 100.0 * fraction_removed
        return 1.0 / (1.0 - f)

    spread = 0.0 if math.isinf(spread_pct) or math.isnan(spread_pct) else spread_pct
    f = share_pct / 100.0 * fraction_removed
    part = "" if fraction_removed == 1.0 else f" x {fraction_removed:.0%} of it"
    return Speedup(
        value=speedup(share_pct),
        low=speedup(share_pct - spread),
        high=speedup(share_pct + spread),
        arithmetic=(
            f"removing {share_pct:.1f}% exclusive {what} time{part} -> "
            f"1 / (1 - {f:.3f}) = {speedup(share_pct):.2f}x at most"
        ),
    )


def seen_speedup(share_pct: float, beyond_trace_pct: float) -> float | None:
    """The ceiling 1 / (1 - f) of the share the trace shows, where part of it came from outside the
    trace."""
    if not beyond_trace_pct > 0:
        return None
    f = min(max(share_pct - beyond_trace_pct, 0.0), 99.0) / 100.0
    return 1.0 / (1.0 - f)


def worst_unit(analysis: ProfileAnalysis, category: str) -> UnitAnalysis | None:
    """The unit where ``category`` takes the largest exclusive share."""
    if not analysis.units:
        return None
    return max(analysis.units, key=lambda u: u.categories[category].exclusive_pct)


def share_evidence(unit: UnitAnalysis, category: str, threshold: float) -> Evidence:
    share = unit.categories[category]
    return Evidence(
        metric=f"exclusive {category} share of step time",
        value=round(share.exclusive_pct, 2),
        unit="%",
        threshold=threshold,
        spread=_finite(share.exclusive_pct_ci95),
        device=unit.name,
    )


def severity(value: float, spread: float, high: float) -> str:
    return "high" if clears(value, spread, high) else "medium"


def _finite(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else round(x, 2)


def spread_note(spread: float) -> list[str]:
    if math.isinf(spread) or math.isnan(spread):
        return [
            "only one window: step-to-step spread is unknown, the share is a single measurement"
        ]
    return []
