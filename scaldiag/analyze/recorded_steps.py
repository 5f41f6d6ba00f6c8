"""Every recorded step, classified by evidence: steady, warm-up, compilation, profiler window.

A step's *period* runs from its begin to the next step's begin; the step
that ends an epoch runs to the epoch's synchronisation point (Keras reads
the metrics there, so the device has finished). On asynchronous backends
the host runs ahead of the device inside an epoch and waits at its end:
counting that last step, wait included, is what makes the mean period agree
with a stopwatch around the epoch's steps. A step is one batch: with
``steps_per_execution=K`` one recorded execution of k <= K batches is k
steps of period / k each.

What a step was comes from the framework, never from its duration
(docs/profile.md, "The clock"):

- *warm-up*: the first ``warmup_steps`` steps of the run, by position (the
  first call compiles on every backend, and allocators and autotuners settle),
  and the first ``warmup_steps`` of each phase a new optimizer leads (PyTorch's
  ``optimizer`` marks: its state is made in its first step, a new model's
  allocations settle);
- *compile or retrace*: a step whose period holds a compile the framework
  reported (``compile`` marks: JAX's compile events, a Keras train step
  traced, torch dynamo's compiles);
- *profiler window*: traced steps, and the steps the profiler starts and
  stops in (the recorder's ``trace_start``...``trace_stopped`` marks);
- *input prefetch*: with DataLoader workers, the steps that consume the
  batches the workers could make ahead (``prefetch_factor x num_workers``,
  the ``in_flight`` of the ``input_ready`` mark) after a stretch that is not
  steady (warm-up, the profiler window, a compile): the loop then runs on a
  full buffer, not at the pipeline's rate (a 60-step run with 15 workers read
  1.7-2.0 ms a step against 7.9 ms at 400 steps, H100, 2026-12-06);
- everything else is *steady*, however slow: a spike is the user's time.

*Epoch edges* (the time from an epoch's begin to its first step, and a
step's time before an ``epoch_begin`` that falls inside it, as PyTorch's new
DataLoader iterator does) are not any step's: the accounting counts them as
epoch boundaries, and the steady clock never holds them. So is evaluation
inside a PyTorch step (``model.eval()`` to ``model.train()``, marked
``test_begin``/``test_end``): the step begins at ``test_end``; and the wait
for a new DataLoader pass's first batch from worker processes (its workers
starting: ``input_ready``): the step begins when that batch arrived.

Where the device was timed (``device_steps.jsonl``: CUDA events at each step
boundary), a step's duration is the device's; its place on the run's
timeline stays the host's.

*Phases* (PyTorch): a step is one pass of the loop, whichever optimizers it
steps. Where another optimizer takes the lead (a new phase's, a new fold's:
collect/frameworks/torch_optimizers.py, ``optimizer`` marks of role
``leads``), a phase begins; optimizers stepping in turn within a pass (a GAN's)
are named with the phase they stepped in.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

import numpy as np

STEADY, WARMUP, COMPILE, TRACED = "steady", "warm-up", "compile or retrace", "profiler window"
PREFETCHED = "input prefetch"
# Where a step's time stops being an edge: an epoch's begin, evaluation's end, and a new DataLoader
# pass's first batch from its workers (they were starting: ``input_ready``).
EDGE_MARKS = ("epoch_begin", "test_end", "input_ready")


@dataclass(frozen=True)
class Period:
    step: int  # the recorder's step (one call of the train function)
    epoch: int
    first_batch: int  # global number of its first batch, counted over the run
    batches: int
    begin_ns: int
    end_ns: int
    ends_epoch: bool  # ends at the epoch's synchronisation point
    traced: bool  # inside the profiler window (both ends traced)
    kind: str
    device_ns: int | None = None  # the device's time for this step, where the device was timed
    compiled: bool = False  # steady although it compiled: compiles recur in most steps
    phase: int = 0  # the phase it is in, from 1 (0: the record names no optimizer)

    @property
    def duration_ns(self) -> int:
        """The step's time: the device's where it was timed, else the host's period."""
        return self.device_ns if self.device_ns is not None else self.end_ns - self.begin_ns

    @property
    def ns_per_batch(self) -> float:
        return self.duration_ns / self.batches


