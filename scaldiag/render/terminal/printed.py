"""The script's own clocks beside scaldiag's figures (analyze/printed_clock.py), in words.

A disagreement is said before anything else in the report; agreements beside the headline.
The clock's names come from the script's output: shown inert (render/terminal/common.inert)."""

from __future__ import annotations

import math

from scaldiag.analyze.clock import WORDS
from scaldiag.analyze.printed_clock import AGREE, Comparison, PrintedClock

# Agreements and clocks not compared shown in the default report; the rest under --verbose.
SHOWN = 3


def ms(value: float) -> str:
    """Three figures, whole milliseconds from a second up (1,260, not 1.26e+03)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def figure(x: Comparison) -> str:
    return f"{x.shown} = {ms(x.ms)} ms a step ({WORDS.get(x.scope, x.scope)})"


def parts_words(parts, figure_ms: float, spread_ms: float = math.nan) -> str:
    """The parts a figure adds up to, each with its unit: " + validation 3.1 ms" for each part of at
    least 0.5% of the figure. A part below zero is the rest where the steps measured alone add to
    more than the clock's figure (a steady mean above the epochs' own): said as what it is,
    " - 2.08 ms (NAME: below zero, ...)", within or beyond ``spread_ms`` (the step's 95% range),
    never as a part of the run's time."""
    terms = []
    for name, part in parts:
        if abs(part) < 0.005 * figure_ms:
            continue
        if part >= 0:
            terms.append(f" + {name} {ms(part)} ms")
            continue
        noise = (
            f", within the step's ±{ms(spread_ms)} ms"
            if -part <= spread_ms
            else ""  # nan: no range to set it in
        )
        terms.append(
            f" - {ms(-part)} ms ({name}: below zero, the steps measured alone above this"
            f" figure{noise})"
        )
    return "".join(terms)


def scaldiag_figure(x: Comparison) -> str:
    parts = parts_words(x.parts, x.ms)
    if x.window:  # the clock's own window, all of it in parts
        return f"scaldiag over that window: {ms(x.scaldiag_ms)} ms" + (
            f" = {parts.removeprefix(' + ')}" if parts else ""
        )
    step = x.scaldiag_ms - sum(part for _, part in x.parts)
    return f"scaldiag: {ms(x.scaldiag_ms)} ms" + (
        f" = training step {ms(step)} ms{parts}" if parts else ""
    )


def _beside(x: Comparison) -> str:
    """What the verdict leaves unsaid: scaldiag's own cost in the clock's figure, the headline
    beside a window's figure, a call's batches."""
    said = []
    if not x.window and x.own_ms >= 0.005 * x.ms:
        said.append(f"{ms(x.own_ms)} ms of it scaldiag's profiler (not in a plain run)")
    if x.window and x.headline_ms is not None and abs(x.headline_ms / x.scaldiag_ms - 1) > AGREE:
        left = [name for name, part in x.parts if name != "steady" and part >= 0.01 * x.ms]
        said.append(
            f"the headline's {ms(x.headline_ms)} ms leaves out its " + ", ".join(left)
            if left
            else f"the headline says {ms(x.headline_ms)} ms"
        )
    if x.headline_off_ms is not None and not (x.window and x.headline_ms is not None):
        said.append(
            f"the headline's {ms(x.headline_off_ms)} ms is of other steps"
            if x.headline_scope == x.scope
            else f"the headline's {ms(x.headline_off_ms)} ms times "
            f"{WORDS.get(x.headline_scope, x.headline_scope)}, not this"
        )
    if x.batches_a_step:
        said.append(
            f"one call runs {x.batches_a_step:,} batches: {ms(x.ms / x.batches_a_step)} ms a batch"
            f" (scaldiag {ms(x.scaldiag_ms / x.batches_a_step)})"
        )
    return "".join(f"; {s}" for s in said)


def _into(ns: int, started_ns: int | None) -> str:
    return f"{(ns - started_ns) / 1e9:.1f}" if started_ns else "?"


def disagreement(x: Comparison, started_ns: int | None) -> str:
    if x.unrecorded:
        seen = "none" if not x.recorded else f"only {x.recorded:,}"
        counted = f"counted {x.counted:,} steps" if x.counted else f"ran ({x.shown})"
        return (
            f"Your clock disagrees: {x.what} {counted} at {_into(x.begin_ns, started_ns)}-"
            f"{_into(x.end_ns, started_ns)} s into the run where scaldiag recorded {seen}: "
            f"{x.note}."
        )
    if x.agrees:  # agrees with the scope's figure, not with the headline's
        return (
            f"Your clock contradicts the headline: {x.what}: {figure(x)}; the headline says "
            f"{ms(x.headline_ms)} ms ({x.headline_ms / x.ms - 1:+.1%}, beyond 5% and the spread, "
            f"±{x.spread_ms:.2g} ms); scaldiag's {ms(x.scaldiag_ms)} ms of the same scope agrees "
            f"({x.by})."
        )
    return (
        f"Your clock disagrees: {x.what}: {figure(x)}; {scaldiag_figure(x)}, {_off(x)}, beyond 5%"
        f" and the spread (±{x.spread_ms:.2g} ms): {x.note}{_beside(x)}."
    )


def _off(x: Comparison) -> str:
    off = x.scaldiag_ms / x.ms - 1
    return f"{abs(off):.1%} {'under' if off < 0 else 'over'} yours"


def agreement(x: Comparison) -> str:
    return (
        f"{x.what}: {figure(x)}; {scaldiag_figure(x)}: agrees "
        f"({x.scaldiag_ms / x.ms - 1:+.1%}, {x.by}){_beside(x)}"
    )


def not_compared(x: Comparison) -> str:
    return f"{x.what}: {x.shown}: not compared ({x.note})"


def first_lines(p: PrintedClock | None, started_ns: int | None) -> list[str]:
    """What the report says before its header: every disagreement."""
    if p is None:
        return []
    return [disagreement(x, started_ns) for x in p.disagreements]


def clock_lines(p: PrintedClock | None, verbose: bool) -> list[str]:
    """Beside the headline: the clocks that agree, then those that could not be compared."""
    if p is None:
        return []
    agreed = [agreement(x) for x in p.comparisons if x.agrees and x.headline_agrees is not False]
    other = [not_compared(x) for x in p.comparisons if x.agrees is None]
    lines = agreed + other
    if not verbose and len(lines) > SHOWN:
        lines = lines[:SHOWN] + [f"and {len(lines) - SHOWN} more of your clocks (--verbose, JSON)"]
    if p.dropped:
        lines.append(f"{p.dropped:,} printed lines were not kept (too many): clocks in them unread")
    if not p.comparisons:
        lines.append("no clock recognised in the script's output")
    return lines
