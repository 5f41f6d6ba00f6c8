"""A job over several machines: every node's ranks on one clock, reduced per node.

Each node's run directory holds its ranks' traces, each on its node's clock.
Per rank, the trace gives its steps, its collectives and its input:

- PyTorch (Kineto): steps are ``ProfilerStep#N`` (numbered by the capture the
  same way on every rank); collectives the process group's work
  (``gloo:all_reduce``... on host threads, ``nccl`` kernels on devices),
  handed over by c10d's ``c10d::allreduce_``; input the DataLoader's fetches.
- TensorFlow (XPlane, e.g. ``MultiWorkerMirroredStrategy``): steps as the
  trace analysis finds them (``analyze/trace_steps.py``: scaldiag's own ``train``
  markers with their ``step_num``, else the train function's calls numbered
  in order); collectives TF's collective ops (``scope/name:CollectiveReduceV2``
  on the collective executor's ``collective_ops`` threads), handed over by
  ``CollectiveOpV2Kernel::Run`` on the executor's thread; input the step's
  waits for its next batch (tf.data's get_next threads, ``IteratorGetNext``).
  XPlane stores times from the profiler session's start: the session's start
  (``profile_start_time``) is added back, so the rank is on its machine's clock.
- JAX (XPlane, ``jax.distributed.initialize``): steps as TF's; collectives XLA's thunks on its CPU
  threads, named by their HLO instruction (``all-reduce.7``), each from when the rank reaches it (no
  separate hand-over) to its end; input scaldiag's ``scaldiag_input`` annotations of Python batches;
  the session's start added back as TF's.

Collectives are matched across ranks by step number and order within the
step, never by time, so a clock off by a whole step still pairs the right ones.

- Clock: an all-reduce ends on every rank at nearly the same instant (no rank
  finishes before the last one's data arrived), so each node's offset against
  node 0 is the centre of the matched ends' differences (the median of their
  tightest half: ``clock_skew.densest``).
- Arrival: where a rank starts a collective against the others (after the
  clocks are aligned). A node whose ranks start late at the collectives makes
  every other rank wait that long: ``lateness_ms`` per step, signed (early is
  negative), so jitter averages out instead of counting as lateness; over the
  step's collectives weighted by how far apart their ranks arrived, so that a
  step that waits once (TF) reads that wait, and one whose collectives all
  carry it (DDP's buckets) reads their mean.
- Link: what a collective takes after its last rank arrived (handed it to
  the backend) is the transfer and the reduction, not a wait for a peer:
  ``link_ms`` per step. What no rank's work hides is ``exposed_ms``: from the
  last hand-over of the step (the last rank's backward done) to the end of the
  rank's last collective; the optimizer waits for it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from scaldiag.analyze import categories, intervals
from scaldiag.analyze.clock_skew import densest
from scaldiag.analyze.stats import Summary, t95
from scaldiag.analyze.trace_steps import find_steps
from scaldiag.trace import Line, Plane, Trace

STEP = re.compile(r"^ProfilerStep(#\d+)?$")
# The process group's work (c10d's record_function of the backend, e.g. gloo:all_reduce), not
# c10d::allreduce_, which only enqueues it; on a GPU, NCCL's kernels.
HOST_COLLECTIVE = re.compile(r"^(gloo|mpi|ucc|xccl):\w")
# The hand-over of a collective: c10d's op on the calling thread (to the backend); TF's kernel on
# the executor's thread, which passes it to the collective executor's threads
# (tensorflow/core/kernels/collective_ops.cc traces it as "CollectiveOpV2Kernel::Run").
ENQUEUE = re.compile(r"^c10d::\w+_$|^CollectiveOpV\d+Kernel::Run$")
DEVICE_COLLECTIVE = re.compile(r"^nccl", re.I)
INPUT = re.compile(r"^scaldiag_input$|^enumerate\(DataLoader\)")
# TF's collective ops that exchange data, as the executor names op events ("scope/name:Type"), on
# the collective executor's threads: from the work's start there to the reduction's end.
# (CollectiveAssignGroupV2 and CollectiveInitializeCommunicator set a group up and exchange nothing
# a step.)
TF_COLLECTIVE = re.compile(
    r":Collective(Reduce|Gather|BcastSend|BcastRecv|AllToAll|ReduceScatter)(V\d+)?$"
)
# JAX's (XLA's) collectives on CPU: each HLO instruction runs as a thunk on XLA's threads (the CPU
# client's, ``tf_XLAPjRtCpuClient/*``, or its Eigen pool's, ``tf_XLAEigen/*``, on larger steps),
# traced by its instruction name (``all-reduce.7``), from when the rank reaches it to its end (a
# zero-length ``end: all-reduce.7`` marks the end; it is not matched). No separate hand-over: the
# thunk's start is the rank's arrival. On GPUs they are NCCL's kernels on the device planes. Matched
# by name on any host thread.
XLA_COLLECTIVE = re.compile(
    r"^(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast)"
    r"(\.\d+)?$"
)
# TF's and JAX's collectives on host threads (a trace holds one framework's: one pattern over both).
HOST_FRAMEWORK_COLLECTIVE = re.compile(f"{TF_COLLECTIVE.pattern}|{XLA_COLLECTIVE.pattern}")
# The profiler session's start in the machine's clock (ns), a stat of XPlane's "Task Environment"
# plane (TF and JAX write it): XPlane events are stored from it.
SESSION_START = "profile_start_time"


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


@dataclass(frozen=True)
class PackedRank:
    """One rank's evidence as the merge reads it, in one int64 array: a job holds every rank's until
    they are merged, so one array a rank, not ten arrays, a list of key tuples and an interval set
    (``RankEvents``: about 2.7 KB a rank of the grown 5-step job, against about 0.5 KB here).

    ``data`` holds, one column after the other: the steps' numbers, starts and ends (``steps``
    each), the collectives' step numbers, k, arrivals and ends (``collectives`` each; a collective
    without a key has step -1, as one before the first step), the input's starts and ends
    (``inputs`` each)."""

    node: str
    rank: str
    steps: int
    collectives: int
    inputs: int
    data: np.ndarray
    steps_numbered_by: str | None = None


def pack(r: RankEvents) -> PackedRank:
    """The rank's evidence in one array (PackedRank): what the merge reads of it, nothing else."""
    arrive_ns, end_ns = np.asarray(r.arrive_ns, np.int64), np.asarray(r.coll_end_ns, np.int64)
    n = min(len(arrive_ns), len(end_ns))
    key = np.full((2, n), -1, np.int64)
    keyed = min(n, len(r.coll_key))
    if keyed:
        key[:, :keyed] = np.array(r.coll_key[:keyed], np.int64).reshape(-1, 2).T
    columns = [r.step_num, r.step_start_ns, r.step_end_ns, key[0], key[1], arrive_ns[:n]]
    columns += [end_ns[:n], r.input[0], r.input[1]]
    data = np.concatenate([np.asarray(c, np.int64) for c in columns])
    return PackedRank(
        r.node, r.rank, len(r.step_num), n, len(r.input[0]), data, r.steps_numbered_by
    )


