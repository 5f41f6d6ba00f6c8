"""SD206 straggler: one device computes longer than the others each step.

In synchronous data parallelism every all-reduce waits for the slowest
replica, so the step takes the slowest device's compute. Seen in a
multi-GPU trace as one device's compute time per step above the others'
(a slower or throttled card, an uneven shard, a device sharing its PCIe
switch or its CPU with other work).
"""

from __future__ import annotations

from scaldiag.analyze.profile import ProfileAnalysis
from scaldiag.rules.base import Evidence, Finding, RuleFacts, Speedup

# One device computing 10% longer than the fastest: past the few-percent
# spread of identical GPUs running identical kernels.
MIN_EXCESS = 0.10
# ...and the excess must be at least this share of the step: two H200s computing 0.68 and 0.57 ms
# in a ~50 ms step (1.3% busy) differ by noise that no fix of the slow device would repay.
MIN_STEP_SHARE = 0.05

FIX = {
    "tensorflow": (
        "Find why that GPU is slow: nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE for throttling,"
        " nvidia-smi topo -m for a shared PCIe switch, other processes on it (nvidia-smi); give"
        " every replica the same batch (drop_remainder=True in ds.batch)."
    ),
    "jax": (
        "Find why that GPU is slow: nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE for throttling,"
        " nvidia-smi topo -m for a shared PCIe switch, other processes on it (nvidia-smi); keep"
        " every device's shard the same size."
    ),
    "pytorch": (
        "Find why that rank is slow: nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE for throttling,"
        " nvidia-smi topo -m for a shared PCIe switch, other processes on it (nvidia-smi); pin each"
        " rank to its own GPU (torch.cuda.set_device(local_rank)) and give every rank the same"
        " batch (DistributedSampler(ds, drop_last=True), DataLoader(..., drop_last=True))."
    ),
}


class _Straggler(RuleFacts):
    id = "SD206"
    title = "A straggler device"
    category = "compute"

    def check(self, analysis: ProfileAnalysis) -> Finding | None:
        gpus = [u for u in analysis.units if u.kind == "gpu"]
        if len(gpus) < 2:
            return None
        slow = max(gpus, key=lambda u: u.categories["compute"].busy_ms)
        fast = min(gpus, key=lambda u: u.categories["compute"].busy_ms)
        slow_ms, fast_ms = slow.categories["compute"].busy_ms, fast.categories["compute"].busy_ms
        # Noise: the exclusive-share intervals of both, in ms of their steps.
        spread = sum(
            u.categories["compute"].exclusive_pct_ci95 / 100 * u.step_time_ms.mean
            for u in (slow, fast)
        )
        excess = slow_ms - fast_ms
        if fast_ms <= 0 or excess / fast_ms < MIN_EXCESS or not excess > spread:
            return None
        step = slow.step_time_ms.mean
        if not step > 0 or excess / step < MIN_STEP_SHARE:
            return None
        gain = 1 / (1 - min(excess / step, 0.99))
        return self.finding(
            severity="medium",
            summary=(
                f"{slow.name} computes {slow_ms:.3f} ms per step, {fast.name} {fast_ms:.3f} ms "
                f"(+{100 * excess / fast_ms:.0f}%): every step waits for the slow one"
            ),
            evidence=[
                Evidence("compute per step", round(slow_ms, 4), "ms", device=slow.name),
                Evidence("compute per step", round(fast_ms, 4), "ms", device=fast.name),
                Evidence(
                    "excess over the fastest",
                    round(100 * excess / fast_ms, 1),
                    "%",
                    threshold=100 * MIN_EXCESS,
                ),
            ],
            fix=FIX,
            predicted_speedup=Speedup(
                gain,
                gain,
                gain,
                "the slow device as fast as the fastest saves at most "
                f"{excess:.3f} ms of {step:.3f} ms: {gain:.2f}x",
            ),
        )


RULE = _Straggler()
