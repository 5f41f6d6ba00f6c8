"""A job's analysis: per node its figures, held as a table of numbers (``NodeTable``) and read
back as ``NodeSummary``."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from scaldiag.analyze.clock_skew import Offset
from scaldiag.analyze.stats import Summary, t95

EMPTY_F64 = np.empty(0, np.float64)


@dataclass(frozen=True)
class NodeSummary:
    node: str
    ranks: list[str]
    step_ms: Summary  # traced steps, the node's ranks together
    input_ms: Summary  # per step: the step thread in the DataLoader
    collective_ms: Summary  # per step: collectives running, from the rank's own start
    link_ms: Summary  # per step: collectives after their last rank arrived
    # per step: from the step's last hand-over on any rank to the rank's last collective's end
    exposed_ms: Summary
    # per step: how much later than the others' mean this node's ranks start collectives
    lateness_ms: Summary
    # (weighted by each collective's spread of arrivals: where the step waited)
    last_pct: float  # collectives at which this node's ranks arrived last
    bytes_per_step: int | None = None
    steady_step_ms: Summary | None = None  # every steady step of the node's first rank (its record)
    intra_node_ms: Summary | None = (
        None  # the same all-reduce between two processes of this node (measured)
    )


# NodeSummary's Summary fields that every node has, measured over the traced steps, in its order.
MEASURED = ("step_ms", "input_ms", "collective_ms", "link_ms", "exposed_ms", "lateness_ms")
# A Summary's numbers in a row of NodeTable.summaries, in Summary's field order.
ROW = ("mean", "p50", "p90", "stdev", "n", "ci95")


@dataclass(frozen=True, eq=False, repr=False)
class NodeTable(Sequence):
    """Every node's figures as columns, each node's ``NodeSummary`` made when asked for (the rules
    and the views read a job's nodes one at a time): its six measured Summary as six numbers each
    in one float64 array (288 bytes a node), not six Summary objects and their floats (about 1.7 KB
    a node with the NodeSummary, most of what a 4,096-node job held at its peak;
    bench/results/job_merge.md). The figures from the nodes' records are held as given, by node
    name, for the nodes that have them.

    Read back as they were made: a Summary's numbers are floats (its ``n`` an int, exact in float64
    below 2**53), so a node made here is equal, field by field and in repr, to the one made from
    the figures directly. A sequence of NodeSummary wherever a list of them is read; equal to a
    list of the same nodes, and shown as one."""

    nodes: list[str]  # each node's name
    ranks: list[str]  # every node's rank names, the nodes' one after another
    rank_at: np.ndarray  # where each node's ranks begin in ``ranks``, then the end
    summaries: np.ndarray  # (nodes, len(MEASURED), len(ROW)) float64
    last_pct: np.ndarray  # (nodes,) float64
    bytes_per_step: dict[str, int | None]
    steady_step_ms: dict[str, Summary | None]
    intra_node_ms: dict[str, Summary | None]

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, at):
        if isinstance(at, slice):
            return [self._node(i) for i in range(len(self))[at]]
        return self._node(range(len(self))[at])  # (an index past the end: IndexError)

    def __iter__(self) -> Iterator[NodeSummary]:
        return map(self._node, range(len(self)))

    def __eq__(self, other) -> bool:
        return other is self or (isinstance(other, Sequence) and list(self) == list(other))

    def __repr__(self) -> str:
        return repr(list(self))

    def _node(self, i: int) -> NodeSummary:
        node = self.nodes[i]
        return NodeSummary(
            node,
            self.ranks[int(self.rank_at[i]) : int(self.rank_at[i + 1])],
            *summaries_in(self.summaries[i]),
            float(self.last_pct[i]),
            self.bytes_per_step.get(node),
            self.steady_step_ms.get(node),
            self.intra_node_ms.get(node),
        )


@dataclass(frozen=True)
class JobAnalysis:
    nodes: Sequence[NodeSummary]  # reduce_job's: a NodeTable
    offsets: list[Offset]
    matched_collectives: int
    notes: list[str] = field(default_factory=list)
    ranks_per_node: int = 1
    # Every node on one kernel in one network namespace (shared_network_stack): no network between
    # them.
    one_network_stack: bool = False


def summaries_in(rows: np.ndarray) -> list[Summary]:
    """Rows of ``summary_rows`` (mean, p50, p90, stdev, n, ci95) as Summary, ``n`` an int again."""
    return [
        Summary(mean, p50, p90, stdev, int(n), ci95)
        for mean, p50, p90, stdev, n, ci95 in rows.tolist()
    ]


def summary_rows(samples: list[np.ndarray]) -> np.ndarray:
    """``Summary.of`` of each sample as a row of NodeTable.summaries (mean, p50, p90, stdev, n,
    ci95), the same floats, computed for all samples of one length at once: one row each in one
    array, numpy's mean, percentiles and deviation along the rows (each row reduced as the sample
    alone is: the same pairwise sums, the same interpolation). Six summaries a node at 166 us each
    were most of the merge's arithmetic (1 ms a node)."""
    out = np.empty((len(samples), len(ROW)))
    by_length: dict[int, list[int]] = {}
    for i, values in enumerate(samples):
        by_length.setdefault(len(values), []).append(i)
    for n, at in by_length.items():
        if n == 0:
            empty = Summary.of(EMPTY_F64)
            out[at] = [getattr(empty, k) for k in ROW]
            continue
        rows = np.array([samples[i] for i in at], np.float64).reshape(len(at), n)
        stdev = rows.std(axis=1, ddof=1) if n > 1 else np.zeros(len(at))
        # (half * sd) / sqrt(n) elementwise: the same IEEE operations as Summary.of's, in its order
        ci95 = t95(n - 1) * stdev / math.sqrt(n) if n > 1 else math.inf
        out[at] = np.column_stack(
            (
                rows.mean(axis=1),
                np.percentile(rows, 50, axis=1),
                np.percentile(rows, 90, axis=1),
                stdev,
                np.full(len(at), float(n)),
                np.broadcast_to(ci95, len(at)),
            )
        )
    return out
