"""SD106 low device utilisation: the devices are busy for a small part of each step.

A symptom rather than a cause: the other findings say why. Raised so that
the headroom is stated plainly: a device busy 20% of the time could in
principle run a step 5x faster.
"""

from __future__ import annotations

from scaldiag.analyze.profile import ProfileAnalysis
from scaldiag.rules.base import Evidence, Finding, RuleFacts, Speedup

# Below half busy, at least half of every step is lost; below a quarter, the
# device is mostly waiting. (xprof's overview shows the same ratio as "device
# compute time"; it sets no threshold.)
LOW_BUSY_PCT = 50.0
VERY_LOW_BUSY_PCT = 25.0

FIX = {
    "tensorflow": (
        "Fix the findings above (input, host overhead, copies); then raise the per-replica batch."
    ),
    "jax": (
        "Fix the findings above (input, host overhead, copies); then raise the per-device batch."
    ),
    "pytorch": (
        "Fix the findings above (input, host overhead, copies); then raise the per-rank batch."
    ),
}


class _LowUtilisation(RuleFacts):
    id = "SD106"
    title = "Low device utilisation"
    category = "idle"

    def check(self, analysis: ProfileAnalysis) -> Finding | None:
        gpus = [u for u in analysis.units if u.kind == "gpu"]
        if not gpus or analysis.steps_method == "none":
            return None
        unit = min(gpus, key=lambda u: u.busy_pct)
        if not unit.busy_pct < LOW_BUSY_PCT:  # NaN included: no share, no finding
            return None
        # The share as printed, and the ceiling from that same number: the arithmetic shown is the
        # arithmetic done (it once printed "100 / 0.7 = 100.00x", the share clamped to 1% unsaid).
        shown = busy_text(unit.busy_pct)
        busy = float(shown)
        ceiling = 100.0 / busy if busy > 0 else None
        return self.finding(
            severity="high" if unit.busy_pct < VERY_LOW_BUSY_PCT else "medium",
            summary=f"{unit.name} is busy {shown}% of each step",
            evidence=[
                Evidence(
                    "device busy share of step time",
                    round(unit.busy_pct, 2) or busy,
                    "%",
                    threshold=LOW_BUSY_PCT,
                    device=unit.name,
                )
            ],
            fix=FIX,
            predicted_speedup=(
                None
                if ceiling is None
                else Speedup(
                    ceiling,
                    ceiling,
                    ceiling,
                    f"a device busy {shown}% of the step: 100 / {shown} = {ceiling:.2f}x if it"
                    " never waited (ceiling)",
                )
            ),
            notes=[
                (
                    "a ceiling, not a forecast: it is reached only if every cause of waiting is"
                    " removed"
                    if ceiling is not None
                    else (
                        "no ceiling: the device runs no work inside the steps, so no speedup can be"
                        " derived from its share"
                    )
                )
            ],
        )


def busy_text(pct: float) -> str:
    """A busy share as printed: three significant digits (0.661, 12.3), so a small share is not 0.7
    or 0.0."""
    return f"{pct:.3g}" if pct > 0 else "0"


RULE = _LowUtilisation()
