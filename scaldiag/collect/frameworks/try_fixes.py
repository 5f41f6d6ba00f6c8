"""The fix ``scaldiag try`` applies inside the child, from outside the script.

``SCALDIAG_TRY_DATALOADER`` holds JSON keyword arguments (``{"num_workers": 1,
"persistent_workers": true}``) that every ``torch.utils.data.DataLoader`` the script builds gets in
place of its own. ``SCALDIAG_TRY_KERAS`` (``{"steps_per_execution": 32, "workers": 1}``): every
``Model.compile`` gets that ``steps_per_execution``, every ``keras.utils.PyDataset`` those
``workers`` (threads; ``use_multiprocessing`` stays the script's). The script's file is never read
or written; unset, nothing changes.

``batch_size_factor`` (either variable; ``try --allow-semantic`` only: it changes what is trained)
multiplies the batch the script asks for: a DataLoader's ``batch_size`` (not one given a
``batch_sampler``, whose batches are the sampler's), ``Model.fit``'s ``batch_size`` where ``x`` is
an array (Keras's default 32 where the script gives none; a dataset or PyDataset batches itself).
Where it cannot, the run keeps the script's batch, and ``try`` reads that from the record.

``tf_data_autotune`` (``SCALDIAG_TRY_KERAS``, TensorFlow): every ``tf.data`` ``map`` the script
builds without ``num_parallel_calls`` gets ``tf.data.AUTOTUNE`` (its order kept: ``deterministic``
stays the script's). No prefetch is added: Keras's ``fit`` prefetches a tf.data dataset itself
(the trace shows its Prefetch stage, and SD101 says so).
"""

from __future__ import annotations

import functools
import json
import os

from scaldiag.collect.env import TRY_DATALOADER_ENV as DATALOADER_ENV
from scaldiag.collect.env import TRY_KERAS_ENV as KERAS_ENV

# Where Keras 3 defines PyDataset (both backends).
PYDATASET_MODULE = "keras.src.trainers.data_adapters.py_dataset_adapter"


def _overrides(name: str) -> dict:
    try:
        value = json.loads(os.environ.get(name) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def dataloader_overrides() -> dict:
    return _overrides(DATALOADER_ENV)


def keras_overrides() -> dict:
    return _overrides(KERAS_ENV)


def _given(original, self, args, kwargs) -> dict:
    """The arguments of a call by name, as ``original`` binds them (positional ones too), with a
    ``**kwargs`` catch-all flattened: what a wrapper changes one value of, then passes on."""
    import inspect

    given = dict(inspect.signature(original).bind(self, *args, **kwargs).arguments)
    given.pop("self", None)
    given.update(given.pop("kwargs", {}))
    return given


def _rewrite_calls(owner, name: str, rewrite) -> None:
    """``owner.name`` wrapped so that each call's arguments, bound by name as the original binds
    them (``_given``), pass through ``rewrite(given) -> given`` first; a method is wrapped once."""
    original = getattr(owner, name)
    if getattr(original, "_scaldiag_try", False):
        return

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        return original(self, **rewrite(_given(original, self, args, kwargs)))

    wrapper._scaldiag_try = True
    setattr(owner, name, wrapper)


def patch_compile(model_class) -> None:
    """``Model.compile`` with ``try``'s steps_per_execution, where it set one."""
    n = keras_overrides().get("steps_per_execution")
    if isinstance(n, int):
        _rewrite_calls(model_class, "compile", lambda given: {**given, "steps_per_execution": n})


KERAS_DEFAULT_BATCH = 32  # Model.fit's batch_size when the script gives none (array input)
TF_DATA_MODULE = "tensorflow.python.data.ops.dataset_ops"  # where tf.data.Dataset is defined
TF_AUTOTUNE = -1  # tf.data.AUTOTUNE


def patch_fit_batch(model_class) -> None:
    """``Model.fit`` with the batch ``try`` multiplied, where it set a factor and ``x`` is an
    array (it has a shape): a tf.data dataset, a generator or a PyDataset is batched by the
    script, and is left alone."""
    k = keras_overrides().get("batch_size_factor")
    if not isinstance(k, int):
        return

    def rewrite(given: dict) -> dict:
        if hasattr(given.get("x"), "shape"):
            given["batch_size"] = (given.get("batch_size") or KERAS_DEFAULT_BATCH) * k
        return given

    _rewrite_calls(model_class, "fit", rewrite)


def patch_tf_data(module) -> None:
    """``tf.data.Dataset.map`` with ``num_parallel_calls=AUTOTUNE`` where the script gave none,
    where ``try`` set ``tf_data_autotune``."""
    data = getattr(module, "DatasetV2", None)
    if keras_overrides().get("tf_data_autotune") is not True or data is None:
        return

    def rewrite(given: dict) -> dict:
        if given.get("num_parallel_calls") is None:
            given["num_parallel_calls"] = TF_AUTOTUNE
        return given

    _rewrite_calls(data, "map", rewrite)


def patch_pydataset(module) -> None:
    """``PyDataset.__init__`` with ``try``'s workers, where it set some: subclasses pass their
    keyword arguments up (``super().__init__(**kwargs)``), and the workers are read from there."""
    n = keras_overrides().get("workers")
    data = getattr(module, "PyDataset", None)
    if isinstance(n, int) and data is not None:
        _rewrite_calls(data, "__init__", lambda given: {**given, "workers": n})


def patch_dataloader(module) -> None:
    """DataLoader's constructor with the overrides, where ``try`` set some."""
    overrides = dict(dataloader_overrides())
    loader = getattr(module, "DataLoader", None)
    if not overrides or loader is None:
        return
    factor = overrides.pop("batch_size_factor", None)

    def rewrite(given: dict) -> dict:
        given = {**given, **overrides}
        if isinstance(factor, int) and given.get("batch_sampler") is None:
            given["batch_size"] = (given.get("batch_size", 1) or 1) * factor
        if not given.get("num_workers"):  # DataLoader refuses both without workers
            given.pop("persistent_workers", None)
            given.pop("prefetch_factor", None)
        return given

    _rewrite_calls(loader, "__init__", rewrite)
