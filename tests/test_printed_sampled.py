"""A timer of one iteration a print, told from a timer of its window's mean by the record
(analyze/printed_sampled.py): made-up windows, each hypothesis planted."""

import numpy as np

from scaldiag.analyze.clock import LOOP_ITERATION
from scaldiag.analyze.printed_reading import TIMER, Reading
from scaldiag.analyze.printed_sampled import comparison, sampled


def _readings(values_ms):
    return [
        Reading("t", TIMER, LOOP_ITERATION, f"{v:.2f} ms", v, 10, k, k + 1, 0.005, "")
        for k, v in enumerate(values_ms)
    ]


def _windows(n, rng):
    """Iterations as on a loaded CPU: most 50-60 ms, one in a few stalled for seconds."""
    out = []
    for _ in range(n):
        w = rng.uniform(50, 60, 9)
        w[rng.integers(0, 9)] += rng.choice([0, 0, 3000])
        out.append(w)
    return out


def test_a_timer_of_the_second_last_iteration_is_found_and_agrees():
    rng = np.random.default_rng(0)
    windows = _windows(30, rng)
    values = [w[-2] for w in windows]
    s = sampled(_readings(values), windows)
    assert s is not None and s.back == 1 and s.every == 10
    x = comparison(s, dict(what="t", scope=LOOP_ITERATION, begin_ns=0, end_ns=0))
    assert x.agrees and abs(x.error) < 1e-9 and x.sampled_every == 10


def test_a_timer_of_its_window_s_mean_stays_a_mean():
    rng = np.random.default_rng(1)
    windows = _windows(30, rng)
    assert sampled(_readings([w.mean() for w in windows]), windows) is None


def test_a_timer_that_times_something_else_is_no_sample():
    """Each value 30% over any one iteration: neither hypothesis holds, the window's mean stands
    (and the clock's disagreement is said by printed_clock)."""
    rng = np.random.default_rng(2)
    windows = _windows(30, rng)
    assert sampled(_readings([1.3 * w[-1] for w in windows]), windows) is None


def test_too_few_readings_tell_nothing():
    rng = np.random.default_rng(3)
    windows = _windows(3, rng)
    assert sampled(_readings([w[-1] for w in windows]), windows) is None
