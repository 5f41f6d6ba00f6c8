"""The user's clock first (analyze/clock.py): a step at each scope, and the parts between them."""

import math

from scaldiag.analyze import recorded_steps
from scaldiag.analyze.clock import LOOP_ITERATION, STEADY_STEP, WHOLE_EPOCH, WHOLE_TRAINING, clock
from scaldiag.analyze.epochs import epoch_stats

MS = 1_000_000


def _loop(steps: int, step_ms: int, eval_ms: int):
    """A PyTorch-shaped loop: each iteration a step of step_ms, then eval_ms of evaluation marked
    test_begin/test_end (as model.eval()/model.train() mark it); the step after it begins at
    test_end.
    """
    found, marks, t = [], [{"mark": "epoch_begin", "t_ns": 0, "epoch": 0}], 0
    for i in range(steps):
        begin = t
        t += step_ms * MS
        found.append(
            recorded_steps.Period(
                step=i,
                epoch=0,
                first_batch=i,
                batches=1,
                begin_ns=begin,
                end_ns=t,
                ends_epoch=False,
                traced=False,
                kind=recorded_steps.STEADY,
            )
        )
        marks += [{"mark": "test_begin", "t_ns": t}, {"mark": "test_end", "t_ns": t + eval_ms * MS}]
        t += eval_ms * MS
    marks.append({"mark": "epoch_end", "t_ns": t, "epoch": 0})
    return found, marks


def test_a_loop_with_evaluation_in_every_iteration_reads_as_step_plus_evaluation():
    found, marks = _loop(steps=10, step_ms=4, eval_ms=3)
    c = clock(found, marks, {"loop_adapters": ["pytorch"]}, None, 4.0, 0.0)
    assert c.user_scope == LOOP_ITERATION
    # From the second step on, each iteration is its evaluation and its step: 7 ms.
    assert math.isclose(c.scopes[LOOP_ITERATION].ms, 7.0)
    assert c.scopes[STEADY_STEP].ms == 4.0
    parts = dict(c.parts_ms)
    assert math.isclose(parts["evaluation inside the loop"], 3.0)
    assert abs(parts["the loop's other work between steps"]) < 1e-9


def test_keras_reads_whole_epochs_and_names_validation():
    found, marks = [], []
    t = 0
    for epoch in range(4):
        marks.append({"mark": "epoch_begin", "t_ns": t, "epoch": epoch})
        for i in range(5):
            found.append(
                recorded_steps.Period(
                    step=epoch * 5 + i,
                    epoch=epoch,
                    first_batch=epoch * 5 + i,
                    batches=1,
                    begin_ns=t,
                    end_ns=t + 2 * MS,
                    ends_epoch=i == 4,
                    traced=False,
                    kind=recorded_steps.STEADY,
                )
            )
            t += 2 * MS
        marks += [
            {"mark": "test_begin", "t_ns": t},
            {"mark": "test_end", "t_ns": t + 5 * MS},
            {"mark": "epoch_end", "t_ns": t + 5 * MS, "epoch": epoch},
        ]
        t += 5 * MS
    epochs = epoch_stats(found, marks)
    c = clock(
        found, marks, {"framework": {"name": "keras"}, "loop_adapters": ["keras"]}, epochs, 2.0, 0.0
    )
    assert c.user_scope == WHOLE_EPOCH
    # Keras's verbose=1 figure leaves each epoch's first step out: (4 steps + 5 ms validation) / 4.
    assert math.isclose(c.scopes[WHOLE_EPOCH].user_ms, (4 * 2 + 5) / 4)
    assert math.isclose(dict(c.parts_ms)["validation"], 5 / 5)
    assert WHOLE_TRAINING in c.scopes


def test_a_loop_without_known_clock_leads_with_the_steady_step():
    found, marks = _loop(steps=3, step_ms=4, eval_ms=0)
    c = clock(found, marks, {}, None, 4.0, 0.0)
    assert c.user_scope == STEADY_STEP
    assert c.parts_ms == []


def test_no_steady_step_no_clock():
    assert clock([], [], {}, None, None, math.nan) is None


