"""Findings are ranked by their ceilings, never on noise: where two ranges overlap, the trace orders
them.

The case: bench/zoo/host_launch.py on an H200 (bench/results/gpu_h200/accuracy run 6, round 2, its
JSON report in run6_reports_keras.tgz, `git show
a155845:bench/results/gpu_h200/accuracy/run6_reports_keras.tgz`). The input-free step measured the
input at 0.78 ms of a 1.56 ms step (clone 0.777 ms, its epochs 0.723-0.787), above the trace's own
input (DevicePutWithSharding, 0.21 ms a step); raised, input read 50.2% +-5.0 and host overhead
44.0% +-4.7, and SD101 ranked first on a script whose planted cause is host overhead. The trace's
shares before the raise are rebuilt here from that report: every category but input scaled back by
the raise's factor (input_cost._unit). The report does not give the trace's own input share; its
host table names DevicePutWithSharding, 0.21 ms a step (13%), and run 7's traces of the same script
showed 25.4% and 26.9% (run7_reports_keras.tgz, in git at a155845 too): both are tried.
"""

import pytest

from scaldiag.analyze.categories import CATEGORIES
from scaldiag.analyze.input_cost import input_cost, with_input_cost
from scaldiag.analyze.profile import CategoryTime, ProfileAnalysis, UnitAnalysis
from scaldiag.analyze.stats import Summary
from scaldiag.rules import rank, run_rules
from scaldiag.rules.base import Finding, Speedup

STEP_MS, STEP_CI_MS = 1.559752745082612, 0.010298843216181686
CLONE = {
    "step_ms": 0.7765096853146846,
    "step_ms_min": 0.7227411692307291,
    "step_ms_max": 0.787107199999997,
    "source": "a clone of the model trained on one cached batch after training",
}
TRACE_INPUT_MS = 0.208  # DevicePutWithSharding, the report's host table (input, ms a step)


def _gpu_unit(parts_pct: dict[str, tuple[float, float]], step_ms: float = STEP_MS) -> UnitAnalysis:
    parts = {c: parts_pct.get(c, (0.0, 0.0)) for c in CATEGORIES}
    cats = {
        c: CategoryTime(
            exclusive_ms=step_ms * pct / 100,
            exclusive_pct=pct,
            exclusive_pct_ci95=ci,
            busy_ms=step_ms * pct / 100,
        )
        for c, (pct, ci) in parts.items()
    }
    return UnitAnalysis(
        name="/device:GPU:0",
        kind="gpu",
        steps=5,
        busy_pct=4.7,
        categories=cats,
        step_time_ms=Summary(mean=step_ms, p50=step_ms, p90=step_ms, stdev=0.46, n=5, ci95=0.57),
    )


def _profile(unit: UnitAnalysis) -> ProfileAnalysis:
    return ProfileAnalysis(
        run="r",
        sources=[],
        hosts=[],
        event_count=0,
        steps_method="markers",
        steps_description="",
        units=[unit],
        framework="jax",
        profiler_inflation=1.46,
    )


def _round2_trace(trace_input_ms: float = TRACE_INPUT_MS) -> ProfileAnalysis:
    """The corrected trace of round 2 before the input raise: the report's shares / the raise's
    factor."""
    target = STEP_MS - CLONE["step_ms"]
    back = (STEP_MS - trace_input_ms) / (STEP_MS - target)
    after = {
        "compute": (4.5, 1.3),
        "h2d": (0.1, 0.0),
        "d2h": (0.1, 0.0),
        "idle": (1.2, 0.8),
        "host_overhead": (44.0, 4.7),
    }
    # A trace's shares add up to 100%; the report's, rounded, to 100.1%: the rest as rounding.
    input_pct = 100 * trace_input_ms / STEP_MS
    fit = (100 - input_pct) / sum(pct * back for pct, _ in after.values())
    parts = {c: (pct * back * fit, ci * back) for c, (pct, ci) in after.items()}
    parts["input"] = (input_pct, 3.0)
    return _profile(_gpu_unit(parts))


