"""One rank's evidence from its trace's planes: its steps, its collectives (keyed by step and
order), when it handed each over, its input (``rank_events``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from scaldiag.analyze import categories, intervals
from scaldiag.analyze.device import device_events
from scaldiag.analyze.nodes.names import (
    ENQUEUE,
    HOST_COLLECTIVE,
    HOST_FRAMEWORK_COLLECTIVE,
    INPUT,
    SESSION_START,
    STEP,
    match,
    name_flags,
    plane_of,
    selected,
)
from scaldiag.analyze.trace_steps import find_steps, step_evidence
from scaldiag.trace import Line, Plane, Trace


@dataclass(frozen=True)
class RankEvents:
    """One rank's evidence, plain arrays on its node's clock (integer ns)."""

    node: str
    rank: str
    step_num: np.ndarray
    step_start_ns: np.ndarray
    step_end_ns: np.ndarray
    coll_start_ns: np.ndarray  # sorted by start
    coll_end_ns: np.ndarray
    coll_key: list[tuple[int, int]]  # (step number, k-th collective of that step)
    input: intervals.IntervalSet
    # When the rank handed each collective over (c10d's enqueue): its arrival. A backend runs its
    # collectives one after another, so the work of the k-th may start long after the rank was ready
    # for it, behind the ones still waiting for a late peer. None: the work's start.
    coll_arrive_ns: np.ndarray | None = None
    # How the steps were numbered where no marker carried a number (the train function's calls, in
    # order): pairing by step then assumes every rank's trace window began at the same step. None:
    # numbered by markers.
    steps_numbered_by: str | None = None

    @property
    def arrive_ns(self) -> np.ndarray:
        return self.coll_start_ns if self.coll_arrive_ns is None else self.coll_arrive_ns

    def shifted(self, offset_ns: int) -> RankEvents:
        if not offset_ns:
            return self
        s = offset_ns
        return replace(
            self,
            step_start_ns=self.step_start_ns - s,
            step_end_ns=self.step_end_ns - s,
            coll_start_ns=self.coll_start_ns - s,
            coll_end_ns=self.coll_end_ns - s,
            input=(self.input[0] - s, self.input[1] - s),
            coll_arrive_ns=None if self.coll_arrive_ns is None else self.coll_arrive_ns - s,
        )


def rank_events(node: str, rank: str, planes: list[Plane]) -> RankEvents | None:
    """A rank's evidence from its planes; None where it has no steps (nothing to compare)."""
    step_line, step_sel, nums = _step_line(planes)
    if step_line is None:
        return _rank_events_of_found_steps(node, rank, planes)
    order = np.argsort(step_line.start_ns[step_sel], kind="stable")
    starts, ends, nums = (
        step_line.start_ns[step_sel][order],
        step_line.end_ns[step_sel][order],
        nums[order],
    )
    cs, ce = collectives(planes)
    arrive = _arrivals_of(planes, cs)
    keys = _keys(cs if arrive is None else arrive, starts, nums)
    names = plane_of(planes, step_line).event_names
    input_sel = match(step_line, names, INPUT)
    return RankEvents(
        node,
        rank,
        nums,
        starts,
        ends,
        cs,
        ce,
        keys,
        intervals.union(step_line.start_ns[input_sel], step_line.end_ns[input_sel]),
        arrive,
    )


