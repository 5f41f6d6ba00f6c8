"""SD207 input ceiling: the input pipeline alone barely outruns training.

After training, the data given to ``fit`` is iterated without the model for a
few seconds. If it delivers fewer samples per second than ``HEADROOM`` times
what training consumed, more devices cannot go much faster: N devices need N
times the samples, and the input caps the speedup at ceiling / consumed.
"""

from __future__ import annotations

from scaldiag.analyze.run import RunAnalysis
from scaldiag.rules.base import Evidence, Finding, RuleFacts
from scaldiag.rules.sd101_input_bound import FIX

# With less than 2x headroom, a second device cannot double throughput.
HEADROOM = 2.0
# Under 1.2x headroom even a second device would gain at most a fifth: high.
HIGH_SEVERITY_CAP = 1.2


class _InputCeiling(RuleFacts):
    id = "SD207"
    title = "The input pipeline caps the speedup"
    category = "input"

    def check(self, run: RunAnalysis) -> Finding | None:
        ceiling = run.training.get("input_ceiling")
        if not ceiling or not run.steps or not run.steps.samples_per_s:
            return None
        cap = ceiling["samples_per_s"] / run.steps.samples_per_s
        if cap >= HEADROOM:
            return None
        return self.finding(
            severity="high" if cap < HIGH_SEVERITY_CAP else "medium",
            summary=_summary(ceiling["samples_per_s"], run.steps.samples_per_s, cap),
            evidence=[
                Evidence(
                    "input pipeline alone",
                    round(ceiling["samples_per_s"]),
                    "samples/s",
                    threshold=round(HEADROOM * run.steps.samples_per_s),
                ),
                Evidence("training throughput", round(run.steps.samples_per_s), "samples/s"),
            ],
            fix=FIX,
            notes=[
                f"measured by {ceiling['source']}, {ceiling['batches']} batches in"
                f" {ceiling['seconds']:.1f} s after training; a ceiling on what more devices can"
                " give, not a gain"
            ],
        )


def _summary(alone: float, consumed: float, cap: float) -> str:
    """What the cap bounds, in words: more devices' speedup over this run, not this step's
    (SD101's)."""
    head = f"the input alone delivers {alone:,.0f} samples/s; training consumed {consumed:,.0f}"
    # not a speed-up: the input already paces training (a ceiling under 1 is never printed as one)
    if cap < 1:
        return (
            f"{head}: the input already paces training, so more devices cannot speed it up at all"
        )
    return (
        f"{head}: more devices can raise throughput at most {cap:.2f}x over this run, however many"
        " are added"
    )


RULE = _InputCeiling()
