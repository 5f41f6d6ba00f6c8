"""A job over several machines analysed: its nodes' facts and their ranks' evidence in, one
``JobAnalysis`` out (``analyze_job``). Pure: the pipeline reads the node directories and the rank
files; here is decided which nodes merge, whether they are one job's, the clocks, the notes.

A multi-node job is ranks on more than one host: each rank's evidence (analyze/nodes/evidence.py)
on its node's clock, every node put on node 0's from the ends of the collectives they share
(analyze/nodes/clock.py through clock_skew.align, the path of a job's rank files), then reduced
per node (analyze/nodes/reduce.py).
"""

from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from scaldiag.analyze import job_merge
from scaldiag.analyze.nodes import (
    JobAnalysis,
    JobEvents,
    MergeRefused,
    PackedRank,
    align,
    reduce_job,
    shared_network_stack,
)
from scaldiag.analyze.stats import Summary
from scaldiag.errors import ScaldiagError


@dataclass(frozen=True, slots=True)
class JobNode:
    """What the merge takes of one node's record, read by the pipeline (slots: a job holds one a
    node until the merge)."""

    dir: str  # its run directory, as text
    label: str  # ``host/nodeK``
    nnodes: int | None  # the job's node count as this node's record says it
    stack: tuple  # (kernel boot id, network namespace) as run.json says them
    intra_ns: dict[int, list[int]] | None  # the intra-node all-reduce: times per split, where any
    parameter_bytes: int | None  # bytes all-reduced a step (the optimizer's parameters)
    steady_ms: Summary | None  # the node's steady step time over every recorded step
    trace_error: str | None  # the capture's word on its trace, where it has one


# (evidence, its rank file as text) per rank of a node
NodeRanks = list[tuple[PackedRank, str]]


class RankFiles(Sequence):
    """Each rank's file as (node label, rank name, path), made when asked (the report's
    ``rank_files``): held as the nodes' labels and directories, each rank's node (its index), its
    name (the job's own list) and its path under its node's directory (``under``: the same words
    for every node, held once), not a tuple and a path a rank (about 0.15 KB)."""

    def __init__(
        self, labels: list[str], dirs: list[str], node_of: array, names: list[str], under: list
    ) -> None:
        self._labels, self._dirs, self._node_of = labels, dirs, node_of
        self._names, self._under = names, under

    @staticmethod
    def under(node_dir: str, path: str) -> str | tuple[str]:
        """``path`` below ``node_dir`` (interned: every node's is the same), or ``(path,)``."""
        head = node_dir + os.sep
        return sys.intern(path[len(head) :]) if path.startswith(head) else (path,)

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k, rel = self._node_of[i], self._under[i]
        path = rel[0] if isinstance(rel, tuple) else self._dirs[k] + os.sep + rel
        return (self._labels[k], self._names[i], path)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return repr(list(self))


@dataclass(frozen=True)
class GatheredRanks:
    """Every rank's evidence already in the job's columns, in the nodes' order (the pipeline's,
    gathered as each rank is read: JobEvents.gathered), each rank's file (node label, rank name,
    path) and the node directories that have a rank."""

    events: JobEvents
    files: RankFiles
    dirs: set[str]

    def get(self, node_dir: str) -> bool:
        return node_dir in self.dirs


@dataclass(frozen=True)
class MergedJob:
    """The job's analysis, the node directories merged (in order) and each rank's file (node
    label, rank name, path): the report's."""

    analysis: JobAnalysis
    node_dirs: list[str]
    rank_files: Sequence[tuple[str, str, str]]  # a list, or RankFiles


def analyze_job(
    nodes: list[JobNode], ranks: dict[str, NodeRanks] | GatheredRanks, left_out: list[str]
) -> MergedJob:
    """The job from its nodes (node 0 first) and each node's ranks by directory; ``left_out``: what
    reading left out, first among the notes. A node with no rank's trace with steps is left out and
    named; fewer than two nodes, copies of one trace, clocks that cannot be aligned or are a
    minute apart are refused (ScaldiagError). ``ranks`` is emptied: its evidence moves into the
    job's columns (held once); GatheredRanks: the columns made as the ranks were read."""
    left_out = left_out + _without_ranks(nodes, ranks)
    nodes = [n for n in nodes if ranks.get(n.dir)]
    if len(nodes) < 2:
        raise ScaldiagError(
            f"{len(nodes)} node of the job can be merged, nothing to merge: " + "; ".join(left_out)
        )
    job, files = _job_events(nodes, ranks)
    job_merge.refuse_copies(job)
    step_ns = _step_ns(job)
    job, offsets, clock_notes = _aligned(job, step_ns)
    notes = left_out + clock_notes + job_merge.uncertain_clocks(offsets, step_ns)
    notes += _job_notes(job, nodes)
    one_stack = shared_network_stack([{"boot_id": n.stack[0], "net_ns": n.stack[1]} for n in nodes])
    notes += [one_stack] if one_stack else []
    analysis = reduce_job(job, offsets, *_node_figures(nodes, job, notes))
    analysis = replace(analysis, one_network_stack=one_stack is not None)
    return MergedJob(analysis, [n.dir for n in nodes], files)


