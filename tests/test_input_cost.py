"""The input's measured cost (steady step against the input-free step) in the breakdown."""

import pytest

from scaldiag.analyze.input_cost import NOISE_FRACTION, describe, input_cost, with_input_cost
from scaldiag.analyze.profile import CategoryTime, ProfileAnalysis, UnitAnalysis
from scaldiag.analyze.stats import Summary


def _unit(step_ms, parts):
    cats = {
        name: CategoryTime(
            exclusive_ms=ms, exclusive_pct=100 * ms / step_ms, exclusive_pct_ci95=0.5, busy_ms=ms
        )
        for name, ms in parts.items()
    }
    return UnitAnalysis(
        name="/host:CPU",
        kind="host",
        steps=5,
        busy_pct=90.0,
        categories=cats,
        step_time_ms=Summary(mean=step_ms, p50=step_ms, p90=step_ms, stdev=1.0, n=5, ci95=1.0),
    )


def _profile(unit):
    return ProfileAnalysis(
        run="r",
        sources=[],
        hosts=[],
        event_count=0,
        steps_method="markers",
        steps_description="",
        units=[unit],
    )


def _measured(step_ms, low=None, high=None):
    return {
        "step_ms": step_ms,
        "step_ms_min": low or step_ms,
        "step_ms_max": high or step_ms,
        "source": "clone",
    }


def test_a_cost_the_trace_does_not_show_is_counted_as_input_and_the_step_still_adds_up():
    # TF on the CPU with a PyDataset: the step never waits for a batch (input 1 ms in the trace),
    # yet without its input the same model steps in 60 of the 100 ms.
    cost = input_cost(100.0, 2.0, _measured(60.0, 58.0, 62.0))
    assert (
        cost.cost_ms == pytest.approx(40.0)
        and cost.share_pct == pytest.approx(40.0)
        and cost.significant
    )
    raised = with_input_cost(
        _profile(_unit(100.0, {"compute": 90.0, "host_overhead": 9.0, "input": 1.0})), cost
    )
    cats = raised.units[0].categories
    assert cats["input"].exclusive_ms == pytest.approx(40.0)
    assert sum(c.exclusive_ms for c in cats.values()) == pytest.approx(100.0)
    # The rest give up the difference in proportion: compute keeps 90/99 of the remaining 60 ms.
    assert cats["compute"].exclusive_ms == pytest.approx(60.0 * 90 / 99)
    assert list(cats) == ["compute", "host_overhead", "input"]
    assert any("input measured" in n for n in raised.notes)


def test_shares_that_are_means_of_each_steps_share_still_add_up_after_the_raise():
    # A unit's share is the mean of each step's share, not its mean ms over the mean step: a slow
    # step with little input makes the input's share (2%) differ from 1 of 100 ms. The raise keeps
    # the shares adding up to 100 (a CI run read 99.992%, and the lost speedups no longer added up).
    unit = _unit(100.0, {"compute": 90.0, "host_overhead": 9.0, "input": 1.0})
    shares = {"compute": 89.0, "host_overhead": 9.0, "input": 2.0}
    unit.categories.update(
        {
            c: CategoryTime(t.exclusive_ms, shares[c], 0.5, t.busy_ms)
            for c, t in unit.categories.items()
        }
    )
    raised = with_input_cost(_profile(unit), input_cost(100.0, 2.0, _measured(60.0, 58.0, 62.0)))
    cats = raised.units[0].categories
    assert sum(c.exclusive_pct for c in cats.values()) == pytest.approx(100.0, abs=1e-9)
    assert cats["input"].exclusive_pct == pytest.approx(40.0)
    assert cats["compute"].exclusive_pct == pytest.approx(60.0 * 89 / 98)
    # What the trace showed as input is its share (2%), not 1 ms of the mean step (1%).
    assert cats["input"].beyond_trace_pct == pytest.approx(40.0 - 2.0)


def test_a_difference_inside_the_noise_changes_nothing():
    cost = input_cost(100.0, 1.0, _measured(100.0 * (1 - NOISE_FRACTION / 2)))
    assert not cost.significant
    profile = _profile(_unit(100.0, {"compute": 95.0, "input": 1.0, "idle": 4.0}))
    assert with_input_cost(profile, cost) is profile


def test_the_clone_slower_than_training_is_no_cost_and_a_wide_clone_spread_widens_the_noise():
    assert input_cost(100.0, 1.0, _measured(130.0)).cost_ms == 0.0
    wide = input_cost(100.0, 1.0, _measured(80.0, 50.0, 110.0))
    assert wide.noise_ms == pytest.approx(1.0 + 30.0) and not wide.significant


def test_a_trace_that_already_shows_more_input_keeps_it():
    cost = input_cost(100.0, 1.0, _measured(70.0))
    profile = _profile(_unit(100.0, {"compute": 50.0, "input": 50.0}))
    assert with_input_cost(profile, cost) is profile


def test_steps_per_execution_scales_the_cost_to_the_traced_step():
    cost = input_cost(10.0, 0.1, _measured(6.0))  # per batch; a traced step runs 4 batches
    raised = with_input_cost(
        _profile(_unit(40.0, {"compute": 39.0, "input": 1.0})), cost, batches_per_step=4
    )
    assert raised.units[0].categories["input"].exclusive_ms == pytest.approx(16.0)


@pytest.mark.parametrize("bad", [None, {}, {"step_ms": "x"}, {"step_ms": 0}, {"step_ms": -1}])
def test_a_missing_or_damaged_record_gives_no_cost(bad):
    assert input_cost(100.0, 1.0, bad) is None


def test_the_sentence_says_whether_the_cost_was_counted():
    counted = describe(input_cost(100.0, 2.0, _measured(60.0, 58.0, 62.0)))
    assert (
        counted.startswith("input cost: 40.0 ms of the 100.0 ms step (40%)")
        and "counted as input" in counted
    )
    assert "none beyond the noise" in describe(input_cost(100.0, 1.0, _measured(99.0)))