def _rank_events_of_found_steps(node: str, rank: str, planes: list[Plane]) -> RankEvents | None:
    """A rank without ``ProfilerStep`` markers (TF, JAX: XPlane): its steps as the trace analysis
    finds them,
    numbered by their markers' ``step_num``, else in order; None where it finds none."""
    steps = find_steps(Trace(step_evidence(planes), []))
    if steps.method == "none" or not steps.count:
        return None
    by_order = steps.numbers is None or len(steps.numbers) != steps.count
    nums = np.arange(steps.count, dtype=np.int64) if by_order else steps.numbers.astype(np.int64)
    cs, ce = collectives(planes)
    arrive = _arrivals_of(planes, cs)
    keys = _keys(cs if arrive is None else arrive, steps.start_ns, nums)
    found = RankEvents(
        node,
        rank,
        nums,
        steps.start_ns.astype(np.int64),
        steps.end_ns.astype(np.int64),
        cs,
        ce,
        keys,
        _input_waits(planes),
        arrive,
        f"in order: {steps.description}" if by_order else None,
    )
    # from the session's start to the machine's clock
    return found.shifted(-_session_start_ns(planes))


def _session_start_ns(planes: list[Plane]) -> int:
    """The profiler session's start on the machine's clock, where the trace says it (0: as
    stored)."""
    for plane in planes:
        value = plane.stats.get(SESSION_START)
        if isinstance(value, (int, np.integer)) and value > 0:
            return int(value)
    return 0


def _input_waits(planes: list[Plane]) -> intervals.IntervalSet:
    """Where the rank's steps wait for their next batch, as the trace analysis counts input
    (analyze/categories.py): every event of tf.data's get_next threads (the consumer the step runs),
    input events by name elsewhere (``IteratorGetNext``, ``scaldiag_input``), never tf.data's
    producers, which run ahead of the step in the background."""
    starts, ends = [], []
    for plane in planes:
        if not plane.is_host:
            continue
        by_name = np.array(
            [categories.host_category(n, False) == "input" for n in plane.event_names] + [False]
        )
        for line in plane.lines:
            default = categories.host_line_default(line.name)
            if not len(line) or default == categories.BACKGROUND:
                continue
            sel = np.ones(len(line), bool) if default == "input" else selected(line, by_name)
            starts.append(line.start_ns[sel])
            ends.append(line.end_ns[sel])
    if not starts:
        return intervals.EMPTY
    return intervals.union(
        np.concatenate(starts).astype(np.int64), np.concatenate(ends).astype(np.int64)
    )


def _arrivals_of(planes: list[Plane], work_start: np.ndarray) -> np.ndarray | None:
    """The enqueue of each collective, paired in order with its work (a backend runs them in the
    order
    given: ``pair_arrivals``); None where no pairing is safe or there are no enqueue events."""
    found = [
        line.start_ns[selected(line, wanted)]
        for p in planes
        if not p.is_device
        for wanted in [name_flags(p.event_names, ENQUEUE)]
        for line in p.lines
        if len(line)
    ]
    enqueue = np.sort(np.concatenate(found)) if found else np.empty(0, np.int64)
    return pair_arrivals(enqueue.astype(np.int64), np.asarray(work_start, np.int64))


# Collectives a trace window may cut at its edges: an enqueue whose work ran after the window closed
# (or work whose enqueue came before it opened). Under load a TF worker's window ended between the
# two (19 ops against 20 hand-overs), and dropping every arrival for it read the peer's wait as
# lateness: a false SD210.
MAX_EDGE_UNPAIRED = 3


def pair_arrivals(enqueue: np.ndarray, work_start: np.ndarray) -> np.ndarray | None:
    """Each collective's arrival: its enqueue, paired in order with the work it handed over (an
    enqueue
    stamped after its work began arrives when the work began). Where the counts differ by a few (cut
    at the window's edges), the run of enqueues (or of works) with the fewest enqueues after their
    work, then the tightest in total, is paired; a work left without an enqueue arrives when it
    starts. None where the counts differ by more: no pairing is safe."""
    n, m = len(work_start), len(enqueue)
    if not n or not m or abs(m - n) > MAX_EDGE_UNPAIRED:
        return None
    k = min(n, m)

    def runs(shift: int) -> tuple[np.ndarray, np.ndarray]:
        return (
            (enqueue[shift : shift + k], work_start[:k])
            if m >= n
            else (enqueue, work_start[shift : shift + k])
        )

    def cost(shift: int) -> tuple[int, int]:
        e, w = runs(shift)
        return int((e > w).sum()), int((w - np.minimum(e, w)).sum())

    shift = min(range(abs(m - n) + 1), key=cost)
    e, w = runs(shift)
    arrive = work_start.copy()
    paired = slice(0, n) if m >= n else slice(shift, shift + m)
    arrive[paired] = np.minimum(e, w)
    return arrive


