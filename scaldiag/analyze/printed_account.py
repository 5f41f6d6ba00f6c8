"""scaldiag's accounting of the window a printed clock timed, in named parts (printed_clock.py).

Where a clock's figure is not of steps a scope's figure covers (the one epoch of a run, its compile
in it; a timer whose window holds scaldiag's profiler window), it is set beside scaldiag's record
of the same window: its wall time over the steps recorded in it, cut into parts (steady steps,
compile and warm-up steps, scaldiag's own profiler window and measurements, evaluation, the rest).
The verdict is on the total: does scaldiag account for the user's figure; the parts say how much
of it was scaldiag's own cost in this run, which a plain run does not pay.

scaldiag's own intervals (the recorder's marks): the profiler's start and stop
(``trace_start``...``trace_started``, ``trace_stop``...``trace_stopped``), the traced steps, the
input-ceiling and input-free measurements after training (``ceiling_*``, ``input_free_*``).
A print that came after one of them is late by it: a window placed back from the print by the
clock's own duration skips them (``walk_back``). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaldiag.analyze import intervals as iv
from scaldiag.analyze import recorded_steps

PROFILER = "scaldiag's profiler (not in a plain run)"
MEASURING = "scaldiag's measurements (not in a plain run)"
OWN_PARTS = (PROFILER, MEASURING)
COMPILING = "compile/warm-up"
# An epoch's begin to its first step (Keras makes the epoch's iterator there): the accounting's
# "epoch boundaries"
EDGES = "epoch edges"
# The window's parts, in the order each claims its time (a traced step is the profiler's, not a
# steady step; evaluation outside the steps; the rest last).
_KINDS = (
    ("steady", (recorded_steps.STEADY,)),
    (COMPILING, (recorded_steps.WARMUP, recorded_steps.COMPILE)),
    ("input prefetch", (recorded_steps.PREFETCHED,)),
)


# The order the parts are said in: the user's steps first, scaldiag's own last but the rest.
_SHOWN = (*(name for name, _ in _KINDS), "evaluation", EDGES, PROFILER, MEASURING, "rest")


def in_order(parts) -> list[tuple[str, float]]:
    return sorted(parts, key=lambda part: _SHOWN.index(part[0]))


def profiler_pairs(marks: list[dict]) -> list[tuple[int, int]]:
    return recorded_steps.mark_pairs(marks, "trace_start", "trace_started") + (
        recorded_steps.mark_pairs(marks, "trace_stop", "trace_stopped")
    )


def measuring_pairs(marks: list[dict]) -> list[tuple[int, int]]:
    return recorded_steps.mark_pairs(marks, "ceiling_begin", "ceiling_end") + (
        recorded_steps.mark_pairs(marks, "input_free_begin", "input_free_end")
    )


def stalls(marks: list[dict]):
    """The intervals that delay the script's prints without being steps: the profiler's start and
    stop, the measurements."""
    return iv.of_pairs(sorted(profiler_pairs(marks) + measuring_pairs(marks)))


def walk_back(end_ns: int, span_ns: int, own) -> tuple[int, list[tuple[int, int]]]:
    """The begin of a window that holds ``span_ns`` of the script's time before ``end_ns``,
    scaldiag's stalls skipped (a timer printed after the profiler stopped was late by the stop);
    and the stalls skipped."""
    begins, ends = own
    t, left, skipped = end_ns, span_ns, []
    k = int(np.searchsorted(begins, end_ns, "left"))
    for a, b in zip(begins[:k][::-1].tolist(), ends[:k][::-1].tolist()):
        b = min(b, t)
        if t - b >= left:
            break
        left -= t - b
        skipped.append((a, b))
        t = a
    return t - left, skipped[::-1]


@dataclass(frozen=True)
class WindowAccount:
    ms: float  # the window's wall time (less own time the clock did not count) a recorded step
    batches: int
    parts: list[tuple[str, float]]  # ms a step, summing to ms

    @property
    def compiled(self) -> bool:
        """The window holds a compile or warm-up step (the framework's evidence)."""
        return any(name == COMPILING for name, _ in self.parts)

    def recorded(self) -> WindowAccount:
        """The parts the record names, the rest out."""
        parts = [(name, ms) for name, ms in self.parts if name != "rest"]
        return WindowAccount(sum(ms for _, ms in parts), self.batches, parts)

    @property
    def own_ms(self) -> float:
        return sum(ms for name, ms in self.parts if name in OWN_PARTS)


class Accountant:
    """Windows of the record accounted in parts, each in O(log n) plus the steps inside it (a log
    of 100,000 lines is as many windows)."""

    def __init__(self, found: list[recorded_steps.Period], marks: list[dict]):
        self.found = found
        self.begins = np.array([p.begin_ns for p in found], np.int64)
        self.ends = np.array([p.end_ns for p in found], np.int64)
        traced = [(p.begin_ns, p.end_ns) for p in found if p.kind == recorded_steps.TRACED]
        self.sets = [
            (PROFILER, iv.of_pairs(sorted(profiler_pairs(marks) + traced))),
            (MEASURING, iv.of_pairs(sorted(measuring_pairs(marks)))),
            *(
                (name, iv.of_pairs([(p.begin_ns, p.end_ns) for p in found if p.kind in kinds]))
                for name, kinds in _KINDS
            ),
            ("evaluation", iv.of_pairs(recorded_steps.mark_pairs(marks, "test_begin", "test_end"))),
            (EDGES, iv.of_pairs(_edges(marks, found))),
        ]
        self.own = iv.merge(self.sets[0][1], self.sets[1][1])
        # what a timer around a loop pays that the steady steps' figures leave out: scaldiag's own
        # time, compile and warm-up steps (a new optimizer's first), the epochs' edges (a phase's
        # timer over several passes of its loader)
        named = dict(self.sets)
        self.outside_steps = iv.merge(self.own, named[COMPILING], named[EDGES])

    def own_share(self, begin_ns: int, end_ns: int, edges: bool = False) -> float:
        """The share of a window that is scaldiag's own (profiler, measurements), and with
        ``edges`` its compile and warm-up steps and the epochs' edges too."""
        if end_ns <= begin_ns:
            return 0.0
        window = (np.array([begin_ns], np.int64), np.array([end_ns], np.int64))
        spans = self.outside_steps if edges else self.own
        return float(iv.measure_in_windows(spans, *window)[0]) / (end_ns - begin_ns)

    def account(
        self,
        begin_ns: int,
        end_ns: int,
        first_out: bool = False,
        skipped: tuple | list = (),
    ) -> WindowAccount | None:
        """scaldiag's record of [begin_ns, end_ns] in parts, per recorded step in it (a step is in
        where most of it is). ``first_out``: from the end of the window's first step (Keras's
        verbose=1 bar leaves it out); ``skipped``: stalls inside the window the clock did not count
        (``walk_back``). None where no step was recorded in it."""
        lo = int(np.searchsorted(self.ends, begin_ns, "right"))
        hi = int(np.searchsorted(self.begins, end_ns, "left"))
        inside = [p for p in self.found[lo:hi] if _mostly_in(p, begin_ns, end_ns)]
        if first_out and len(inside) > 1:
            begin_ns, inside = max(begin_ns, inside[0].end_ns), inside[1:]
        batches = sum(p.batches for p in inside)
        claimed = _within(iv.of_pairs(sorted(skipped)), begin_ns, end_ns)
        wall_ns = end_ns - begin_ns - int(np.sum(claimed[1] - claimed[0]))
        if batches <= 0 or wall_ns <= 0:
            return None
        parts: list[tuple[str, float]] = []
        for name, spans in self.sets:
            spans = iv.subtract(_within(spans, begin_ns, end_ns), claimed)
            claimed = iv.merge(claimed, spans)
            ns = int(np.sum(spans[1] - spans[0]))
            if ns > 0:
                parts.append((name, ns / batches / 1e6))
        rest_ms = wall_ns / batches / 1e6 - sum(ms for _, ms in parts)
        if rest_ms:
            parts.append(("rest", rest_ms))
        return WindowAccount(wall_ns / batches / 1e6, batches, in_order(parts))


def _edges(marks: list[dict], found: list[recorded_steps.Period]) -> list[tuple[int, int]]:
    """Each epoch's begin mark to the first step that begins at or after it."""
    begins = np.array([p.begin_ns for p in found], np.int64)
    pairs = []
    for m in marks:
        if m.get("mark") == "epoch_begin" and isinstance(m.get("t_ns"), int):
            k = int(np.searchsorted(begins, m["t_ns"], "left"))
            if k < len(begins):
                pairs.append((m["t_ns"], int(begins[k])))
    return sorted(pairs)


def _within(s, begin_ns: int, end_ns: int):
    """The set's part inside [begin_ns, end_ns), by two binary searches."""
    starts, ends = s
    lo = int(np.searchsorted(ends, begin_ns, "right"))
    hi = int(np.searchsorted(starts, end_ns, "left"))
    return np.maximum(starts[lo:hi], begin_ns), np.minimum(ends[lo:hi], end_ns)


def _mostly_in(p: recorded_steps.Period, begin_ns: int, end_ns: int) -> bool:
    both = min(p.end_ns, end_ns) - max(p.begin_ns, begin_ns)
    return both > 0 and 2 * both >= p.end_ns - p.begin_ns
