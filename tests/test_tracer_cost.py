"""A trace alone: the tracer's own cost, estimated, keeps SD105 from calling a healthy trace
host-bound."""

import pytest
from conftest import FIXTURES

from scaldiag.analyze import tracer_cost
from scaldiag.analyze.profile import analyze_trace
from scaldiag.analyze.trace_steps import find_steps
from scaldiag.readers import read_trace
from scaldiag.rules.report import build_report

DEVSET = FIXTURES / "x2_devset"
# The scripts' own stopwatch on the two-GPU machine (fixtures/x2_devset/README.md).
UNTRACED_MS = {
    "keras_jax_mlp_sync_1gpu_plain": 32 / 29_774 * 1e3,
    "keras_jax_mlp_sync_2gpu": 64 / 48_155 * 1e3,
}


@pytest.mark.parametrize("name", sorted(UNTRACED_MS))
def test_the_cost_per_event_bounds_what_tracing_added(name):
    """What tracing added to the step, per host event, is within the cost the estimate takes."""
    _, trace = read_trace(DEVSET / f"{name}.xplane.pb")
    steps = find_steps(trace)
    traced_ms = (int(steps.end_ns[-1]) - int(steps.start_ns[0])) / steps.count / 1e6
    events = tracer_cost.host_events_per_step(trace, steps)
    added_us_per_event = (traced_ms - UNTRACED_MS[name]) * 1e3 / events
    assert 0 < added_us_per_event <= tracer_cost.US_PER_HOST_EVENT["jax"]


def test_a_healthy_two_gpu_trace_alone_is_not_called_host_bound_high():
    """1.62x on 2 GPUs in truth; the trace's host overhead (52% of the traced step) is mostly the
    tracer."""
    run, trace = read_trace(DEVSET / "keras_jax_mlp_sync_2gpu.xplane.pb")
    analysis = analyze_trace(trace, run)
    assert analysis.profiler_inflation is None and analysis.tracer_ms_per_step > 1.0
    assert analysis.units[0].categories["host_overhead"].exclusive_pct > 40  # what the trace shows
    findings = {f.id: f for f in build_report(analysis).findings}
    assert "SD105" not in findings or findings["SD105"].severity != "high"
