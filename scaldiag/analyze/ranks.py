"""A job's ranks: what needs all of them is found from a little of each, the rest rank by rank.

Each rank of a job writes its own trace (torchrun: one Kineto file per rank). Two things need
every rank: one clock (the ends of the collectives they share, analyze/clock_skew.py) and the
steps (each step from the first rank to start it). Both come from a rank's *evidence*: its
collective ends, the host events that mark steps, the span of its events, a few kilobytes
(``evidence``). Everything else is the rank's own, and is reduced from its trace alone
(profile.reduce_rank): each device against its own process's host threads, never another
rank's, whose Python cannot be why this GPU waits.

So a job can be read one rank at a time, twice (evidence, then the reduction), with one
rank's events in memory at once: pipeline.py does it from files, in worker processes;
profile.analyze_trace does the same with a trace already in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from scaldiag.analyze import clock_skew
from scaldiag.analyze.clock_skew import Offset
from scaldiag.analyze.nodes.evidence import collectives
from scaldiag.analyze.trace_steps import SPAN_PLANE, Steps, find_steps, step_evidence
from scaldiag.errors import TraceError
from scaldiag.trace import Trace


@dataclass(frozen=True)
class RankEvidence:
    """What the job's clock and steps need of one rank, on the rank's own clock."""

    label: str  # the rank's planes' host ("rank0", "host/rank0")
    collective_ends_ns: np.ndarray  # its devices' collective kernels' ends (collectives), sorted
    step_planes: list  # its planes cut to what finds steps (steps.step_evidence)
    first_ns: int | None  # its first event's start, its last event's end
    last_ns: int | None
    host_stats: dict = field(default_factory=dict)  # its host plane's stats (readers.rank_notes)
    host: str | None = None  # the machine its file names (Kineto's host_name), where it names one


def evidence(trace: Trace, label: str) -> RankEvidence:
    """One rank's evidence (``trace`` holds that rank's planes only)."""
    # The devices' collective kernels only: the one evidence of a collective (nodes.collectives),
    # without the host work a job's nodes add (clock_skew.ONE_HOST).
    ends = np.sort(collectives(trace.planes, host_work=False)[1])
    cut = step_evidence(trace.planes)
    # The span of all the rank's events: step_evidence's one event of its "span" plane (none: no
    # events).
    span = next((p.lines[0] for p in cut if p.name == SPAN_PLANE), None)
    stats = next((p.stats for p in trace.planes if p.is_host), {})
    return RankEvidence(
        label,
        ends,
        cut,
        None if span is None else int(span.start_ns[0]),
        None if span is None else int(span.end_ns[0]),
        dict(stats),
    )


@dataclass(frozen=True)
class JobClock:
    """The ranks on the first rank's clock, and the job's steps on it."""

    offsets: list[Offset]
    # each one's last ends where the host's last step does: each rank runs it on (with_device_tail)
    steps: Steps
    notes: list[str]

    def shift_ns(self, rank: int) -> int:
        return clock_skew.shift_of(self.offsets[rank]) if self.offsets else 0


def job_clock(ranks: list[RankEvidence]) -> JobClock:
    """Offsets from the collectives (clock_skew.align, ONE_HOST's rules), then the steps from every
    rank's step evidence on the one clock.

    Raises TraceError where a rank cannot be put on the clock and its trace starts more than a step
    away from the first rank's."""

    def refuse_if_far(i: int) -> None:
        _refuse_if_far(ranks[0], ranks[i])

    offsets = clock_skew.align(
        [clock_skew.Clock(r.label, r.collective_ends_ns) for r in ranks],
        clock_skew.ONE_HOST,
        refuse_if_far,
    )
    planes = []
    for rank, offset in zip(ranks, offsets):
        shift = clock_skew.shift_of(offset)
        planes += (
            [clock_skew.shifted(p, shift) for p in rank.step_planes] if shift else rank.step_planes
        )
    steps = find_steps(Trace(planes=planes, sources=[]))
    return JobClock(offsets, steps, clock_skew.describe(offsets))


def _refuse_if_far(first: RankEvidence, other: RankEvidence) -> None:
    """Without collectives, a rank whose trace starts more than a step from the first rank's is
    refused (clock_skew.far_apart), unless both files name the same machine: one machine's
    processes read one clock (two CPU ranks of one torchrun under load began their traces 3.8 ms
    apart, a step being 3.2 ms, and were refused)."""
    if first.host and first.host == other.host:
        return
    steps = find_steps(Trace(planes=first.step_planes, sources=[]))
    if (
        steps.count < 1
        or steps.method == "none"
        or first.first_ns is None
        or other.first_ns is None
    ):
        return
    step_ns = float(np.median(steps.end_ns - steps.start_ns))
    gap_ns = other.first_ns - first.first_ns
    why = clock_skew.far_apart(other.label, first.label, gap_ns, step_ns, "its trace starts")
    if why:
        raise TraceError(f"{why}. Analyze each rank's file alone")


def split(trace: Trace) -> list[tuple[str, Trace]]:
    """The trace's ranks (planes by host, in order of first appearance); one, unlabelled, for one
    process."""
    labels = list(dict.fromkeys(p.host for p in trace.planes))
    if len(labels) < 2:
        return [(labels[0] if labels else "", trace)]
    return [
        (label, replace(trace, planes=[p for p in trace.planes if p.host == label]))
        for label in labels
    ]
