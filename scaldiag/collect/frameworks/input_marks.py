"""Make Python input code visible in the trace.

A ``keras.utils.PyDataset`` or a Python generator produces batches in Python,
which the profilers do not trace (their Python tracer is off: it slows
training). On the JAX backend Keras calls them on the training thread, so
their time looked like host overhead. ``scaldiag profile`` therefore wraps
each batch fetch in a profiler annotation named ``scaldiag_input``, which the
analysis counts as input. The annotation costs nothing while no trace runs.
"""

from __future__ import annotations

import inspect

INPUT_MARKER = "scaldiag_input"


def _annotation(backend: str):
    if backend == "jax":
        import jax

        return lambda: jax.profiler.TraceAnnotation(INPUT_MARKER)
    if backend == "tensorflow":
        import tensorflow as tf

        return lambda: tf.profiler.experimental.Trace(INPUT_MARKER)
    return None


def mark_input(x, backend: str, on_first_batch=None):
    """``x`` with its batch fetches annotated: a PyDataset in place, a generator wrapped.

    ``on_first_batch(batch)`` is called with the first batch the training
    takes, which is how the batch size of Python input becomes known without
    consuming anything of the user's data.
    """
    annotate = _annotation(backend)
    if annotate is None:
        return x
    import keras

    seen = _FirstBatch(on_first_batch)
    if isinstance(x, keras.utils.PyDataset):
        _annotate_getitem(x, annotate, seen)
        return x
    if inspect.isgenerator(x):
        return _annotated_generator(x, annotate, seen)
    return x


class _FirstBatch:
    def __init__(self, callback):
        self.callback = callback

    def __call__(self, batch) -> None:
        callback, self.callback = self.callback, None
        if callback is not None:
            try:
                callback(batch)
            except Exception:
                pass  # knowing the batch is evidence; the user's input is not touched by a failure


def _annotate_getitem(dataset, annotate, seen) -> None:
    """Give this one object a subclass whose ``__getitem__`` is annotated (Python looks
    special methods up on the type, so patching the instance would not be seen)."""
    cls = type(dataset)
    original = cls.__getitem__

    def __getitem__(self, index):
        with annotate():
            batch = original(self, index)
        seen(batch)
        return batch

    dataset.__class__ = type(cls.__name__, (cls,), {"__getitem__": __getitem__, "__module__": cls.__module__,
                                                    "__qualname__": cls.__qualname__})


def annotate_array_batches(backend: str) -> None:
    """Keras on JAX slices NumPy arrays into batches in Python, on the training thread, inside
    the step (ArrayDataAdapter): annotate each batch's slicing and conversion as input too.
    (On TensorFlow the same data goes through tf.data, which its profiler names already.)"""
    if backend != "jax":
        return
    from keras.src.trainers.data_adapters import array_data_adapter

    adapter = array_data_adapter.ArrayDataAdapter
    original = adapter._get_iterator
    if getattr(original, "_scaldiag_annotated", False):
        return
    annotate = _annotation(backend)

    def _get_iterator(self, *args, **kwargs):
        return _annotated_generator(original(self, *args, **kwargs), annotate, _FirstBatch(None))

    _get_iterator._scaldiag_annotated = True
    adapter._get_iterator = _get_iterator


def _annotated_generator(generator, annotate, seen):
    while True:
        with annotate():
            try:
                item = next(generator)
            except StopIteration:
                return
        seen(item)
        yield item