def _step_line(planes: list[Plane]):
    """The host thread holding the ProfilerStep markers, its selection, their step numbers (the
    reader
    keeps ``#N`` as the ``step_num`` stat; a name that still holds it is read too)."""
    for plane in planes:
        if plane.is_device:
            continue
        is_step = name_flags(plane.event_names, STEP)  # (anchored: search is match)
        for line in plane.lines:
            if not len(line):
                continue
            ids = np.where(
                line.name_id < 0,
                len(plane.event_names),
                np.minimum(line.name_id, len(plane.event_names)),
            ).astype(np.int64)
            sel = is_step[ids]
            if sel.any():
                return line, sel, _step_numbers(line, plane.event_names, sel)
    return None, None, None


def _step_numbers(line: Line, names: list[str], sel: np.ndarray) -> np.ndarray:
    column = line.stat("step_num") if "step_num" in line.stats else None
    out = []
    for row in np.flatnonzero(sel).tolist():
        value = column[row] if column is not None else None
        if not isinstance(value, (int, np.integer)):
            m = re.search(r"#(\d+)$", names[line.name_id[row]])
            value = int(m.group(1)) if m else -1
        out.append(int(value))
    return np.array(out, np.int64)


def collectives(planes: list[Plane], host_work: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """One rank's collectives (starts, ends), sorted by start: the scaldiag-wide evidence of a
    collective, for the ranks of a job's files (analyze/ranks.py) and for a job's nodes.

    Its devices' collective kernels as the breakdown counts them (analyze/categories.py: NCCL's,
    XLA's collective instructions, peer copies) and, with ``host_work`` (a job's nodes), the
    process group's work on host threads (``gloo:all_reduce``...) and, where no device runs a
    collective, TF's and XLA's collective ops on host threads: a TF or JAX collective whose work
    runs on a GPU is there as its kernels, its host op the launch. ``analyze`` aligns the ranks of
    its files on the devices' kernels only (clock_skew.ONE_HOST)."""
    device = {id(p): device_events(p) for p in planes if p.is_device}
    on_device = any(d.of("collective").any() for d in device.values())
    starts, ends = [], []
    for plane in planes:
        if plane.is_device:
            d = device[id(plane)]
            sel = d.of("collective")
            starts.append(d.start_ns[sel])
            ends.append(d.end_ns[sel])
            continue
        if not host_work:
            continue
        wanted = name_flags(plane.event_names, HOST_COLLECTIVE)
        if not on_device:
            wanted = wanted | name_flags(plane.event_names, HOST_FRAMEWORK_COLLECTIVE)
        for line in plane.lines:
            if len(line):
                sel = selected(line, wanted)
                starts.append(line.start_ns[sel])
                ends.append(line.end_ns[sel])
    if not starts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s, e = np.concatenate(starts).astype(np.int64), np.concatenate(ends).astype(np.int64)
    order = np.argsort(s, kind="stable")
    return s[order], e[order]


def _keys(
    coll_start: np.ndarray, step_start: np.ndarray, nums: np.ndarray
) -> list[tuple[int, int]]:
    """(step number, k) per collective: the step it starts in (a step runs to the next one's
    start)."""
    at = np.searchsorted(step_start, coll_start, side="right") - 1
    keys, seen = [], {}
    for i in at.tolist():
        step = int(nums[i]) if i >= 0 else -1
        k = seen.get(step, 0)
        seen[step] = k + 1
        keys.append((step, k))
    return keys
