"""The verdict on a printed clock beside scaldiag's figure (printed_clock.py): the comparison, the
agreement within 5% or the spread, and a clock set beside scaldiag's record of its own window,
in parts (printed_account.py). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from scaldiag.analyze import printed_account, recorded_steps
from scaldiag.analyze.clock import Clock
from scaldiag.analyze.printed_reading import Reading
from scaldiag.analyze.printed_windows import recorded_batches
from scaldiag.analyze.stats import ci95_half_width

# Within 5% of the clock the user reads: the bar for "agrees" (issue 46).
AGREE = 0.05
# A spread wider than this share of the figure judges nothing: a "1ms/step" bar, or readings
# that vary by half, neither agree nor disagree (the report says the clock is too coarse).
JUDGE = 0.25
COARSE = "coarse"


@dataclass(frozen=True)
class Comparison:
    """One clock (every reading of one printed figure) beside scaldiag's figure of its scope."""

    what: str
    scope: str
    shown: str  # the clock's last compared figure as printed ("12.3 it/s")
    ms: float | None  # the clock's ms a step of its scope (mean of the compared readings)
    scaldiag_ms: float | None
    error: float | None  # clock_ms / scaldiag_ms - 1
    agrees: bool | None  # None: not compared (note says why)
    by: str = ""  # "within 5%" or "within the spread (±x ms)"; "" where it disagrees
    spread_ms: float = 0.0
    readings: int = 0  # the clock's readings compared
    parts: list[tuple[str, float]] = field(default_factory=list)  # scaldiag's figure's parts
    note: str = ""
    begin_ns: int = 0
    end_ns: int = 0
    counted: int | None = None  # unrecorded: the steps the clock counted in its window
    recorded: int | None = None  # unrecorded: the steps scaldiag recorded there
    headline: bool = False  # the clock is of the scope the report leads with
    headline_ms: float | None = None  # the headline's figure, where the clock is of its scope
    headline_agrees: bool | None = None  # the clock against the headline's own figure
    # scaldiag's figure is its record of the clock's own window, ``parts`` all of it (steady,
    # compile/warm-up, scaldiag's profiler, ...): the clock timed steps no scope's figure is of
    window: bool = False
    own_ms: float = 0.0  # of scaldiag's figure, its own cost in this run (not in a plain run)
    batches_a_step: int | None = None  # a step that loops over batches inside (step_loop)
    # The headline's figure where it is over 5% off this clock and of another scope (said in the
    # clock's line: no headline far from a printed clock without the report saying so)
    headline_off_ms: float | None = None
    headline_scope: str = ""
    # A timer of one iteration a print (printed_sampled.py): it times one in this many
    sampled_every: int | None = None

    @property
    def unrecorded(self) -> bool:
        return self.counted is not None


def by_window(
    group: list[Reading],
    c: Clock | None,
    found: list[recorded_steps.Period],
    accountant: printed_account.Accountant,
    after_first: bool,
    base: dict,
    recorded_only: bool = False,
    epochs_headline: bool = False,
) -> Comparison:
    """The clock beside scaldiag's record of each reading's own window, in parts (steady,
    compile/warm-up, scaldiag's profiler, evaluation, the rest): the verdict on the total.
    ``recorded_only``: the parts scaldiag recorded, the rest out (a window placed back from its
    print by the clock's own span is the clock's figure whole: only what the record holds in it
    checks it)."""
    pairs = [
        (r, accountant.account(r.begin_ns, r.end_ns, after_first, r.skipped))
        for r in group
        if r.ms is not None
    ]
    pairs = [(r, a.recorded() if recorded_only else a) for r, a in pairs if a is not None]
    # (a compile epoch's line is read and not compared where later ones were printed, as above)
    pairs = [(r, a) for r, a in pairs if not a.compiled] or pairs
    if not pairs:
        return Comparison(
            shown=group[-1].shown,
            ms=mean_ms(group),
            scaldiag_ms=None,
            error=None,
            agrees=None,
            note="no step recorded in its window",
            **base,
        )
    values = np.array([r.ms for r, _ in pairs])
    beside = np.array([a.ms for _, a in pairs])
    ms, figure = float(values.mean()), float(beside.mean())
    resolution_ms = float(np.mean([r.resolution_ms for r, _ in pairs])) / math.sqrt(len(values))
    spread_ms = in_quadrature(spread_ci(values - beside), resolution_ms)
    parts: dict[str, float] = {}
    for _, a in pairs:
        for name, part in a.parts:
            parts[name] = parts.get(name, 0.0) + part / len(pairs)
    # the headline's clock where its window holds steps of the headline's (not another model's)
    headline = (
        c is not None
        and base["scope"] == c.user_scope
        and bool(recorded_batches(found, [r for r, _ in pairs]).sum())
    )
    headline_ms = headline_figure(c) if headline else None
    # the clock of the headline's own epochs (each compiled): set beside the headline too
    headline_by = (
        agreement(ms, headline_ms, in_quadrature(spread_ci(values), resolution_ms))
        if epochs_headline and headline
        else ""
    )
    return Comparison(
        shown=shown_of([r for r, _ in pairs]),
        **verdict(ms, figure, spread_ms),
        readings=len(pairs),
        parts=printed_account.in_order(parts.items()),
        headline=headline,
        headline_ms=headline_ms,
        headline_agrees=verdict_of(headline_by) if epochs_headline and headline else None,
        window=True,
        own_ms=float(np.mean([a.own_ms for _, a in pairs])),
        **{**base, "begin_ns": pairs[0][0].begin_ns, "end_ns": pairs[-1][0].end_ns},
    )


