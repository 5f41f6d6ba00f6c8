"""A patch reaches a framework's module only through an adapter's trigger (adapters.import_patches
watches the triggers alone). Twice a patch was given by an adapter module's ``patches()`` and never
triggered: the PyDataset and tf.data fixes of `try` (their fixed runs ran the script's own, found on
tests/tfdata_slow_map.py) and the CUDA graph hooks (torch.cuda.graphs: a graph-capturing script
under `profile` hung at exit on the GPU, every fix of docs/pytorch.md written and none applied)."""

import importlib
import json

import pytest

from scaldiag.collect.env import EMULATE_ENV, TRY_DATALOADER_ENV, TRY_KERAS_ENV
from scaldiag.collect.frameworks import adapters


@pytest.mark.parametrize("adapter", adapters.ADAPTERS, ids=lambda a: a.name)
def test_every_patch_an_adapter_gives_is_watched(adapter, monkeypatch):
    # The switches under which the adapters give their optional patches (emulation, try's fixes).
    monkeypatch.setenv(EMULATE_ENV, "2")
    monkeypatch.setenv(TRY_KERAS_ENV, json.dumps({"tf_data_autotune": True, "workers": 2}))
    monkeypatch.setenv(TRY_DATALOADER_ENV, json.dumps({"num_workers": 1}))
    given = importlib.import_module(adapter.module).patches()
    assert given, adapter.name
    assert set(given) <= set(adapter.triggers), set(given) - set(adapter.triggers)
    assert set(given) <= set(adapters.import_patches())
