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


def shares(windows: tuple[np.ndarray, np.ndarray], readings: list[Reading]) -> np.ndarray:
    """The share of each reading's window that ``windows`` cover (a reading of a moment: 1 where
    the moment is inside them, else 0). One pass: a log of 100,000 lines is as many readings."""
    begins = np.array([r.begin_ns for r in readings], np.int64)
    ends = np.array([r.end_ns for r in readings], np.int64)
    moment = ends <= begins
    begins = np.where(moment, ends, begins)
    lengths = np.where(moment, 1, ends - begins)
    inside = iv.measure_in_windows(windows, begins, np.where(moment, ends + 1, ends))
    return np.asarray(inside, float) / lengths


def touching_batches(every: list[recorded_steps.Period], readings: list[Reading]) -> np.ndarray:
    """The batches of the steps that reach into each reading's window at all (one that ends after
    the window begins and begins before it ends): the lenient count a clock's "steps scaldiag did
    not record" is judged by (a window between two lines that holds scaldiag's profiler stop holds
    the edges of the steps around it, and no alarm)."""
    starts = np.array([p.begin_ns for p in every], np.int64)
    ends = np.array([p.end_ns for p in every], np.int64)
    total = np.concatenate([[0], np.cumsum([p.batches for p in every], dtype=np.int64)])
    lo = np.searchsorted(ends, [r.begin_ns for r in readings], "right")
    hi = np.searchsorted(starts, [r.end_ns for r in readings], "left")
    return np.where(hi > lo, total[hi] - total[np.minimum(lo, hi)], 0)


def recorded_batches(every: list[recorded_steps.Period], readings: list[Reading]) -> np.ndarray:
    """The batches of the steps scaldiag recorded inside each reading's window: a step is inside
    where its midpoint is (the periods are in time order and do not overlap), so windows that tile
    the run count each step once (JAX's steps ran from one call's begin to the next's: the time
    between two epoch lines held one step and the edge of the one before, counted as two)."""
    mids = np.array([(p.begin_ns + p.end_ns) // 2 for p in every], np.int64)
    total = np.concatenate([[0], np.cumsum([p.batches for p in every], dtype=np.int64)])
    lo = np.searchsorted(mids, [r.begin_ns for r in readings], "left")
    hi = np.searchsorted(mids, [r.end_ns for r in readings], "right")
    return total[hi] - total[lo]


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


class Figures:
    """scaldiag's figure of a scope over the steps in a reading's window (a phase's clock beside
    that phase's steps, not the run's mean), in O(log n) a reading."""

    def __init__(self, found: list[recorded_steps.Period], epochs: EpochStats | None):
        steady = [p for p in found if p.kind == recorded_steps.STEADY]
        pairs = [
            (before, p)
            for before, p in zip(found, found[1:])
            if p.kind == recorded_steps.STEADY and before.epoch == p.epoch
        ]
        # loop iterations: a steady step's end to the one before's, in one epoch
        self._iter = _Spans(
            [b.end_ns for b, _ in pairs],
            [p.end_ns for _, p in pairs],
            [p.end_ns - b.end_ns for b, p in pairs],
            [p.batches for _, p in pairs],
        )
        self._step = _Spans(
            [p.begin_ns for p in steady],
            [p.end_ns for p in steady],
            [p.duration_ns for p in steady],
            [p.batches for p in steady],
        )
        self._epochs = (
            sorted(
                (e for e in epochs.epochs if e.epoch in epochs.compared), key=lambda e: e.begin_ns
            )
            if epochs is not None
            else []
        )
        self._epoch_ends = np.array([e.end_ns for e in self._epochs], np.int64)

    def over(self, scope: str, r: Reading, after_first: bool) -> float | None:
        """None where the window holds too few steps of the scope (the scope's figure then)."""
        if r.median and scope in (LOOP_ITERATION, STEADY_STEP):
            return (self._iter if scope == LOOP_ITERATION else self._step).median_ms(
                r.begin_ns, r.end_ns
            )
        if scope == WHOLE_EPOCH:
            return self._whole_epochs(r, after_first)
        if scope == LOOP_ITERATION:
            return self._iter.per_batch_ms(r.begin_ns, r.end_ns)
        if scope == STEADY_STEP:
            return self._step.per_batch_ms(r.begin_ns, r.end_ns)
        return None  # the whole training, the host's dispatch: the scope's figure

    def spans(self, scope: str, r: Reading) -> np.ndarray | None:
        """Each iteration (or step) inside the reading's window, ms a batch, in time order: what a
        timer of one iteration a print is set beside (printed_sampled.py)."""
        if scope == LOOP_ITERATION:
            return self._iter.inside_ms(r.begin_ns, r.end_ns)
        if scope == STEADY_STEP:
            return self._step.inside_ms(r.begin_ns, r.end_ns)
        return None

    def _whole_epochs(self, r: Reading, after_first: bool) -> float | None:
        first = int(np.searchsorted(self._epoch_ends, r.begin_ns, "right"))
        values = []
        for e in self._epochs[first:]:
            if e.begin_ns >= r.end_ns:
                break
            if _overlap(e.begin_ns, e.end_ns, r) >= COVERED:
                after = e.ms_per_step_after_first if after_first else None
                values.append(after if after is not None else e.ms_per_step)
        return float(np.mean(values)) if values else None


class _Spans:
    """Spans in time order (begins and ends both sorted): those inside a window are one run of
    them, found by two binary searches; their sums from prefix sums."""

    def __init__(self, begins, ends, durations_ns, batches):
        self.begins = np.array(begins, np.int64)
        self.ends = np.array(ends, np.int64)
        self.ns = np.concatenate([[0], np.cumsum(np.array(durations_ns, np.int64))])
        self.batches = np.concatenate([[0], np.cumsum(np.array(batches, np.int64))])
        self.per_ms = np.array(durations_ns, float) / np.maximum(np.array(batches, float), 1) / 1e6

    def median_ms(self, begin_ns: int, end_ns: int) -> float | None:
        """The median of the spans inside the window, a batch each (a timer that prints its steps'
        median; only its readings pay for the pass over their steps)."""
        lo = int(np.searchsorted(self.begins, begin_ns, "left"))
        hi = int(np.searchsorted(self.ends, end_ns, "right"))
        return float(np.median(self.per_ms[lo:hi])) if hi - lo >= 2 else None

    def inside_ms(self, begin_ns: int, end_ns: int) -> np.ndarray | None:
        lo = int(np.searchsorted(self.begins, begin_ns, "left"))
        hi = int(np.searchsorted(self.ends, end_ns, "right"))
        return self.per_ms[lo:hi] if hi > lo else None

    def per_batch_ms(self, begin_ns: int, end_ns: int) -> float | None:
        lo = int(np.searchsorted(self.begins, begin_ns, "left"))
        hi = int(np.searchsorted(self.ends, end_ns, "right"))
        if hi - lo < 2:
            return None
        return float(self.ns[hi] - self.ns[lo]) / float(self.batches[hi] - self.batches[lo]) / 1e6


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
