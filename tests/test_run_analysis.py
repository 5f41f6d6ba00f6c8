"""Steady-state step statistics from recorded steps (pure functions)."""

import pytest

from scaldiag.analyze.run import step_stats
from scaldiag.record.rundir import read_jsonl

MS = 1_000_000


def steps(periods_ms, traced=(), epochs=None):
    rows, t = [], 0
    for i, p in enumerate(periods_ms):
        rows.append({"step": i, "epoch": (epochs or {}).get(i, 0), "begin_ns": t, "end_ns": t + int(p * MS) - 1000,
                     "traced": i in traced})
        t += int(p * MS)
    return rows


def test_warmup_compile_and_trace_window_are_left_out():
    periods = [500, 40, 12] + [10, 11, 9, 10] + [10] * 5 + [10, 10, 300, 10, 10]
    rows = steps(periods, traced=range(7, 12))
    s = step_stats(rows, {"warmup_steps": 3, "global_batch": 64})
    assert s.excluded["warm-up"] == [0, 1, 2]
    assert s.excluded["profiler window"] == [6, 7, 8, 9, 10, 11]
    assert s.excluded["compile or retrace"] == [14]
    assert s.steady == 6  # steps 3,4,5,12,13,15 (step 16 has no next begin)
    assert s.step_time_ms.mean == pytest.approx(60 / 6)
    assert s.samples_per_s == pytest.approx(64 / 0.010)
    assert s.samples_per_s_low < s.samples_per_s < s.samples_per_s_high


def test_epoch_boundaries_are_not_step_periods():
    rows = steps([10] * 6 + [1000] + [10] * 6, epochs={i: 1 for i in range(7, 13)})
    for r in rows[7:]:
        r["step"] -= 7  # Keras restarts batch numbers each epoch
    s = step_stats(rows, {"warmup_steps": 0})
    assert s.steady == 11 and s.step_time_ms.mean == pytest.approx(10)
    assert s.samples_per_s is None  # no global batch known


def test_steps_per_execution_multiplies_samples():
    s = step_stats(steps([10] * 8), {"warmup_steps": 0, "global_batch": 32, "steps_per_execution": 4})
    assert s.samples_per_step == 128


def test_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "beg')
    assert read_jsonl(path) == [{"step": 0}, {"step": 1}]
