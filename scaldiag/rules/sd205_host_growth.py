"""SD205 per-step host time growing with the global batch.

Under weak scaling each device's work is constant, but one host feeds all of
them: slicing, converting and copying the global batch, or per-sample Python,
runs on one thread and grows with N. Seen in the attribution as host-side
parts (input, host_overhead) that take speedup away as devices are added.
"""

from __future__ import annotations

from scaldiag.analyze.scaling import ScalingAnalysis
from scaldiag.rules.base import (
    Finding,
    RuleFacts,
    lost_evidence,
    lost_speedup_severity,
    recovery_speedup,
)

MIN_LOST = 0.1  # as SD203: a tenth of a device's worth, beyond the noise
HOST_PARTS = ("input", "host_overhead")

FIX = {
    "tensorflow": (
        "Feed each replica its own shard, in parallel and ahead of the step:\n  ds ="
        " strategy.experimental_distribute_dataset(ds.prefetch(tf.data.AUTOTUNE))\nor"
        " strategy.distribute_datasets_from_function(fn) so each replica reads its shard; move"
        " Python per-sample work into tf.data map(num_parallel_calls=AUTOTUNE)."
    ),
    "jax": (
        "Keras on JAX prepares the global batch on one host thread: give a PyDataset workers"
        " (workers=N, threads: processes pickle every batch back) or feed tf.data with prefetch; in"
        " plain JAX build each device's shard with jax.make_array_from_callback and prefetch the"
        " next batch while the step runs."
    ),
    "pytorch": (
        "Let each rank load only its shard, in worker processes: DataLoader(ds,"
        " sampler=DistributedSampler(ds), num_workers=os.cpu_count() // world_size,"
        " pin_memory=True, persistent_workers=True); keep per-sample Python work out of the main"
        " process."
    ),
}


class _HostGrowth(RuleFacts):
    id = "SD205"
    title = "Per-step host time grows with the global batch"
    category = "host_overhead"

    def check(self, s: ScalingAnalysis) -> Finding | None:
        if s.mode == "strong" or s.emulated:
            return None  # with the global batch fixed the host's work does not grow
        for a in reversed(s.attribution):
            parts = [c for c in a.causes if c.category in HOST_PARTS]
            lost = sum(c.lost_speedup for c in parts)
            spread = sum(c.spread for c in parts)
            if lost - spread >= MIN_LOST:
                return self.finding(
                    severity=lost_speedup_severity(lost, a.ideal),
                    summary=(
                        f"at {a.gpus} devices the host-side parts ({', '.join(HOST_PARTS)}) cost"
                        f" {lost:.2f}x of the ideal {a.ideal:.2f}x: one host prepares a batch"
                        f" {a.gpus}x as large"
                    ),
                    evidence=[lost_evidence(c.category, a.gpus, c, MIN_LOST) for c in parts],
                    fix=FIX,
                    predicted_speedup=recovery_speedup(
                        a.measured, lost, "host work per step held constant"
                    ),
                )
        return None


RULE = _HostGrowth()
