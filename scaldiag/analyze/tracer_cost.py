"""The tracer's own cost in a trace alone: host events per step times a measured cost per event.

``scaldiag profile`` measures the profiler's inflation (traced against
untraced steps) and takes it out of the shares (analyze/inflation.py). A
trace given to ``scaldiag analyze`` has no untraced steps, so its host-side
shares hold the tracer's cost: each host event the profiler records costs
the host time inside and around it. This module estimates that cost per step
so that the rules raise no finding the tracer alone could explain.

The cost per event was measured on traces recorded without scaldiag, each
beside the same script's untraced stopwatch on the same machine (one H200;
the 1-GPU traces of ../shared/fixtures/x2_devset, their README's samples/s):
(traced step - untraced step) / host events per step.

| trace | host events a step | traced ms | untraced ms | us an event |
|---|---|---|---|---|
| Keras 3 on JAX, dense MLP, batch 32 | 876 | 1.779 | 1.075 | 0.80 |
| Keras 3 on JAX, convnet, batch 64 | 1404 | 4.301 | 1.793 | 1.79 |
| PyTorch 2.11, DDP script on 1 GPU, batch 32 | 324 | 3.031 | 2.513 | 1.60 |

The largest measured for the framework is used (an upper bound: a rule is
held back only where the tracer *could* explain the share). Traces that
scaldiag's own capture recorded cost more an event (4.9-10.9 us: fewer,
heavier events), and are corrected by the measured inflation instead.
TensorFlow's GPU traces were not measured: the largest of all is used.
"""

from __future__ import annotations

import numpy as np

from scaldiag.analyze.trace_steps import Steps
from scaldiag.trace import Trace

US_PER_HOST_EVENT = {"jax": 1.79, "pytorch": 1.60}
US_PER_HOST_EVENT_OTHER = max(US_PER_HOST_EVENT.values())


def host_events_per_step(trace: Trace, steps: Steps) -> float:
    """Host events that start inside the steps, per step."""
    if not steps.count:
        return 0.0
    first, last = int(steps.start_ns[0]), int(steps.end_ns[-1])
    count = 0
    for plane in trace.host_planes:
        for line in plane.lines:
            if len(line):
                count += int(np.count_nonzero((line.start_ns >= first) & (line.start_ns < last)))
    return count / steps.count


def tracer_ms_per_step(framework: str, events_per_step: float) -> float:
    """The most the tracer could have added to a step, in ms."""
    return events_per_step * US_PER_HOST_EVENT.get(framework, US_PER_HOST_EVENT_OTHER) / 1e3
