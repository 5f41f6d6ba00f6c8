"""Steady-state step statistics from recorded steps (pure functions)."""

import numpy as np
import pytest

from scaldiag.analyze.run import step_stats
from scaldiag.record.run_json import RunJson
from scaldiag.record.rundir import read_jsonl

MS = 1_000_000


def steps(periods_ms, traced=(), epochs=None):
    rows, t = [], 0
    for i, p in enumerate(periods_ms):
        rows.append(
            {
                "step": i,
                "epoch": (epochs or {}).get(i, 0),
                "begin_ns": t,
                "end_ns": t + int(p * MS) - 1000,
                "traced": i in traced,
            }
        )
        t += int(p * MS)
    return rows


def compile_mark(rows, step, ms=50):
    """A compile the framework reported, inside ``step`` (as the JAX listener or dynamo writes it).
    """
    begin = rows[step]["begin_ns"] + 1000
    return {"mark": "compile", "t_ns": begin, "end_ns": begin + ms * 1000, "source": "test"}


def test_warmup_compile_and_trace_window_are_left_out():
    periods = [500, 40, 12] + [10, 11, 9, 10] + [10] * 5 + [10, 10, 300, 10, 10]
    rows = steps(periods, traced=range(7, 12))
    s = step_stats(rows, {"warmup_steps": 3, "global_batch": 64}, [compile_mark(rows, 14)])
    assert s.excluded["warm-up"] == [0, 1, 2]
    assert s.excluded["profiler window"] == [6, 7, 8, 9, 10, 11]
    assert s.excluded["compile or retrace"] == [14]
    assert s.steady == 7  # steps 3,4,5,12,13,15 and 16, which ends at its own end (the run's last)
    assert s.recorded == s.steady + sum(len(v) for v in s.excluded.values())
    assert s.step_time_ms.mean == pytest.approx((60 + 10 - 0.001) / 7)
    assert s.samples_per_s == pytest.approx(64 / (s.step_time_ms.mean / 1e3))
    assert s.samples_per_s_low < s.samples_per_s < s.samples_per_s_high
    assert s.profiler_inflation == pytest.approx(10 / s.step_time_ms.mean)


def test_a_slow_step_without_evidence_is_steady_and_reported_as_an_outlier():
    """Eager PyTorch compiles nothing: its slow step (a catch-up after the script's own synchronize,
    a load spike) is the user's time, in the mean, and named as an outlier."""
    periods = [10] * 3 + [10] * 8 + [300] + [10] * 8
    rows = steps(periods)
    s = step_stats(rows, {"warmup_steps": 3, "global_batch": 64})
    assert "compile or retrace" not in s.excluded
    assert s.steady == 17 and s.outliers == [11]
    assert s.step_time_ms.mean == pytest.approx((16 * 10 + 300 - 0.001) / 17)


