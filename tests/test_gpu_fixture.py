"""The real H200 trace (JAX data-parallel, 2 GPUs, 10 marked steps), checked
against values read straight from the proto."""

import re

import numpy as np
import pytest
from conftest import GPU_TRACE
from rawproto import events, union_length_in

from scaldiag.analyze.breakdown import breakdown
from scaldiag.analyze.device import device_events
from scaldiag.analyze.profile import analyze_trace
from scaldiag.analyze.trace_steps import find_steps
from scaldiag.readers.xplane.read import find_run, read_trace
from scaldiag.rules.report import build_report


@pytest.fixture(scope="module")
def analysis():
    run, files = find_run(GPU_TRACE)
    return analyze_trace(read_trace(files), run)


@pytest.fixture(scope="module")
def space(request):
    from rawproto import load_space

    return load_space(GPU_TRACE.read_bytes())


def markers(space):
    return sorted(
        (e["start_ns"], e["end_ns"]) for e in events(space, "/host:CPU") if "step_num" in e["stats"]
    )


def test_both_gpus_with_ten_marked_steps(analysis, space):
    assert [u.name for u in analysis.units] == ["/device:GPU:0", "/device:GPU:1"]
    assert all(u.steps == 10 for u in analysis.units)
    assert analysis.steps_method == "markers"
    assert analysis.framework == "jax"


def test_steps_span_marker_to_marker(space):
    steps = find_steps(read_trace([GPU_TRACE]))
    starts = [s for s, _ in markers(space)]
    assert len(starts) == 10
    assert np.allclose(steps.start_ns, starts, atol=1)
    assert np.allclose(steps.end_ns[:-1], starts[1:], atol=1)
    assert (
        steps.end_ns[-1] >= markers(space)[-1][1] - 1
    )  # the last step ends no earlier than its marker


@pytest.mark.parametrize("gpu", [0, 1])
def test_h2d_bytes_per_step_is_the_sum_of_memcpy_sizes(analysis, space, gpu):
    copies = [e for e in events(space, f"/device:GPU:{gpu}") if e["name"] == "MemcpyH2D"]
    total = sum(
        int(re.search(r"size:(\d+)", e["stats"]["memcpy_details"]).group(1)) for e in copies
    )
    unit = analysis.units[gpu]
    assert unit.h2d.bytes_per_step == pytest.approx(total / 10)
    assert unit.h2d.bytes_by_host_kind == {
        "pinned": pytest.approx(total / 10)
    }  # the details say pinned
    assert unit.h2d.count_per_step == len(copies) / 10


@pytest.mark.parametrize("gpu", [0, 1])
def test_nccl_all_reduce_time_and_count(analysis, space, gpu):
    nccl = [
        e
        for e in events(space, f"/device:GPU:{gpu}")
        if e["name"].startswith("ncclDevKernel_AllReduce")
    ]
    assert len(nccl) == 10
    unit = analysis.units[gpu]
    assert unit.collective_count_per_step == 1.0
    expected_ms = sum(e["end_ns"] - e["start_ns"] for e in nccl) / 10 / 1e6
    assert unit.categories["collective"].busy_ms == pytest.approx(expected_ms, rel=1e-3)


def test_exclusive_times_add_up_to_the_step(analysis):
    for unit in analysis.units:
        total = sum(c.exclusive_ms for c in unit.categories.values())
        assert total == pytest.approx(unit.step_time_ms.mean, rel=1e-9)
        assert sum(c.exclusive_pct for c in unit.categories.values()) == pytest.approx(100.0)


def test_device_busy_per_step_is_the_union_of_its_events(space):
    trace = read_trace([GPU_TRACE])
    steps = find_steps(trace)
    plane = trace.device_planes[0]
    result = breakdown(device_events(plane).sets(), steps)
    dev = [(e["start_ns"], e["end_ns"]) for e in events(space, plane.name)]
    expected = [union_length_in(dev, a, b) for a, b in zip(steps.start_ns, steps.end_ns)]
    assert np.allclose(result.device_busy_ns, expected, atol=len(dev))  # ns rounding per event


def test_report_names_the_host_as_the_bound(analysis):
    report = build_report(analysis)
    ids = [f.id for f in report.findings]
    assert ids[0] in ("SD105", "SD101")  # the devices wait on the host
    assert "SD106" in ids  # and are busy under a fifth of the step
    assert all(f.predicted_speedup.value > 1 for f in report.findings)


def test_without_markers_steps_are_inferred_from_the_jitted_step_calls(tmp_path, space):
    # The same trace with its StepTraceAnnotation markers' step_num stats removed.
    space = type(space).FromString(space.SerializeToString())  # a copy: the fixture is shared
    for plane in space.planes:
        ids = [k for k, m in plane.stat_metadata.items() if m.name == "step_num"]
        for line in plane.lines:
            for event in line.events:
                keep = [s for s in event.stats if s.metadata_id not in ids]
                del event.stats[:]
                event.stats.extend(keep)
    path = tmp_path / "nomarkers.xplane.pb"
    path.write_bytes(space.SerializeToString())
    steps = find_steps(read_trace([path]))
    calls = sorted(
        {e["start_ns"] for e in events(space, "/host:CPU") if e["name"] == "PjitFunction(step)"}
    )
    assert steps.method == "inferred" and "PjitFunction(step)" in steps.description
    assert steps.count == 10
    # Outermost of the two nested PjitFunction(step) events per step.
    assert np.allclose(steps.start_ns, calls[::2], atol=1)
