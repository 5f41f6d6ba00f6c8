"""Every node on node 0's clock, from the ends of the collectives their first ranks share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaldiag.analyze.clock_skew import densest
from scaldiag.analyze.nodes.columns import JobEvents


# Slots: the report holds one a node (a 10,000-node job: 0.2 KB a node less than a __dict__).
@dataclass(frozen=True, slots=True)
class NodeOffset:
    node: str
    offset_ns: int | None  # this node's clock minus node 0's; None: not estimated
    spread_ns: int | None  # median absolute deviation of the matched ends' differences
    collectives: int


class MergeRefused(ValueError):
    """The nodes' clocks cannot be put on one: merging would let the clocks decide the verdict."""


def align(job: JobEvents, step_ns: float) -> tuple[JobEvents, list[NodeOffset], list[str]]:
    """Every node on node 0's clock (the first node listed), from the matched ends of collectives.

    Raises MergeRefused where a node's offset cannot be estimated and its steps start more than
    ``step_ns`` from node 0's: a wrong clock would then decide who is late."""
    nodes = job.nodes
    first_rank = np.unique(job.node_of, return_index=True)[1]  # nodes are numbered as they come
    ref = int(first_rank[0])
    offsets, notes = [NodeOffset(nodes[0], 0, 0, len(job.keys_of(ref)))], []
    shift_ns = np.zeros(len(nodes), np.int64)
    for at, node in enumerate(nodes[1:], 1):
        other = int(first_rank[at])
        a, b = _matched_ends(job, ref, other)
        if not len(a):  # merged as recorded, where its steps are within a step of node 0's
            _refuse_if_far(node, nodes[0], _first_common_step_gap(job, ref, other), step_ns)
            offsets.append(NodeOffset(node, None, None, 0))
            notes.append(
                f"{node}: clock offset not estimated (no collective to align on); merged as"
                " recorded"
            )
            continue
        offset, spread = densest(b - a)
        offsets.append(NodeOffset(node, offset, spread, len(a)))
        shift_ns[at] = offset
    return job.shifted(shift_ns), offsets, notes


def _refuse_if_far(node: str, first: str, gap: int | None, step_ns: float) -> None:
    """MergeRefused where ``node``'s clock cannot be aligned and the same step starts more than a
    step (``gap``: ns, None: no step traced on both) from ``first``'s."""
    if gap is not None and abs(gap) <= step_ns:
        return
    why = (
        "and no step was traced on both"
        if gap is None
        else (
            f"and the same step starts {abs(gap) / 1e6:.1f} ms apart, more than a step"
            f" ({step_ns / 1e6:.1f} ms)"
        )
    )
    raise MergeRefused(
        f"{node}'s clock cannot be aligned with {first}'s: no collective ends on both to align"
        f" on, {why}: merging them would decide the verdict by the clocks"
    )


def _matched_ends(job: JobEvents, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The ends of the collectives ranks ``a`` and ``b`` both hold (by key), in ``a``'s order."""
    index = {k: i for i, k in enumerate(job.keys_of(b))}
    pairs = [(i, index[k]) for i, k in enumerate(job.keys_of(a)) if k in index and k[0] >= 0]
    if not pairs:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ia, ib = np.array(pairs).T
    return job.end_ns[job.colls_of(a)][ia], job.end_ns[job.colls_of(b)][ib]


def _first_common_step_gap(job: JobEvents, a: int, b: int) -> int | None:
    num_a, num_b = job.step_num[job.steps_of(a)], job.step_num[job.steps_of(b)]
    common = np.intersect1d(num_a, num_b)
    if not len(common):
        return None
    ia, ib = np.flatnonzero(num_a == common[0])[0], np.flatnonzero(num_b == common[0])[0]
    return int(job.step_start_ns[job.steps_of(b)][ib] - job.step_start_ns[job.steps_of(a)][ia])
