"""``scaldiag try``'s fixes applied inside the child (collect/frameworks/try_fixes.py) and chosen
from a fix's text (commands/try_fix.py ``fix_env``): real Keras classes, patched on subclasses so
nothing leaks into other tests."""

from __future__ import annotations

import json
import types

import pytest

from scaldiag.collect.frameworks import try_fixes
from scaldiag.commands.try_fix import fix_env
from scaldiag.rules import knobs
from scaldiag.rules.sd102_host_to_device import FIX as SD102_FIX
from scaldiag.rules.sd105_host_bound import FIX as SD105_FIX

PLAN = {"num_workers": "1", "pydataset_workers": "1", "intra_op_threads": "2"}


def test_a_keras_fix_is_applied_through_the_environment_and_a_torch_one_is_not():
    values = knobs.values(SD105_FIX["tensorflow"])
    env, sets = fix_env(values, "tensorflow", PLAN)
    n = int(max(values["steps_per_execution"], key=int))
    assert json.loads(env[try_fixes.KERAS_ENV]) == {"steps_per_execution": n}
    assert sets == {"steps_per_execution": n}
    # the same knob named in a PyTorch run's text is no PyTorch knob: nothing to apply
    assert fix_env(values, "pytorch", PLAN) == ({}, {})


def test_a_fix_with_no_knob_try_can_set_gives_nothing_to_apply():
    # SD102's PyTorch fix names pin_memory and uint8 input: neither is set from outside
    assert fix_env(knobs.values(SD102_FIX["pytorch"]), "pytorch", PLAN) == ({}, {})


def test_pydataset_workers_take_try_s_value(monkeypatch):
    keras = pytest.importorskip("keras")
    monkeypatch.setenv(try_fixes.KERAS_ENV, json.dumps({"workers": 3}))

    class Base(keras.utils.PyDataset):  # stands in for Keras's own, which stays untouched
        pass

    class Rows(Base):  # a script's dataset: its keyword arguments passed up
        def __init__(self, **kwargs):
            super().__init__(**kwargs)

        def __len__(self):
            return 1

        def __getitem__(self, i):
            return i

    # the import hook hands over the module that defines PyDataset
    try_fixes.patch_pydataset(types.SimpleNamespace(PyDataset=Base))
    assert Rows(workers=1, use_multiprocessing=False).workers == 3
    assert keras.utils.PyDataset(workers=1).workers == 1


