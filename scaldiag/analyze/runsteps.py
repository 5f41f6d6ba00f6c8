"""Every recorded step, classified: steady, warm-up, compilation, profiler window.

A step's *period* runs from its begin to the next step's begin; the step
that ends an epoch runs to the epoch's synchronisation point (Keras reads
the metrics there, so the device has finished). On asynchronous backends
the host runs ahead of the device inside an epoch and waits at its end:
counting that last step, wait included, is what makes the mean period
agree with a stopwatch around whole epochs. A step is one batch: with
``steps_per_execution=K`` one recorded execution of k <= K batches is k
steps of period / k each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A step after warm-up more than this many times the median is compilation or
# retracing (new shapes, a new tf.function trace), not steady state. Steady
# steps on these machines vary by well under 2x; a compile costs 10-1000x.
COMPILE_FACTOR = 3.0

STEADY, WARMUP, COMPILE, TRACED = "steady", "warm-up", "compile or retrace", "profiler window"


@dataclass(frozen=True)
class Period:
    step: int         # the recorder's step (one call of the train function)
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


def periods(steps: list[dict], training: dict) -> list[Period]:
    """One period per recorded step, in order, each with its kind."""
    warmup = int(training.get("warmup_steps") or 0)
    per_execution = int(training.get("steps_per_execution") or 1)
    per_epoch = training.get("steps_per_epoch")
    out, first_batch = [], 0
    for i, row in enumerate(steps):
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        continues = nxt is not None and nxt["step"] == row["step"] + 1 and nxt.get("epoch") == row.get("epoch")
        end = nxt["begin_ns"] if continues else row["end_ns"]
        batches = _batches(row, nxt if continues else None, per_execution, per_epoch)
        traced = bool(row.get("traced")) and (not continues or bool(nxt.get("traced")))
        # Profiler start and stop land in the periods next to the window: those are not steady either.
        near_window = bool(row.get("traced")) or (continues and bool(nxt.get("traced")))
        kind = WARMUP if row["step"] < warmup else TRACED if near_window else STEADY
        out.append(Period(row["step"], first_batch, batches, row["begin_ns"], max(end, row["begin_ns"]),
                          not continues, traced, kind))
        first_batch += batches
    return _mark_compiles(out)


def _batches(row: dict, nxt: dict | None, per_execution: int, per_epoch: int | None) -> int:
    """Batches this step ran: from the batch index Keras gives each call, else steps_per_execution."""
    if "batch" not in row:
        return per_execution
    following = nxt.get("batch") if nxt is not None else per_epoch
    if following is None:
        return per_execution
    return max(1, min(per_execution, int(following) - int(row["batch"])))


def _mark_compiles(found: list[Period]) -> list[Period]:
    """Steps far slower than the steady median are compilation or retracing.

    The step that ends an epoch is not judged this way: it holds the device
    finishing the work the host queued ahead, which can be many steps' worth.
    """
    inner = [p.ns_per_batch for p in found if p.kind == STEADY and not p.ends_epoch]
    if not inner:
        return found
    limit = COMPILE_FACTOR * float(np.median(inner))
    return [Period(**{**p.__dict__, "kind": COMPILE}) if p.kind == STEADY and not p.ends_epoch
            and p.ns_per_batch > limit else p for p in found]
