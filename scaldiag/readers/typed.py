"""Each wanted stat of the type its producers write, else absent: what every reader's trace is
given.

A producer may write ``step_num`` as text or ``hlo_op`` as a number; the analysis then sees the stat
as missing rather than crashing on it. ``readers.read_trace`` and ``readers.read_rank`` apply it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from scaldiag.trace import INT_STATS, SparseStat, Trace


def typed_stats(trace: Trace) -> Trace:
    """The trace with each wanted stat of the type its producers write, else None (absent).

    A producer may write ``step_num`` as text or ``hlo_op`` as a number; the
    analysis then sees the stat as missing rather than crashing on it.
    """
    planes = []
    for plane in trace.planes:
        lines = [
            (
                replace(
                    line,
                    stats={k: _typed_column(k, v) for k, v in line.stats.items()},
                    stats_typed=True,
                )
                if line.stats and not line.stats_typed
                else line
            )
            for line in plane.lines
        ]
        planes.append(replace(plane, lines=lines))
    return replace(trace, planes=planes)


def _typed_column(name: str, column: np.ndarray | SparseStat) -> np.ndarray | SparseStat:
    if isinstance(column, SparseStat):
        values = _typed_column(name, column.values)
        keep = np.flatnonzero(values != None)  # noqa: E711
        return column if values is column.values else SparseStat(column.rows[keep], values[keep])
    present = np.flatnonzero(column != None)  # noqa: E711 (element-wise on an object array)
    if not len(present):
        return column
    present_values = column[present]
    # a pass at C speed; a trace's values are of one or two types
    kinds = set(map(type, present_values))
    if kinds <= ({int} if name in INT_STATS else {str}) and (
        name not in INT_STATS or _fits_int64(present_values)
    ):
        return column
    check = _as_int if name in INT_STATS else _as_text
    values = [check(v) for v in present_values]
    if all(a is b for a, b in zip(values, present_values)):
        return column
    out = column.copy()
    out[present] = values
    return out


_INT64 = (-(2**63), 2**63)  # the analysis keeps step numbers and group ids in int64 columns


def _fits_int64(values: np.ndarray) -> bool:
    return _INT64[0] <= min(values) and max(values) < _INT64[1]


def _as_int(value):
    if isinstance(value, (bool, np.bool_)):
        return None
    if (
        isinstance(value, (float, np.floating))
        and math.isfinite(value)
        and float(value).is_integer()
    ):
        value = int(value)
    if isinstance(value, (int, np.integer)) and _INT64[0] <= value < _INT64[1]:
        return value
    # a step_num of 2**63 (a double's) crashed the step finder: such a stat is absent, as text is
    return None


def _as_text(value):
    return value if isinstance(value, str) else None
