"""Every recorded step, classified: steady, warm-up, compilation, profiler window.

A step's *period* runs from its begin to the next step's begin; the step
that ends an epoch runs to the epoch's synchronisation point (Keras reads
the metrics there, so the device has finished), and the step that starts
an epoch from the epoch's start (the loop makes its iterator there: the
first batch waits for it). On asynchronous backends
the host runs ahead of the device inside an epoch and waits at its end:
counting that last step, wait included, is what makes the mean period
agree with a stopwatch around whole epochs. A step is one batch: with
``steps_per_execution=K`` one recorded execution of k <= K batches is k
steps of period / k each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A step of the first epoch more than this many times the median is compilation
# or retracing (new shapes, a new tf.function trace), not steady state. Steady
# steps on these machines vary by well under 2x; a compile costs 10-1000x.
# Later epochs reuse what was compiled, so a slow step there is the machine
# (another process, a page fault, GC): the user's stopwatch pays it, and so
# does the steady step time.
COMPILE_FACTOR = 3.0

STEADY, WARMUP, COMPILE, TRACED = "steady", "warm-up", "compile or retrace", "profiler window"


@dataclass(frozen=True)
class Period:
    step: int         # the recorder's step (one call of the train function)
    epoch: int
    first_batch: int  # global number of its first batch, counted over the run
    batches: int
    begin_ns: int
    end_ns: int
    ends_epoch: bool  # ends at the epoch's synchronisation point
    traced: bool      # inside the profiler window (both ends traced)
    kind: str

    @property
    def ns_per_batch(self) -> float:
        return (self.end_ns - self.begin_ns) / self.batches


def periods(steps: list[dict], training: dict, marks: list[dict] = ()) -> list[Period]:
    """One period per recorded step, in order, each with its kind.

    With the run's marks, an epoch's time runs whole through its steps: the
    first step from ``epoch_begin``, the last to the sync point, so that the
    steps of a steady epoch add up to what a stopwatch around it reads.
    """
    epoch_begins = _epoch_begins(steps, marks)
    warmup = int(training.get("warmup_steps") or 0)
    per_execution = int(training.get("steps_per_execution") or 1)
    per_epoch = training.get("steps_per_epoch")
    out, first_batch = [], 0
    for i, row in enumerate(steps):
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        continues = nxt is not None and nxt["step"] == row["step"] + 1 and nxt.get("epoch") == row.get("epoch")
        end = nxt["begin_ns"] if continues else row["end_ns"]
        begin = epoch_begins.get(i, row["begin_ns"])
        batches = _batches(row, nxt if continues else None, per_execution, per_epoch)
        traced = bool(row.get("traced")) and (not continues or bool(nxt.get("traced")))
        # Profiler start and stop land in the periods next to the window: those are not steady either.
        near_window = bool(row.get("traced")) or (continues and bool(nxt.get("traced")))
        kind = WARMUP if row["step"] < warmup else TRACED if near_window else STEADY
        out.append(Period(row["step"], int(row.get("epoch") or 0), first_batch, batches, begin, max(end, begin),
                          not continues, traced, kind))
        first_batch += batches
    return _mark_compiles(out)


def _epoch_begins(steps: list[dict], marks) -> dict[int, int]:
    """Row index of each epoch's first step -> the epoch's begin mark, where one precedes the step."""
    begins = [m["t_ns"] for m in marks if m["mark"] == "epoch_begin"]
    if not begins:
        return {}
    starts = np.array(begins, np.int64)
    found = {}
    for i, row in enumerate(steps):
        if i > 0 and steps[i - 1].get("epoch") == row.get("epoch") and steps[i - 1]["step"] + 1 == row["step"]:
            continue
        k = int(np.searchsorted(starts, row["begin_ns"], side="right")) - 1
        previous_end = steps[i - 1]["end_ns"] if i > 0 else None
        if k >= 0 and (previous_end is None or starts[k] >= previous_end):
            found[i] = int(starts[k])
    return found


def _batches(row: dict, nxt: dict | None, per_execution: int, per_epoch: int | None) -> int:
    """Batches this step ran: from the batch index Keras gives each call, else steps_per_execution."""
    if "batch" not in row:
        return per_execution
    following = nxt.get("batch") if nxt is not None else per_epoch
    if following is None:
        return per_execution
    return max(1, min(per_execution, int(following) - int(row["batch"])))


def _mark_compiles(found: list[Period]) -> list[Period]:
    """Steps of the first epoch far slower than their kind's median are compilation or retracing.

    The step that ends an epoch holds the device finishing the work the host
    queued ahead, which can be many steps' worth, so it is judged only
    against the steps that end later epochs: the first epoch's end also
    compiles the metrics' read-out once (measured: 190-330 ms on an H200
    against 2-3 ms at later epochs' ends, Keras 3.15 on JAX).
    """
    first_epoch = found[0].epoch if found else 0
    inner = [p.ns_per_batch for p in found if p.kind == STEADY and not p.ends_epoch]
    ends = [p.ns_per_batch for p in found if p.kind == STEADY and p.ends_epoch and p.epoch != first_epoch]
    inner_limit = COMPILE_FACTOR * float(np.median(inner)) if inner else None
    end_limit = COMPILE_FACTOR * float(np.median(ends)) if ends else None

    def compiles(p: Period) -> bool:
        limit = end_limit if p.ends_epoch else inner_limit
        return p.kind == STEADY and p.epoch == first_epoch and limit is not None and p.ns_per_batch > limit

    return [Period(**{**p.__dict__, "kind": COMPILE}) if compiles(p) else p for p in found]
