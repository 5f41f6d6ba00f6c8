"""SD203 collective cost growing with N: the all-reduce eats the speedup.

From a sweep's attribution: the part of the lost speedup due to exposed
all-reduce time. Evidence adds the bus bandwidth the all-reduce achieved,
2(N-1)/N x parameter bytes / collective time per step (NCCL's busbw
definition, taking the gradients to be the parameter bytes), next to the
link's nominal bandwidth: far below it, the all-reduces are small and
latency-bound (many small tensors); near it, the bytes themselves cost.

Its number is a ceiling (the all-reduce hidden entirely); beside it, a
forecast for a 4x per-replica batch at that count, which all-reduces the same
gradients once for 4x the samples (analyze/forecast.py ``larger_batch_at``).
"""

from __future__ import annotations

from scaldiag.analyze.scaling import ScalingAnalysis
from scaldiag.rules.base import (
    Evidence,
    Finding,
    RuleFacts,
    lost_evidence,
    lost_speedup_severity,
    recovery_speedup,
)
from scaldiag.rules.sd103_collective_bound import FIX
from scaldiag.rules.sd201_per_replica_batch import forecast_speedup

# Lost speedup, in units of speedup (ideal 2.0 -> measured 1.9 is 0.1), beyond
# the noise: below a tenth of a device's worth it is not worth a change.
MIN_LOST = 0.1
# An all-reduce reaching under a tenth of the link's nominal bandwidth moves
# too few bytes per call to be bandwidth-bound: NCCL's own all-reduce curves
# reach their plateau only from megabytes per call.
LATENCY_BOUND_LINK_FRACTION = 0.1


class _CollectiveGrowth(RuleFacts):
    id = "SD203"
    title = "All-reduce cost grows with the device count"
    category = "collective"

    def check(self, s: ScalingAnalysis) -> Finding | None:
        worst = None
        for a in s.attribution:
            cause = next(c for c in a.causes if c.category == "collective")
            if cause.lost_speedup - cause.spread >= MIN_LOST and (
                worst is None or cause.lost_speedup > worst[1].lost_speedup
            ):
                worst = (a, cause)
        if worst is None:
            return None
        a, cause = worst
        evidence = [lost_evidence("exposed all-reduce", a.gpus, cause, MIN_LOST)]
        point = next((p for p in s.points if p.gpus == a.gpus), None)
        notes = []
        if point and point.allreduce_bus_bytes_per_s:
            evidence.append(
                Evidence(
                    f"all-reduce bus bandwidth achieved at {a.gpus} devices",
                    round(point.allreduce_bus_bytes_per_s / 1e9, 2),
                    "GB/s",
                    threshold=(
                        round(point.link_bytes_per_s / 1e9, 1) if point.link_bytes_per_s else None
                    ),
                )
            )
            if (
                point.link_bytes_per_s
                and point.allreduce_bus_bytes_per_s
                < LATENCY_BOUND_LINK_FRACTION * point.link_bytes_per_s
            ):
                notes.append(
                    "under a tenth of the link's bandwidth: many small all-reduces, latency-bound; "
                    "pack gradients into fewer, larger all-reduces"
                )
        return self.finding(
            severity=lost_speedup_severity(cause.lost_speedup, a.ideal),
            summary=(
                f"at {a.gpus} devices exposed all-reduce costs {cause.lost_speedup:.2f}x of the"
                f" ideal {a.ideal:.2f}x (measured {a.measured:.2f}x)"
            ),
            evidence=evidence,
            fix=FIX,
            notes=notes,
            predicted_speedup=recovery_speedup(
                a.measured, cause.lost_speedup, "hiding all of it", a.gpus
            ),
            forecast=forecast_speedup(
                next((f for f in s.larger_batch if f.gpus == a.gpus), None),
                next((p for p in s.points if p.gpus == a.gpus), None),
            ),
        )


RULE = _CollectiveGrowth()
