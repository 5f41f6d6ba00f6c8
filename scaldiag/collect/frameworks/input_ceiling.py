"""How fast the input pipeline alone delivers samples: the input ceiling.

Iterates the data ``fit`` was given, without the model, for a bounded time
after training ends, and counts samples. Only data that can be iterated again
without consuming the user's stream: a ``tf.data.Dataset`` or a
``keras.utils.PyDataset``. Arrays are not measured (slicing is not the limit:
their hand-over to devices is in the trace); generators cannot be replayed.

The pipeline is measured as ``fit`` runs it: a PyDataset with workers through
Keras's own enqueuer (its thread or process pool), not ``__getitem__`` one call
at a time, which read a 4-worker pipeline as a quarter of its speed and raised
SD207 on a twin whose workers were the fix (issue 35). The pool's first batches,
made while it starts, are start-up, not throughput.
"""

from __future__ import annotations

import time

CEILING_SECONDS = 3.0  # bounded: this runs after the user's fit, before it returns
MAX_BATCHES = 200


def measure(x, seconds: float = CEILING_SECONDS) -> dict | None:
    """{"samples_per_s", "batches", "seconds", "source", "first_batch_size"}, or None when ``x``
    cannot be replayed."""
    batches, source, startup = _as_fit_runs_it(x)
    if batches is None or seconds <= 0:
        return None
    try:
        return count_batches(batches, source, startup, seconds)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # a worker pool stops here (its generator's finally)


def count_batches(batches, source: str, startup: int, seconds: float) -> dict | None:
    """Samples per second from ``batches`` for up to ``seconds`` (MAX_BATCHES at most), after its
    first ``startup`` batches: a pipeline's start-up (threads, a pool's first batches, made while
    the first was, first reads) is not throughput. Also the torch adapter's DataLoader count."""
    first = next(batches, None)
    if first is None:
        return None
    for _ in range(startup - 1):
        if next(batches, None) is None:
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


def _as_fit_runs_it(x):
    """(batches, how, start-up batches): a PyDataset with workers through Keras's enqueuer, else
    ``replayable``'s iterator with one start-up batch."""
    pooled = _through_workers(x)
    if pooled is not None:
        return pooled
    batches, source = replayable(x)
    return batches, source, 1


def _through_workers(x):
    """A PyDataset's batches from Keras's own OrderedEnqueuer over its workers (what ``fit``'s
    PyDatasetAdapter starts each epoch), or None where it has none."""
    try:
        import keras
        from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter
    except ImportError:
        return None
    if not isinstance(x, keras.utils.PyDataset):
        return None
    adapter = PyDatasetAdapter(x, shuffle=False)
    if adapter.enqueuer is None:  # workers=1 without processes: fit calls __getitem__ itself
        return None
    kind = "processes" if x.use_multiprocessing else "threads"

    def batches():
        try:
            yield from adapter.get_numpy_iterator()
        finally:
            adapter.enqueuer.stop()

    how = f"{type(x).__name__} through Keras's enqueuer ({x.workers} worker {kind}, as fit runs it)"
    return batches(), how, max(1, int(x.workers))


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