def headline_figure(c: Clock) -> float:
    return c.scopes[c.user_scope].over_every_epoch_ms


def spread_ci(values: np.ndarray) -> float:
    return ci95_half_width(values) if len(values) > 1 else 0.0


def in_quadrature(*spreads: float) -> float:
    return math.sqrt(sum(x * x for x in spreads))


def verdict(ms: float, figure: float, spread_ms: float) -> dict:
    """A Comparison's verdict fields: the clock's ms beside scaldiag's figure, within 5% or the
    spread, too coarse to judge, or a gap said in words."""
    by = agreement(ms, figure, spread_ms)
    note = coarse_note(spread_ms, figure) if by == COARSE else "" if by else gap_note(ms, figure)
    return dict(
        ms=ms,
        scaldiag_ms=figure,
        error=ms / figure - 1,
        agrees=verdict_of(by),
        by=by if by != COARSE else "",
        spread_ms=spread_ms,
        note=note,
    )


def verdict_of(by: str) -> bool | None:
    return None if by == COARSE else bool(by)


def agreement(ms: float, figure: float, spread_ms: float) -> str:
    """How the clock agrees with the figure, in words; "" where it does not; ``COARSE`` where only
    a spread too wide to judge by (over ``JUDGE`` of the figure) covers the gap."""
    if abs(ms / figure - 1) <= AGREE:
        return f"within {AGREE:.0%}"
    if abs(ms - figure) <= spread_ms:
        return COARSE if spread_ms > JUDGE * figure else f"within the spread (±{spread_ms:.3g} ms)"
    return ""


def coarse_note(spread_ms: float, figure: float) -> str:
    return (
        f"your clock is too coarse, or varies too much, to judge: ±{spread_ms:.3g} ms against "
        f"{figure:.3g} ms"
    )


def shown_of(readings: list[Reading]) -> str:
    """The clock's figures as printed: each where a few, else the first and the last."""
    shown = [r.shown for r in readings]
    if len(shown) > 1 and len(set(shown)) == 1:
        return f"{shown[0]} ({len(shown)} readings)"
    if len(shown) > 4:
        return f"{shown[0]} ... {shown[-1]} ({len(shown)} readings)"
    return ", ".join(shown)


def mean_ms(group: list[Reading]) -> float | None:
    values = [r.ms for r in group if r.ms is not None]
    return float(np.mean(values)) if values else None


def gap_note(clock_ms: float, figure_ms: float) -> str:
    if clock_ms > figure_ms:
        return (
            f"scaldiag cannot account for {clock_ms - figure_ms:.3g} ms a step of your clock's: "
            "work in its window that no recorded step holds"
        )
    return (
        f"scaldiag's figure is {figure_ms - clock_ms:.3g} ms a step over your clock's: its steps "
        "hold work your clock does not time, or your clock times another span"
    )
