"""Whether the ranks merged into a job are one job's, and the figures a node's record adds to the
merge.

Pure: each function takes what the readers and the record gave (analyze/nodes/'s ``JobEvents``,
analyze/clock_skew.py's ``Offset``, a node's recorded all-reduce times) and refuses with a
``ScaldiagError`` what is not one job's, or says what makes a figure doubtful. analyze/job.py calls
them in order.
"""

from __future__ import annotations

import math

from scaldiag.analyze.clock_skew import Offset
from scaldiag.analyze.nodes import JobEvents
from scaldiag.analyze.stats import Summary
from scaldiag.errors import ScaldiagError
from scaldiag.record.nodes import MAX_CLOCK_OFFSET_NS, is_time_ns

# A spread of the matched ends above this share of a step makes a node's lateness (a few % of a
# step) no evidence: said.
MAX_SPREAD_OF_STEP = 0.1


def refuse_copies(job: JobEvents) -> None:
    """The same trace in two places (a rank file copied into another node) is one rank, not two.

    Each rank's steps and collective ends are remembered by their hash, not as a key (a bytes key
    a rank was about 0.2 KB a rank at the merge's peak); ranks of one hash are compared whole."""
    first: dict[int, int] = {}
    more: dict[int, list[int]] = {}  # ranks whose hash an earlier rank of other instants had
    for i, rank in enumerate(job.ranks):
        key = _instants(job, i)
        h = hash(key)
        if h not in first:
            first[h] = i
            continue
        for j in [first[h], *more.get(h, [])]:
            if _instants(job, j) == key:
                raise ScaldiagError(
                    f"{rank} and {job.ranks[j]} are the same trace (every step and collective at"
                    " the same instant): a copied file is not another rank; not merged"
                )
        more.setdefault(h, []).append(i)


def _instants(job: JobEvents, i: int) -> bytes:
    """Rank ``i``'s step starts and collective ends, as one key."""
    return (
        job.step_start_ns[job.steps_of(i)].tobytes() + b"|" + job.end_ns[job.colls_of(i)].tobytes()
    )


def refuse_far_clocks(offsets: list[Offset]) -> None:
    """Clocks more than MAX_CLOCK_OFFSET_NS apart: another job's trace, or one without its base
    time."""
    for o in offsets[1:]:
        if o.offset_ns is not None and abs(o.offset_ns) > MAX_CLOCK_OFFSET_NS:
            raise ScaldiagError(
                f"the nodes are not merged: {o.name}'s trace is {_duration(abs(o.offset_ns))} from"
                f" {offsets[0].name}'s (hosts of one job keep their clocks within a minute):"
                " another job's trace, or a trace without its base time"
            )


def uncertain_clocks(offsets: list[Offset], step_ns: float) -> list[str]:
    """A note for each node whose offset's spread is past MAX_SPREAD_OF_STEP of a step."""
    return [
        f"{o.name}: its clock offset is uncertain: the matched collective ends spread"
        f" {o.spread_ns / 1e6:.3f} ms, {100 * o.spread_ns / step_ns:.0f}% of a step; lateness below"
        " that is not evidence"
        for o in offsets[1:]
        if o.spread_ns is not None and step_ns > 0 and o.spread_ns > MAX_SPREAD_OF_STEP * step_ns
    ]


def _duration(ns: int) -> str:
    s = ns / 1e9
    for unit, size in (
        ("years", 365.25 * 86400),
        ("days", 86400),
        ("hours", 3600),
        ("minutes", 60),
    ):
        if s >= size:
            return f"{s / size:,.1f} {unit}"
    return f"{s:.1f} s"


def intra_node_ms(splits: dict[int, list[int]], per_step: float) -> Summary | None:
    """The node's own all-reduce (record/nodes.intra_node_times_ns) in the split nearest the job's
    collectives a step (its buckets), in ms; None where none was measured."""
    if not splits:
        return None
    nearest = min(splits, key=lambda k: abs(math.log(k) - math.log(max(per_step, 1.0))))
    return Summary.of([t / 1e6 for t in splits[nearest]])


def merged_trace(docs: list[tuple[str, str, dict]], offsets: list[Offset]) -> dict:
    """Every rank's Chrome trace document (``(node, rank name, document)``, as the readers gave it)
    in one document on node 0's clock, each node's offset removed: one process per rank and original
    process, named ``<node>/<rank>: <name>``. A shifted time that is not finite is left out (None).
    """
    shifts = {o.name: o.offset_ns or 0 for o in offsets}
    events, base0, pids = [], None, {}
    for node, rank_name, doc in docs:
        base = doc.get("baseTimeNanoseconds")
        base = base if is_time_ns(base) else 0
        base0 = base if base0 is None else base0
        shift_us = (base - base0 - shifts.get(node, 0)) / 1e3
        for e in doc.get("traceEvents") if isinstance(doc.get("traceEvents"), list) else []:
            if isinstance(e, dict):
                events.append(_merged_event(e, shift_us, rank_name, pids))
    return {
        "traceEvents": events,
        "baseTimeNanoseconds": base0 or 0,
        "displayTimeUnit": "ms",
        "scaldiag": {"offsets_ns": shifts},
    }


def _merged_event(e: dict, shift_us: float, rank_name: str, pids: dict) -> dict:
    e = dict(e)
    ts = e.get("ts")
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        moved = ts + shift_us
        e["ts"] = moved if math.isfinite(moved) else None
    e["pid"] = pids.setdefault((rank_name, str(e.get("pid"))[:200]), len(pids) + 1)
    if e.get("ph") == "M" and e.get("name") == "process_name" and isinstance(e.get("args"), dict):
        e["args"] = {**e["args"], "name": f"{rank_name}: {e['args'].get('name', '')}"}
    return e
