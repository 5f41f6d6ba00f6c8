"""Interval algebra on numpy arrays: half-open [start, end) in integer ns.

A *set* is a pair of sorted, disjoint arrays ``(starts, ends)``. Everything
here is vectorised: the analysis of a million-event trace must not loop in
Python per event.
"""

from __future__ import annotations

import numpy as np

IntervalSet = tuple[np.ndarray, np.ndarray]

EMPTY: IntervalSet = (np.empty(0, np.int64), np.empty(0, np.int64))


def union(starts: np.ndarray, ends: np.ndarray) -> IntervalSet:
    """Merge possibly overlapping intervals into a sorted disjoint set."""
    keep = ends > starts
    starts, ends = np.asarray(starts, np.int64)[keep], np.asarray(ends, np.int64)[keep]
    if len(starts) == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    # A new merged interval begins where a start lies beyond all earlier ends.
    begins = np.concatenate(([True], starts[1:] > reach[:-1]))
    group_end = np.flatnonzero(np.concatenate((begins[1:], [True])))
    return starts[begins], reach[group_end]


def of_pairs(pairs) -> IntervalSet:
    """The disjoint set covering ``(start, end)`` pairs (marks' begin and end, say)."""
    return union(
        np.array([a for a, _ in pairs], np.int64), np.array([b for _, b in pairs], np.int64)
    )


def merge(*sets: IntervalSet) -> IntervalSet:
    """Union of several sets."""
    if not sets:
        return EMPTY
    return union(np.concatenate([s for s, _ in sets]), np.concatenate([e for _, e in sets]))


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """The part of ``a`` not covered by ``b`` (both disjoint sets)."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    # Sweep over all boundaries: a adds 1 inside, b adds 2 inside; keep where
    # the running level is exactly 1 (in a, not in b).
    points = np.concatenate((a[0], a[1], b[0], b[1]))
    steps = np.concatenate(
        (np.ones(len(a[0])), -np.ones(len(a[1])), np.full(len(b[0]), 2.0), np.full(len(b[1]), -2.0))
    )
    order = np.lexsort((steps, points))  # at equal points, ends (negative) first
    points, level = points[order], np.cumsum(steps[order])
    inside = level[:-1] == 1
    starts, ends = points[:-1][inside], points[1:][inside]
    return union(starts, ends)


def covered_before(s: IntervalSet, t: np.ndarray) -> np.ndarray:
    """Length of ``s`` lying before each time in ``t`` (vectorised)."""
    starts, ends = s
    t = np.asarray(t, np.int64)
    if len(starts) == 0:
        return np.zeros(len(t), np.int64)
    cum = np.concatenate(([0], np.cumsum(ends - starts)))
    k = np.searchsorted(starts, t, side="right")  # intervals starting at or before t
    last_end = ends[np.maximum(k - 1, 0)]
    overhang = np.where(k > 0, np.maximum(last_end - t, 0), 0)
    return cum[k] - overhang


def measure_in_windows(s: IntervalSet, w_start: np.ndarray, w_end: np.ndarray) -> np.ndarray:
    """Covered length of ``s`` inside each window [w_start, w_end)."""
    return covered_before(s, w_end) - covered_before(s, w_start)
