"""The input-free step on real TensorFlow (CPU): a clone is timed, the user's model and randomness untouched."""

import os
import random

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="needs TensorFlow (make test installs it)")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
keras = pytest.importorskip("keras")

from scaldiag.collect.frameworks import input_free  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_process_flag(monkeypatch):
    monkeypatch.setattr(input_free, "_measured_in_this_process", False)


def _model():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dropout(0.1),
                              keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.default_rng(0).random((256, 8), dtype=np.float32)
    y = np.arange(256) % 3
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    return model, (x[:32], y[:32])


def test_the_clone_is_timed_and_the_users_model_and_random_state_are_untouched():
    model, batch = _model()
    before = [v.numpy().copy() for v in model.variables + model.optimizer.variables]
    random.seed(7)
    np.random.seed(7)
    expected = (random.random(), np.random.random())
    random.seed(7)
    np.random.seed(7)
    result = input_free.measure(model, batch, "tensorflow", step_s=0.002, parameter_bytes=None)
    assert (random.random(), np.random.random()) == expected
    after = [v.numpy() for v in model.variables + model.optimizer.variables]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert result["epochs_timed"] == input_free.TIMED_EPOCHS
    assert 0 < result["step_ms_min"] <= result["step_ms"] <= result["step_ms_max"]
    assert result["steps_per_epoch"] >= input_free.MIN_STEPS


def test_once_per_process_a_missing_batch_and_a_huge_model_are_skipped_with_the_reason():
    model, batch = _model()
    with pytest.raises(input_free.Skipped, match="no batch"):
        input_free.measure(model, None, "tensorflow", 0.01, None)
    with pytest.raises(input_free.Skipped, match="MiB of parameters"):
        input_free.measure(model, batch, "tensorflow", 0.01, input_free.MAX_PARAMETER_BYTES + 1)
    with pytest.raises(input_free.Skipped, match="over 30 s"):
        input_free.measure(model, batch, "tensorflow", 20.0, None)
    with pytest.raises(input_free.Skipped, match="once per process"):
        input_free.measure(model, batch, "tensorflow", 0.01, None)


def test_a_subclassed_model_cannot_be_cloned_and_says_so():
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return self.dense(x)

    model = Net()
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((32, 4), np.float32)
    model.fit(x, np.zeros((32, 3), np.float32), verbose=0)
    with pytest.raises(input_free.Skipped, match="clone"):
        input_free.measure(model, (x, np.zeros((32, 3), np.float32)), "tensorflow", 0.001, None)


def test_a_step_estimate_far_too_short_cannot_run_the_clone_past_its_time(monkeypatch):
    # Host step periods can undercount (a backend dispatching ahead): the epochs themselves are timed
    # and the clone is stopped once the rest would pass MAX_SECONDS.
    model, batch = _model()
    monkeypatch.setattr(input_free, "MAX_SECONDS", 0.5)
    with pytest.raises(input_free.Skipped, match="stopped"):
        input_free.measure(model, batch, "tensorflow", step_s=1e-4, parameter_bytes=None)
