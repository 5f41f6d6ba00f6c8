"""render/ranges.py: one wording of a speed-up and its range, of a figure and its spread."""

import math

from scaldiag.render import ranges
from scaldiag.rules.base import Speedup, removal_speedup


def test_ceiling_with_its_range():
    assert ranges.speedup(6.67, 5.8, 7.7) == "at most 6.67x (95% range 5.80x-7.70x)"


def test_forecast_has_no_at_most():
    assert ranges.speedup(1.7, 1.4, 2.1, kind="forecast") == "1.70x (95% range 1.40x-2.10x)"


def test_range_of_one_value_is_left_out():
    assert ranges.speedup(1.5, 1.5, 1.5, kind="forecast") == "1.50x"
    assert ranges.speedup(2.0) == "at most 2.00x"


def test_unbounded_top_is_said_in_words():
    assert ranges.speedup(4.82, 2.14, 100.0) == "at most 4.82x (95% range 2.14x or more)"
    assert ranges.interval_x(1.2, math.inf) == "1.20x or more"


def test_ceiling_under_one_is_never_a_speedup():
    text = ranges.speedup(0.98)
    assert text == "no speed-up (its ceiling, 0.98x, is under 1x)"
    assert not text.startswith("at most")


def test_forecast_under_one_is_a_slowdown():
    assert (
        ranges.speedup(0.9, 0.85, 0.95, kind="forecast")
        == "0.90x (a slow-down) (95% range 0.85x-0.95x)"
    )


def test_speedup_of_a_rules_speedup():
    s = removal_speedup(40.0, 5.0, "input")
    assert ranges.speedup_of(s) == f"at most {s.value:.2f}x (95% range {s.low:.2f}x-{s.high:.2f}x)"
    assert ranges.speedup_of(Speedup(1.3, 1.3, 1.3, "", kind="forecast")) == "1.30x"


def test_figure_with_its_spread():
    assert ranges.spread(12.3456, 0.21, "ms") == "12.346 ±0.210 ms"
    assert ranges.spread(12.3456, None, "ms") == "12.346 ms (spread unknown)"
    assert (
        ranges.spread(1234.0, math.inf, "samples/s", digits=0) == "1,234 samples/s (spread unknown)"
    )


def test_interval_of_a_figure():
    assert ranges.interval(1234, 1456, "samples/s") == "1,234-1,456 samples/s"
    assert ranges.interval(1234, None, "samples/s") == "1,234 or more samples/s"
