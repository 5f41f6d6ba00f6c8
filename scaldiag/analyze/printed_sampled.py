"""A timer that prints one iteration's time, not its window's mean.

minGPT's Trainer prints ``iter_dt`` every 10 iterations: the time of the one iteration before the
print, a sample of one in ten. Beside the mean of the 10 iterations between two prints it reads
wrong wherever iterations vary (a loaded CPU: 461.7 against 540.3 ms, -14.5%, while each printed
value equals scaldiag's record of that one iteration, median ratio 1.000). So its readings are
compared with the iterations they time, where the record says which: each reading beside the
iterations in its window, the last, the one before it, ... (``BACK``), and its window's mean.
A timer is of one iteration where, at the median over its readings, it is within ``AGREE`` of one
such iteration and not of its window's mean; the iteration is the same place back for every
reading (one hypothesis for the whole clock, not one a reading).

Where iterations do not vary (a quiet GPU) the hypotheses cannot be told apart and the window's
mean stands: then the two figures are the same anyway. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scaldiag.analyze.printed_reading import Reading
from scaldiag.analyze.printed_verdict import (
    AGREE,
    Comparison,
    in_quadrature,
    shown_of,
    spread_ci,
    verdict,
)

BACK = 3  # the last, the second-last and the third-last iteration ended before the print
# Fewer readings than this cannot tell a sample from a mean (one reading matches anything).
MIN_READINGS = 5
ORDINALS = ("last", "second-last", "third-last")


@dataclass(frozen=True)
class Sampled:
    back: int  # 0: the last iteration ended before the print; 1: the one before it, ...
    readings: list[Reading]  # the readings with iterations in their window
    of_ms: list[float]  # scaldiag's record of each reading's iteration
    every: int  # iterations a window, the median: the clock times one in ``every``


def sampled(readings: list[Reading], spans: list[np.ndarray | None]) -> Sampled | None:
    """The iteration the timer times, where the record says it times one; else None.
    ``spans``: each reading's iterations inside its window, ms a batch, in time order."""
    pairs = [(r, s) for r, s in zip(readings, spans) if s is not None and len(s) >= 2]
    if len(pairs) < MIN_READINGS:
        return None
    values = np.array([r.ms for r, _ in pairs])
    of_mean = np.median(np.abs(values / np.array([s.mean() for _, s in pairs]) - 1))
    if of_mean <= AGREE:
        return None  # the window's mean explains it: a mean timer, or iterations that do not vary
    best: tuple[float, int] | None = None
    for back in range(BACK):
        if any(len(s) <= back for _, s in pairs):
            break
        off = float(np.median(np.abs(values / np.array([s[-1 - back] for _, s in pairs]) - 1)))
        if best is None or off < best[0]:
            best = (off, back)
    if best is None or best[0] > AGREE:
        return None
    back = best[1]
    return Sampled(
        back,
        [r for r, _ in pairs],
        [float(s[-1 - back]) for _, s in pairs],
        # (the counter's increase where the line has one: the spans inside a window leave out
        # the one that crosses its edge)
        int(np.median([r.count or len(s) for r, s in pairs])),
    )


def comparison(s: Sampled, base: dict) -> Comparison:
    """The timer beside the iterations it timed: paired, each reading beside its iteration. The
    headline (every iteration) is not this clock's scope: where it is over 5% off, the clock's line
    says so (printed_clock.headline_off)."""
    values = np.array([r.ms for r in s.readings])
    beside = np.array(s.of_ms)
    ms, figure = float(values.mean()), float(beside.mean())
    resolution_ms = float(np.mean([r.resolution_ms for r in s.readings])) / math.sqrt(len(values))
    spread_ms = in_quadrature(spread_ci(values - beside), resolution_ms)
    what = f"{base['what']} (one iteration in {s.every}: the {ORDINALS[s.back]} before each print)"
    return Comparison(
        shown=shown_of(s.readings),
        **verdict(ms, figure, spread_ms),
        readings=len(values),
        sampled_every=s.every,
        **{
            **base,
            "what": what,
            "begin_ns": s.readings[0].begin_ns,
            "end_ns": s.readings[-1].end_ns,
        },
    )