def test_host_launch_round_2_ranks_host_overhead_first_where_the_measured_input_overlaps_it():
    trace = _round2_trace()
    assert [f.id for f in run_rules(trace)][0] == "SD105"  # the trace alone: host overhead by far
    cost = input_cost(STEP_MS, STEP_CI_MS, CLONE)
    raised = with_input_cost(trace, cost)
    cats = raised.units[0].categories
    # The report's numbers come back: input 50.2% +-5.0, host overhead 44.0% (of the rounded
    # report's 49.9% beside input: here the shares add up to 100%).
    assert cats["input"].exclusive_pct == pytest.approx(50.2, abs=0.1)
    assert cats["input"].exclusive_pct_ci95 == pytest.approx(5.0, abs=0.05)
    rest_pct = 100 - cats["input"].exclusive_pct
    assert cats["host_overhead"].exclusive_pct == pytest.approx(44.0 * rest_pct / 49.9, abs=0.05)
    assert sum(c.exclusive_pct for c in cats.values()) == pytest.approx(100.0)
    assert cats["input"].beyond_trace_pct == pytest.approx(
        50.2 - 100 * TRACE_INPUT_MS / STEP_MS, abs=0.1
    )
    found = run_rules(raised)
    by_id = {f.id: f for f in found}
    sd101, sd105 = by_id["SD101"], by_id["SD105"]
    # By the point values alone SD101 would come first; the ranges overlap, so the measurement does
    # not order them, and the trace (13% input against 77% host overhead) does.
    assert sd101.predicted_speedup.value > sd105.predicted_speedup.value
    assert sd101.predicted_speedup.low <= sd105.predicted_speedup.high
    assert sd101.seen_speedup == pytest.approx(1 / (1 - TRACE_INPUT_MS / STEP_MS), rel=1e-3)
    assert [f.id for f in found][:2] == ["SD105", "SD101"]
    assert any("the trace shows 13.3% as input" in n for n in sd101.notes)


@pytest.mark.parametrize("trace_input_pct", [13.3, 25.4, 26.9])
def test_the_order_holds_for_the_trace_input_seen_in_either_run(trace_input_pct):
    raised = with_input_cost(
        _round2_trace(STEP_MS * trace_input_pct / 100), input_cost(STEP_MS, STEP_CI_MS, CLONE)
    )
    assert raised.units[0].categories["input"].exclusive_pct == pytest.approx(50.2, abs=0.1)
    assert [f.id for f in run_rules(raised)][:2] == ["SD105", "SD101"]


def test_a_measured_input_cost_beyond_the_noise_of_the_rest_ranks_first():
    """The measurement is what sees input on other threads (a PyDataset slowing the ops): where its
    range
    is clear of the others', it ranks, whatever the trace showed."""
    trace = _profile(
        _gpu_unit(
            {
                "compute": (40.0, 1.0),
                "input": (2.0, 0.5),
                "host_overhead": (30.0, 2.0),
                "idle": (28.0, 2.0),
            },
            step_ms=10.0,
        )
    )
    raised = with_input_cost(
        trace, input_cost(10.0, 0.05, {"step_ms": 3.0, "step_ms_min": 2.9, "step_ms_max": 3.1})
    )
    assert raised.units[0].categories["input"].exclusive_pct == pytest.approx(70.0)
    assert [f.id for f in run_rules(raised)][0] == "SD101"


def _finding(id_, value, low, high, seen=None, category="input"):
    return Finding(
        id=id_,
        title=id_,
        severity="high",
        category=category,
        summary="",
        evidence=[],
        fix={},
        predicted_speedup=Speedup(value, low, high, ""),
        seen_speedup=seen,
    )


def test_overlapping_findings_fully_seen_in_the_trace_keep_the_order_of_their_values():
    a, b = _finding("A", 2.0, 1.7, 2.3), _finding("B", 1.9, 1.6, 2.2, category="host_overhead")
    assert [f.id for f in rank([b, a])] == ["A", "B"]


def test_the_utilisation_symptom_stays_last_and_disjoint_ranges_keep_their_order():
    idle = _finding("SD106", 9.0, 9.0, 9.0, category="idle")
    big = _finding("SD101", 3.0, 2.9, 3.1, seen=1.1)
    small = _finding("SD105", 1.5, 1.4, 1.6, category="host_overhead")
    assert [f.id for f in rank([idle, small, big])] == ["SD101", "SD105", "SD106"]


def test_ranking_ends_on_a_chain_of_overlaps():
    found = [
        _finding(str(i), 2.0 - i / 10, 1.5 - i / 10, 2.5 - i / 10, seen=1.0 + i / 10)
        for i in range(6)
    ]
    assert [f.id for f in rank(found)] == ["5", "4", "3", "2", "1", "0"]
