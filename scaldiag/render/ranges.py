"""One way to state a range, in every view (terminal run report, compare, HTML).

Two kinds of speed-up (rules/base.py ``Speedup``):

- a *ceiling* bounds what a fix can give ("at most, if the cost vanished"):
  ``at most 6.67x (95% range 5.80x-7.70x)``;
- a *forecast* is what the fix should give:
  ``1.70x (95% range 1.40x-2.10x)``.

The range is the 95% interval the evidence gives the number. A range of one
value is left out; a top that is unbounded (or ten times the bottom, where the
share it comes from nears the whole step) is said as ``5.80x or more``. A
ceiling under 1x is not a speed-up and is never printed as one: ``no speed-up
(its ceiling, 0.98x, is under 1x)``. What a ceiling bounds (this step, or the
throughput more devices can reach) is the caller's words, beside these.

A figure with its spread: ``12.345 ±0.210 ms``; an interval of a figure:
``1,234-1,456 samples/s`` or ``1,234 or more samples/s``.
"""

from __future__ import annotations

import math
from typing import Protocol

# A top ten times the bottom says "no upper bound" more honestly than its digits: it comes from a
# share whose upper end nears 100% of the step (1 / (1 - 0.99) = 100x).
UNBOUNDED_RATIO = 10.0
# Two ends that print alike at two decimals are one value.
SAME_X = 0.005


class SpeedupLike(Protocol):
    value: float
    low: float
    high: float
    kind: str


def _x(v: float) -> str:
    return f"{v:.2f}x"


def interval_x(low: float, high: float) -> str:
    """The 95% range of a speed-up: ``5.80x-7.70x``, ``5.80x or more``, or "" when it is one
    value."""
    if not math.isfinite(high) or high >= UNBOUNDED_RATIO * max(low, 1e-9):
        return f"{_x(low)} or more"
    if abs(high - low) < SAME_X:
        return ""
    return f"{_x(low)}-{_x(high)}"


def speedup(
    value: float, low: float | None = None, high: float | None = None, kind: str = "ceiling"
) -> str:
    """A speed-up with its range, as every view prints it (module docstring)."""
    if kind == "ceiling" and value < 1.0 - SAME_X:
        return f"no speed-up (its ceiling, {_x(value)}, is under 1x)"
    if kind == "ceiling" and value < 1.0 + SAME_X:
        return "none to speak of (at most 1.00x)"
    head = f"at most {_x(value)}" if kind == "ceiling" else _x(value)
    if kind != "ceiling" and value < 1.0 - SAME_X:
        head += " (a slow-down)"
    span = "" if low is None or high is None else interval_x(low, high)
    return f"{head} (95% range {span})" if span else head


def speedup_of(s: SpeedupLike) -> str:
    """``speedup`` of a rules.base.Speedup (or anything with value, low, high and kind)."""
    return speedup(s.value, s.low, s.high, s.kind)


def _num(v: float, digits: int) -> str:
    return f"{v:,.{digits}f}"


def spread(value: float, ci95: float | None, unit: str = "", digits: int = 3) -> str:
    """A figure with its 95% half-width: ``12.345 ±0.210 ms``; without a known spread, the figure
    and "(spread unknown)"."""
    tail = f" {unit}" if unit else ""
    if ci95 is None or not math.isfinite(ci95):
        return f"{_num(value, digits)}{tail} (spread unknown)"
    return f"{_num(value, digits)} ±{_num(ci95, digits)}{tail}"


def interval(low: float, high: float | None, unit: str = "", digits: int = 0) -> str:
    """A figure's 95% interval: ``1,234-1,456 samples/s``, ``1,234 or more samples/s`` (no top)."""
    tail = f" {unit}" if unit else ""
    if high is None or not math.isfinite(high):
        return f"{_num(low, digits)} or more{tail}"
    return f"{_num(low, digits)}-{_num(high, digits)}{tail}"