def periods(
    steps: list[dict],
    training: dict,
    marks: list[dict] = (),
    device_ns: dict[int, int] | None = None,
) -> list[Period]:
    """One period per recorded step, in order, each with its kind.

    ``marks``: the run's marks (compile evidence, epoch begins). ``device_ns``:
    step number -> the device's time for it (record ``device_steps``).
    """
    warmup = int(training.get("warmup_steps") or 0)
    per_execution = int(training.get("steps_per_execution") or 1)
    per_epoch = training.get("steps_per_epoch")
    edges = np.array(sorted(m["t_ns"] for m in marks if m.get("mark") in EDGE_MARKS), np.int64)
    compiles = compile_spans(marks)
    profiler = _profiler_spans(marks)
    device_ns = device_ns or {}
    found_phases = phases(marks)
    phase_starts = [p.first_step for p in found_phases]
    new_phase_steps = _new_phase_warmup(found_phases, warmup)
    out, first_batch = [], 0
    for i, row in enumerate(steps):
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        continues = (
            nxt is not None
            and nxt["step"] == row["step"] + 1
            and nxt.get("epoch") == row.get("epoch")
        )
        end = max(nxt["begin_ns"] if continues else row["end_ns"], row["begin_ns"])
        begin = _after_edge(row["begin_ns"], end, edges)
        batches = _batches(row, nxt if continues else None, per_execution, per_epoch)
        traced = bool(row.get("traced")) and (not continues or bool(nxt.get("traced")))
        # Profiler start and stop land in the periods next to the window: those are not steady
        # either.
        near_window = (
            bool(row.get("traced"))
            or (continues and bool(nxt.get("traced")))
            or _overlaps(begin, end, profiler)
        )
        # a split step: host time
        device = device_ns.get(row["step"]) if begin == row["begin_ns"] else None
        warming = row["step"] < warmup or row["step"] in new_phase_steps
        kind = _kind(warming, near_window, begin, end, compiles)
        out.append(
            Period(
                row["step"],
                int(row.get("epoch") or 0),
                first_batch,
                batches,
                begin,
                end,
                not continues,
                traced,
                kind,
                device,
                phase=bisect.bisect_right(phase_starts, row["step"]),
            )
        )
        first_batch += batches
    return _prefetched(_recurring_compiles_are_steady(out), marks)


def _new_phase_warmup(found_phases: list[Phase], warmup: int) -> set[int]:
    """The warm-up steps of each new phase after the first (a new optimizer's or model's)."""
    return {
        step
        for p in found_phases[1:]
        if p.new
        for step in range(p.first_step, p.first_step + warmup)
    }


def _kind(
    warming: bool, near_window: bool, begin: int, end: int, compiles: tuple[np.ndarray, np.ndarray]
) -> str:
    """A period's kind: warm-up, then the profiler's window, then a compile; else steady."""
    return (
        WARMUP
        if warming
        else TRACED
        if near_window
        else COMPILE
        if _overlaps(begin, end, compiles)
        else STEADY
    )


def _prefetched(found: list[Period], marks) -> list[Period]:
    """The steady steps that ran on the input's buffer: after a stretch that is not the run's
    steady state (the warm-up, the profiler window, a compile), where the loop was slow and the
    workers kept making batches, the next ``in_flight`` batches (the latest ``input_ready``
    mark's) are ``PREFETCHED``. A pass's start and evaluation recur in every epoch: what follows
    them is the run's own steady state and the user's clock holds it, so it stays steady."""
    ready = sorted(
        (m["t_ns"], int(m["in_flight"]))
        for m in marks
        if m.get("mark") == "input_ready" and m.get("in_flight")
    )
    if not ready:
        return found
    out, k, in_flight, left = [], 0, 0, 0
    for p in found:
        while k < len(ready) and ready[k][0] <= p.begin_ns:
            in_flight = ready[k][1]
            k += 1
        if p.kind != STEADY:
            left = in_flight
        elif left > 0:
            left -= p.batches
            p = Period(**{**p.__dict__, "kind": PREFETCHED})
        out.append(p)
    return out


def _recurring_compiles_are_steady(found: list[Period]) -> list[Period]:
    """Compiles in most steps (a shape that changes every step, a graph break that recompiles) are
    the steady state, not its start: such steps stay in the steady clock
    (``StepStats.compiling_steady``).
    """
    compiling = sum(p.kind == COMPILE for p in found)
    if compiling <= sum(p.kind == STEADY for p in found):
        return found
    return [
        Period(**{**p.__dict__, "kind": STEADY, "compiled": True}) if p.kind == COMPILE else p
        for p in found
    ]


def compile_spans(marks) -> tuple[np.ndarray, np.ndarray]:
    """(begins, ends) of the compiles the framework reported, sorted by begin."""
    spans = sorted(
        (m["t_ns"], m["end_ns"])
        for m in marks
        if m.get("mark") == "compile"
        and isinstance(m.get("end_ns"), int)
        and not isinstance(m["end_ns"], bool)
        and m["end_ns"] >= m["t_ns"]
    )
    return np.array([s for s, _ in spans], np.int64), np.array([e for _, e in spans], np.int64)


def _profiler_spans(marks) -> tuple[np.ndarray, np.ndarray]:
    """(begins, ends) of the profiler starting and stopping (the recorder's trace marks)."""
    spans = sorted(
        mark_pairs(marks, "trace_start", "trace_started")
        + mark_pairs(marks, "trace_stop", "trace_stopped")
    )
    return np.array([s for s, _ in spans], np.int64), np.array([e for _, e in spans], np.int64)


