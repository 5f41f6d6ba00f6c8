"""A job over several machines: every node's ranks on one clock, reduced per node.

Each node's run directory holds its ranks' traces, each on its node's clock.
Per rank, the trace gives its steps, its collectives and its input:

- PyTorch (Kineto): steps are ``ProfilerStep#N`` (numbered by the capture the
  same way on every rank); collectives the process group's work
  (``gloo:all_reduce``... on host threads, collective kernels on devices),
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
  tightest half): ``clock_skew.align`` under ``ACROSS_HOSTS``' rules, the path
  ``analyze`` takes for a job's rank files under ``ONE_HOST``'s.
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

from scaldiag.analyze.nodes.clock import MergeRefused, align
from scaldiag.analyze.nodes.columns import JobEvents, PackedRank, pack
from scaldiag.analyze.nodes.evidence import RankEvents, collectives, pair_arrivals, rank_events
from scaldiag.analyze.nodes.names import (
    ENQUEUE,
    HOST_COLLECTIVE,
    INPUT,
    STEP,
    TF_COLLECTIVE,
    XLA_COLLECTIVE,
)
from scaldiag.analyze.nodes.network import shared_network_stack
from scaldiag.analyze.nodes.reduce import SUMMARY_CHUNK_NODES, reduce_job
from scaldiag.analyze.nodes.table import (
    MEASURED,
    JobAnalysis,
    NodeSummary,
    NodeTable,
    summaries_in,
    summary_rows,
)

__all__ = [
    "ENQUEUE",
    "HOST_COLLECTIVE",
    "INPUT",
    "MEASURED",
    "STEP",
    "SUMMARY_CHUNK_NODES",
    "TF_COLLECTIVE",
    "XLA_COLLECTIVE",
    "JobAnalysis",
    "JobEvents",
    "MergeRefused",
    "NodeSummary",
    "NodeTable",
    "PackedRank",
    "RankEvents",
    "align",
    "collectives",
    "pack",
    "pair_arrivals",
    "rank_events",
    "reduce_job",
    "shared_network_stack",
    "summaries_in",
    "summary_rows",
]