def test_a_recompile_in_a_later_epoch_is_left_out_with_the_frameworks_evidence():
    """Keras 3 on JAX recompiles at the first step of the second epoch: the compile event marks it.
    """
    rows = steps([2] * 10 + [600] + [2] * 9, epochs={i: i // 10 for i in range(20)})
    without = step_stats(rows, {"warmup_steps": 3})
    assert "compile or retrace" not in without.excluded and without.outliers == [10]
    s = step_stats(rows, {"warmup_steps": 3}, [compile_mark(rows, 10, ms=500)])
    assert s.excluded["compile or retrace"] == [10] and not s.outliers
    assert s.step_time_ms.mean == pytest.approx(2.0, rel=1e-3)


def test_an_epoch_begin_inside_a_step_starts_it_there():
    """PyTorch: the step after an epoch's last optimizer.step() holds the epoch's end and the new
    DataLoader iterator; from the epoch_begin mark on it is a step, before it is the epoch's edge.
    """
    rows = steps([10] * 10 + [510] + [10] * 9)
    begin = rows[10]["begin_ns"] + 500 * MS
    s = step_stats(rows, {"warmup_steps": 0}, [{"mark": "epoch_begin", "t_ns": begin, "epoch": 1}])
    assert s.steady == 20 and not s.outliers
    assert s.step_time_ms.mean == pytest.approx(10.0, rel=1e-3)


def test_the_device_clock_times_the_steps_where_it_was_recorded():
    from scaldiag.analyze import recorded_steps

    rows = steps([2] * 10)  # the host queued each step in 2 ms; the device took 9 ms
    device = recorded_steps.device_times([{"step": 0, "device_ms": [9.0] * 10}])
    found = recorded_steps.periods(rows, {"warmup_steps": 2}, (), device)
    assert [p.ns_per_batch for p in found] == [9 * MS] * 10


def test_an_inflation_under_one_is_not_measurable_and_corrects_nothing():
    rows = steps([10] * 5 + [4] * 5 + [10] * 5, traced=range(5, 10))
    s = step_stats(rows, {"warmup_steps": 0})
    assert s.profiler_inflation is None and "not measurable" in s.inflation_note


def test_epoch_boundaries_are_not_step_periods():
    rows = steps([10] * 6 + [1000] + [10] * 6, epochs={i: 1 for i in range(7, 13)})
    rows[6]["end_ns"] = (
        rows[6]["begin_ns"] + 10 * MS
    )  # the epoch's last step ends at its sync point
    for r in rows[7:]:
        r["step"] -= 7  # Keras restarts batch numbers each epoch
    s = step_stats(rows, {"warmup_steps": 0})
    assert s.steady == 13 and s.recorded == 13
    assert s.step_time_ms.mean == pytest.approx((12 * 10 + 10 - 0.001) / 13)
    assert s.epoch_end_steps == 2
    assert s.samples_per_s is None  # no global batch known


def test_the_device_catching_up_at_the_epoch_end_is_counted():
    """An asynchronous backend: the host queues 20 steps at 2 ms, then waits 160 ms at the epoch's
    end.
    The stopwatch around the epoch says 10 ms per step; so must the steady step time."""
    rows = steps([2] * 20)
    rows[-1]["end_ns"] = rows[-1]["begin_ns"] + 162 * MS
    s = step_stats(rows, {"warmup_steps": 0, "global_batch": 100})
    epoch_ms = (rows[-1]["end_ns"] - rows[0]["begin_ns"]) / MS
    assert s.steady == 20 and not s.excluded
    assert s.step_time_ms.mean == pytest.approx(epoch_ms / 20)
    assert s.samples_per_s == pytest.approx(100 * 20 / (epoch_ms / 1e3))


def test_a_step_is_one_batch_with_steps_per_execution():
    """steps_per_execution=4 over 30 batches per epoch: executions of 4 batches, the last of 2."""
    rows = steps([8] * 7 + [4])
    for i, r in enumerate(rows):
        r["batch"] = 4 * i
    rows[-1]["end_ns"] = rows[-1]["begin_ns"] + 4 * MS
    s = step_stats(
        rows,
        {"warmup_steps": 0, "global_batch": 32, "steps_per_execution": 4, "steps_per_epoch": 30},
    )
    assert s.recorded == 30 and s.steady == 30
    assert s.samples_per_step == 32
    assert s.step_time_ms.mean == pytest.approx(2.0)  # (7 x 8 ms + 4 ms) / 30 batches
    assert s.samples_per_s == pytest.approx(32 / 0.002)


def test_every_recorded_step_is_steady_or_excluded_with_a_reason():
    rng = np.random.default_rng(0)
    for trial in range(50):
        n = int(rng.integers(2, 60))
        periods = rng.choice([1, 10, 11, 200], size=n, p=[0.1, 0.5, 0.35, 0.05])
        epochs = {i: int(e) for i, e in enumerate(np.sort(rng.integers(0, 3, n)))}
        rows = steps(
            periods, traced=range(int(rng.integers(0, n)), int(rng.integers(0, n))), epochs=epochs
        )
        s = step_stats(rows, {"warmup_steps": int(rng.integers(0, 5))})
        if s is None:
            continue
        assert s.recorded == n == s.steady + sum(len(v) for v in s.excluded.values()), trial


def test_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "beg')
    assert read_jsonl(path) == [{"step": 0}, {"step": 1}]


def test_the_first_epoch_end_compiles_once_and_is_not_steady():
    """Keras on JAX compiles the metrics' read-out at the first epoch's end (~200 ms on an H200)."""
    rows = steps([2] * 30, epochs={i: i // 10 for i in range(30)})
    for r in rows:
        r["step"] = r["step"] % 10
    for last, extra_ms in ((9, 200), (19, 1), (29, 1)):
        rows[last]["end_ns"] = rows[last]["begin_ns"] + (2 + extra_ms) * MS
    s = step_stats(rows, {"warmup_steps": 0}, [compile_mark(rows, 9, ms=150)])
    assert s.excluded == {"compile or retrace": [9]}


def test_a_slow_step_after_the_first_epoch_is_the_machine_and_stays_steady():
    rows = steps([2] * 20 + [50] + [2] * 9, epochs={i: i // 10 for i in range(30)})
    for r in rows:
        r["step"] = r["step"] % 10
    s = step_stats(rows, {"warmup_steps": 0})
    assert not s.excluded and s.steady == 30


def test_accounting_paints_every_second_once():
    """Launch 0 s, script 0.1 s, Keras 1 s, fit 2-9 s with 2 epochs of steps and a validation,
    ceiling,
    script end 9.5 s, launcher end 10 s."""
    from scaldiag.analyze import recorded_steps
    from scaldiag.analyze.accounting import account

    s = 1_000_000_000
    marks = [
        {"mark": m, "t_ns": int(t * s)}
        for m, t in [
            ("script_begin", 0.1),
            ("keras_imported", 1.0),
            ("fit_begin", 2.0),
            ("epoch_begin", 2.5),
            ("test_begin", 5.0),
            ("test_end", 5.5),
            ("epoch_begin", 6.0),
            ("ceiling_begin", 8.5),
            ("ceiling_end", 8.8),
            ("fit_end", 9.0),
            ("script_end", 9.5),
        ]
    ]
    rows = [
        {
            "step": i,
            "epoch": 0,
            "begin_ns": int((2.5 + 0.25 * i) * s),
            "end_ns": int(5.0 * s) if i == 9 else 0,
            "traced": 3 <= i < 8,
        }
        for i in range(10)
    ]
    rows += [
        {
            "step": 10 + i,
            "epoch": 1,
            "begin_ns": int((6.0 + 0.25 * i) * s),  # the recorder counts steps
            "end_ns": int(8.5 * s) if i == 9 else 0,
            "traced": False,
        }
        for i in range(10)
    ]  # over the run
    found = recorded_steps.periods(rows, {"warmup_steps": 3}, marks)
    acc = account(RunJson(started_ns=0, ended_ns=10 * s), marks, found)
    parts = {p.part: round(p.seconds, 6) for p in acc.parts}
    assert sum(parts.values()) == pytest.approx(10.0)
    assert parts["interpreter and scaldiag start"] == 0.1 and parts["imports"] == 0.9
    assert parts["script before fit"] == 1.0 and parts["fit start-up"] == 0.5
    assert parts["validation"] == 0.5 and parts["input-ceiling measurement"] == pytest.approx(0.3)
    assert parts["compilation and warm-up"] == 0.75  # steps 0-2 of the first epoch
    assert parts["profiler window"] == pytest.approx(
        1.25
    )  # traced steps 3-7 (step 2, warm-up, is warm-up)
    assert parts["steady training steps"] == pytest.approx(
        0.5 + 2.5
    )  # steps 8, 9 of epoch 0; all of epoch 1
    assert parts["epoch boundaries"] == pytest.approx(
        0.5 + 0.2
    )  # after validation; after the ceiling
    assert parts["teardown"] == 0.5 and "other" not in parts
    assert acc.own_s == pytest.approx(0.3)  # the ceiling measurement is scaldiag's, not the user's
    assert acc.goodput == pytest.approx(3.0 / (10 - 0.3))


def test_ranks_of_a_multi_process_job_each_get_their_steps_and_the_slow_one_is_named(tmp_path):
    import io
    import json as jsonlib

    from rich.console import Console

    from scaldiag.pipeline import diagnose_run
    from scaldiag.record.rundir import write_json
    from scaldiag.render import json as json_render
    from scaldiag.render import terminal

    def record(run_dir, step_ms):
        run_dir.mkdir(exist_ok=True)
        write_json(run_dir, "run.json", {"status": "finished", "started_ns": 0, "ended_ns": 10**10})
        write_json(run_dir, "training.json", {"warmup_steps": 2, "global_batch": 64})
        rows = steps([step_ms + 0.01 * (i % 3) for i in range(30)])
        (run_dir / "steps.jsonl").write_text("".join(jsonlib.dumps(r) + "\n" for r in rows))

    record(tmp_path, 10.0)
    record(tmp_path / "rank1", 12.0)
    report = diagnose_run(tmp_path)
    assert sorted(report.analysis.ranks) == [0, 1]
    assert report.analysis.ranks[1].step_time_ms.mean > report.analysis.ranks[0].step_time_ms.mean
    out = io.StringIO()
    terminal.render(report, Console(file=out, width=100))
    assert "rank 1 is 20% slower than the fastest" in out.getvalue()
    assert set(json_render.to_dict(report)["ranks"]) == {"0", "1"}
    # what the terminal says is the analysis's, so the JSON says it too
    assert json_render.to_dict(report)["slow_rank"] == {
        "rank": 1,
        "excess_pct": pytest.approx(20, abs=0.5),
    }
    record(tmp_path / "rank1", 10.0)  # the same speed: no rank is named
    out = io.StringIO()
    again = diagnose_run(tmp_path)
    terminal.render(again, Console(file=out, width=100))
    assert "no rank slower than another beyond the noise" in out.getvalue()
    assert again.analysis.slow_rank is None and json_render.to_dict(again)["slow_rank"] is None


def test_a_host_sample_row_with_another_number_of_cores_is_left_out():
    # A bit flipped in host_samples.jsonl ("60.0" -> "60,0") made one row three cores long (found by
    # fuzzing).
    from scaldiag.analyze.run import host_summary

    row = {"core_pct": [50.0, 60.0], "proc_cpu_pct": 80.0, "proc_rss_bytes": 100}
    rows = [{"t_ns": k, **row} for k in range(5)] + [
        {"t_ns": 5, **row, "core_pct": [50.0, 60.0, 0.0]}
    ]
    summary = host_summary(rows, None)
    assert summary.cores == 2 and summary.samples == 5 and summary.core_pct_mean == 55.0


def test_the_device_clock_sets_the_mean_too():
    rows = steps([2] * 10)
    from scaldiag.analyze import recorded_steps
    from scaldiag.analyze.run import _step_stats

    found = recorded_steps.periods(
        rows,
        {"warmup_steps": 0},
        (),
        recorded_steps.device_times([{"step": 0, "device_ms": [9.0] * 10}]),
    )
    s = _step_stats(found, {"global_batch": 9})
    assert s.clock == "device" and s.step_time_ms.mean == pytest.approx(9.0)
    assert s.samples_per_s == pytest.approx(1000.0)


def test_epochs_that_differ_widen_the_interval():
    """Three epochs at 10, 10 and 13 ms a step (the machine got busy): the per-step interval is
    narrow, the
    epochs' own means are not; the interval is the wider."""
    periods = [10] * 20 + [10] * 20 + [13] * 20
    rows = steps(periods, epochs={i: i // 20 for i in range(60)})
    s = step_stats(rows, {"warmup_steps": 0})
    means = np.array([10, 10, 13.0])
    from scaldiag.analyze.stats import t95

    assert s.step_time_ms.ci95 == pytest.approx(t95(2) * means.std(ddof=1) / np.sqrt(3), rel=1e-3)


def test_whole_epochs_are_timed_as_keras_prints_them():
    """Four epochs of 10 steps at 2 ms, each with 5 ms of iterator start before its first step and
    20 ms of
    validation after its last: Keras's verbose=2 ms/step is (5 + 20 + 20) / 10 = 4.5 ms, the steady
    step 2 ms.
    """
    from scaldiag.analyze import recorded_steps
    from scaldiag.analyze.epochs import epoch_stats

    rows, marks, t = [], [], 0
    for epoch in range(4):
        marks.append({"mark": "epoch_begin", "t_ns": t, "epoch": epoch})
        t += 5 * MS
        for i in range(10):
            rows.append(
                {"step": 10 * epoch + i, "epoch": epoch, "begin_ns": t, "end_ns": t + 2 * MS}
            )
            t += 2 * MS
        marks += [{"mark": "test_begin", "t_ns": t}, {"mark": "test_end", "t_ns": t + 20 * MS}]
        t += 20 * MS
        marks.append({"mark": "epoch_end", "t_ns": t, "epoch": epoch})
    found = recorded_steps.periods(rows, {"warmup_steps": 0}, marks)
    e = epoch_stats(found, marks)
    assert e.compared == [2, 3] and e.ms_per_step == pytest.approx(4.5)
    assert e.ms_per_step_after_first == pytest.approx((18 + 20) / 9)  # from the first step's end
    assert e.validation_s_per_epoch == pytest.approx(0.02)
    assert step_stats(rows, {"warmup_steps": 0}, marks).step_time_ms.mean == pytest.approx(2.0)


def test_compiles_in_most_steps_are_the_steady_state():
    """A shape that changes every step recompiles every step: that is what the user's stopwatch
    pays."""
    rows = steps([30] * 20)
    marks = [compile_mark(rows, i, ms=20) for i in range(20)]
    s = step_stats(rows, {"warmup_steps": 2}, marks)
    assert "compile or retrace" not in s.excluded and s.steady == 18 and s.compiling_steady == 18


def test_steps_of_zero_length_give_no_rate_and_no_error():
    """A damaged steps.jsonl (found by python -m bench fuzz --mode rundir): every steady step zero
    long."""
    rows = [{"step": i, "epoch": 0, "begin_ns": 1000, "end_ns": 1000} for i in range(10)]
    s = step_stats(rows, {"warmup_steps": 0, "global_batch": 32})
    assert s.samples_per_s is None and s.step_time_ms.mean == 0


def test_the_steps_on_the_input_s_buffer_are_not_steady():
    """With DataLoader workers, the ``in_flight`` batches after the warm-up and after the profiler
    window ran on a buffer the workers filled meanwhile (recorded_steps ``PREFETCHED``); after
    evaluation, which recurs every epoch and the user's clock holds, the steps stay steady."""
    from scaldiag.analyze import recorded_steps

    rows = steps([10] * 30, traced=range(12, 15))
    ready = {"mark": "input_ready", "t_ns": 0, "workers": 2, "in_flight": 4}
    evaluation = [
        {"mark": "test_begin", "t_ns": rows[24]["begin_ns"] + 10},  # step 24 begins at its end
        {"mark": "test_end", "t_ns": rows[24]["begin_ns"] + 20},
    ]
    found = recorded_steps.periods(rows, {"warmup_steps": 3}, [ready, *evaluation])
    kinds = {p.step: p.kind for p in found}
    prefetched = [s for s, k in kinds.items() if k == recorded_steps.PREFETCHED]
    # after the warm-up (0-2) and after the window (11-14: 11 is the step it starts in)
    assert prefetched == [3, 4, 5, 6, 15, 16, 17, 18]
    steady = [s for s, k in kinds.items() if k == recorded_steps.STEADY]
    assert steady == [7, 8, 9, 10, *range(19, 30)]
    # No workers (no in_flight): nothing is the buffer's.
    found = recorded_steps.periods(rows, {"warmup_steps": 3}, [{**ready, "in_flight": None}])
    assert not any(p.kind == recorded_steps.PREFETCHED for p in found)
