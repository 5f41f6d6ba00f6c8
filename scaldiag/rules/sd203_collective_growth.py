"""SD203 collective cost growing with N: the all-reduce eats the speedup.

From a sweep's attribution: the part of the lost speedup due to exposed
all-reduce time. Evidence adds the bus bandwidth the all-reduce achieved,
2(N-1)/N x parameter bytes / collective time per step (NCCL's busbw
definition, taking the gradients to be the parameter bytes), next to the
link's nominal bandwidth: far below it, the all-reduces are small and
latency-bound (many small tensors); near it, the bytes themselves cost.
"""

from __future__ import annotations

from scaldiag.analyze.scaling import ScalingAnalysis
from scaldiag.rules.base import Evidence, Finding, Speedup
from scaldiag.rules.sd103_collective_bound import FIX

# Lost speedup, in units of speedup (ideal 2.0 -> measured 1.9 is 0.1), beyond
# the noise: below a tenth of a device's worth it is not worth a change.
MIN_LOST = 0.1


class _CollectiveGrowth:
    id = "SD203"

    def check(self, s: ScalingAnalysis) -> Finding | None:
        worst = None
        for a in s.attribution:
            cause = next(c for c in a.causes if c.category == "collective")
            if cause.lost_speedup - cause.spread >= MIN_LOST and (worst is None or cause.lost_speedup > worst[1].lost_speedup):
                worst = (a, cause)
        if worst is None:
            return None
        a, cause = worst
        evidence = [Evidence(f"speedup lost to exposed all-reduce at {a.gpus} devices", round(cause.lost_speedup, 3),
                             "x", threshold=MIN_LOST, spread=round(cause.spread, 3))]
        point = next((p for p in s.points if p.gpus == a.gpus), None)
        notes = []
        if point and point.allreduce_bus_bytes_per_s:
            evidence.append(Evidence(f"all-reduce bus bandwidth achieved at {a.gpus} devices",
                                     round(point.allreduce_bus_bytes_per_s / 1e9, 2), "GB/s",
                                     threshold=round(point.link_bytes_per_s / 1e9, 1) if point.link_bytes_per_s
                                     else None))
            if point.link_bytes_per_s and point.allreduce_bus_bytes_per_s < 0.1 * point.link_bytes_per_s:
                notes.append("under a tenth of the link's bandwidth: many small all-reduces, latency-bound; "
                             "pack gradients into fewer, larger all-reduces")
        gain = (a.measured + cause.lost_speedup) / a.measured
        return Finding(
            id=self.id, title="All-reduce cost grows with the device count", severity="high" if cause.lost_speedup
            >= 0.3 * a.ideal else "medium", category="collective",
            summary=f"at {a.gpus} devices exposed all-reduce costs {cause.lost_speedup:.2f}x of the ideal "
                    f"{a.ideal:.2f}x (measured {a.measured:.2f}x)",
            evidence=evidence, fix=FIX, notes=notes,
            predicted_speedup=Speedup(gain, gain, gain, f"hiding all of it: ({a.measured:.2f} + {cause.lost_speedup:.2f})"
                                                        f" / {a.measured:.2f} = {gain:.2f}x at {a.gpus} devices"))


RULE = _CollectiveGrowth()
