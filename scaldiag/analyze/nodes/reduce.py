"""Per node: its ranks' figures summarised (``reduce_job``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scaldiag.analyze import intervals
from scaldiag.analyze.clock_skew import Offset
from scaldiag.analyze.nodes.arrivals import arrival_table
from scaldiag.analyze.nodes.columns import JobEvents
from scaldiag.analyze.nodes.figures import RankFigures, per_rank
from scaldiag.analyze.nodes.table import (
    EMPTY_F64,
    MEASURED,
    ROW,
    JobAnalysis,
    NodeTable,
    summary_rows,
)
from scaldiag.analyze.stats import Summary

# Nodes whose per-step samples are held at once, summarised together: large enough that numpy's
# calls are shared by hundreds of rows, small enough that the samples of a 4,096-node job (six
# arrays a node) are not all held beside their summaries.
SUMMARY_CHUNK_NODES = 256


def reduce_job(
    job: JobEvents,
    offsets: list[Offset],
    bytes_per_step: dict[str, int | None],
    notes: list[str] | None = None,
    steady_ms: dict[str, Summary | None] | None = None,
    intra_node_ms: dict[str, Summary | None] | None = None,
) -> JobAnalysis:
    """Per node: steps, input, collectives, the link's time, lateness at the collectives (ranks
    aligned); ``steady_ms`` and ``intra_node_ms``: each node's figures from its record, by name.

    Linear in ranks x collectives: every rank's arrival at every collective matched on every rank
    is one table (``arrival_table``), each collective's last and first arrival and their sum
    computed once, and each rank's figures from them (``per_rank``)."""
    arrivals = arrival_table(job)
    figures, matched = per_rank(job, arrivals), arrivals.count
    del arrivals  # its columns (a few a matched collective of each rank) not held to the end
    by_node = np.argsort(job.node_of, kind="stable")  # each node's ranks in the job's order
    node_at = np.searchsorted(job.node_of[by_node], np.arange(len(job.nodes) + 1))
    summaries, last_pct = _summarised(job, figures, by_node, node_at)
    table = NodeTable(
        list(job.nodes),
        [job.ranks[i] for i in by_node.tolist()],
        node_at.astype(np.int64),
        summaries,
        last_pct,
        bytes_per_step,
        steady_ms or {},
        intra_node_ms or {},
    )
    per_node = max(1, int(np.diff(node_at).max()))
    return JobAnalysis(table, offsets, matched, list(notes or []), ranks_per_node=per_node)


def _summarised(job: JobEvents, figures: RankFigures, by_node: np.ndarray, node_at: np.ndarray):
    """Each node's six measured Summary as rows of numbers, and at what share of the collectives
    it arrived last: a chunk of nodes at a time, their samples summarised together
    (summary_rows), then let go."""
    nnodes = len(job.nodes)
    summaries = np.empty((nnodes, len(MEASURED), len(ROW)))
    last_pct = np.empty(nnodes)
    for first in range(0, nnodes, SUMMARY_CHUNK_NODES):
        chunk = range(first, min(first + SUMMARY_CHUNK_NODES, nnodes))
        samples = [
            _node_samples(job, by_node[node_at[k] : node_at[k + 1]].tolist(), figures)
            for k in chunk
        ]
        rows = summary_rows([values for node in samples for values in node.values])
        summaries[chunk.start : chunk.stop] = rows.reshape(len(chunk), len(MEASURED), -1)
        last_pct[chunk.start : chunk.stop] = [
            100.0 * found.last / found.total if found.total else math.nan for found in samples
        ]
    return summaries, last_pct


@dataclass(frozen=True)
class _NodeSamples:
    """A node's per-step values, its ranks' together, in NodeSummary's order (step, input,
    collective, link, exposed, lateness; ms), and at how many collectives its ranks arrived last
    of how many compared."""

    ranks: list[int]
    values: list[np.ndarray]
    last: int
    total: int


def _node_samples(job: JobEvents, ranks: list[int], f: RankFigures) -> _NodeSamples:
    """Node's per-step values from its ranks' (``ranks``: their indices in the job)."""
    step, inp, coll, link, exposed, late = [], [], [], [], [], []
    last = total = 0
    for i in ranks:
        w0, w1 = job.step_start_ns[job.steps_of(i)], job.step_end_ns[job.steps_of(i)]
        step.append((w1 - w0) / 1e6)
        inp.append(intervals.measure_in_windows(job.input_of(i), w0, w1) / 1e6)
        own = intervals.union(job.arrive_ns[job.colls_of(i)], job.end_ns[job.colls_of(i)])
        coll.append(intervals.measure_in_windows(own, w0, w1) / 1e6)
        cells = slice(int(f.cell_at[i]), int(f.cell_at[i + 1]))
        after_last = intervals.union(f.after_start_ns[cells], f.end_ns[cells])
        link.append(intervals.measure_in_windows(after_last, w0, w1) / 1e6)
        groups = slice(int(f.group_at[i]), int(f.group_at[i + 1]))
        exposed.append(f.tails_ms[groups])
        late.append(f.late_ms[groups] if f.late_ms is not None else EMPTY_F64)
        last, total = last + int(f.last[i]), total + int(f.n[i])
    values = [_joined_f64(v) for v in (step, inp, coll, link, exposed, late)]
    return _NodeSamples(ranks, values, last, total)


def _joined_f64(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.float64, copy=False) if parts else EMPTY_F64
