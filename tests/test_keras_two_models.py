"""Two models fitted in one script (issue 46): each fit is keyed by its model, their epochs are kept
apart, the second model's compile epoch is known by its compile marks, and the figures are one
model's (the traced one) with the others' beside them."""

import shutil

import pytest
from loops import ROOT, profile

from scaldiag.analyze import recorded_steps
from scaldiag.analyze.epochs import epoch_stats

MS = 1_000_000


def _two_models(compile_in: int | None = None):
    """Periods and marks of two models, 3 epochs each of 4 steps of 2 ms (model 0) and 5 ms
    (model 1); ``compile_in``: an epoch that holds a compile mark."""
    found, marks, t, step = [], [], 0, 0
    for epoch in range(6):
        model = epoch // 3
        if epoch % 3 == 0:
            marks.append(
                {"mark": "fit_begin", "t_ns": t, "model": model, "model_name": f"m{model}"}
            )
        marks.append({"mark": "epoch_begin", "t_ns": t, "epoch": epoch, "model": model})
        if epoch == compile_in:
            marks.append({"mark": "compile", "t_ns": t + MS, "end_ns": t + 2 * MS})
        for _ in range(4):
            begin, t = t, t + (2 if model == 0 else 5) * MS
            found.append(
                recorded_steps.Period(
                    step, epoch, step, 1, begin, t, False, False, recorded_steps.STEADY
                )
            )
            step += 1
        marks.append({"mark": "epoch_end", "t_ns": t, "epoch": epoch})
    return found, sorted(marks, key=lambda m: m["t_ns"])


def test_each_model_is_compared_from_its_own_third_epoch():
    found, marks = _two_models()
    e = epoch_stats(found, marks)
    assert [(m.name, m.epochs, m.compared) for m in e.models] == [
        ("m0", [0, 1, 2], [2]),
        ("m1", [3, 4, 5], [5]),
    ]
    assert [m.ms_per_step for m in e.models] == [2.0, 5.0]
    # No trace window: the first model's figures, and the epochs that are its own.
    assert (e.model, e.compared, e.ms_per_step) == (0, [2], 2.0)
    assert e.model_epochs == {0, 1, 2}


def test_an_epoch_that_compiled_is_left_out_by_its_compile_mark_and_the_traced_model_heads():
    found, marks = _two_models(compile_in=5)
    marks.append({"mark": "trace_start", "t_ns": found[13].begin_ns})  # in model 1's epoch 3
    e = epoch_stats(found, sorted(marks, key=lambda m: m["t_ns"]))
    assert [x.compiled for x in e.epochs] == [False] * 5 + [True]
    assert e.model == 1 and "traced" in e.model_why
    # Model 1's only later epoch compiled: nothing else to compare, so it stays (compiling is then
    # its steady state), never dropped for its length.
    assert e.compared == [5] and e.compiled_left_out == []


def test_one_model_records_have_no_models_and_keep_the_runs_numbering():
    found, marks = _two_models()
    for m in marks:
        m.pop("model", None)
    e = epoch_stats(found, marks)
    assert e.models == [] and e.model is None and e.model_epochs is None
    assert e.compared == [2, 3, 4, 5]


def test_two_keras_models_fitted_one_after_the_other(tmp_path):
    pytest.importorskip("tensorflow")
    from scaldiag.pipeline import analyze_run_dir
    from scaldiag.record.reader import read_record

    script = tmp_path / "keras_two_models.py"
    shutil.copy(ROOT / "tests" / "keras_two_models.py", script)
    script.write_text(
        script.read_text().replace("default=2048", "default=512")
    )  # 16 steps an epoch: the trace window fits in the first fit
    run_dir, _ = profile(script, env={"SCALDIAG_INPUT_FREE": "0"})
    record = read_record(run_dir)
    fits = [(m["model"], m["model_name"]) for m in record.marks if m["mark"] == "fit_begin"]
    assert fits == [(0, "baseline"), (1, "wider")]
    assert record.training["models"] == ["baseline", "wider"]
    begins = [m for m in record.marks if m["mark"] == "epoch_begin"]
    assert [(m["epoch"], m["model"]) for m in begins] == [(i, i // 3) for i in range(6)]
    a = analyze_run_dir(run_dir)
    e = a.epochs
    assert [(m.name, m.epochs, m.compared) for m in e.models] == [
        ("baseline", [0, 1, 2], [2]),
        ("wider", [3, 4, 5], [5]),
    ]
    # The second model's first epoch holds its train function's tf.function traces.
    assert next(x for x in e.epochs if x.epoch == 3).compiled
    assert e.model == 0 and e.model_why == "the model the profiler traced"
    assert e.compared == [2]
    # The steps and clocks are the traced model's: its 3 epochs of 16 steps, no step of the other.
    assert a.steps.recorded == 48
    assert a.clock.scopes["whole_epoch"].what.startswith("baseline: epoch 3")
