"""What the host threads are doing at each instant.

Host events nest (a step function contains an executor run that contains an
op). A thread's state at an instant is decided by the innermost event active
then; an event without a category of its own inherits its parent's, so the
Eigen work inside a convolution op stays compute, and time inside a step
function that no op covers is host overhead.
"""

from __future__ import annotations

import numpy as np

from scaldiag.analyze import categories as cat
from scaldiag.analyze import intervals as iv
from scaldiag.trace import Line, Plane

HOST_STATES = ("compute", "layout", "collective", "input", "host_overhead", cat.WAIT, cat.BACKGROUND)
_CODE = {state: code for code, state in enumerate(HOST_STATES)}
_GENERIC_CODE = -1
_OVERHEAD = _CODE["host_overhead"]


def host_states(planes: list[Plane], ops_are_compute: bool) -> dict[str, iv.IntervalSet]:
    """Union over all host threads of the time spent in each state."""
    pieces: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for plane in planes:
        own = _own_codes(plane.event_names, ops_are_compute)
        for line in plane.lines:
            for code, segments in _line_states(line, own).items():
                pieces.setdefault(code, []).append(segments)
    return {HOST_STATES[code]: iv.merge(*sets) for code, sets in pieces.items()}


def _own_codes(event_names: list[str], ops_are_compute: bool) -> np.ndarray:
    """Code of the category each distinct event name gives itself."""
    codes = np.empty(len(event_names), np.int64)
    for i, name in enumerate(event_names):
        state = cat.host_category(name, ops_are_compute)
        codes[i] = _GENERIC_CODE if state is None else _CODE[state]
    return codes


def _line_states(line: Line, own_by_name: np.ndarray) -> dict[int, iv.IntervalSet]:
    keep = line.end_ns > line.start_ns
    if not keep.any():
        return {}
    default = cat.host_line_default(line.name)
    start, end = line.start_ns[keep], line.end_ns[keep]
    if default is not None:  # the thread's role decides every event on it
        return {_CODE[default]: iv.union(start, end)}
    own = own_by_name[line.name_id[keep]]
    order = np.lexsort((-end, start))  # parents before their children
    seg_s, seg_e, seg_c = _self_segments(start[order].tolist(), end[order].tolist(), own[order].tolist())
    seg_s, seg_e, seg_c = np.array(seg_s, np.int64), np.array(seg_e, np.int64), np.array(seg_c, np.int64)
    return {int(c): iv.union(seg_s[seg_c == c], seg_e[seg_c == c]) for c in np.unique(seg_c)}


def _self_segments(starts: list[int], ends: list[int], own: list[int]):
    """Split nested events into the segments where each is innermost.

    Returns parallel lists (start, end, code) where code is the innermost
    event's effective category. A child that outlives its parent (not
    properly nested) is clipped to the parent.
    """
    seg_s: list[int] = []
    seg_e: list[int] = []
    seg_c: list[int] = []
    stack_end: list[int] = []
    stack_code: list[int] = []
    resume: list[int] = []  # where the stacked event's current self segment began
    for s, e, c in zip(starts, ends, own):
        while stack_end and stack_end[-1] <= s:
            _pop(stack_end, stack_code, resume, seg_s, seg_e, seg_c)
        if stack_end:
            e = min(e, stack_end[-1])
            if s > resume[-1]:
                seg_s.append(resume[-1]); seg_e.append(s); seg_c.append(stack_code[-1])
            if c == _GENERIC_CODE:
                c = stack_code[-1]
        elif c == _GENERIC_CODE:
            c = _OVERHEAD
        stack_end.append(e); stack_code.append(c); resume.append(s)
    while stack_end:
        _pop(stack_end, stack_code, resume, seg_s, seg_e, seg_c)
    return seg_s, seg_e, seg_c


def _pop(stack_end, stack_code, resume, seg_s, seg_e, seg_c) -> None:
    end = stack_end.pop()
    start = resume.pop()
    code = stack_code.pop()
    if end > start:
        seg_s.append(start); seg_e.append(end); seg_c.append(code)
    if resume:
        resume[-1] = max(resume[-1], end)
