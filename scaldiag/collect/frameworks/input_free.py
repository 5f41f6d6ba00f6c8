"""The step without its input: a clone of the model trained on one cached batch, after training.

The steady step minus this step is what the input costs the step, every way at
once: waiting for batches, handing them to the device, and input work on other
threads competing with the computation for the cores or the GIL. A trace shows
only the first of these: on TensorFlow for the CPU, a ``PyDataset`` that
prefetches on tf.data's threads slows every op of the step while the step never
waits for a batch (measured: 2.6x slower steps with an identity ``PyDataset``
than with arrays, all of it inside the ops).

The clone has the model's architecture and compile settings (optimizer, loss,
metrics, ``steps_per_execution``, ``jit_compile``) and fresh weights (the
weights' values do not change the work), is trained with ``fit`` on one batch
of the user's data held in device memory, never touches the user's model, and
is dropped afterwards. Its first epoch compiles; two more are timed, each
ended by Keras's epoch-end synchronisation, so the figure is a stopwatch.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import math
import random
import time

import numpy as np

from scaldiag.collect.frameworks import keras_info

TIMED_SECONDS = 1.0   # per timed epoch, after one that compiles
TIMED_EPOCHS = 3      # the median of three: one epoch disturbed by the machine does not decide
MIN_STEPS, MAX_STEPS = 3, 1000
MAX_SECONDS = 30.0    # steps so long that the clone would take longer than this are not timed
MIN_FIT_STEPS = 10    # a fit this short has too few steady steps to compare with
_measured_in_this_process = False  # once: a script calling fit in a loop must not pay it every call
# A clone doubles the model's memory (weights, gradients, optimizer slots): past this, do not risk
# the device's memory after the user's training.
MAX_PARAMETER_BYTES = 512 * 2**20


class Skipped(Exception):
    """The input-free step cannot be measured; the message says why."""


def measure(model, batch, backend: str, step_s: float, parameter_bytes: int | None) -> dict:
    """{"step_ms", "step_ms_min", "step_ms_max", "steps_per_epoch", "epochs_timed", "seconds", "source"}.

    ``step_s``: the steady period between batch hooks seen in training (one execution of
    ``steps_per_execution`` batches), to size the epochs.
    Raises Skipped with the reason when the clone cannot be made or run.
    """
    import keras

    global _measured_in_this_process
    if _measured_in_this_process:
        raise Skipped("measured once per process, at the first fit")
    if batch is None:
        raise Skipped("no batch of the input was kept")
    if parameter_bytes and parameter_bytes > MAX_PARAMETER_BYTES:
        raise Skipped(f"the model has {parameter_bytes / 2**20:.0f} MiB of parameters; a clone could exhaust memory")
    _measured_in_this_process = True
    started = time.perf_counter()
    # The clone's initializers and seeds draw on the global generators: the user's script after fit
    # must see the same random numbers as without scaldiag.
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        return _timed_clone(model, batch, backend, step_s, keras, started)
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _timed_clone(model, batch, backend: str, step_s: float, keras, started: float) -> dict:
    per_execution = keras_info.steps_per_execution(model)
    batch_s = step_s / per_execution  # Keras calls a batch hook once per execution of K batches
    steps = _steps(batch_s, per_execution)
    if batch_s * steps * (1 + TIMED_EPOCHS) > MAX_SECONDS:
        raise Skipped(f"steps of {batch_s:.1f} s: timing a clone would take over {MAX_SECONDS:.0f} s")
    clone = _clone(model, keras)
    try:
        data = _on_device(batch, keras)
        timer = _epoch_timer(keras, started + MAX_SECONDS)
        fit = inspect.unwrap(keras.Model.fit)  # scaldiag's own hook on fit must not observe the clone
        fit(clone, _repeated(data, backend), steps_per_epoch=steps, epochs=1 + TIMED_EPOCHS, verbose=0, shuffle=False,
            callbacks=[timer])
    except Skipped:
        raise
    except Exception as exc:
        raise Skipped(f"training the clone failed ({type(exc).__name__}: {exc})") from exc
    finally:
        del clone
        gc.collect()
    timed = sorted(seconds / steps * 1e3 for seconds in timer.epoch_s[1:])
    if len(timed) < TIMED_EPOCHS:
        raise Skipped(f"the clone's epochs would take over {MAX_SECONDS:.0f} s: stopped")
    return {"step_ms": timed[len(timed) // 2], "step_ms_min": timed[0], "step_ms_max": timed[-1],
            "steps_per_epoch": steps, "epochs_timed": len(timed), "seconds": time.perf_counter() - started,
            "source": "a clone of the model trained on one cached batch after training"}


def _steps(step_s: float, per_execution: int) -> int:
    """Steps per epoch so a timed epoch lasts about TIMED_SECONDS, a whole number of executions."""
    steps = MAX_STEPS if not step_s > 0 else int(min(MAX_STEPS, max(MIN_STEPS, math.ceil(TIMED_SECONDS / step_s))))
    return -(-steps // per_execution) * per_execution


def _clone(model, keras):
    strategy = getattr(model, "distribute_strategy", None)  # TensorFlow: the clone's variables mirror the same way
    scope = strategy.scope() if strategy is not None and hasattr(strategy, "scope") else contextlib.nullcontext()
    with scope:
        try:
            clone = keras.models.clone_model(model)
        except Exception as exc:  # subclassed models: Keras cannot clone them
            raise Skipped(f"Keras cannot clone this model ({type(exc).__name__}: {exc})") from exc
        config = model.get_compile_config() if hasattr(model, "get_compile_config") else None
        try:
            if config:
                clone.compile_from_config(config)
            else:
                optimizer = type(model.optimizer).from_config(model.optimizer.get_config())
                clone.compile(optimizer=optimizer, loss=model.loss)
        except Exception as exc:
            raise Skipped(f"the clone cannot be compiled as the model was ({type(exc).__name__}: {exc})") from exc
    return clone


def _on_device(batch, keras):
    """The batch as backend tensors, once: the clone's steps then take no input work at all."""
    if isinstance(batch, list):
        batch = tuple(batch)
    return keras.tree.map_structure(lambda a: keras.ops.convert_to_tensor(a) if a is not None else None, batch)


def _repeated(data, backend: str):
    if backend == "tensorflow":
        import tensorflow as tf

        # Native tf.data: no Python per batch (a generator would add its own cost back).
        return tf.data.Dataset.from_tensors(data).repeat()
    return _forever(data)


def _forever(data):
    while True:
        yield data


def _epoch_timer(keras, deadline: float):
    """A callback timing each epoch, stopping the clone when the next epochs would pass ``deadline``
    (a perf_counter time): the step estimate can be off, the time given to the clone cannot."""
    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epoch_s: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):  # Keras has synchronised with the device here
            now = time.perf_counter()
            self.epoch_s.append(now - self._t0)
            if now + self.epoch_s[-1] * (1 + TIMED_EPOCHS - len(self.epoch_s)) > deadline:
                self.model.stop_training = True
    return EpochTimer()
