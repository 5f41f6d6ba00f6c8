"""How fast the input pipeline alone delivers samples: the input ceiling.

Iterates the data ``fit`` was given, without the model, for a bounded time
after training ends, and counts samples. Only data that can be iterated again
without consuming the user's stream: a ``tf.data.Dataset`` or a
``keras.utils.PyDataset``. Arrays are not measured (slicing is not the limit:
their hand-over to devices is in the trace); generators cannot be replayed.
"""

from __future__ import annotations

import time

CEILING_SECONDS = 3.0  # bounded: this runs after the user's fit, before it returns
MAX_BATCHES = 200


def measure(x, seconds: float = CEILING_SECONDS) -> dict | None:
    """{"samples_per_s", "batches", "seconds", "source", "first_batch_size"}, or None when ``x``
    cannot be replayed."""
    batches, source = replayable(x)
    if batches is None or seconds <= 0:
        return None
    first = next(batches, None)  # pipeline start-up (threads, first reads) is not throughput
    if first is None:
        return None
    samples, count, start = 0, 0, time.perf_counter()
    for batch in batches:
        samples += batch_size(batch)
        count += 1
        if count >= MAX_BATCHES or time.perf_counter() - start >= seconds:
            break
    elapsed = time.perf_counter() - start
    if count == 0 or elapsed <= 0:
        return None
    return {
        "samples_per_s": samples / elapsed,
        "batches": count,
        "seconds": elapsed,
        "source": source,
        "first_batch_size": batch_size(first),
    }


def replayable(x):
    """(an iterator over the batches of ``x``, how) when ``x`` can be iterated again, else (None,
    None)."""
    if hasattr(x, "element_spec") and hasattr(x, "__iter__"):
        return iter(x), "tf.data.Dataset iterated alone"
    try:
        import keras

        if isinstance(x, keras.utils.PyDataset):
            n = x.num_batches if x.num_batches is not None else MAX_BATCHES
            return (x[i] for i in range(n)), f"{type(x).__name__}.__getitem__ called alone"
    except ImportError:
        pass
    return None, None


def batch_size(batch) -> int:
    """The leading dimension of a batch: of its first array, through tuples, lists and dicts."""
    leaf = batch
    while isinstance(leaf, (tuple, list, dict)) and leaf:
        leaf = next(iter(leaf.values())) if isinstance(leaf, dict) else leaf[0]
    shape = getattr(leaf, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) else 1
