"""What a Keras 3 training run is: backend, versions, replicas, batch sizes.

Read from the model and the arguments of ``fit``, never by consuming data.
Every reader returns None when it cannot tell, and the report says so.
"""

from __future__ import annotations

import importlib.metadata

KERAS_DEFAULT_BATCH = 32  # keras.Model.fit: batch_size defaults to 32 for array inputs


def backend() -> str:
    import keras

    return keras.backend.backend()


def versions(backend_name: str) -> dict[str, str]:
    names = (
        ["keras", "tensorflow", "tensorflow-cpu"]
        if backend_name == "tensorflow"
        else ["keras", "jax", "jaxlib"]
    )
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def replicas(model, backend_name: str) -> int | None:
    try:
        if backend_name == "tensorflow":
            return int(model.distribute_strategy.num_replicas_in_sync)
        if backend_name == "jax":
            import keras

            distribution = keras.distribution.distribution()
            return 1 if distribution is None else int(distribution.device_mesh.devices.size)
    except Exception:
        return None
    return None


def model_name(model) -> str | None:
    """The model's name (Keras's ``name``: the user's, or ``sequential``, ``functional_1``...)."""
    name = getattr(model, "name", None)
    return name if isinstance(name, str) else None


def steps_per_execution(model) -> int:
    for attr in ("steps_per_execution", "_steps_per_execution"):
        value = getattr(model, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return 1


def global_batch(x, batch_size) -> tuple[int | None, str]:
    """Samples per step from fit's ``x`` and ``batch_size``, and how it was found."""
    if x is None:
        return None, "unknown: no x given to fit"
    if hasattr(x, "element_spec"):  # tf.data.Dataset: the batch dimension of its elements
        import tensorflow as tf

        leaves = tf.nest.flatten(x.element_spec)
        dim = leaves[0].shape[0] if leaves and leaves[0].shape.rank else None
        return (
            (int(dim), "tf.data element_spec")
            if dim is not None
            else (None, "unknown: dataset batch is dynamic")
        )
    if is_array_like(x):
        return (
            (int(batch_size), "fit(batch_size=)")
            if batch_size
            else (KERAS_DEFAULT_BATCH, "Keras default batch_size")
        )
    size = getattr(x, "batch_size", None)  # the usual attribute of a PyDataset or Sequence
    if isinstance(size, int) and size > 0:
        return size, f"{type(x).__name__}.batch_size"
    return None, f"unknown: {type(x).__name__} input"


def is_array_like(x) -> bool:
    if isinstance(x, (list, tuple)):
        return bool(x) and all(is_array_like(v) for v in x)
    if isinstance(x, dict):
        return bool(x) and all(is_array_like(v) for v in x.values())
    return hasattr(x, "shape") and hasattr(x, "dtype")


def parameter_bytes(model) -> int | None:
    """Bytes of the trainable weights: what a data-parallel step all-reduces (as gradients)."""
    import numpy as np

    try:
        return int(
            sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for w in model.trainable_weights)
        )
    except Exception:
        return None
