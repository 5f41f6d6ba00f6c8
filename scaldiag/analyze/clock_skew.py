"""One clock for a job: every clock's offset against the first, from collectives that end together.

The one path of both merges: the ranks of a job's trace files (analyze/ranks.py, ``analyze``) and
the nodes of a job over several machines (analyze/nodes/clock.py, ``report NODE_DIR ...``; a node
by its first rank: the ranks of one node share its clock). A ring or tree all-reduce ends on all
ranks at nearly the same instant (no rank finishes before the last one's data arrived), so the
same collective's ends on two clocks mark one moment: the offset is the centre of their
differences, its spread the median absolute deviation around it.

What differs is what each merge holds, so a parameter (``ClockRules``): a rank holds its devices'
kernel ends only, found before the job's steps (found on the aligned clock), so ``ONE_HOST`` pairs
them in order (a window may hold a collective more at its start: a few index shifts searched),
takes their median and leaves an offset under 20 us as recorded; a node's collectives are keyed
by (step, k) from its own steps, so ``ACROSS_HOSTS`` pairs by key (a clock off by a whole step
still pairs the right ones), takes the tightest half's median (``densest``) and corrects every
offset. A clock with nothing to pair is asked about (``refuse_if_far``; the reason, one for both:
``far_apart``): merged as recorded, and said, unless a wrong clock would decide the verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from scaldiag.trace import Plane

MAX_INDEX_SHIFT = 3  # collectives a rank's window may hold more or fewer of, at its start
# An offset under this is left as recorded: the collectives' own spread on one node is microseconds.
NEGLIGIBLE_NS = 20_000


# Slots: a job's report holds one a node (a 10,000-node job: 0.2 KB a node less than a __dict__).
@dataclass(frozen=True, slots=True)
class Offset:
    name: str  # the rank's or node's label
    offset_ns: int | None  # this clock minus the first one's; None: not estimated
    spread_ns: int | None  # median absolute deviation of the paired ends' differences
    collectives: int  # how many collective ends it was estimated from (the first: its own count)
    corrected: bool  # whether the offset is taken off (shift_of)


@dataclass(frozen=True)
class Clock:
    """One clock's collectives: their ends, sorted, and where they are keyed, (2, n) step numbers
    and k-th of the step (a step number < 0: not in a numbered step, never paired)."""

    name: str
    ends_ns: np.ndarray
    keys: np.ndarray | None = None


@dataclass(frozen=True)
class ClockRules:
    """How one merge pairs and centres the collectives' ends (the module's docstring)."""

    by_key: bool  # pair by (step, k); else in order, the best of a few index shifts
    centre: Callable[[np.ndarray], tuple[float, float]]  # differences -> (offset, spread)
    negligible_ns: int  # an offset under this is left as recorded


def median(diffs: np.ndarray) -> tuple[float, float]:
    """(median, median absolute deviation around it) of paired end differences."""
    offset = float(np.median(diffs))
    return offset, float(np.median(np.abs(diffs - offset)))


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


# The ranks of a job's trace files (analyze/ranks.py) and the nodes of a job (analyze/nodes/).
ONE_HOST = ClockRules(by_key=False, centre=median, negligible_ns=NEGLIGIBLE_NS)
ACROSS_HOSTS = ClockRules(by_key=True, centre=densest, negligible_ns=0)


def align(
    clocks: list[Clock], rules: ClockRules, refuse_if_far: Callable[[int], None]
) -> list[Offset]:
    """Each clock's offset against the first's (``clocks`` in order). ``refuse_if_far(i)`` is asked
    of clock ``i`` where it cannot be estimated; it raises where merging it as recorded would let
    the clocks decide the verdict."""
    first, rest = clocks[0], clocks[1:]
    offsets = [Offset(first.name, 0, 0, len(first.ends_ns), False)]
    for i, clock in enumerate(rest, 1):
        found = _estimate(_pairings(first, clock, rules.by_key), rules.centre)
        if found is None:
            refuse_if_far(i)
            offsets.append(Offset(clock.name, None, None, 0, False))
            continue
        offset, spread, count = found
        offsets.append(
            Offset(clock.name, offset, spread, count, abs(offset) >= rules.negligible_ns)
        )
    return offsets


def _pairings(first: Clock, other: Clock, by_key: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The candidate pairings of the two clocks' ends: by key, the one; in order, one an index
    shift."""
    if by_key:
        yield _by_key(first, other)
        return
    for shift in range(-MAX_INDEX_SHIFT, MAX_INDEX_SHIFT + 1):
        a, b = first.ends_ns[max(0, -shift) :], other.ends_ns[max(0, shift) :]
        n = min(len(a), len(b))
        yield a[:n], b[:n]


def _by_key(first: Clock, other: Clock) -> tuple[np.ndarray, np.ndarray]:
    """The ends of the collectives both clocks hold (by key, in a numbered step), in ``first``'s
    order."""
    index = {k: i for i, k in enumerate(zip(*other.keys.tolist()))}
    pairs = [
        (i, index[k]) for i, k in enumerate(zip(*first.keys.tolist())) if k in index and k[0] >= 0
    ]
    if not pairs:
        return first.ends_ns[:0], other.ends_ns[:0]
    ia, ib = np.array(pairs).T
    return first.ends_ns[ia], other.ends_ns[ib]


def _estimate(
    pairings: Iterator[tuple[np.ndarray, np.ndarray]], centre: Callable
) -> tuple[int, int, int] | None:
    """(offset, spread, count) of the pairing whose differences agree best (then the most), or
    None where none pairs any."""
    best = None
    for a, b in pairings:
        if not len(a):
            continue
        offset, spread = centre(b.astype(np.int64) - a.astype(np.int64))
        key = (spread, -len(a))
        if best is None or key < best[0]:
            best = (key, int(round(offset)), int(round(spread)), len(a))
    return None if best is None else best[1:]


def far_apart(name: str, first: str, gap_ns: int | None, step_ns: float, what: str) -> str | None:
    """Why ``name``'s clock, which cannot be aligned, is not merged as recorded: ``gap_ns`` (None:
    nothing to compare) between ``what`` ("the same step starts", "its trace starts") on it and on
    ``first``'s is over a step (``step_ns``); None where it is within one."""
    if gap_ns is not None and abs(gap_ns) <= step_ns:
        return None
    why = (
        "and no step was traced on both"
        if gap_ns is None
        else (
            f"and {what} {abs(gap_ns) / 1e6:.1f} ms apart, more than a step"
            f" ({step_ns / 1e6:.1f} ms)"
        )
    )
    return (
        f"{name}'s clock cannot be aligned with {first}'s: no collective ends on both to align"
        f" on, {why}: merging them would decide the verdict by the clocks"
    )


def shift_of(offset: Offset) -> int:
    """What is taken off the clock's times to put them on the first one's (0: left as
    recorded)."""
    return offset.offset_ns if offset.corrected else 0


def not_estimated(name: str) -> str:
    return f"{name}: clock offset not estimated (no collective to align on); merged as recorded"


def describe(offsets: list[Offset]) -> list[str]:
    """A note per clock that was corrected or could not be estimated (the ranks' notes; a job's
    report shows its nodes' offsets in its own table)."""
    notes = []
    for o in offsets:
        if o.corrected:
            notes.append(
                f"{o.name}: clock offset {o.offset_ns / 1e6:+.3f} ms against {offsets[0].name},"
                f" corrected (median over {o.collectives} collective ends, spread"
                f" {o.spread_ns / 1e3:.1f} us)"
            )
        elif o.offset_ns is None:
            notes.append(not_estimated(o.name))
    return notes


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