@dataclass(frozen=True)
class JobEvents:
    """Every rank's evidence in flat int64 columns, the ranks one after another: each ``*_at``
    holds where each rank's rows begin, then the end (rank i's steps are
    ``step_at[i]:step_at[i + 1]``). Per rank only its node's index and its name are more; node
    and rank names are held once for the job."""

    nodes: list[str]  # in the order of their first rank
    node_of: np.ndarray  # (ranks,): the index of each rank's node in ``nodes``
    ranks: list[str]
    numbered_by: dict[int, str]  # rank index: how its steps were numbered, where not by markers
    step_at: np.ndarray
    step_num: np.ndarray
    step_start_ns: np.ndarray
    step_end_ns: np.ndarray
    coll_at: np.ndarray
    coll_step: np.ndarray  # -1: not in a numbered step (never matched)
    coll_k: np.ndarray  # k-th collective of its step
    arrive_ns: np.ndarray
    end_ns: np.ndarray
    input_at: np.ndarray
    input_start_ns: np.ndarray
    input_end_ns: np.ndarray

    @classmethod
    def of(cls, ranks: list[RankEvents | PackedRank]) -> JobEvents:
        packed = [r if isinstance(r, PackedRank) else pack(r) for r in ranks]
        node_ids: dict[str, int] = {}
        node_of = np.array([node_ids.setdefault(p.node, len(node_ids)) for p in packed], np.int64)
        steps, colls, inputs = (
            np.array([getattr(p, k) for p in packed], np.int64).reshape(-1)
            for k in ("steps", "collectives", "inputs")
        )
        flat = np.concatenate([p.data for p in packed]) if packed else _EMPTY_I64
        base = np.concatenate(([0], np.cumsum(3 * steps + 4 * colls + 2 * inputs)))[:-1]

        def column(first: np.ndarray, counts: np.ndarray) -> np.ndarray:
            return _gather(flat, base + first, counts)

        s, c = 3 * steps, 3 * steps + 4 * colls
        return cls(
            list(node_ids),
            node_of,
            [p.rank for p in packed],
            {i: p.steps_numbered_by for i, p in enumerate(packed) if p.steps_numbered_by},
            _bounds(steps),
            column(0 * steps, steps),
            column(steps, steps),
            column(2 * steps, steps),
            _bounds(colls),
            column(s, colls),
            column(s + colls, colls),
            column(s + 2 * colls, colls),
            column(s + 3 * colls, colls),
            _bounds(inputs),
            column(c, inputs),
            column(c + inputs, inputs),
        )

    def shifted(self, shift_of_node_ns: np.ndarray) -> JobEvents:
        """Every rank's times less its node's shift (its clock minus node 0's)."""
        if not shift_of_node_ns.any():
            return self
        per_rank = shift_of_node_ns[self.node_of]

        def moved(at: np.ndarray, values: np.ndarray) -> np.ndarray:
            return values - np.repeat(per_rank, np.diff(at))

        return replace(
            self,
            step_start_ns=moved(self.step_at, self.step_start_ns),
            step_end_ns=moved(self.step_at, self.step_end_ns),
            arrive_ns=moved(self.coll_at, self.arrive_ns),
            end_ns=moved(self.coll_at, self.end_ns),
            input_start_ns=moved(self.input_at, self.input_start_ns),
            input_end_ns=moved(self.input_at, self.input_end_ns),
        )

    def steps_of(self, i: int) -> slice:
        return slice(int(self.step_at[i]), int(self.step_at[i + 1]))

    def colls_of(self, i: int) -> slice:
        return slice(int(self.coll_at[i]), int(self.coll_at[i + 1]))

    def input_of(self, i: int) -> intervals.IntervalSet:
        at = slice(int(self.input_at[i]), int(self.input_at[i + 1]))
        return self.input_start_ns[at], self.input_end_ns[at]

    def keys_of(self, i: int) -> list[tuple[int, int]]:
        at = self.colls_of(i)
        return list(zip(self.coll_step[at].tolist(), self.coll_k[at].tolist()))


