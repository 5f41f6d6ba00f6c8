"""SD201 per-replica batch shrinking: the global batch was not scaled with the GPUs.

With the global batch fixed (strong scaling), each of N replicas gets 1/N of
it: kernels get small, and per-step costs (launches, Python, all-reduce) stay
while the work per device shrinks. Keeping the per-replica batch
(global = per-replica x N) is what data parallelism is for.

Forecast (kind ``forecast``): the largest count's throughput with the smallest
run's per-replica batch, from the smallest run's measured device work at that
batch and the largest run's measured all-reduce, host and input parts
(analyze/forecast.py ``kept_batch``).
"""

from __future__ import annotations

from scaldiag.analyze.batch_memory import brief, held, room
from scaldiag.analyze.forecast import SweepForecast
from scaldiag.analyze.scaling import ScalingAnalysis, ScalingPoint
from scaldiag.rules.base import Evidence, Finding, RuleFacts, Speedup

FIX = {
    "tensorflow": (
        "Scale the global batch with the replicas:\n"
        "  global_batch = per_replica_batch * strategy.num_replicas_in_sync\n"
        "  ds = ds.batch(global_batch)\n"
        "(and the learning rate with it, e.g. linearly with warm-up)."
    ),
    "jax": (
        "Scale the global batch with the devices: global_batch = per_replica_batch *"
        " jax.device_count() (with keras.distribution.DataParallel, fit(batch_size=global_batch));"
        " scale the learning rate too."
    ),
    "pytorch": (
        "Keep each rank's batch as you add GPUs: DataLoader(ds, batch_size=per_replica_batch, "
        "sampler=DistributedSampler(ds)) gives a global batch of per_replica_batch * world_size; "
        "scale the learning rate with it (e.g. linearly with warm-up)."
    ),
}


class _PerReplicaBatch(RuleFacts):
    id = "SD201"
    title = "Per-replica batch shrinks as GPUs are added"
    category = "batch"

    def check(self, s: ScalingAnalysis) -> Finding | None:
        points = [p for p in s.points if p.per_replica_batch]
        if len(points) < 2 or points[-1].per_replica_batch >= points[0].per_replica_batch:
            return None
        first, last = points[0], points[-1]
        return self.finding(
            severity="medium",
            summary=(
                f"per-replica batch {first.per_replica_batch:g} at {first.gpus} device(s),"
                f" {last.per_replica_batch:g} at {last.gpus}: the global batch stayed"
                f" {last.global_batch}"
            ),
            evidence=[
                Evidence(f"per-replica batch at {p.gpus}", p.per_replica_batch, "samples")
                for p in points
            ],
            fix=FIX,
            forecast=forecast_speedup(s.kept_batch, first),
            notes=[] if s.kept_batch else ["no forecast: it needs both runs' traces and batches"],
        )


def forecast_speedup(f: SweepForecast | None, base: ScalingPoint | None = None) -> Speedup | None:
    """A sweep forecast as a finding's number: samples/s with the fix over samples/s measured, at
    f.gpus. ``base``: a run at another per-replica batch, whose peak memory says whether the
    forecast's batch fits: the batch it ran (SD201 keeps it), or k times it (SD203 grows it)."""
    if f is None:
        return None
    mem = base.device_memory if base is not None else None
    fits = ""
    if mem is not None and base.per_replica_batch:
        factor = f.per_replica_batch / base.per_replica_batch
        fits = (
            held(mem, base.per_replica_batch, base.gpus)
            if factor <= 1
            else brief(mem, room(mem, factor))
        )
    return Speedup(f.speedup, f.speedup, f.speedup, f.arithmetic, kind="forecast", fits=fits)


RULE = _PerReplicaBatch()
