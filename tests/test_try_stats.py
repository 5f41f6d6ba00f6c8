"""analyze/try_stats.py: which pairs count, their range, and when it resolves."""

from __future__ import annotations

import pytest

from scaldiag.analyze.try_stats import (
    MIN_PAIRS,
    another_round,
    left_out,
    pair_ratio,
    side_failure,
    summary,
)


def _side(step_ms, exit_code=0, samples=None):
    return {"exit": exit_code, "step_ms": step_ms, "samples_per_step": samples}


def _pair(b, f):
    return {"baseline": _side(b), "fixed": _side(f)}


def test_a_failed_side_leaves_its_pair_out_and_names_why():
    failed = {"baseline": _side(10.0), "fixed": _side(5.0, exit_code=3)}
    killed = {"baseline": _side(None, exit_code=-15), "fixed": _side(5.0)}
    empty = {"baseline": _side(None), "fixed": _side(5.0)}
    assert pair_ratio(failed) is None and pair_ratio(killed) is None and pair_ratio(empty) is None
    assert left_out([_pair(10.0, 5.0), failed, killed, empty, {"baseline": _side(1.0)}]) == [
        "round 1: fixed exited 3",
        "round 2: baseline killed by signal 15",
        "round 3: baseline had no steady steps",
        "round 4: fixed did not run",
    ]
    assert side_failure({"step_ms": 3.0}) == "did not finish"


def test_a_ratio_is_per_sample_where_both_sides_know_their_batch():
    batch = {"baseline": _side(10.0, samples=16), "fixed": _side(20.0, samples=64)}
    assert pair_ratio(batch) == pytest.approx(2.0)
    assert pair_ratio(_pair(10.0, 8.0)) == pytest.approx(1.25)


def test_a_range_resolves_only_with_enough_pairs_on_one_side():
    assert summary([]) is None
    few = summary([2.0] * (MIN_PAIRS - 1))
    assert few["resolved"] is False  # two pairs say nothing, however far from 1.0x
    faster = summary([1.3, 1.4, 1.35])
    assert faster["resolved"] and faster["separates_from_1"]
    noise = summary([0.8, 1.2, 1.01, 0.95])
    assert noise["resolved"] is False and noise["low"] < 1.0 < noise["high"]
    # inside 1.0x's noise but clear of a forecast of 3x: resolved against the forecast
    short = summary([0.9, 1.1, 1.0], forecast=3.0)
    assert short["resolved"] and short["separates_from_forecast"] and not short["separates_from_1"]


def test_rounds_go_on_past_the_minimum_only_while_unresolved():
    good = [_pair(13.0, 10.0)] * 3
    noisy = [_pair(10.0, 9.0), _pair(9.0, 10.0), _pair(10.0, 10.0)]
    failed = [{"baseline": _side(10.0), "fixed": _side(5.0, exit_code=3)}] * 3
    assert another_round([], 3, 12, None)
    assert not another_round(good, 3, 12, None)
    assert another_round(noisy, 3, 12, None)
    assert not another_round(noisy * 4, 3, 12, None)  # the maximum
    assert not another_round(failed, 3, 12, None)  # nothing measured: more of it says nothing
