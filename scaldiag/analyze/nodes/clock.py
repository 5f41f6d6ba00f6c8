"""Every node on node 0's clock: each node's first rank's collectives, keyed by step, given to the
one clock path (clock_skew.align, ACROSS_HOSTS's rules); the ranks of one node share its clock."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scaldiag.analyze import clock_skew
from scaldiag.analyze.clock_skew import Offset
from scaldiag.analyze.nodes.columns import JobEvents


class MergeRefused(ValueError):
    """The nodes' clocks cannot be put on one: merging would let the clocks decide the verdict."""


def align(
    job: JobEvents, step_ns: float, in_place: bool = False
) -> tuple[JobEvents, list[Offset], list[str]]:
    """Every node on node 0's clock (the first node listed), from the matched ends of collectives;
    ``in_place``: ``job``'s own times moved (JobEvents.shifted).

    Raises MergeRefused where a node's offset cannot be estimated and its steps start more than
    ``step_ns`` from node 0's: a wrong clock would then decide who is late."""
    nodes = job.nodes
    first_rank = np.unique(job.node_of, return_index=True)[1].tolist()  # numbered as they come
    clocks = _Clocks(job, np.stack([job.coll_step, job.coll_k]), nodes, first_rank)

    def refuse_if_far(at: int) -> None:
        gap = _first_common_step_gap(job, first_rank[0], first_rank[at])
        why = clock_skew.far_apart(nodes[at], nodes[0], gap, step_ns, "the same step starts")
        if why:
            raise MergeRefused(why)

    offsets = clock_skew.align(clocks, clock_skew.ACROSS_HOSTS, refuse_if_far)
    notes = [clock_skew.not_estimated(o.name) for o in offsets if o.offset_ns is None]
    shift_ns = np.array([clock_skew.shift_of(o) for o in offsets], np.int64)
    return job.shifted(shift_ns, in_place), offsets, notes


class _Clocks(Sequence):
    """Each node's clock, made when clock_skew.align asks for it (it reads them one at a time):
    not a Clock and its arrays held for every node at once (0.3 KB a node, the merge's peak of
    Python's small objects at 10,000 nodes). ``keys``: every rank's (2, n) keys, stacked once."""

    def __init__(self, job: JobEvents, keys: np.ndarray, nodes: list, first_rank: list) -> None:
        self.job, self.keys, self.nodes, self.first_rank = job, keys, nodes, first_rank

    def __len__(self) -> int:
        return len(self.first_rank)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return _Clocks(self.job, self.keys, self.nodes[i], self.first_rank[i])
        return _clock(self.job, self.keys, self.nodes[i], self.first_rank[i])


def _clock(job: JobEvents, keys: np.ndarray, node: str, i: int) -> clock_skew.Clock:
    """Rank ``i``'s collectives, as its node's clock (``keys``: every rank's (2, n) keys)."""
    at = job.colls_of(i)
    return clock_skew.Clock(node, job.end_ns[at], keys[:, at])


def _first_common_step_gap(job: JobEvents, a: int, b: int) -> int | None:
    num_a, num_b = job.step_num[job.steps_of(a)], job.step_num[job.steps_of(b)]
    common = np.intersect1d(num_a, num_b)
    if not len(common):
        return None
    ia, ib = np.flatnonzero(num_a == common[0])[0], np.flatnonzero(num_b == common[0])[0]
    return int(job.step_start_ns[job.steps_of(b)][ib] - job.step_start_ns[job.steps_of(a)][ia])
