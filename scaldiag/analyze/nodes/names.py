"""The names a rank's evidence is found by: steps, collectives, their hand-overs, input; and
whether a plane's names match one, judged once a name."""

from __future__ import annotations

import re

import numpy as np

from scaldiag.trace import Line, Plane

STEP = re.compile(r"^ProfilerStep(#\d+)?$")
# The process group's work (c10d's record_function of the backend, e.g. gloo:all_reduce), not
# c10d::allreduce_, which only enqueues it. (A device's collective kernels are
# analyze/categories.py's: evidence.collectives.)
HOST_COLLECTIVE = re.compile(r"^(gloo|mpi|ucc|xccl):\w")
# The hand-over of a collective: c10d's op on the calling thread (to the backend); TF's kernel on
# the executor's thread, which passes it to the collective executor's threads
# (tensorflow/core/kernels/collective_ops.cc traces it as "CollectiveOpV2Kernel::Run").
ENQUEUE = re.compile(r"^c10d::\w+_$|^CollectiveOpV\d+Kernel::Run$")
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


def plane_of(planes: list[Plane], line: Line) -> Plane:
    return next(p for p in planes if any(x is line for x in p.lines))


def match(line: Line, names: list[str], pattern: re.Pattern) -> np.ndarray:
    return selected(line, name_flags(names, pattern))


# Whether each pattern finds a name, remembered by the pattern's text: the ranks of a job name the
# same ops, so each distinct name is searched once, not once a rank. Bounded, in names and so in
# memory (names are the trace's to choose; an XPlane plane can hold 100,000): a plane of more names
# is searched without them.
_FOUND: dict[str, dict[str, bool]] = {}
_REMEMBERED_NAMES = 2048


def name_flags(names: list[str], pattern: re.Pattern) -> np.ndarray:
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


def selected(line: Line, wanted: np.ndarray) -> np.ndarray:
    """The line's events whose name is wanted (``wanted``: ``name_flags``' one flag per event
    name and the last False); an id out of range is not."""
    n = len(wanted) - 1
    ids = line.name_id.astype(np.int64)
    return wanted[np.where((ids >= 0) & (ids < n), ids, n)]  # (np.clip took 15 us a line)
