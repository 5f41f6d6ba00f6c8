"""SD210 straggler node: one node's ranks reach every collective late.

In synchronous data parallelism every rank waits, at each all-reduce, for
the last rank to arrive. A node whose ranks arrive late at the collectives
(on the job's one clock: analyze/nodes/clock.py) costs every other node that wait
each step. Where its input (the DataLoader's fetches on the step thread)
takes longer than the other nodes' by most of the lateness, the cause is the
node's input (a slower disk, fewer cores, a busier machine); otherwise its
compute (a slower or throttled machine).
"""

from __future__ import annotations

import math

from scaldiag.analyze.nodes import JobAnalysis
from scaldiag.rules.base import Evidence, Finding, RuleFacts, Speedup, ms_evidence

# As SD206 (straggler device): a lateness under 5% of the step is noise no fix of the slow node
# would repay. Compared with the low end of the lateness's 95% interval (docs/rules.md, "Noise"):
# two workers sharing a loaded 2-core machine read a mean of 0.4-2.1 ms of an 11-18 ms step (4-11%)
# on a plain job, +-1.2-2.7 ms.
MIN_STEP_SHARE = 0.05
# The input explains the lateness when the node's extra input time per step covers at least half of
# it.
INPUT_EXPLAINS = 0.5

FIX_INPUT = {
    "pytorch": (
        "Feed that node faster: more loader workers there (DataLoader(..., num_workers=N,"
        " pin_memory=True, persistent_workers=True, prefetch_factor=4)), its data on a local disk"
        " or cached (a copy on local NVMe, not the network file system), and check nothing else"
        " competes for its cores."
    ),
    "tensorflow": (
        "Feed that node faster: ds.map(...,"
        " num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE), ds.cache() to local"
        " disk, and check nothing else competes for its cores."
    ),
    "jax": (
        "Feed that node faster: more loader workers (grain's worker_count, tf.data AUTOTUNE), data"
        " on local disk, and check nothing else competes for its cores."
    ),
}
FIX_COMPUTE = {
    k: (
        "Find why that node computes slower: nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE for"
        " throttling, other jobs on it (nvidia-smi, top), its CPU and memory (numactl --hardware);"
        " give every rank the same batch (drop_last=True)."
    )
    for k in ("pytorch", "tensorflow", "jax")
}


class _StragglerNode(RuleFacts):
    id = "SD210"
    title = "A straggler node"
    category = "compute"

    def check(self, job: JobAnalysis) -> Finding | None:
        if len(job.nodes) < 2 or not job.matched_collectives:
            return None
        # By position, not identity: a job's nodes are made as they are read (analyze/nodes/table.py
        # NodeTable), one at a time, so the others are gone over again rather than held.
        at, late = max(enumerate(job.nodes), key=lambda p: p[1].lateness_ms.mean)
        s = late.lateness_ms
        ci = s.ci95 if math.isfinite(s.ci95) else s.mean
        step = min(n.step_ms.mean for n in job.nodes)
        if not step > 0 or (s.mean - ci) / step < MIN_STEP_SHARE:
            return None

        def others():
            return (n for i, n in enumerate(job.nodes) if i != at)

        extra_input = late.input_ms.mean - sum(n.input_ms.mean for n in others()) / (
            len(job.nodes) - 1
        )
        by_input = extra_input >= INPUT_EXPLAINS * s.mean
        gain = step / (step - min(s.mean, 0.99 * step))
        low_gain = step / (step - min(max(s.mean - ci, 0), 0.99 * step))
        cause = (
            f"its input takes {late.input_ms.mean:.1f} ms a step, {extra_input:.1f} ms more than"
            " the other nodes'"
            if by_input
            else "its input is no slower than the others': its compute is"
        )
        return self.finding(
            severity="high" if s.mean / step >= 0.25 else "medium",
            summary=(
                f"{late.node} reaches the collectives {s.mean:.1f} ms after the other nodes each"
                f" step (last at {late.last_pct:.0f}% of them); {cause}"
            ),
            evidence=[
                ms_evidence("lateness at the collectives per step", s.mean, s.ci95, late.node),
                Evidence(
                    "arrived last", round(late.last_pct, 1), "% of collectives", device=late.node
                ),
                # the late node's input first, then the others'
                *[
                    ms_evidence("input per step", n.input_ms.mean, n.input_ms.ci95, n.node)
                    for n in (late, *others())
                ],
            ],
            fix=FIX_INPUT if by_input else FIX_COMPUTE,
            # the late node's input as the cause: named in the title, its category the input's
            title=f"{self.title}: its input is slow" if by_input else self.title,
            category="input" if by_input else self.category,
            predicted_speedup=Speedup(
                gain,
                low_gain,
                gain,
                f"the other nodes stop waiting {s.mean:.1f} ms of a {step:.1f} ms step",
            ),
        )


RULE = _StragglerNode()
