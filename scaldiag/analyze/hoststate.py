"""What the host threads are doing at each instant.

Host events nest (a step function contains an executor run that contains an
op). A thread's state at an instant is decided by the innermost event active
then; an event without a category of its own inherits its parent's, so the
Eigen work inside a convolution op stays compute, and time inside a step
function that no op covers is host overhead.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from scaldiag import native
from scaldiag.analyze import categories as cat
from scaldiag.analyze import intervals as iv
from scaldiag.trace import Line, Plane

HOST_STATES = (
    "compute",
    "layout",
    "collective",
    "input",
    "host_overhead",
    cat.WAIT,
    cat.BACKGROUND,
)
_CODE = {state: code for code, state in enumerate(HOST_STATES)}
_GENERIC_CODE = -1
_OVERHEAD = _CODE["host_overhead"]
_INPUT = _CODE["input"]
_CHUNK = 1 << 20  # segments measured at a time: bounds the temporaries of a large trace
# Codes that take their parent's (index: code + 1), as _effective_codes decides; for the C sweep.
_INHERITING = np.zeros(len(HOST_STATES) + 1, np.uint8)
_INHERITING[[_GENERIC_CODE + 1, _OVERHEAD + 1, _CODE["compute"] + 1, _CODE["layout"] + 1]] = 1

# the C loops, where they were built (setup.py); else the numpy code, which gives the same results
try:
    from scaldiag.analyze import _hoststate as _hoststate_c
except ImportError:
    _hoststate_c = None


def _native():
    """The C loops (_hoststate.c), unless they were not built or SCALDIAG_NATIVE=0 asks for
    numpy."""
    return native.enabled(_hoststate_c)


@dataclass(frozen=True)
class HostTimeline:
    """What the host threads did: per state, and per innermost event."""

    states: dict[str, iv.IntervalSet]  # union over all threads of each state
    # Every thread's innermost-event segments, for naming what the host did.
    seg_start: np.ndarray
    seg_end: np.ndarray
    seg_state: np.ndarray  # state codes (index into HOST_STATES)
    seg_name_id: np.ndarray  # index into names
    names: np.ndarray  # distinct event names of all host planes (object array)

    @property
    def seg_name(self) -> np.ndarray:
        """Each segment's event name (object array)."""
        return self.names[self.seg_name_id]

    @functools.cached_property
    def _shown_segments(self) -> np.ndarray:
        """Segments activity_during may name: neither waits nor background work."""
        return np.flatnonzero(self.seg_state < _CODE[cat.WAIT])

    def get(self, state: str) -> iv.IntervalSet:
        return self.states.get(state, iv.EMPTY)

    def activity_during(
        self, gaps: iv.IntervalSet, per: int, top: int = 5
    ) -> list[tuple[str, str, float]]:
        """The host events most present during ``gaps``: (name, state, thread-ns / per).

        Thread time: two threads in the same event count twice. Background
        producers and waits are left out: they are not what the step does.
        """
        shown, overlap = [], []
        for part in np.array_split(
            self._shown_segments, max(1, len(self._shown_segments) // _CHUNK)
        ):
            part_overlap = iv.measure_in_windows(gaps, self.seg_start[part], self.seg_end[part])
            present = part_overlap > 0
            shown.append(part[present])
            overlap.append(part_overlap[present])
        shown, overlap = np.concatenate(shown), np.concatenate(overlap)
        if not len(shown):
            return []
        pair = self.seg_name_id[shown].astype(np.int64) * len(HOST_STATES) + self.seg_state[shown]
        by_pair = np.bincount(pair, weights=overlap)
        pairs = np.flatnonzero(np.bincount(pair))
        return _top_pairs(pairs, by_pair[pairs], self.names, per, top)


def _top_pairs(pairs: np.ndarray, totals: np.ndarray, names: np.ndarray, per: int, top: int):
    """The ``top`` (name, state) pairs by thread time: (name, state, totals / per).

    ``pairs`` (name id * len(HOST_STATES) + state, ascending) are those
    present; ranking them in (name, state) order keeps the result what
    grouping "name\0state" strings gave, ties included.
    """
    names, states = names[pairs // len(HOST_STATES)], pairs % len(HOST_STATES)
    order = sorted(range(len(pairs)), key=lambda i: f"{names[i]}\0{states[i]}")
    totals = totals[order]
    best = np.argsort(-totals)[:top]
    return [
        (names[order[i]], HOST_STATES[int(states[order[i]])], float(totals[i]) / per) for i in best
    ]


def host_states(planes: list[Plane], ops_are_compute: bool) -> HostTimeline:
    """What every host thread does at each instant (see the module docstring)."""
    segments = []
    pieces, names = _walk_threads(planes, ops_are_compute, lambda seg: segments.append(list(seg)))
    columns = [np.empty(0, np.int64)] * 2 + [np.empty(0, np.int8), np.empty(0, np.int32)]
    for k in range(
        len(columns) if segments else 0
    ):  # a column at a time, its pieces freed as it is joined
        columns[k] = np.concatenate([seg[k] for seg in segments])
        for seg in segments:
            seg[k] = None
    return HostTimeline(
        {HOST_STATES[c]: iv.merge(*sets) for c, sets in pieces.items()}, *columns, names
    )


def host_states_during(
    planes: list[Plane],
    ops_are_compute: bool,
    gap_sets: list[iv.IntervalSet],
    per: int,
    top: int = 5,
) -> tuple[HostTimeline, list[list[tuple[str, str, float]]]]:
    """``host_states`` and, for each of ``gap_sets``, what ``activity_during`` says of it.

    Each thread's segments are measured against every set as the thread is
    done, then dropped: memory follows the largest thread, not the trace,
    and all sets cost one search per segment boundary. The timeline
    returned holds the states only (no segments).
    """
    measure = _GapMeasure(gap_sets)
    totals = [np.zeros(0, np.int64) for _ in gap_sets]

    native = _native()

    def add(seg) -> None:
        seg_s, seg_e, seg_c, seg_n = seg
        if native is not None and len(seg_n):
            cells = (int(seg_n.max()) + 1) * len(HOST_STATES)
            for k in range(len(totals)):
                if len(totals[k]) < cells:
                    totals[k] = np.concatenate(
                        (totals[k], np.zeros(cells - len(totals[k]), np.int64))
                    )
            measure.add_native(native, seg_s, seg_e, seg_c, seg_n, totals)
            return
        shown = np.flatnonzero(seg_c < _CODE[cat.WAIT])
        for a in range(0, len(shown), _CHUNK):  # bounds the temporaries of a long thread
            part = shown[a : a + _CHUNK]
            pair = seg_n[part].astype(np.int64) * len(HOST_STATES) + seg_c[part]
            for k, overlap in enumerate(measure.overlaps(seg_s[part], seg_e[part])):
                # sums of integers: exact
                by_pair = np.bincount(pair, weights=overlap).astype(np.int64)
                if len(by_pair) > len(totals[k]):
                    totals[k] = np.concatenate(
                        (totals[k], np.zeros(len(by_pair) - len(totals[k]), np.int64))
                    )
                totals[k][: len(by_pair)] += by_pair

    pieces, names = _walk_threads(planes, ops_are_compute, add)
    activity = []
    for total in totals:
        pairs = np.flatnonzero(total > 0)
        activity.append(
            _top_pairs(pairs, total[pairs].astype(np.float64), names, per, top)
            if len(pairs)
            else []
        )
    empty = np.empty(0, np.int64)
    timeline = HostTimeline(
        {HOST_STATES[c]: iv.merge(*sets) for c, sets in pieces.items()},
        empty,
        empty,
        np.empty(0, np.int8),
        np.empty(0, np.int32),
        names,
    )
    return timeline, activity


def _walk_threads(planes: list[Plane], ops_are_compute: bool, each):
    """Every thread's innermost segments, given to ``each`` as (start, end, state code, global name
    id).

    Returns the pieces of each state's union (by code) and the distinct names of all planes.
    """
    pieces: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    name_ids: dict[str, int] = {}  # one id per distinct name, across planes
    for plane in planes:
        own = _own_codes(plane.event_names, ops_are_compute)
        to_global = np.array(
            [name_ids.setdefault(n, len(name_ids)) for n in plane.event_names], np.int32
        )
        for line in plane.lines:
            for seg_s, seg_e, seg_c, seg_n, unions in _line_segments(line, own, to_global):
                for c, union in (
                    unions if unions is not None else _unions_by_state(seg_s, seg_e, seg_c)
                ):
                    pieces.setdefault(c, []).append(union)
                each((seg_s, seg_e, seg_c, seg_n))
    names = np.empty(len(name_ids), dtype=object)
    names[:] = list(name_ids)
    return pieces, names


def _unions_by_state(seg_s: np.ndarray, seg_e: np.ndarray, seg_c: np.ndarray):
    """(code, union of its segments) for each state code present, ascending.

    A thread's segments come in time order and disjoint, so each state's union
    is its segments merged where one ends as the next begins: one stable sort by
    code (of int8: a counting sort), no sort by time.
    """
    if not len(seg_c):
        return []
    order = np.argsort(seg_c, kind="stable")
    code, start, end = seg_c[order], seg_s[order], seg_e[order]
    begins = np.empty(len(code), bool)
    begins[0] = True
    np.not_equal(start[1:], end[:-1], out=begins[1:])
    begins[1:] |= code[1:] != code[:-1]
    first = np.flatnonzero(begins)
    last = np.append(first[1:], len(code)) - 1
    merged_code, merged_start, merged_end = code[first], start[first], end[last]
    cut = np.flatnonzero(merged_code[1:] != merged_code[:-1]) + 1
    return [
        (int(merged_code[a]), (merged_start[a:b], merged_end[a:b]))
        for a, b in zip(np.append(0, cut).tolist(), np.append(cut, len(merged_code)).tolist())
    ]


class _GapMeasure:
    """How much of each of several interval sets lies inside many windows.

    The sets are measured a group at a time (_GapTable: one sorted array of
    the group's boundaries, one search per window end), groups of at most
    _GROUP_SETS sets: the tables' memory is then at most that many cells per
    boundary, linear in the sets' boundaries however many sets (devices)
    there are, where one table over every set took sets x all boundaries
    (16,000 devices: gigabytes). The usual 1-8 devices are one group: one
    table, one search per window end, as before.
    """

    def __init__(self, sets: list[iv.IntervalSet]):
        self.groups = [
            (a, _GapTable(sets[a : a + _GROUP_SETS])) for a in range(0, len(sets), _GROUP_SETS)
        ]

    def add_native(self, native, seg_s, seg_e, seg_c, seg_n, totals: list[np.ndarray]) -> None:
        """What overlaps and a bincount per (name, state) give, added to ``totals``, by the C
        loop."""
        columns = [
            np.ascontiguousarray(x, t)
            for x, t in ((seg_s, np.int64), (seg_e, np.int64), (seg_c, np.int8), (seg_n, np.int32))
        ]
        for a, table in self.groups:
            if len(table.bounds):  # (no boundaries: nothing covered)
                native.measure(
                    table.bounds,
                    table.left,
                    list(zip(table.before, table.inside, totals[a : a + len(table.before)])),
                    *columns,
                    _CODE[cat.WAIT],
                    len(HOST_STATES),
                )

    def overlaps(self, w_start: np.ndarray, w_end: np.ndarray):
        """Per set, in order, its covered length inside each window [w_start, w_end) (a generator:
        one set's at a time)."""
        # A thread's segments mostly follow one another: where a window ends the next starts, its
        # coverage before its end is the next one's before its start; only the others are searched.
        follows = np.flatnonzero(w_end[:-1] == w_start[1:])
        alone = np.ones(len(w_end), bool)
        alone[follows] = False
        alone = np.flatnonzero(alone)
        for _, table in self.groups:
            yield from table.overlaps(w_start, w_end, follows, alone)


_GROUP_SETS = 8  # gap sets (devices) measured against one table of their boundaries


class _GapTable:
    """How much of each of a few interval sets lies inside many windows, one search per window end.

    All the sets' boundaries, sorted, cut time into pieces that each set
    either covers or not; a time's coverage before it is then its piece's
    coverage before plus its distance into the piece if covered (integers,
    as ``intervals.covered_before`` gives them). Memory: sets x their
    boundaries, hence few sets a table (_GapMeasure).
    """

    def __init__(self, sets: list[iv.IntervalSet]):
        bounds = np.sort(
            np.concatenate(
                [np.asarray(x, np.int64) for s in sets for x in s] or [np.empty(0, np.int64)]
            )
        )
        self.bounds = (
            bounds[np.concatenate(([True], bounds[1:] != bounds[:-1]))] if len(bounds) else bounds
        )
        self.before, self.inside = [], []
        for s in sets:
            before = iv.covered_before(s, self.bounds)
            # index k: the piece that ends at bounds[k] (k = 0: before all; the last: after all,
            # uncovered)
            self.before.append(np.concatenate(([0], before)))
            self.inside.append(np.concatenate(([0], np.diff(before) > 0, [0])).astype(np.int64))
        self.left = np.concatenate((self.bounds[:1], self.bounds))

    def overlaps(
        self, w_start: np.ndarray, w_end: np.ndarray, follows: np.ndarray, alone: np.ndarray
    ):
        """Per set, its covered length inside each window [w_start, w_end); ``follows``: the windows
        whose end is the next one's start, ``alone``: the others (_GapMeasure.overlaps)."""
        if not len(self.bounds):
            for _ in self.before:
                yield np.zeros(len(w_start), np.int64)
            return
        k_start = np.searchsorted(self.bounds, w_start, side="right")
        into_start = w_start - self.left[k_start]
        k_alone = np.searchsorted(self.bounds, w_end[alone], side="right")
        into_alone = w_end[alone] - self.left[k_alone]
        for before, inside in zip(self.before, self.inside):
            at_start = before[k_start]
            at_start += into_start * inside[k_start]
            overlap = np.empty_like(at_start)
            overlap[follows] = at_start[follows + 1]
            overlap[alone] = before[k_alone] + into_alone * inside[k_alone]
            overlap -= at_start
            yield overlap


def _own_codes(event_names: list[str], ops_are_compute: bool) -> np.ndarray:
    """Code of the category each distinct event name gives itself."""
    codes = np.empty(len(event_names), np.int64)
    for i, name in enumerate(event_names):
        state = cat.host_category(name, ops_are_compute)
        codes[i] = _GENERIC_CODE if state is None else _CODE[state]
    return codes


def _line_segments(line: Line, own_by_name: np.ndarray, to_global: np.ndarray):
    """(start, end, state code as int8, name id as int32 (``to_global`` of the line's), each state's
    union or None) of a thread's innermost segments, a piece at a time."""
    default = cat.host_line_default(line.name)
    pieces = _line_pieces(line.start_ns, line.end_ns)
    for a, b in pieces:
        lasts = line.end_ns[a:b] > line.start_ns[a:b]
        if lasts.all():  # the usual thread: every event lasts, so its piece is a view, not a copy
            start, end, names = line.start_ns[a:b], line.end_ns[a:b], line.name_id[a:b]
        else:
            keep = a + np.flatnonzero(lasts)
            if not len(keep):
                continue
            start, end, names = line.start_ns[keep], line.end_ns[keep], line.name_id[keep]
        for seg_s, seg_e, seg_c, seg_n, unions in _innermost_pieces(
            start, end, own_by_name, cut=len(pieces) == 1, names=(names, to_global)
        ):
            if default is not None:  # the thread's role decides the state of every event on it
                seg_c, unions = np.full(len(seg_c), _CODE[default], np.int8), None
            yield seg_s, seg_e, seg_c, seg_n, unions


def _line_pieces(start: np.ndarray, end: np.ndarray) -> list[tuple[int, int]]:
    """Ranges of a thread's events, as stored, that are segmented on their own.

    A thread's events mostly come sorted by start: then the pieces that
    innermost_segments would cut it into (by _free_starts, among the events
    that last) are found here, on the stored events, so that only a piece
    at a time is copied, sorted and segmented. Otherwise the whole thread
    is one range, cut later.
    """
    n = len(start)
    native = _native()
    if native is not None and n > _CHUNK:  # the same cuts in one pass (_hoststate.c free_cuts)
        cuts = native.free_cuts(
            np.ascontiguousarray(start, np.int64), np.ascontiguousarray(end, np.int64), _CHUNK
        )
        if cuts is None:
            return [(0, n)]
        raw = np.frombuffer(cuts, np.int64).tolist()
        return list(zip(raw[:-1], raw[1:]))
    if n <= _CHUNK or not (start[1:] >= start[:-1]).all():
        return [(0, n)]
    lasts = end > start
    if lasts.all():  # the usual thread
        kept_index = np.arange(n, dtype=np.int64)
    # (a cumsum of int64: numpy's of bools into int64 takes a slow casting loop, 30 ns an event)
    else:
        kept_index = np.cumsum(lasts.astype(np.int64))
        kept_index -= 1  # each event's index among those that last
    if kept_index[-1] + 1 <= _CHUNK:
        return [(0, n)]
    reach = np.where(lasts, end, np.iinfo(np.int64).min)
    np.maximum.accumulate(reach, out=reach)
    # Where no earlier lasting event is still open (the first lasting one excepted), as _free_starts
    # finds.
    free = np.flatnonzero(lasts[1:] & (reach[:-1] <= start[1:])) + 1
    del reach
    free = free[kept_index[free] > 0]
    cuts = _free_starts_in(kept_index[free], int(kept_index[-1]) + 1, _CHUNK)
    raw = [0] + [int(free[np.searchsorted(kept_index[free], c)]) for c in cuts[1:-1]] + [n]
    return list(zip(raw[:-1], raw[1:]))


def innermost_segments(start: np.ndarray, end: np.ndarray, own: np.ndarray):
    """Split one thread's nested events into the segments where each is innermost.

    Returns arrays (start, end, code, index): code is the innermost event's
    effective category (its own, else its nearest categorised ancestor's, else
    host overhead), index its position in the arguments. Events on a thread
    nest; a child that outlives its parent is clipped to it, and what starts
    after that clipped end is not inside it (see _innermost_loop, the reference).
    """
    pieces = [piece[:4] for piece in _innermost_pieces(start, end, own)]
    if len(pieces) == 1:
        return pieces[0]
    return tuple(np.concatenate(column) for column in zip(*pieces))


def _innermost_pieces(
    start: np.ndarray, end: np.ndarray, own: np.ndarray, cut: bool = True, names=None
):
    """innermost_segments, a piece of the thread at a time, in time order (``cut``: else one piece).

    ``names``: (each event's name id, int32; a table of the ids to give) where ``own`` is the
    state code of each name, not of each event: the pieces then hold each segment's code as int8
    and its innermost event's id from the table as int32, not its index (what _walk_threads keeps).
    """
    order = _by_start_then_longest(start, end)  # parents before their children
    if order is not None:
        start, end = start[order], end[order]
        if names is None:
            own = own[order]
        else:
            names = (names[0][order], names[1])
    # Where no earlier event is still open, what follows is independent of
    # what came before: a long thread is done a piece at a time, which bounds
    # the memory its temporaries take.
    cuts = _free_starts(start, end, _CHUNK) if cut else [0, len(start)]
    for a, b in zip(cuts[:-1], cuts[1:]):
        if names is not None:
            yield _innermost_named(start[a:b], end[a:b], names[0][a:b], own, names[1])
            continue
        seg_s, seg_e, code, inner, unions = _innermost_piece(start[a:b], end[a:b], own[a:b])
        inner = inner.astype(np.intp, copy=False)
        inner += a
        yield seg_s, seg_e, code, inner if order is None else order[inner], unions


def _innermost_named(start, end, names, own_by_name, to_global):
    """_innermost_piece of events known by name id: (start, end, code as int8, ``to_global`` of
    the innermost event's name as int32, unions or None)."""
    native = _native()
    if native is not None:
        *found, unions = native.innermost_named(
            *(np.ascontiguousarray(x, np.int64) for x in (start, end)),
            np.ascontiguousarray(names, np.int32),
            np.ascontiguousarray(own_by_name, np.int64),
            np.ascontiguousarray(to_global, np.int32),
            _GENERIC_CODE,
            _OVERHEAD,
            _INPUT,
            _INHERITING.tobytes(),
        )
        return (
            *(np.frombuffer(found[k], np.int64) for k in (0, 1)),
            np.frombuffer(found[2], np.int8),
            np.frombuffer(found[3], np.int32),
            _native_unions(unions),
        )
    seg_s, seg_e, code, inner, unions = _innermost_piece(start, end, own_by_name[names])
    return seg_s, seg_e, code.astype(np.int8), to_global[names[inner]], unions


def _native_unions(unions) -> list:
    """The C sweep's unions, (code, start bytes, end bytes) a state, as (code, (starts, ends))."""
    return [(c, (np.frombuffer(s, np.int64), np.frombuffer(e, np.int64))) for c, s, e in unions]


def _free_starts(start: np.ndarray, end: np.ndarray, size: int) -> list[int]:
    """0, cut points about ``size`` events apart where every earlier event has ended, and
    len(start)."""
    n = len(start)
    if n <= size:
        return [0, n]
    reach = np.maximum.accumulate(end)
    free = np.flatnonzero(reach[:-1] <= start[1:]) + 1  # event i starts with nothing open
    del reach
    return _free_starts_in(free, n, size)


def _free_starts_in(free: np.ndarray, n: int, size: int) -> list[int]:
    """0, the first of ``free`` (ascending) at or after each multiple of ``size``, and n."""
    cuts = [0]
    for target in range(size, n, size):
        k = np.searchsorted(free, max(target, cuts[-1] + 1))
        if k < len(free):
            cuts.append(int(free[k]))
    return sorted(set(cuts)) + [n]


def _innermost_piece(start: np.ndarray, end: np.ndarray, own: np.ndarray):
    """innermost_segments of events sorted by (start, -end), all of positive length, and each
    state's union of them (as _unions_by_state gives it), or None where it is left to the caller.

    By the C sweep (_hoststate.c) where it is built; else vectorised where the
    events, their ends clipped, nest (as real threads' mostly do), else by
    _innermost_loop, the reference both follow.
    """
    native = _native()
    if native is not None:
        *found, unions = native.innermost(
            *(np.ascontiguousarray(x, np.int64) for x in (start, end, own)),
            _GENERIC_CODE,
            _OVERHEAD,
            _INPUT,
            _INHERITING.tobytes(),
        )
        return (
            *(np.frombuffer(column, np.int64) for column in found),
            _native_unions(unions),
        )
    clipped = _clipped_ends(start, end)
    if clipped is None:
        return *_innermost_loop(start, end, own), None
    return *_innermost_sorted(start, *clipped, own), None


def _innermost_loop(start: np.ndarray, end: np.ndarray, own: np.ndarray):
    """innermost_segments by a stack sweep, one event at a time (the reference; _hoststate.c in C).

    Events sorted by (start, -end): the open ones are on a stack; an event's
    parent is the innermost open one and its end is clipped to the parent's
    (clipped) end, so a child that outlives its parent ends with it and the
    events after it are not inside it. At equal times ends come first (deepest
    first), then starts (shallowest first): the last transition at a time holds.
    """
    start, end, own = start.tolist(), end.tolist(), own.tolist()
    clipped, code, stack = [0] * len(start), [0] * len(start), []
    segments: list[tuple[int, int, int, int]] = []
    last_time, last_inner = None, -1

    def transition(time: int, inner: int) -> None:
        nonlocal last_time, last_inner
        if last_inner >= 0 and time > last_time:
            segments.append((last_time, time, code[last_inner], last_inner))
        last_time, last_inner = time, inner

    for i, (s, e, c) in enumerate(zip(start, end, own)):
        while stack and clipped[stack[-1]] <= s:
            done = stack.pop()
            transition(clipped[done], stack[-1] if stack else -1)
        if stack:
            parent = stack[-1]
            clipped[i] = min(e, clipped[parent])
            if _INHERITING[c + 1] and (c == _GENERIC_CODE or code[parent] == _INPUT):
                c = code[parent]
        else:
            clipped[i] = e
            c = _OVERHEAD if c == _GENERIC_CODE else c
        code[i] = c
        stack.append(i)
        transition(s, i)
    while stack:
        done = stack.pop()
        transition(clipped[done], stack[-1] if stack else -1)
    columns = np.array(segments, np.int64).reshape(-1, 4)
    return tuple(np.ascontiguousarray(columns[:, k]) for k in range(4))


_CLIP_ROUNDS = 8


def _clipped_ends(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(end, parent) of each event, its end clipped to its parent's, parents found among the clipped
    events (what the stack sweep gives), in rounds of vectorised parent finding; None where that
    does not settle.

    A result is only returned where it is the sweep's: the clipped events nest
    (each one's open events at its start are its ancestors) and each end is
    min(its own, its parent's clipped end). Ends stay after their starts between
    rounds, so that counting open events stays meaningful.
    """
    clipped = end
    for _ in range(_CLIP_ROUNDS):
        parent, open_at_start = _parents(start, clipped)
        has = parent >= 0
        wanted = end.copy()
        wanted[has] = np.minimum(end[has], clipped[parent[has]])
        if np.array_equal(wanted, clipped):
            return (
                (clipped.copy(), parent) if np.array_equal(open_at_start, _depths(parent)) else None
            )
        clipped = np.maximum(wanted, start + 1)
    return None


def _innermost_sorted(start: np.ndarray, end: np.ndarray, parent: np.ndarray, own: np.ndarray):
    """innermost_segments of events sorted by (start, -end) that nest, with their parents.

    Returns (start, end, code, index into these events).
    """
    depth = _depths(parent)
    code = _effective_codes(own, parent, depth)
    del own
    n = len(start)
    # Transitions: at a start the event becomes innermost; at an end its
    # parent does. At equal times ends go first (deepest first), then starts
    # (shallowest first), so the last transition at a time is the right one.
    times = np.concatenate((end, start))
    del start, end
    is_start = np.concatenate((np.zeros(n, bool), np.ones(n, bool)))
    tie = np.concatenate((-depth, depth))
    del depth
    times, o = _transitions_sorted(times, is_start, tie)
    del is_start, tie
    now_inner = np.concatenate((parent, np.arange(n, dtype=parent.dtype)))[o]
    del o, parent
    keep = np.flatnonzero((times[1:] > times[:-1]) & (now_inner[:-1] >= 0))
    inner = now_inner[keep]
    return times[keep], times[keep + 1], code[inner], inner


def _by_start_then_longest(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``np.lexsort((-end, start))``, or None where that is the order they are in.

    A thread's events mostly come sorted by start, without ties.
    """
    if len(start) < 2 or (start[1:] > start[:-1]).all():
        return None
    return np.lexsort((-end, start))


def _transitions_sorted(times: np.ndarray, is_start: np.ndarray, tie: np.ndarray):
    """``np.lexsort((tie, is_start, times))`` and the times in that order; ``times`` is consumed.

    One stable sort of one integer key where the three fit in 63 bits.

    Where the one-key sort applies, the key is built in ``times``' own memory
    and the sorted times are read back from it.
    """
    if len(times) == 0:
        return times, np.arange(0)
    low, span = int(times.min()), int(times.max()) - int(times.min())
    tie_low, tie_span = int(tie.min()), int(tie.max()) - int(tie.min()) + 1
    if (span + 1) * 2 * tie_span >= 1 << 62:
        order = np.lexsort((tie, is_start, times))
        return times[order], order
    key = times
    key -= low
    key *= 2 * tie_span
    key += is_start * tie_span
    key += tie - tie_low
    order = np.argsort(key, kind="stable")
    key = key[order]
    key //= 2 * tie_span
    key += low
    return key, order


def _parents(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of each event's enclosing event (-1 at top level), events sorted by (start, -end), and
    how many events are open at each one's start (its depth, where the events nest)."""
    n = len(start)
    # Open events at each start: those sorted before it that end after it starts.
    closed_before = np.searchsorted(np.sort(end), start, side="right")
    depth = np.arange(n) - closed_before
    del closed_before
    index = np.int32 if n < 2**31 else np.int64
    parent = np.full(n, -1, index)
    levels = _by_level(depth)
    previous_level = levels[0] if levels else np.empty(0, np.int64)
    for level in levels[1:]:
        if len(level) == 0 or len(previous_level) == 0:
            break
        slot = np.searchsorted(previous_level, level) - 1
        parent[level[slot >= 0]] = previous_level[slot[slot >= 0]]
        previous_level = level
    return parent, depth


def _by_level(depth: np.ndarray, mask: np.ndarray | None = None) -> list[np.ndarray]:
    """Indices with depth 0, 1, 2 ... (ascending within each), optionally among ``mask`` only.

    One stable sort, instead of a pass over all events per level.
    """
    rows = np.arange(len(depth)) if mask is None else np.flatnonzero(mask)
    if not len(rows):
        return []
    d = depth[rows]
    top = int(d.max())
    if int(d.min()) < 0:  # not a nesting depth: no levels to walk
        return []
    small = d.astype(np.int16) if top < 2**15 else d
    rows = rows[np.argsort(small, kind="stable")]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(small, minlength=top + 1))))
    return [rows[bounds[k] : bounds[k + 1]] for k in range(top + 1)]


def _depths(parent: np.ndarray) -> np.ndarray:
    """Ancestors above each event, by pointer doubling (parents come before their children)."""
    n = len(parent)
    up = np.where(parent >= 0, parent, n).astype(parent.dtype)  # n: above the top (maps to itself)
    up = np.append(up, parent.dtype.type(n))
    depth = np.append((parent >= 0).astype(parent.dtype), parent.dtype.type(0))
    while (up[:n] < n).any():
        depth = depth + depth[up]
        up = up[up]
    return depth[:n]


def _effective_codes(own: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Own category, else the nearest categorised ancestor's, else host overhead.

    Input is kept downwards: the ops run while fetching a batch (a PyTorch DataLoader's ATen ops
    with num_workers=0, the array slicing under Keras' annotated batches) are input work, not the
    framework overhead or compute their own names would say. Waits stay waits.
    """
    code = own.copy()
    generic = own == _GENERIC_CODE
    code[(depth == 0) & generic] = _OVERHEAD
    work = generic | (own == _OVERHEAD) | (own == _CODE["compute"]) | (own == _CODE["layout"])
    for level in _by_level(depth, work & (depth > 0)):  # level by level: parents first
        inherited = code[parent[level]]
        take = generic[level] | (inherited == _INPUT)
        code[level[take]] = inherited[take]
    return code
