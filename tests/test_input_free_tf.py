"""The input-free step on real TensorFlow (CPU): timed within its budget, the user's model and
randomness untouched."""

import math
import os
import random

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="needs TensorFlow (make test installs it)")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
keras = pytest.importorskip("keras")

from scaldiag.collect.frameworks import input_free  # noqa: E402

pytestmark = pytest.mark.slow  # real Keras trainings and timed steps, in this process


@pytest.fixture(autouse=True)
def fresh_process_flag(monkeypatch):
    monkeypatch.setattr(input_free, "_measured_in_this_process", False)


def _model(steps_per_execution=1):
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.1),
            keras.layers.Dense(3),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    x = np.random.default_rng(0).random((256, 8), dtype=np.float32)
    y = np.arange(256) % 3
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    return model, (x[:32], y[:32])


def _state(model):
    return [
        v.numpy().copy()
        for v in model.variables + model.optimizer.variables + model.metrics_variables
    ]


def test_the_budget_is_3_s_or_5_percent_of_the_run_whichever_is_larger():
    assert input_free.budget_s(0.0) == 3.0
    assert input_free.budget_s(59.0) == 3.0
    assert input_free.budget_s(600.0) == pytest.approx(30.0)
    assert input_free.budget_s(float("nan")) == 3.0


def test_a_runs_budget_counts_from_its_start_in_run_json(tmp_path):
    import json
    import time

    assert input_free.run_budget_s(tmp_path) == 3.0  # no run.json: the least budget
    (tmp_path / "run.json").write_text(json.dumps({"started_ns": time.time_ns() - 1000 * 10**9}))
    assert input_free.run_budget_s(tmp_path) == pytest.approx(50.0, abs=0.5)


@pytest.mark.parametrize("steps_per_execution", [1, 4])
def test_the_models_own_step_is_timed_within_the_budget_and_its_state_and_random_state_are_put_back(
    steps_per_execution,
):
    model, batch = _model(steps_per_execution)
    before = _state(model)
    random.seed(7)
    np.random.seed(7)
    expected = (random.random(), np.random.random())
    random.seed(7)
    np.random.seed(7)
    result = input_free.measure(
        model, batch, "tensorflow", step_s=0.002 * steps_per_execution, parameter_bytes=None
    )
    assert (random.random(), np.random.random()) == expected
    after = _state(model)
    assert len(before) == len(after) and all(np.array_equal(a, b) for a, b in zip(before, after))
    assert result["method"] == "own_step"
    assert result["epochs_timed"] == input_free.TIMED_EPOCHS
    assert 0 < result["step_ms_min"] <= result["step_ms"] <= result["step_ms_max"]
    assert result["steps_per_epoch"] > 3 and result["steps_per_epoch"] % steps_per_execution == 0
    assert result["budget_s"] == input_free.BUDGET_S
    assert result["steps_per_epoch"] <= input_free.MAX_STEPS