def test_jax_leads_with_the_hosts_dispatch_and_names_the_backlog_a_sync_waits_for():
    """JAX's own examples stop their timers before any sync: the adapter's wait at each sync
    (``device_wait``) is the device's backlog, which their clock leaves out and the step holds."""
    found, marks = _loop(steps=10, step_ms=4, eval_ms=0)
    last = found[-1]
    marks.append({"mark": "device_wait", "t_ns": last.end_ns - 10 * MS, "end_ns": last.end_ns})
    c = clock(found, marks, {"loop_adapters": ["jax"]}, None, 4.0, 0.0)
    assert c.user_scope == "host_dispatch"
    assert math.isclose(c.scopes["host_dispatch"].ms, (40 - 10) / 10)
    ((part, ms),) = c.parts_ms
    assert "backlog" in part and math.isclose(ms, 1.0)


def test_lightning_reads_the_last_epochs_iterations():
    """Lightning's bar shows the rate of the epoch running: at the end, the last epoch's batches
    after
    its first. The line gives that figure and, beside it, every epoch's."""
    found, t = [], 0
    for epoch, step_ms in enumerate((4, 4, 6)):
        for i in range(5):
            found.append(
                recorded_steps.Period(
                    step=epoch * 5 + i,
                    epoch=epoch,
                    first_batch=epoch * 5 + i,
                    batches=1,
                    begin_ns=t,
                    end_ns=t + step_ms * MS,
                    ends_epoch=i == 4,
                    traced=False,
                    kind=recorded_steps.STEADY,
                )
            )
            t += step_ms * MS
    c = clock(found, [], {"loop_adapters": ["pytorch", "lightning"]}, None, 14 * 5 / 15, 0.0)
    scope = c.scopes[LOOP_ITERATION]
    assert c.user_scope == LOOP_ITERATION and scope.reads_last_epoch
    assert math.isclose(scope.ms_last_epoch, 6.0) and math.isclose(scope.user_ms, 6.0)
    assert math.isclose(scope.ms, (4 * 4 + 4 * 4 + 4 * 6) / 12)


def test_transformers_train_runtime_reaches_the_epochs_end_past_the_last_steps_evaluation():
    """The Trainer's train_runtime runs from before on_train_begin to the end of the last epoch: the
    evaluation (and checkpoint) due at the last step come after that step's end and are in it (a CPU
    run of transformers' run_clm.py with eval_strategy steps: scaldiag's figure was 4.7% short
    without them).
    """
    found, t = [], 2 * MS  # fit_begin (on_train_begin) at 0, the first step 2 ms later
    marks = [{"mark": "fit_begin", "t_ns": 0}, {"mark": "epoch_begin", "t_ns": MS, "epoch": 0}]
    for i in range(10):
        found.append(
            recorded_steps.Period(
                step=i,
                epoch=0,
                first_batch=i,
                batches=1,
                begin_ns=t,
                end_ns=t + 4 * MS,
                ends_epoch=i == 9,
                traced=False,
                kind=recorded_steps.STEADY,
            )
        )
        t += 4 * MS
        if i in (4, 9):  # eval_steps 5: after steps 5 and 10, before the epoch ends
            marks += [
                {"mark": "test_begin", "t_ns": t, "kind": "evaluation"},
                {"mark": "test_end", "t_ns": t + 3 * MS, "kind": "evaluation"},
            ]
            t += 3 * MS
    marks += [{"mark": "epoch_end", "t_ns": t, "epoch": 0}, {"mark": "fit_end", "t_ns": t + 5 * MS}]
    c = clock(found, marks, {"loop_adapters": ["pytorch", "transformers"]}, None, 4.0, 0.0)
    assert c.user_scope == WHOLE_TRAINING
    # 2 ms before the first step, 10 steps of 4 ms, two evaluations of 3 ms: 48 ms over 10 steps.
    assert math.isclose(c.scopes[WHOLE_TRAINING].ms, 4.8)
    parts = dict(c.parts_ms)
    assert math.isclose(parts["evaluation and checkpoints inside training"], 0.6)
    assert math.isclose(parts["epoch edges, compiles and the loop's other work"], 0.2)


def test_whole_training_without_loop_marks_is_the_steps_span():
    found, marks = _loop(steps=4, step_ms=4, eval_ms=0)
    marks = [m for m in marks if m["mark"] != "epoch_end"]
    c = clock(found, marks, {}, None, 4.0, 0.0)
    assert math.isclose(c.scopes[WHOLE_TRAINING].ms, 4.0)
