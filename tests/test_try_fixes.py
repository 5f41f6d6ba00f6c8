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