class _Clock:
    """The measurement's clock, advanced by the test: how the budget is spent then depends on no
    machine."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.mark.parametrize("steps_per_execution", [1, 4])
def test_the_timed_epochs_fill_the_budget_and_stay_within_it(monkeypatch, steps_per_execution):
    """The model's real step, on a clock that each execution advances 5 ms a batch: the epochs are
    sized
    from what is left of the budget, so they use most of it and never run past it (on the real clock
    a loaded machine decides both: `python -m bench input_free` guards the 3 s there)."""
    model, batch = _model(steps_per_execution)
    clock = _Clock()
    monkeypatch.setattr(input_free, "time", clock)
    real = model.train_function

    def step(iterator):
        clock.now += 0.005 * steps_per_execution
        return real(iterator)

    model.train_function = step
    result = input_free.measure(
        model, batch, "tensorflow", step_s=0.005 * steps_per_execution, parameter_bytes=None
    )
    assert result["method"] == "own_step" and result["epochs_timed"] == input_free.TIMED_EPOCHS
    assert (
        result["step_ms"] == pytest.approx(5.0) and result["steps_per_epoch"] < input_free.MAX_STEPS
    )
    assert 0.5 * input_free.BUDGET_S < result["seconds"] <= input_free.BUDGET_S


def test_a_clone_compiles_once_and_its_epochs_share_what_is_left_of_the_budget(monkeypatch):
    model, batch = _model()
    monkeypatch.setattr(input_free, "_own_step_applies", lambda model, backend: False)
    before = _state(model)
    result = input_free.measure(
        model, batch, "tensorflow", step_s=0.002, parameter_bytes=None, budget_s=6.0
    )
    assert result["method"] == "clone" and "clone" in result["source"]
    assert all(np.array_equal(a, b) for a, b in zip(before, _state(model)))
    assert result["epochs_timed"] == input_free.TIMED_EPOCHS
    assert 0 < result["compile_s"] < result["seconds"]
    assert 0 < result["step_ms_min"] <= result["step_ms"] <= result["step_ms_max"]


def test_a_compile_that_leaves_no_room_in_the_budget_is_said_not_timed(monkeypatch):
    model, batch = _model()
    monkeypatch.setattr(input_free, "_own_step_applies", lambda model, backend: False)
    # 20 ms steps need 0.08 s for a compile and three epochs of one: a compile that takes more than
    # 40 ms of the 0.1 s leaves no room (making and compiling a clone takes longer than that on any
    # machine).
    with pytest.raises(input_free.Skipped, match=r"compiling took .* of the 0.1 s budget"):
        input_free.measure(
            model, batch, "tensorflow", step_s=0.02, parameter_bytes=None, budget_s=0.1
        )


def test_once_per_process_a_missing_batch_a_huge_model_and_steps_too_long_for_the_budget_are_skipped():  # noqa: E501
    model, batch = _model()
    with pytest.raises(input_free.Skipped, match="no batch"):
        input_free.measure(model, None, "tensorflow", 0.01, None)
    with pytest.raises(input_free.Skipped, match="MiB of parameters"):
        input_free.measure(model, batch, "tensorflow", 0.01, input_free.MAX_PARAMETER_BYTES + 1)
    with pytest.raises(input_free.Skipped, match="over the 3 s budget"):
        input_free.measure(model, batch, "tensorflow", 1.0, None)
    with pytest.raises(input_free.Skipped, match="over the 30 s budget"):
        input_free.measure(
            model, batch, "tensorflow", 10.0, None, budget_s=input_free.budget_s(600)
        )
    input_free.measure(
        model, batch, "tensorflow", 0.002, None, budget_s=0.5
    )  # skips above did not count as one
    with pytest.raises(input_free.Skipped, match="once per process"):
        input_free.measure(model, batch, "tensorflow", 0.01, None)


def test_a_subclassed_model_is_timed_by_its_own_step_and_a_clone_of_it_cannot_be_made(monkeypatch):
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return self.dense(x)

    model = Net()
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((32, 4), np.float32), np.zeros((32, 3), np.float32)
    model.fit(x, y, verbose=0)
    result = input_free.measure(model, (x, y), "tensorflow", 0.001, None)
    assert result["method"] == "own_step" and result["step_ms"] > 0
    monkeypatch.setattr(input_free, "_measured_in_this_process", False)
    monkeypatch.setattr(input_free, "_own_step_applies", lambda model, backend: False)
    with pytest.raises(input_free.Skipped, match="clone"):
        input_free.measure(model, (x, y), "tensorflow", 0.001, None)


def test_a_step_estimate_far_too_short_cannot_run_past_the_budget():
    # Host step periods can undercount (a backend dispatching ahead): the first epoch, sized by that
    # estimate, takes longer than planned; the epochs after it are sized by what it measured, and
    # none starts that the budget cannot hold.
    model, batch = _model()
    budget = 0.4
    try:
        result = input_free.measure(
            model, batch, "tensorflow", step_s=1e-6, parameter_bytes=None, budget_s=budget
        )
    except input_free.Skipped as skipped:
        assert "stopped after" in str(skipped)
    else:
        assert result["seconds"] <= budget + result["step_ms_max"] * input_free.MAX_STEPS / 1e3
        assert math.isfinite(result["step_ms"])
