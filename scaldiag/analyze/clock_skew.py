"""One clock for the ranks of a job: each rank's offset estimated from collectives that end
together.

Every rank writes its own trace with its own clock. A ring or tree
all-reduce ends on all ranks at nearly the same instant (no rank can finish
before the last rank's data has arrived), so the end of the k-th collective
kernel on each rank's GPU marks the same moment. A rank's offset against the
first rank is the median over those collectives of the difference of their
ends; its spread (the median absolute deviation) says how well they agree.
A small index shift is searched for (a rank's trace may hold one collective
more at its window's start) and the shift whose differences agree best is
taken.

Across machines (analyze/nodes/clock.py) collectives are paired by step and order,
and the offset is the centre of the tightest half of the differences
(``densest``), not their median.

Offsets are corrected (every event of the rank moved) and reported. A rank
with no collective to align on cannot be estimated: merging it is refused if
its steps start more than a step away from the first rank's, where a wrong
clock would decide the verdict; otherwise it is merged as recorded, and said.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from scaldiag.analyze.device import DeviceEvents
from scaldiag.trace import Plane

MAX_INDEX_SHIFT = 3  # collectives a rank's window may hold more or fewer of, at its start
# An offset under this is left as recorded: the collectives' own spread on one node is microseconds.
NEGLIGIBLE_NS = 20_000


@dataclass(frozen=True)
class Offset:
    rank: str
    offset_ns: int | None  # this rank's clock minus the first rank's; None: not estimated
    spread_ns: int | None  # median absolute deviation of the collectives' end differences
    collectives: int  # how many collective ends it was estimated from
    corrected: bool


def estimate(
    ranks: list[tuple[str, np.ndarray]], refuse_if_far: Callable[[str, str], None]
) -> list[Offset]:
    """Each rank's offset against the first, from its collective kernels' ends (``ranks``: (label,
    sorted
    ends), in order). ``refuse_if_far(first, name)`` is asked of a rank that cannot be estimated; it
    raises where merging that rank as recorded would let the clocks decide the verdict."""
    (first, reference), rest = ranks[0], ranks[1:]
    offsets = [Offset(first, 0, 0, len(reference), False)]
    for name, ends in rest:
        found = _estimate(reference, ends)
        if found is None:
            refuse_if_far(first, name)
            offsets.append(Offset(name, None, None, 0, False))
            continue
        offset, spread, count = found
        offsets.append(Offset(name, offset, spread, count, abs(offset) >= NEGLIGIBLE_NS))
    return offsets


def shift_of(offset: Offset) -> int:
    """What is taken off the rank's times to put them on the first rank's clock (0: left as
    recorded)."""
    return offset.offset_ns if offset.corrected else 0


def describe(offsets: list[Offset]) -> list[str]:
    """A note per rank whose clock was corrected or could not be estimated."""
    notes = []
    for o in offsets:
        if o.corrected:
            notes.append(
                f"{o.rank}: clock offset {o.offset_ns / 1e6:+.3f} ms against {offsets[0].rank},"
                f" corrected (median over {o.collectives} collective ends, spread"
                f" {o.spread_ns / 1e3:.1f} us)"
            )
        elif o.offset_ns is None:
            notes.append(
                f"{o.rank}: clock offset not estimated (no collective to align on); merged as"
                " recorded"
            )
    return notes


def collective_ends(events: list[DeviceEvents]) -> np.ndarray:
    """The ends of the collective kernels of one rank's devices, sorted."""
    found = [e.end_ns[e.of("collective")] for e in events]
    return np.sort(np.concatenate(found)) if found else np.empty(0, np.int64)


def _estimate(reference: np.ndarray, other: np.ndarray) -> tuple[int, int, int] | None:
    """(offset, spread, count) at the index shift whose differences agree best, or None."""
    best = None
    for shift in range(-MAX_INDEX_SHIFT, MAX_INDEX_SHIFT + 1):
        a = reference[max(0, -shift) :]
        b = other[max(0, shift) :]
        n = min(len(a), len(b))
        if n < 1:
            continue
        diff = b[:n].astype(np.int64) - a[:n].astype(np.int64)
        offset = float(np.median(diff))
        spread = float(np.median(np.abs(diff - offset)))
        key = (spread, -n)
        if best is None or key < best[0]:
            best = (key, int(round(offset)), int(round(spread)), n)
    return None if best is None else best[1:]


def densest(diffs: np.ndarray) -> tuple[int, int]:
    """(centre, spread) of paired end differences: the median of the tightest half of them, and the
    median absolute deviation around it.

    Across machines a rank that still works after its last receive (a reduction, a copy, a thread
    scheduled late on a busy core) ends a few ms after the others; the plain median then drifts by
    a fraction of those. Where both ranks ended on the last exchange the differences agree within
    tens of microseconds, and the tightest half of them is that cluster. On two namespaces of one
    machine (one true clock, 10 all-reduces of 8.4 MB over gloo), the plain median was off by up to
    1.25 ms where a few ends were 3-14 ms apart; the tightest half's median by 0.25 ms at most."""
    d = np.sort(np.asarray(diffs, np.int64))
    half = (len(d) + 1) // 2
    widths = d[half - 1 :] - d[: len(d) - half + 1]
    at = int(np.argmin(widths))
    centre = int(np.median(d[at : at + half]))
    return centre, int(np.median(np.abs(d - centre)))


def shifted(plane: Plane, offset_ns: int) -> Plane:
    """The plane's events (and its device step markers) moved onto the reference clock."""
    lines = [
        replace(line, start_ns=line.start_ns - offset_ns, end_ns=line.end_ns - offset_ns)
        for line in plane.lines
    ]
    marks = getattr(plane, "step_marks", None)
    if marks is not None:
        marks = replace(marks, start_ns=marks.start_ns - offset_ns, end_ns=marks.end_ns - offset_ns)
        return replace(plane, lines=lines, step_marks=marks)
    return replace(plane, lines=lines)
