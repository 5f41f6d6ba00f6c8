"""SD106 low device utilisation: the devices are busy for a small part of each step.

A symptom rather than a cause: the other findings say why. Raised so that
the headroom is stated plainly: a device busy 20% of the time could in
principle run a step 5x faster.
"""

from __future__ import annotations

from scaldiag.analyze.profile import ProfileAnalysis
from scaldiag.rules.base import Evidence, Finding, Speedup

# Below half busy, at least half of every step is lost; below a quarter, the
# device is mostly waiting. (xprof's overview shows the same ratio as "device
# compute time"; it sets no threshold.)
LOW_BUSY_PCT = 50.0
VERY_LOW_BUSY_PCT = 25.0

FIX = {
    "tensorflow": "Fix the findings above (input, host overhead, copies); then raise the per-replica batch.",
    "jax": "Fix the findings above (input, host overhead, copies); then raise the per-device batch.",
    "pytorch": "Fix the findings above (input, host overhead, copies); then raise the per-rank batch.",
}


class _LowUtilisation:
    id = "SD106"

    def check(self, analysis: ProfileAnalysis) -> Finding | None:
        gpus = [u for u in analysis.units if u.kind == "gpu"]
        if not gpus or analysis.steps_method == "none":
            return None
        unit = min(gpus, key=lambda u: u.busy_pct)
        if unit.busy_pct >= LOW_BUSY_PCT:
            return None
        busy = max(unit.busy_pct, 1.0)
        ceiling = 100.0 / busy
        return Finding(
            id=self.id, title="Low device utilisation", category="idle",
            severity="high" if unit.busy_pct < VERY_LOW_BUSY_PCT else "medium",
            summary=f"{unit.name} is busy {unit.busy_pct:.1f}% of each step",
            evidence=[Evidence("device busy share of step time", round(unit.busy_pct, 2), "%",
                               threshold=LOW_BUSY_PCT, device=unit.name)],
            fix=FIX,
            predicted_speedup=Speedup(ceiling, ceiling, ceiling,
                                      f"a device busy {unit.busy_pct:.1f}% of the step: "
                                      f"100 / {unit.busy_pct:.1f} = {ceiling:.2f}x if it never waited (ceiling)"),
            notes=["a ceiling, not a forecast: it is reached only if every cause of waiting is removed"])


RULE = _LowUtilisation()