def _without_ranks(nodes: list[JobNode], ranks: dict[str, NodeRanks] | GatheredRanks) -> list[str]:
    """A note for each node that has no rank's trace with steps (the capture's word where any)."""
    return [
        f"{n.dir}: no rank's trace with steps (PyTorch's ProfilerStep markers, scaldiag's step "
        "markers or the train function's calls)"
        + (f" ({n.trace_error})" if n.trace_error else "")
        + ": this node is left out"
        for n in nodes
        if not ranks.get(n.dir)
    ]


def _job_events(
    nodes: list[JobNode], ranks: dict[str, NodeRanks] | GatheredRanks
) -> tuple[JobEvents, list[tuple[str, str, str]]]:
    """The nodes' ranks in one ``JobEvents`` (in the nodes' order) and each rank's file. The
    evidence moves into the job's columns: ``ranks`` is emptied (held once, not twice: each rank's
    packed array was 0.45 KB a rank more at the merge's peak)."""
    if isinstance(ranks, GatheredRanks):
        return ranks.events, ranks.files
    packed, files = [], []
    for n in nodes:
        found = ranks.pop(n.dir)
        packed += [r for r, _ in found]
        files += [(n.label, r.rank, path) for r, path in found]
    ranks.clear()
    return JobEvents.taken(packed), files


def _step_ns(job: JobEvents) -> float:
    """The first rank's median step: the scale the clocks are judged against."""
    first = job.steps_of(0)
    return float(np.median(job.step_end_ns[first] - job.step_start_ns[first]))


def _aligned(job: JobEvents, step_ns: float):
    """Every node on node 0's clock (nodes.align), refused where a clock cannot be aligned or is
    a minute off."""
    try:
        job, offsets, notes = align(job, step_ns, in_place=True)  # the merge's own columns
    except MergeRefused as exc:
        raise ScaldiagError(f"the nodes are not merged: {exc}") from None
    job_merge.refuse_far_clocks(offsets)
    return job, offsets, notes


def _job_notes(job: JobEvents, nodes: list[JobNode]) -> list[str]:
    """Ranks whose steps were numbered by order, and nodes of the job not in the report."""
    notes = [
        f"{job.ranks[i]}: steps numbered {why}; paired with the other ranks' on the"
        " assumption that every trace window began at the same step"
        for i, why in job.numbered_by.items()
    ]
    nnodes = nodes[0].nnodes
    if nnodes is not None and nnodes > len(nodes):
        notes.append(
            f"{len(nodes)} of the job's {nnodes} nodes merged: the others are not in this report"
        )
    return notes


def _node_figures(nodes: list[JobNode], job: JobEvents, notes: list[str]):
    """reduce_job's figures from the nodes' records, by label, only for the nodes that have them
    (the report holds these dicts to the end): bytes a step, steady step, intra-node all-reduce in
    the split nearest the collectives a step of the node's first rank."""
    bytes_per_step, steady, intra = {}, {}, {}
    first_rank = np.unique(job.node_of, return_index=True)[1]  # nodes are numbered as they come
    colls, steps = np.diff(job.coll_at)[first_rank].tolist(), np.diff(job.step_at)[first_rank]
    for n, collectives, count in zip(nodes, colls, steps.tolist()):
        per_step = collectives / max(1, count)
        figures = (
            n.parameter_bytes,
            n.steady_ms,
            job_merge.intra_node_ms(n.intra_ns or {}, per_step),
        )
        for held, value in zip((bytes_per_step, steady, intra), figures):
            if value is not None:
                held[n.label] = value
    return bytes_per_step, notes, steady, intra
