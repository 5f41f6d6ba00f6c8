"""Where a printed clock's readings lie on scaldiag's record, and scaldiag's figure over the
same steps (printed_clock.py). Pure."""

from __future__ import annotations

import numpy as np

from scaldiag.analyze import intervals as iv
from scaldiag.analyze import recorded_steps
from scaldiag.analyze.clock import (
    HOST_DISPATCH,
    LOOP_ITERATION,
    STEADY_STEP,
    WHOLE_EPOCH,
    WHOLE_TRAINING,
)
from scaldiag.analyze.epochs import EpochStats
from scaldiag.analyze.printed_reading import Reading

# A reading is compared where at least half its window lies on the steps the figure covers.
COVERED = 0.5


def share(windows: tuple[np.ndarray, np.ndarray], r: Reading) -> float:
    if r.end_ns <= r.begin_ns:
        inside = iv.measure_in_windows(
            windows, np.array([r.end_ns], np.int64), np.array([r.end_ns + 1], np.int64)
        )
        return float(inside.sum())
    inside = iv.measure_in_windows(
        windows, np.array([r.begin_ns], np.int64), np.array([r.end_ns], np.int64)
    )
    return float(inside.sum()) / (r.end_ns - r.begin_ns)


def recorded_batches(starts: np.ndarray, ends: np.ndarray, batches: np.ndarray, r: Reading) -> int:
    """The batches of the steps scaldiag recorded inside the reading's window."""
    inside = (ends > r.begin_ns) & (starts < r.end_ns)
    return int(batches[inside].sum())


def covered(
    scope: str, found: list[recorded_steps.Period], epochs: EpochStats | None
) -> tuple[np.ndarray, np.ndarray]:
    """The windows of the steps the scope's figure covers."""
    if scope == WHOLE_EPOCH and epochs is not None:
        pairs = [(e.begin_ns, e.end_ns) for e in epochs.epochs if e.epoch in epochs.compared]
    elif scope == WHOLE_TRAINING and found:
        pairs = [(found[0].begin_ns, found[-1].end_ns)]
    elif scope in (LOOP_ITERATION, STEADY_STEP, HOST_DISPATCH):
        spans: dict[int, list[int]] = {}
        for p in found:
            if p.kind == recorded_steps.STEADY:
                span = spans.setdefault(p.epoch, [p.begin_ns, p.end_ns])
                span[0], span[1] = min(span[0], p.begin_ns), max(span[1], p.end_ns)
        pairs = [tuple(s) for s in spans.values()]
    else:
        pairs = []
    return iv.of_pairs(sorted(pairs))


def figure_in(
    scope: str,
    r: Reading,
    found: list[recorded_steps.Period],
    epochs: EpochStats | None,
    after_first: bool,
) -> float | None:
    """scaldiag's figure of ``scope`` over the steps in the reading's window (a phase's clock
    beside that phase's steps, not the run's mean); None where the window holds too few."""
    if scope == WHOLE_EPOCH and epochs is not None:
        inside = [
            e
            for e in epochs.epochs
            if e.epoch in epochs.compared and _overlap(e.begin_ns, e.end_ns, r) >= COVERED
        ]
        values = [
            e.ms_per_step_after_first
            if after_first and e.ms_per_step_after_first is not None
            else e.ms_per_step
            for e in inside
        ]
        return float(np.mean(values)) if values else None
    if scope == LOOP_ITERATION:
        pairs = [
            (before, p)
            for before, p in zip(found, found[1:])
            if p.kind == recorded_steps.STEADY
            and before.epoch == p.epoch
            and r.begin_ns <= before.end_ns
            and p.end_ns <= r.end_ns
        ]
        if len(pairs) < 2:
            return None
        return sum(p.end_ns - b.end_ns for b, p in pairs) / sum(p.batches for _, p in pairs) / 1e6
    if scope == STEADY_STEP:
        steady = [
            p
            for p in found
            if p.kind == recorded_steps.STEADY and r.begin_ns <= p.begin_ns and p.end_ns <= r.end_ns
        ]
        if len(steady) < 2:
            return None
        return sum(p.duration_ns for p in steady) / sum(p.batches for p in steady) / 1e6
    return None  # the whole training, the host's dispatch: the scope's figure


def _overlap(begin_ns: int, end_ns: int, r: Reading) -> float:
    """The share of the shorter of the two spans that the other covers."""
    both = min(end_ns, r.end_ns) - max(begin_ns, r.begin_ns)
    shorter = min(end_ns - begin_ns, r.end_ns - r.begin_ns)
    return both / shorter if shorter > 0 else float(begin_ns <= r.end_ns <= end_ns)


def coverage(windows: tuple[np.ndarray, np.ndarray], readings: list[Reading]) -> float:
    """The share of the figure's steps' windows that the readings' windows cover."""
    total = float((windows[1] - windows[0]).sum())
    if total <= 0:
        return 0.0
    theirs = iv.of_pairs([(r.begin_ns, r.end_ns) for r in readings if r.end_ns > r.begin_ns])
    inside = iv.measure_in_windows(windows, theirs[0], theirs[1]) if len(theirs[0]) else [0.0]
    return float(np.sum(inside)) / total