def test_compile_takes_try_s_steps_per_execution(monkeypatch):
    keras = pytest.importorskip("keras")
    monkeypatch.setenv(try_fixes.KERAS_ENV, json.dumps({"steps_per_execution": 8}))

    class Small(keras.Sequential):
        pass

    try_fixes.patch_compile(Small)
    model = Small([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", None, None, None, False, 1)  # positional, as some scripts do
    assert model.steps_per_execution == 8
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    plain.compile("sgd", "mse", steps_per_execution=1)
    assert plain.steps_per_execution == 1


def test_the_dataloader_fix_takes_every_knob_the_text_names_pin_memory_on_a_gpu_only():
    from scaldiag.rules.sd101_input_bound import FIX as SD101_FIX

    values = knobs.values(SD101_FIX["pytorch"])
    env, sets = fix_env(values, "pytorch", PLAN)  # a CPU plan: no pin_memory in it
    loader = json.loads(env[try_fixes.DATALOADER_ENV])
    assert loader == {"num_workers": 1, "persistent_workers": True, "prefetch_factor": 4}
    assert sets == loader
    env, _ = fix_env(values, "pytorch", {**PLAN, "pin_memory": "True"})  # a GPU's plan
    assert json.loads(env[try_fixes.DATALOADER_ENV])["pin_memory"] is True


def test_fit_takes_try_s_batch_factor_for_arrays_only(monkeypatch):
    """``try --allow-semantic``'s batch x k: Model.fit's batch_size multiplied where x is an array
    (Keras's default 32 where the script gives none); a dataset batches itself, left alone."""
    keras = pytest.importorskip("keras")
    np = pytest.importorskip("numpy")
    monkeypatch.setenv(try_fixes.KERAS_ENV, json.dumps({"batch_size_factor": 4}))
    seen = []

    class Small(keras.Sequential):
        def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", **kwargs):
            seen.append(batch_size)  # stands in for Keras's fit, which stays untouched

    try_fixes.patch_fit_batch(Small)
    model = Small([keras.Input((4,)), keras.layers.Dense(1)])
    x, y = np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32")
    model.fit(x, y, 8)  # positional, as some scripts do
    model.fit(x, y)  # no batch given: Keras's 32
    model.fit(x=iter([(x, y)]))  # a generator: its own batches
    assert seen == [32, 4 * try_fixes.KERAS_DEFAULT_BATCH, None]


def test_the_dataloader_takes_try_s_batch_factor_unless_a_batch_sampler_makes_the_batches(
    monkeypatch,
):
    torch = pytest.importorskip("torch")
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

    monkeypatch.setenv(try_fixes.DATALOADER_ENV, json.dumps({"batch_size_factor": 4}))

    class Loader(DataLoader):  # stands in for torch's, which stays untouched
        pass

    try_fixes.patch_dataloader(types.SimpleNamespace(DataLoader=Loader))
    data = TensorDataset(torch.zeros(64, 2))
    assert Loader(data, batch_size=8).batch_size == 32
    assert Loader(data).batch_size == 4  # DataLoader's default batch of 1
    sampler = BatchSampler(SequentialSampler(data), batch_size=8, drop_last=False)
    assert len(next(iter(Loader(data, batch_sampler=sampler)))[0]) == 8
    assert DataLoader(data, batch_size=8).batch_size == 8


def test_a_batch_fix_is_measured_in_samples_and_one_the_script_ignored_measures_nothing():
    from scaldiag.analyze.try_stats import batch_unchanged, pair_ratio
    from scaldiag.commands.try_fix import _result

    # batch x4: the fixed step is 2x longer with 4x the samples: 2x the samples/s
    pair = {
        "baseline": {"exit": 0, "step_ms": 10.0, "samples_per_step": 16},
        "fixed": {"exit": 0, "step_ms": 20.0, "samples_per_step": 64},
    }
    assert pair_ratio(pair) == pytest.approx(2.0)
    # the same batch on both sides: the steps' ratio
    same = {
        "baseline": {"exit": 0, "step_ms": 10.0, "samples_per_step": 16},
        "fixed": {"exit": 0, "step_ms": 8.0, "samples_per_step": 16},
    }
    assert pair_ratio(same) == pytest.approx(1.25)
    assert pair_ratio({"baseline": {"step_ms": 10.0}}) is None  # an interrupted pair
    sets = {"per_replica_batch_factor": 4}
    assert batch_unchanged(sets, [pair]) is None
    why = batch_unchanged(sets, [same])
    assert "did not take a batch x4" in why
    finding = types.SimpleNamespace(id="SD105", forecast=None, predicted_speedup=None)
    kept = _result(finding, sets, [same], None)
    assert kept["speedup"] is None and kept["not_applied"] == why
    assert batch_unchanged({"steps_per_execution": 32}, [same]) is None


def test_allow_semantic_tries_the_batch_the_forecast_is_of():
    from scaldiag.commands.try_fix import BATCH_FORECAST, semantic_env

    arithmetic = "per-replica batch x4: per-sample parts (device) 0.100 ms grow x4, ..."
    assert int(BATCH_FORECAST.match(arithmetic).group(1)) == 4
    assert BATCH_FORECAST.match("parallel input workers: ...") is None
    env, sets = semantic_env("pytorch", 4)
    assert json.loads(env[try_fixes.DATALOADER_ENV]) == {"batch_size_factor": 4}
    assert sets == {"per_replica_batch_factor": 4}
    env, _ = semantic_env("jax", 4)
    assert json.loads(env[try_fixes.KERAS_ENV]) == {"batch_size_factor": 4}


def test_the_tf_data_fix_is_tried_only_on_a_script_that_feeds_fit_a_tf_data_dataset():
    """SD101's next lever on a PyDataset script says "feed a tf.data pipeline with
    num_parallel_calls=tf.data.AUTOTUNE": a rewrite, not a knob of the script's pipeline; only a
    run whose input ceiling iterated a tf.data dataset of the script's own gets the map's fix."""
    from scaldiag.rules.machine import fed_tf_data

    text = "or feed a tf.data pipeline with num_parallel_calls=tf.data.AUTOTUNE and .prefetch(...)"
    values = knobs.values(text)
    assert values == {"tf_data_autotune": {"tf.data.AUTOTUNE"}}
    tf_data = {"input_ceiling": {"source": "tf.data.Dataset iterated alone"}}
    pydataset = {"input_ceiling": {"source": "SlowBatches.__getitem__ called alone"}}
    assert fed_tf_data(tf_data) and not fed_tf_data(pydataset) and not fed_tf_data({})
    env, sets = fix_env(values, "tensorflow", PLAN, fed_tf_data(tf_data))
    assert json.loads(env[try_fixes.KERAS_ENV]) == {"tf_data_autotune": True}
    assert sets == {"num_parallel_calls": "tf.data.AUTOTUNE"}
    assert fix_env(values, "tensorflow", PLAN, fed_tf_data(pydataset)) == ({}, {})
    assert fix_env(values, "jax", PLAN, True) == ({}, {})  # no tf.data under JAX's Keras here
