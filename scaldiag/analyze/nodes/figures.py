"""Every rank's figures at the matched collectives, from the table of arrivals: the link's
time, the exposed tail of each step, lateness and who arrived last (``per_rank``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaldiag.analyze.nodes.arrivals import EMPTY_I64, ArrivalTable
from scaldiag.analyze.nodes.columns import JobEvents


@dataclass(frozen=True)
class RankFigures:
    """Every rank's figures at the matched collectives, in flat arrays (no object a rank): per cell
    (``Cells``) when its collective ran after its last arrival; per group (a rank's step) its tail
    after the step's last hand-over and its lateness; per rank at how many collectives it arrived
    last and at how many it was compared. ``cell_at``, ``group_at``: where each rank's begin."""

    after_start_ns: np.ndarray
    end_ns: np.ndarray  # per cell: the rank's own end of the collective
    cell_at: np.ndarray
    tails_ms: np.ndarray
    late_ms: np.ndarray | None  # None: fewer than two rank names, no lateness
    group_at: np.ndarray
    last: np.ndarray
    n: np.ndarray


def per_rank(job: JobEvents, t: ArrivalTable) -> RankFigures:
    c = t.cells
    n_ranks = len(job.ranks)
    after_start = np.maximum(c.arrive_ns, t.last_ns[c.col]) if len(c.col) else EMPTY_I64
    # Groups: a rank's cells of one step, by rank then step, each in the rank's own order (a stable
    # sort).
    step = t.step[c.col] if len(c.col) else EMPTY_I64
    order = np.lexsort((step, c.rank))
    g_rank, g_step = c.rank[order], step[order]
    new = np.ones(len(order), bool)
    new[1:] = (g_rank[1:] != g_rank[:-1]) | (g_step[1:] != g_step[:-1])
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    ranks = np.arange(n_ranks + 1)
    group_at = np.searchsorted(g_rank[starts], ranks)
    tails = _tails_ms(t, g_step, c.end_ns[order], starts)
    # Let go before the lateness makes its own columns a cell: there the arithmetic peaks
    del step, g_rank, g_step, new
    late, last, n = _lateness(t, order, group, starts, n_ranks)
    return RankFigures(
        after_start,
        c.end_ns,
        np.searchsorted(c.rank, ranks),
        tails,
        late,
        group_at,
        last,
        n,
    )


def _tails_ms(
    t: ArrivalTable, g_step: np.ndarray, g_end: np.ndarray, starts: np.ndarray
) -> np.ndarray:
    """Per group (a rank's step): from the last hand-over of any rank at the step's collectives (the
    last
    backward done) to the end of this rank's last collective of the step. Before it some rank still
    computes; after it none can (the optimizer waits for every bucket): the collectives' time
    nobody's work hides."""
    if not len(starts):
        return np.empty(0)
    steps, step_of_col = np.unique(t.step, return_inverse=True)
    last_arrival = np.full(len(steps), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(last_arrival, step_of_col.reshape(-1), t.last_ns)
    last_end = np.maximum.reduceat(g_end, starts)
    return np.maximum(0, last_end - last_arrival[np.searchsorted(steps, g_step[starts])]) / 1e6


def _lateness(
    t: ArrivalTable, order: np.ndarray, group: np.ndarray, starts: np.ndarray, n_ranks: int
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Per group (a rank's step): this rank's arrival minus the other ranks' mean arrival (ms), over
    the
    step's collectives weighted by how far apart their ranks arrived (the last arrival minus the
    first); per rank, at how many collectives it arrived last, and at how many it was compared.

    The weight puts the step's wait where it happened. DDP's buckets all carry a late rank's delay
    (equal weights: the mean); a TF step waits once, at its first all-reduce (the input's has-value
    check), and the ones after it start together (the plain mean over its four collectives read a
    quarter of the wait: 15 ms where the peer waited 60, tests/test_multinode_tf.py). Signed, so
    jitter still averages out (a collective's weight is the same whichever rank was late); a step
    whose ranks all arrived together at every collective is 0."""
    c = t.cells
    if t.names < 2 or not len(c.col):
        return None, np.zeros(n_ranks, np.int64), np.zeros(n_ranks, np.int64)
    mine = t.at_ns[t.name_of_cell, c.col]
    others = _mean_of_others_ns(t, mine, c.col)
    late_ms = (mine.astype(np.float64) - others) / 1e6
    spread = t.last_ns[c.col] - t.first_ns[c.col]
    # Summed in each rank's own order within a step (bincount adds in its input's order), as the
    # plain sum.
    weighted = np.bincount(
        group, weights=(late_ms * spread.astype(np.float64))[order], minlength=len(starts)
    )
    total = np.add.reduceat(spread[order], starts)
    late = np.where(total > 0, weighted / np.where(total > 0, total, 1).astype(np.float64), 0.0)
    last = np.bincount(c.rank[mine == t.last_ns[c.col]], minlength=n_ranks)
    return late, last, np.bincount(c.rank, minlength=n_ranks)


# Integers of this size or less are all exact as floats (2**53), with room for the rounding rule
# below.
_EXACT_BELOW = 2**53 + 4
# Beyond this an int64 sum of the arrivals' distances could overflow: the mean is taken with
# Python's ints.
_INT64_ROOM = 2**62


def _mean_of_others_ns(t: ArrivalTable, mine: np.ndarray, col: np.ndarray) -> np.ndarray:
    """Per cell: the mean arrival of the other rank names at its collective, as a float correctly
    rounded
    from the exact integer mean (the sum of the others over their count, as Python's ints divide).
    """
    d = t.names - 1
    first = t.first_ns[col]
    spread_ok = len(t.last_ns) == 0 or (
        float(t.last_ns.max()) < _INT64_ROOM
        and float(t.first_ns.min()) > -_INT64_ROOM
        and float((t.last_ns - t.first_ns).max()) * t.names < _INT64_ROOM
    )
    if not spread_ok:
        sums = [sum(v) for v in t.at_ns.T.tolist()]
        return np.array(
            [(sums[k] - m) / d for k, m in zip(col.tolist(), mine.tolist())], np.float64
        )
    # The others' sum, less d times the first arrival (in place: a column a cell each step holds,
    # and this is the merge's peak)
    rest = t.above_first_ns[col]
    rest -= mine
    rest += first
    whole, rem = np.divmod(rest, d)
    del rest
    whole += first  # the mean is whole + rem / d, 0 <= rem < d
    del first
    out = whole.astype(np.float64)
    exact = out.astype(np.int64)
    fraction = rem > 0
    small = np.flatnonzero(fraction & (np.abs(whole) <= _EXACT_BELOW))
    # Past 2**53 the floats about ``whole`` are integers at least 2 apart: whole + rem / d rounds as
    # whole does, except where whole lies halfway between two of them: a fraction above it rounds
    # up.
    below = np.flatnonzero(fraction & (exact < whole))
    del fraction
    up = np.nextafter(out[below], np.inf)
    halfway = (whole[below] - exact[below]) == (up.astype(np.int64) - whole[below])
    out[below[halfway]] = up[halfway]
    if len(small):
        out[small] = [(w * d + r) / d for w, r in zip(whole[small].tolist(), rem[small].tolist())]
    return out