def _bounds(counts: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


def _gather(flat: np.ndarray, first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """One column of every rank: rank r's ``counts[r]`` values of ``flat`` from ``first[r]`` on."""
    at = _bounds(counts)
    return flat[np.arange(at[-1]) + np.repeat(first - at[:-1], counts)]


@dataclass(frozen=True)
class NodeOffset:
    node: str
    offset_ns: int | None  # this node's clock minus node 0's; None: not estimated
    spread_ns: int | None  # median absolute deviation of the matched ends' differences
    collectives: int


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
_ROW = ("mean", "p50", "p90", "stdev", "n", "ci95")


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
    summaries: np.ndarray  # (nodes, len(MEASURED), len(_ROW)) float64
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
    offsets: list[NodeOffset]
    matched_collectives: int
    notes: list[str] = field(default_factory=list)
    ranks_per_node: int = 1
    # Every node on one kernel in one network namespace (shared_network_stack): no network between
    # them.
    one_network_stack: bool = False


class MergeRefused(ValueError):
    """The nodes' clocks cannot be put on one: merging would let the clocks decide the verdict."""


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
    cs, ce = _collectives(planes)
    arrive = _arrivals_of(planes, cs)
    keys = _keys(cs if arrive is None else arrive, starts, nums)
    names = _plane_of(planes, step_line).event_names
    input_sel = _match(step_line, names, INPUT)
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
    steps = find_steps(Trace(planes, []))
    if steps.method == "none" or not steps.count:
        return None
    by_order = steps.numbers is None or len(steps.numbers) != steps.count
    nums = np.arange(steps.count, dtype=np.int64) if by_order else steps.numbers.astype(np.int64)
    cs, ce = _collectives(planes)
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
    return found.shifted(
        -_session_start_ns(planes)
    )  # from the session's start to the machine's clock


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
            sel = np.ones(len(line), bool) if default == "input" else _selected(line, by_name)
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
        line.start_ns[_selected(line, flags)]
        for p in planes
        if not p.is_device
        for flags in [_flags(p.event_names, ENQUEUE)]
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


def _plane_of(planes: list[Plane], line: Line) -> Plane:
    return next(p for p in planes if any(x is line for x in p.lines))


def _match(line: Line, names: list[str], pattern: re.Pattern) -> np.ndarray:
    return _selected(line, _flags(names, pattern))


# Whether each pattern finds a name, remembered by the pattern's text: the ranks of a job name the
# same ops, so each distinct name is searched once, not once a rank. Bounded, in names and so in
# memory (names are the trace's to choose; an XPlane plane can hold 100,000): a plane of more names
# is searched without them.
_FOUND: dict[str, dict[str, bool]] = {}
_REMEMBERED_NAMES = 2048


def _flags(names: list[str], pattern: re.Pattern) -> np.ndarray:
    """One flag per event name, whether ``pattern`` finds it, and a last False for ids out of range:
    a plane's names are judged once, not once for each of its lines (600 searches a rank were a
    third of its evidence)."""
    if len(names) > _REMEMBERED_NAMES:
        return np.array([pattern.search(n) is not None for n in names] + [False])
    found = _FOUND.setdefault(pattern.pattern, {})
    try:  # the usual rank: every name judged already, looked up by map in C (a loop was 40 us)
        flags = list(map(found.__getitem__, names))
    except KeyError:
        if len(found) + len(names) > _REMEMBERED_NAMES:
            found.clear()
        for name in names:
            if name not in found:
                found[name] = pattern.search(name) is not None
        flags = list(map(found.__getitem__, names))
    flags.append(False)
    return np.array(flags)


def _selected(line: Line, wanted: np.ndarray) -> np.ndarray:
    """The line's events whose name is wanted (``wanted``: ``_flags``' one flag per event name and
    the last False); an id out of range is not."""
    n = len(wanted) - 1
    ids = line.name_id.astype(np.int64)
    return wanted[np.where((ids >= 0) & (ids < n), ids, n)]  # (np.clip took 15 us a line)


def _step_line(planes: list[Plane]):
    """The host thread holding the ProfilerStep markers, its selection, their step numbers (the
    reader
    keeps ``#N`` as the ``step_num`` stat; a name that still holds it is read too)."""
    for plane in planes:
        if plane.is_device:
            continue
        is_step = _flags(plane.event_names, STEP)  # (anchored: search is match)
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


def _collectives(planes: list[Plane]) -> tuple[np.ndarray, np.ndarray]:
    starts, ends = [], []
    # A TF or JAX collective whose work runs on a GPU (NCCL) is there as its kernels; its host op is
    # the launch.
    device_flags = {id(p): _flags(p.event_names, DEVICE_COLLECTIVE) for p in planes if p.is_device}
    on_device = any(
        _selected(line, device_flags[id(p)]).any()
        for p in planes
        if p.is_device
        for line in p.lines
        if len(line)
    )
    for plane in planes:
        if plane.is_device:
            wanted = device_flags[id(plane)]
        else:
            wanted = _flags(plane.event_names, HOST_COLLECTIVE)
            if not on_device:
                wanted = wanted | _flags(plane.event_names, HOST_FRAMEWORK_COLLECTIVE)
        for line in plane.lines:
            if len(line):
                sel = _selected(line, wanted)
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
        if not len(a):
            gap = _first_common_step_gap(job, ref, other)
            if gap is None or abs(gap) > step_ns:
                raise MergeRefused(
                    f"{node}'s clock cannot be aligned with {nodes[0]}'s: no collective ends on"
                    " both to align on, "
                    + (
                        "and no step was traced on both"
                        if gap is None
                        else (
                            f"and the same step starts {abs(gap) / 1e6:.1f} ms apart, more than a"
                            f" step ({step_ns / 1e6:.1f} ms)"
                        )
                    )
                    + ": merging them would decide the verdict by the clocks"
                )
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


def reduce_job(
    job: JobEvents,
    offsets: list[NodeOffset],
    bytes_per_step: dict[str, int | None],
    notes: list[str] | None = None,
    steady_ms: dict[str, Summary | None] | None = None,
    intra_node_ms: dict[str, Summary | None] | None = None,
) -> JobAnalysis:
    """Per node: steps, input, collectives, the link's time, lateness at the collectives (ranks
    aligned); ``steady_ms`` and ``intra_node_ms``: each node's figures from its record, by name.

    Linear in ranks x collectives: every rank's arrival at every collective matched on every rank is
    one table (``_arrivals``), each collective's last and first arrival and their sum computed once,
    and each rank's figures from them (``_per_rank``)."""
    arrivals = _arrivals(job)
    figures, matched = _per_rank(job, arrivals), arrivals.count
    del arrivals  # its columns (a few a matched collective of each rank) not held to the end
    by_node = np.argsort(job.node_of, kind="stable")  # each node's ranks in the job's order
    node_at = np.searchsorted(job.node_of[by_node], np.arange(len(job.nodes) + 1))
    nnodes = len(job.nodes)
    summaries = np.empty((nnodes, len(MEASURED), len(_ROW)))
    last_pct = np.empty(nnodes)
    # A chunk of nodes at a time: their samples summarised together (summary_rows), then let go.
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


# Nodes whose per-step samples are held at once, summarised together: large enough that numpy's
# calls are shared by hundreds of rows, small enough that the samples of a 4,096-node job (six
# arrays a node) are not all held beside their summaries.
SUMMARY_CHUNK_NODES = 256


def shared_network_stack(nodes: list[dict | None]) -> str | None:
    """The note that every node ran on one kernel in one network namespace, where each node's record
    (run.json's ``node``) says which: their collectives cross that kernel's loopback, no network.
    None where any node differs or does not say (a record made before scaldiag wrote them, a kernel
    other than Linux).
    """
    said = {
        (n.get("boot_id"), n.get("net_ns")) if isinstance(n, dict) else (None, None) for n in nodes
    }
    if len(said) != 1:
        return None
    boot_id, net_ns = next(iter(said))
    if not (isinstance(boot_id, str) and boot_id and isinstance(net_ns, str) and net_ns):
        return None
    return (
        f"every node ran on one machine (kernel boot id {boot_id[:8]}...) in one network namespace"
        f" ({net_ns}): their all-reduce crosses no network, so the network between nodes (SD209) is"
        " not judged"
    )


@dataclass(frozen=True)
class _Cells:
    """Every rank's own collectives that were matched on every rank, in rank order and, within a
    rank, in
    the rank's own order: its index in the job (``rank``), the collective's column of the table, the
    rank's own arrival and end."""

    rank: np.ndarray
    col: np.ndarray
    arrive_ns: np.ndarray
    end_ns: np.ndarray


@dataclass(frozen=True)
class _Table:
    """The arrivals at the collectives matched on every rank: one row a rank name (a later rank of
    the
    same name replaces an earlier one's arrival), one column a collective; per column its step, its
    last and first arrival and the sum of its arrivals' distances from the first (integer ns: the
    mean of the others is exact)."""

    count: int  # collectives matched on every rank (columns)
    names: int  # rank names (rows)
    at_ns: np.ndarray  # (names, count): each name's arrival
    step: np.ndarray  # (count,)
    last_ns: np.ndarray
    first_ns: np.ndarray
    above_first_ns: np.ndarray  # sum over the names of (arrival - first arrival)
    cells: _Cells
    name_of_cell: np.ndarray  # each cell's row


_EMPTY_I64 = np.empty(0, np.int64)


def _arrivals(job: JobEvents) -> _Table:
    """The table of every rank's arrival at each collective matched on every rank (steps numbered >=
    0)."""
    name_ids: dict[str, int] = {}
    name_of_rank = np.array([name_ids.setdefault(r, len(name_ids)) for r in job.ranks], np.int64)
    rank_of = np.repeat(np.arange(len(job.ranks), dtype=np.int64), np.diff(job.coll_at))
    name_of = name_of_rank.reshape(-1)[rank_of]
    steps, ks, arrive, end = job.coll_step, job.coll_k, job.arrive_ns, job.end_ns
    numbered = steps >= 0
    rank_of, name_of, steps, ks, arrive, end = (
        _kept(a, numbered) for a in (rank_of, name_of, steps, ks, arrive, end)
    )
    names = len(name_ids)
    if len(steps):
        keys, key_of = np.unique(np.stack([steps, ks]), axis=1, return_inverse=True)
        key_of = key_of.reshape(-1)
    else:
        keys, key_of = np.empty((2, 0), np.int64), _EMPTY_I64
    # Each (name, collective) once: its last rank's arrival (as a dict filled in rank order keeps).
    cell = name_of * max(1, keys.shape[1]) + key_of
    last_of_cell = len(cell) - 1 - np.unique(cell[::-1], return_index=True)[1]
    named = np.zeros(len(cell), bool)
    named[last_of_cell] = True
    on_every = np.bincount(key_of[named], minlength=keys.shape[1]) == names
    col_of_key = np.cumsum(on_every) - 1
    count = int(on_every.sum())
    at = np.zeros((names, count), np.int64)
    keep = named & on_every[key_of]
    at[name_of[keep], col_of_key[key_of[keep]]] = arrive[keep]
    matched = on_every[key_of]
    cells = _Cells(
        _kept(rank_of, matched),
        col_of_key[_kept(key_of, matched)],
        _kept(arrive, matched),
        _kept(end, matched),
    )
    first = at.min(axis=0) if names else _EMPTY_I64
    return _Table(
        count,
        names,
        at,
        keys[0][on_every],
        at.max(axis=0) if names else _EMPTY_I64,
        first,
        (at - first).sum(axis=0) if names else _EMPTY_I64,
        cells,
        _kept(name_of, matched),
    )


def _kept(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``values[keep]``, without its copy where ``keep`` keeps every row (the usual job: every
    collective numbered and matched on every rank): a copy is a column a cell."""
    return values if keep.all() else values[keep]


@dataclass(frozen=True)
class _Figures:
    """Every rank's figures at the matched collectives, in flat arrays (no object a rank): per cell
    (``_Cells``) when its collective ran after its last arrival; per group (a rank's step) its tail
    after the step's last hand-over and its lateness; per rank at how many collectives it arrived
    last and at how many it was compared. ``cell_at``, ``group_at``: where each rank's begin."""

    after_start_ns: np.ndarray
    end_ns: np.ndarray  # per cell: the rank's own end of the collective
    cell_at: np.ndarray
    tails_ms: np.ndarray
    late_ms: np.ndarray | None  # None: fewer than two rank names, no lateness
    group_at: np.ndarray
    last: np.ndarray
    n: np.ndarray


def _per_rank(job: JobEvents, t: _Table) -> _Figures:
    c = t.cells
    n_ranks = len(job.ranks)
    after_start = np.maximum(c.arrive_ns, t.last_ns[c.col]) if len(c.col) else _EMPTY_I64
    # Groups: a rank's cells of one step, by rank then step, each in the rank's own order (a stable
    # sort).
    step = t.step[c.col] if len(c.col) else _EMPTY_I64
    order = np.lexsort((step, c.rank))
    g_rank, g_step = c.rank[order], step[order]
    new = np.ones(len(order), bool)
    new[1:] = (g_rank[1:] != g_rank[:-1]) | (g_step[1:] != g_step[:-1])
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    ranks = np.arange(n_ranks + 1)
    group_at = np.searchsorted(g_rank[starts], ranks)
    tails = _tails_ms(t, g_step, c.end_ns[order], starts)
    # Let go before the lateness makes its own columns a cell: there the arithmetic peaks
    del step, g_rank, g_step, new
    late, last, n = _lateness(t, order, group, starts, n_ranks)
    return _Figures(
        after_start,
        c.end_ns,
        np.searchsorted(c.rank, ranks),
        tails,
        late,
        group_at,
        last,
        n,
    )


@dataclass(frozen=True)
class _NodeSamples:
    """A node's per-step values, its ranks' together, in NodeSummary's order (step, input,
    collective, link, exposed, lateness; ms), and at how many collectives its ranks arrived last
    of how many compared."""

    ranks: list[int]
    values: list[np.ndarray]
    last: int
    total: int


def _node_samples(job: JobEvents, ranks: list[int], f: _Figures) -> _NodeSamples:
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
        late.append(f.late_ms[groups] if f.late_ms is not None else _EMPTY_F64)
        last, total = last + int(f.last[i]), total + int(f.n[i])
    values = [_joined_f64(v) for v in (step, inp, coll, link, exposed, late)]
    return _NodeSamples(ranks, values, last, total)


_EMPTY_F64 = np.empty(0, np.float64)


def _joined_f64(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.float64, copy=False) if parts else _EMPTY_F64


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
    out = np.empty((len(samples), len(_ROW)))
    by_length: dict[int, list[int]] = {}
    for i, values in enumerate(samples):
        by_length.setdefault(len(values), []).append(i)
    for n, at in by_length.items():
        if n == 0:
            empty = Summary.of(_EMPTY_F64)
            out[at] = [getattr(empty, k) for k in _ROW]
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


def _tails_ms(t: _Table, g_step: np.ndarray, g_end: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per group (a rank's step): from the last hand-over of any rank at the step's collectives (the
    last
    backward done) to the end of this rank's last collective of the step. Before it some rank still
    computes; after it none can (the optimizer waits for every bucket): the collectives' time
    nobody's work hides."""
    if not len(starts):
        return np.empty(0)
    steps, step_of_col = np.unique(t.step, return_inverse=True)
    last_arrival = np.full(len(steps), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(last_arrival, step_of_col.reshape(-1), t.last_ns)
    last_end = np.maximum.reduceat(g_end, starts)
    return np.maximum(0, last_end - last_arrival[np.searchsorted(steps, g_step[starts])]) / 1e6


def _lateness(
    t: _Table, order: np.ndarray, group: np.ndarray, starts: np.ndarray, n_ranks: int
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Per group (a rank's step): this rank's arrival minus the other ranks' mean arrival (ms), over
    the
    step's collectives weighted by how far apart their ranks arrived (the last arrival minus the
    first); per rank, at how many collectives it arrived last, and at how many it was compared.

    The weight puts the step's wait where it happened. DDP's buckets all carry a late rank's delay
    (equal weights: the mean); a TF step waits once, at its first all-reduce (the input's has-value
    check), and the ones after it start together (the plain mean over its four collectives read a
    quarter of the wait: 15 ms where the peer waited 60, tests/test_multinode_tf.py). Signed, so
    jitter still averages out (a collective's weight is the same whichever rank was late); a step
    whose ranks all arrived together at every collective is 0."""
    c = t.cells
    if t.names < 2 or not len(c.col):
        return None, np.zeros(n_ranks, np.int64), np.zeros(n_ranks, np.int64)
    mine = t.at_ns[t.name_of_cell, c.col]
    others = _mean_of_others_ns(t, mine, c.col)
    late_ms = (mine.astype(np.float64) - others) / 1e6
    spread = t.last_ns[c.col] - t.first_ns[c.col]
    # Summed in each rank's own order within a step (bincount adds in its input's order), as the
    # plain sum.
    weighted = np.bincount(
        group, weights=(late_ms * spread.astype(np.float64))[order], minlength=len(starts)
    )
    total = np.add.reduceat(spread[order], starts)
    late = np.where(total > 0, weighted / np.where(total > 0, total, 1).astype(np.float64), 0.0)
    last = np.bincount(c.rank[mine == t.last_ns[c.col]], minlength=n_ranks)
    return late, last, np.bincount(c.rank, minlength=n_ranks)


# Integers of this size or less are all exact as floats (2**53), with room for the rounding rule
# below.
_EXACT_BELOW = 2**53 + 4
# Beyond this an int64 sum of the arrivals' distances could overflow: the mean is taken with
# Python's ints.
_INT64_ROOM = 2**62


def _mean_of_others_ns(t: _Table, mine: np.ndarray, col: np.ndarray) -> np.ndarray:
    """Per cell: the mean arrival of the other rank names at its collective, as a float correctly
    rounded
    from the exact integer mean (the sum of the others over their count, as Python's ints divide).
    """
    d = t.names - 1
    first = t.first_ns[col]
    spread_ok = len(t.last_ns) == 0 or (
        float(t.last_ns.max()) < _INT64_ROOM
        and float(t.first_ns.min()) > -_INT64_ROOM
        and float((t.last_ns - t.first_ns).max()) * t.names < _INT64_ROOM
    )
    if not spread_ok:
        sums = [sum(v) for v in t.at_ns.T.tolist()]
        return np.array(
            [(sums[k] - m) / d for k, m in zip(col.tolist(), mine.tolist())], np.float64
        )
    rest = t.above_first_ns[col] - (mine - first)  # the others' sum, less d times the first arrival
    q, rem = np.divmod(rest, d)
    whole = first + q  # the mean is whole + rem / d, 0 <= rem < d
    out = whole.astype(np.float64)
    exact = out.astype(np.int64)
    # Past 2**53 the floats about ``whole`` are integers at least 2 apart: whole + rem / d rounds as
    # whole does, except where whole lies halfway between two of them: a fraction above it rounds
    # up.
    below = (rem > 0) & (exact < whole)
    up = np.nextafter(out[below], np.inf)
    halfway = (whole[below] - exact[below]) == (up.astype(np.int64) - whole[below])
    out[np.flatnonzero(below)[halfway]] = up[halfway]
    small = np.flatnonzero((rem > 0) & (np.abs(whole) <= _EXACT_BELOW))
    if len(small):
        out[small] = [(w * d + r) / d for w, r in zip(whole[small].tolist(), rem[small].tolist())]
    return out
