"""Real TensorFlow-on-CPU traces (fixtures/tf_cpu), checked against the proto."""

import numpy as np
import pytest
from conftest import tf_cpu_trace
from rawproto import events, union_length_in

from scaldiag.analyze.profile import analyze_trace
from scaldiag.analyze.trace_steps import find_steps
from scaldiag.readers.xplane.read import read_trace
from scaldiag.rules.report import build_report


def load(case):
    path = tf_cpu_trace(case)
    trace = read_trace([path])
    return trace, analyze_trace(trace, case)


def per_step_mean_ms(intervals, steps):
    return (
        np.mean([union_length_in(intervals, a, b) for a, b in zip(steps.start_ns, steps.end_ns)])
        / 1e6
    )


@pytest.mark.parametrize("case", ["mirrored_2cpu", "input_bound", "transposes"])
def test_steps_are_the_keras_train_function_calls(case, raw_space):
    trace, analysis = load(case)
    calls = sorted(
        e["start_ns"]
        for e in events(raw_space(tf_cpu_trace(case)), "/host:CPU")
        if e["name"] == "multi_step_on_iterator"
    )
    assert analysis.steps_method == "inferred"
    assert analysis.units[0].steps == len(calls) == 5  # the fixture profiles 5 batches
    assert np.allclose(find_steps(trace).start_ns, calls, atol=1)
    assert analysis.framework == "tensorflow"


def test_input_bound_waits_on_iterator_get_next(raw_space):
    trace, analysis = load("input_bound")
    unit = analysis.units[0]
    # Input, by the documented rule: the tf.data consumer thread, and the
    # eager copy of the batch on the Python thread.
    consumer = [
        (e["start_ns"], e["end_ns"])
        for e in events(raw_space(tf_cpu_trace("input_bound")), "/host:CPU")
        if e["line"].startswith("tf_data_iterator_get_next") or e["name"] == "EagerCopyToDevice"
    ]
    assert unit.categories["input"].busy_ms == pytest.approx(
        per_step_mean_ms(consumer, find_steps(trace)), rel=1e-3
    )
    report = build_report(analysis)
    assert report.findings[0].id == "SD101"
    assert report.findings[0].severity == "high"
    assert unit.categories["input"].exclusive_pct > 20


def test_transposes_are_layout_time(raw_space):
    trace, analysis = load("transposes")
    ops = [
        (e["start_ns"], e["end_ns"])
        for e in events(raw_space(tf_cpu_trace("transposes")), "/host:CPU")
        if e["name"].rsplit(":", 1)[-1] in ("Transpose", "_MklTranspose")
    ]
    assert ops, "the fixture model has Permute layers"
    unit = analysis.units[0]
    assert unit.categories["layout"].busy_ms == pytest.approx(
        per_step_mean_ms(ops, find_steps(trace)), rel=1e-3
    )
    assert "SD104" in [f.id for f in build_report(analysis).findings]


def test_mirrored_strategy_collectives(raw_space):
    trace, analysis = load("mirrored_2cpu")
    reduce_ops = [
        e
        for e in events(raw_space(tf_cpu_trace("mirrored_2cpu")), "/host:CPU")
        if e["name"].endswith(":CollectiveReduceV2")
    ]
    assert reduce_ops
    unit = analysis.units[0]
    assert unit.categories["collective"].busy_ms > 0
    # CollectiveReduceV2 runs on the collective_ops threads: all of it is collective time.
    assert (
        unit.categories["collective"].busy_ms
        >= per_step_mean_ms([(e["start_ns"], e["end_ns"]) for e in reduce_ops], find_steps(trace))
        - 1e-6
    )
    assert unit.h2d is None  # no device memory on a CPU-only trace