def mark_pairs(marks, begin: str, end: str, open_end: int | None = None) -> list[tuple[int, int]]:
    """(begin, end) times of each ``begin`` mark and the ``end`` mark after it (marks in time
    order); with ``open_end``, a begin never ended is closed there (a run killed inside it)."""
    out, opened = [], None
    for m in marks:
        if m.get("mark") == begin:
            opened = m["t_ns"]
        elif m.get("mark") == end and opened is not None:
            out.append((opened, m["t_ns"]))
            opened = None
    if opened is not None and open_end is not None:
        out.append((opened, open_end))
    return out


def _overlaps(begin: int, end: int, spans: tuple[np.ndarray, np.ndarray]) -> bool:
    """Does any span overlap (begin, end)? (A compile inside the step, or one the step started
    in.)"""
    starts, ends = spans
    k = int(np.searchsorted(starts, end, side="left"))  # spans that began before the step's end
    return k > 0 and bool((ends[:k] > begin).any())


def _after_edge(begin: int, end: int, edges: np.ndarray) -> int:
    """The step's begin, moved past the last edge inside it: the time before is the epoch's edge or
    evaluation, not the step's."""
    k = int(np.searchsorted(edges, end, side="left")) - 1
    return int(edges[k]) if k >= 0 and begin < edges[k] < end else begin


def _batches(row: dict, nxt: dict | None, per_execution: int, per_epoch: int | None) -> int:
    """Batches this step ran: from the batch index Keras gives each call, else
    steps_per_execution."""
    if "batch" not in row:
        return per_execution
    following = nxt.get("batch") if nxt is not None else per_epoch
    if following is None:
        return per_execution
    return max(1, min(per_execution, int(following) - int(row["batch"])))


def device_times(rows: list[dict]) -> dict[int, int]:
    """``device_steps.jsonl`` rows ``{"step": S, "device_ms": [d0, d1, ...]}`` as step -> ns."""
    out = {}
    for row in rows:
        if not isinstance(row, dict):
            continue
        step, values = row.get("step"), row.get("device_ms")
        if not isinstance(step, int) or isinstance(step, bool) or not isinstance(values, list):
            continue
        for i, ms in enumerate(values):
            if isinstance(ms, (int, float)) and not isinstance(ms, bool) and 0 <= ms < 1e9:
                out[step + i] = int(round(ms * 1e6))
    return out


@dataclass(frozen=True)
class Phase:
    """A stretch of steps one optimizer leads (PyTorch ``optimizer`` marks of role ``leads``)."""

    number: int  # from 1, in the order they began
    first_step: int  # the recorder's step it begins with (its first pass's)
    optimizer: int  # the lead optimizer's index: 0 is the first that stepped
    kind: str  # its class: Adam, SGD...
    new: bool  # the optimizer's first steps (False: an earlier one leads again)
    new_model: bool  # it updates none of the parameters of the optimizers alive before it
    begin_ns: int
    in_turn: tuple[tuple[int, str], ...] = ()  # (index, class) of optimizers stepping in turn
    steps: int = 0  # batches recorded in it
    steady: int = 0  # ... of them steady
    steady_ms: float | None = None  # its steady steps' mean, ms a batch


def phases(marks) -> list[Phase]:
    """The phases the record names, in order; [] where it names no optimizer (not PyTorch, or a
    record from before these marks)."""
    found: list[Phase] = []
    turns, leads = [], set()
    for m in marks:
        if m.get("mark") != "optimizer" or not isinstance(m.get("step"), int):
            continue
        index, kind = int(m.get("optimizer") or 0), str(m.get("kind") or "optimizer")
        if m.get("role") == "in turn":
            turns.append((m["step"], index, kind))
        elif m.get("role") == "leads":
            leads.add((m["step"], index))
            if found and m["step"] <= found[-1].first_step:  # the same step: the later wins
                found.pop()
            found.append(
                Phase(
                    len(found) + 1,
                    int(m["step"]),
                    index,
                    kind,
                    bool(m.get("new", True)),
                    # a new model: none of the parameters of the optimizers before (a new fold's)
                    bool(found)
                    and bool(m.get("new", True))
                    and not m.get("shares_parameters_with"),
                    int(m["t_ns"]),
                )
            )
    starts = [p.first_step for p in found]
    for step, index, kind in turns:
        k = bisect.bisect_right(starts, step) - 1
        # (an optimizer seen in turn that led from the same step, in a loop with no DataLoader,
        # stepped twice in a row: it leads)
        if k >= 0 and (step, index) not in leads and found[k].optimizer != index:
            found[k] = replace(found[k], in_turn=(*found[k].in_turn, (index, kind)))
    return found


def phase_figures(found: list[Period], marks) -> list[Phase]:
    """Each phase with its recorded and steady batches and its steady steps' mean."""
    out = []
    for p in phases(marks):
        mine = [q for q in found if q.phase == p.number]
        steady = [q for q in mine if q.kind == STEADY]
        batches = sum(q.batches for q in steady)
        out.append(
            replace(
                p,
                steps=sum(q.batches for q in mine),
                steady=batches,
                steady_ms=sum(q.duration_ns for q in steady) / batches / 1e6 if batches else None,
            )
        )
    return out
