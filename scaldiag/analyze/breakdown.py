"""Per-step breakdown of one execution unit's time into categories.

Exclusive time: each instant of a step counts once, for the first category
in ``CATEGORIES`` active then (device work before host work; see
categories.py). Busy time: each category's own covered time, overlaps
counted in every category that was active.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaldiag.analyze import intervals as iv
from scaldiag.analyze.categories import CATEGORIES, DEVICE_CATEGORIES
from scaldiag.analyze.trace_steps import Steps


@dataclass(frozen=True)
class Breakdown:
    """Per-step, per-category times of one unit. Arrays are [step, category]."""

    exclusive_ns: np.ndarray
    busy_ns: np.ndarray
    step_ns: np.ndarray
    device_busy_ns: np.ndarray  # union of all device work per step


def breakdown(
    sets: dict[str, iv.IntervalSet], steps: Steps, device_categories=DEVICE_CATEGORIES
) -> Breakdown:
    """``sets``: the unit's time per category (absent categories are empty).

    ``device_categories``: those that count as the unit being busy.
    """
    ws, we = steps.start_ns, steps.end_ns
    n = len(ws)
    exclusive = np.zeros((n, len(CATEGORIES)), np.int64)
    busy = np.zeros((n, len(CATEGORIES)), np.int64)
    covered = iv.EMPTY
    for c, category in enumerate(CATEGORIES[:-1]):  # idle: what nothing covers
        s = sets.get(category, iv.EMPTY)
        if len(s[0]) == 0:
            continue
        busy[:, c] = iv.measure_in_windows(s, ws, we)
        exclusive[:, c] = iv.measure_in_windows(iv.subtract(s, covered), ws, we)
        covered = iv.merge(covered, s)
    step_ns = we - ws
    idle = CATEGORIES.index("idle")
    exclusive[:, idle] = step_ns - exclusive.sum(axis=1)
    busy[:, idle] = exclusive[:, idle]
    device = iv.merge(*[sets[c] for c in device_categories if c in sets])
    return Breakdown(exclusive, busy, step_ns, iv.measure_in_windows(device, ws, we))
