"""Make Python input code visible in the trace.

A ``keras.utils.PyDataset`` or a Python generator produces batches in Python,
which the profilers do not trace (their Python tracer is off: it slows
training). On the JAX backend Keras calls them on the training thread, so
their time looked like host overhead. ``scaldiag profile`` therefore wraps
each batch fetch in a profiler annotation named ``scaldiag_input``, which the
analysis counts as input. While no profiler traces, a batch pays only for
asking whether one does (~0.05 us) and one Python call (bench/step_hook/run.py;
the annotation itself, entered and left, cost 0.4-0.5 us a batch), nothing of
ours holds a batch between fetches (``_Fetch``). Once scaldiag's trace window
is over, an epoch's batches go on straight from the user's iterator
(``_annotated_iterator``), and Keras-on-JAX array batches of later epochs are
not wrapped (``annotating``), and a PyDataset gets its own class back
(``_annotate_getitem``): their batches then pay no Python call of ours. (A
generator's batches still pass through ``_annotated_generator``'s frame, which
``yield from`` resumes without a Python call; without a trace window,
``trace_steps=0``, the annotation's test stays on every batch.)
"""

from __future__ import annotations

import inspect
import itertools

from scaldiag.collect.frameworks import tracing

INPUT_MARKER = "scaldiag_input"
_WINDOWS = tracing.PROCESS_WINDOWS


def _annotation(backend: str):
    """``(annotate, tracing)``: a context manager factory, and whether a profiler traces now (or
    None)."""
    if backend == "jax":
        import jax

        annotation = jax.profiler.TraceAnnotation
        return (lambda: annotation(INPUT_MARKER)), getattr(annotation, "is_enabled", _always)
    if backend == "tensorflow":
        import tensorflow as tf

        try:
            from tensorflow.python.profiler.trace import enabled
        except ImportError:
            enabled = _always
        return (lambda: tf.profiler.experimental.Trace(INPUT_MARKER)), enabled
    return None


def _always() -> bool:
    return True


def mark_input(x, backend: str, on_first_batch=None):
    """``x`` with its batch fetches annotated: a PyDataset in place, a generator wrapped.

    ``on_first_batch(batch)`` is called with the first batch the training
    takes, which is how the batch size of Python input becomes known without
    consuming anything of the user's data.
    """
    annotation = _annotation(backend)
    if annotation is None:
        return x
    import keras

    seen = _FirstBatch(on_first_batch)
    if isinstance(x, keras.utils.PyDataset):
        _annotate_getitem(x, annotation, seen)
        return x
    if inspect.isgenerator(x):
        return _annotated_generator(x, annotation, seen)
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


def _annotate_getitem(dataset, annotation, seen) -> None:
    """Give this one object a subclass whose ``__getitem__`` is annotated (Python looks
    special methods up on the type, so patching the instance would not be seen), until a trace
    window has finished since and none is to come: then the object gets its own class back, and its
    batches call the user's ``__getitem__`` alone. A later fit's annotation replaces an earlier one.
    """
    cls = type(dataset).__dict__.get("_scaldiag_plain", type(dataset))
    original = cls.__getitem__
    annotate, tracing = annotation
    finished_before = _WINDOWS.finished

    def __getitem__(self, index):
        if seen.callback is None and _WINDOWS.finished > finished_before and not _WINDOWS.to_come:
            if (
                type(self) is annotated
            ):  # (not a later fit's annotation, made while a worker was in here)
                # (a batch a worker thread fetches meanwhile is annotated or not: either is right)
                self.__class__ = cls
            return original(self, index)
        if tracing():
            with annotate():
                batch = original(self, index)
        else:
            batch = original(self, index)
        if seen.callback is not None:
            seen(batch)
        return batch

    annotated = type(
        cls.__name__,
        (cls,),
        {
            "__getitem__": __getitem__,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "_scaldiag_plain": cls,
        },
    )
    dataset.__class__ = annotated


def annotate_array_batches(backend: str) -> None:
    """Keras on JAX slices NumPy arrays into batches in Python, on the training thread, inside
    the step (ArrayDataAdapter): annotate each batch's slicing and conversion as input too.
    (On TensorFlow the same data goes through tf.data, which its profiler names already.)"""
    if backend != "jax":
        return
    from keras.src.trainers.data_adapters import array_data_adapter

    adapter = array_data_adapter.ArrayDataAdapter
    if getattr(adapter._get_iterator, "_scaldiag_annotated", False):
        return
    adapter._get_iterator = annotating(adapter._get_iterator, _annotation(backend))


def annotating(get_iterator, annotation):
    """``get_iterator`` (a data adapter's method) with its batches annotated while a trace window is
    to come. Keras asks for a new iterator every epoch: once the window is over, the epochs after it
    get the adapter's own iterator and their batches pay nothing (the annotation's Python call was
    0.3-0.7% of a 1.1 ms host-bound step on the H200: bench/results/gpu_h200/overhead_pieces)."""

    def _get_iterator(self, *args, **kwargs):
        batches = get_iterator(self, *args, **kwargs)
        if not tracing.windows_to_come():
            return batches
        return _annotated_iterator(batches, annotation, _FirstBatch(None))

    _get_iterator._scaldiag_annotated = True
    return _get_iterator


class _Fetch:
    """``iterator``'s batches, annotated while a profiler traces, up to the moment a trace window
    has finished since these batches began and none is to come (and the first batch has been seen):
    then this stops, and ``_annotated_iterator``'s chain goes on with ``iterator`` itself, so the
    batches after the window pay no Python call of this. (A window that finished before is no reason
    to stop: the fit hook wraps a generator before the callback makes this fit's window, and Keras
    may take batches in between.)

    An iterator object, not a generator, so that nothing of ours holds a batch between fetches: a
    generator suspended at ``yield item`` keeps the batch it yielded alive until the next one is
    made. That cost 4% of a Keras-on-JAX convnet step on the H200 machine (3 MiB batches; the
    previous batch alive while the next is sliced:
    bench/results/gpu_h200/overhead_pieces/overhead.md#capture_overhead_attributionmd).
    """

    def __init__(self, iterator, annotation, seen):
        self._iterator = iterator
        self._annotate, self._tracing = annotation
        self._seen = seen
        self._finished_before = _WINDOWS.finished

    def __iter__(self):
        return self

    def __next__(self):
        # (attribute reads, not calls: every batch until the window's end pays for this test)
        if (
            self._seen.callback is None
            and _WINDOWS.finished > self._finished_before
            and not _WINDOWS.to_come
        ):
            raise StopIteration  # the chain takes the batches from here on
        if self._tracing():
            with self._annotate():
                item = next(self._iterator)
        else:
            item = next(self._iterator)
        if self._seen.callback is not None:
            self._seen(item)
        return item


def _annotated_iterator(iterator, annotation, seen):
    """An iterator over ``iterator``'s batches: through ``_Fetch`` while it annotates, then directly
    (``itertools.chain`` is C: it adds no Python call a batch, and holds no batch)."""
    return itertools.chain(_Fetch(iterator, annotation, seen), iterator)


def _annotated_generator(generator, annotation, seen):
    """The same as a generator (Keras tells a generator by its type). ``yield from`` hands each
    batch on without the frame keeping it."""
    yield from _annotated_iterator(generator, annotation, seen)
