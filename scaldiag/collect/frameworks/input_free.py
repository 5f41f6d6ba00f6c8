"""The step without its input: the model's step on one cached batch, after training, within a
budget.

The steady step minus this step is what the input costs the step, every way at
once: waiting for batches, handing them to the device, and input work on other
threads competing with the computation for the cores or the GIL. A trace shows
only the first of these: on TensorFlow for the CPU, a ``PyDataset`` that
prefetches on tf.data's threads slows every op of the step while the step never
waits for a batch (measured: 2.6x slower steps with an identity ``PyDataset``
than with arrays, all of it inside the ops).

scaldiag's own time is not the user's: the whole measurement, compilation
included, fits ``budget_s(run_elapsed_s)``: 3 s or 5% of the run, whichever is
larger. Two ways, the first that applies:

- **The model's own compiled step** (TensorFlow, one device, a compiled
  ``train_function``): its state (weights, optimizer slots and step count,
  metrics, random seeds) is copied, the step the training traced is called on an
  iterator over the cached batch (the same shapes: no retrace), and the state is
  put back exactly. Nothing compiles, so the budget goes to timing.
- **A clone** (``keras.models.clone_model``, the same compile settings, fresh
  weights: the weights' values do not change the work) trained with ``fit`` on
  the cached batch: one execution compiles, then the timed epochs share what is
  left of the budget. A compile that leaves no room for them is said, not timed.

Each timed epoch is ended by a synchronisation (Keras's epoch end, or reading the
optimizer's step count), so the figure is a stopwatch; the median of the epochs'
mean steps is the input-free step. bench/input_free/run.py compares it with the
earlier measurement (a clone, a whole compile epoch, three 1 s epochs).
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import random
import time

import numpy as np

from scaldiag.collect.frameworks import keras_info

BUDGET_S = 3.0  # issue 27: the measurement costs at most 3 s or 5% of the run, whichever is larger
BUDGET_FRACTION = 0.05
TIMED_SECONDS = 1.0  # per timed epoch at most: more time buys no accuracy that was measured
TIMED_EPOCHS = 3  # the median of three: one epoch disturbed by the machine does not decide
MAX_STEPS = 1000  # per timed epoch: as before (a bound where the host runs ahead of the device)
BUDGET_SPENT = 0.9  # of what is left after compiling, the share the timed epochs are sized to
MIN_FIT_STEPS = 10  # a fit this short has too few steady steps to compare with
_measured_in_this_process = False  # once: a script calling fit in a loop must not pay it every call
# A clone (or a copy of the state) doubles the model's memory (weights, gradients, optimizer slots):
# past this, do not risk the device's memory after the user's training.
MAX_PARAMETER_BYTES = 512 * 2**20

OWN_STEP = (
    "the model's own compiled step on one cached batch after training (its state copied and put"
    " back)"
)
CLONE = "a clone of the model trained on one cached batch after training"


class Skipped(Exception):
    """The input-free step cannot be measured; the message says why."""


def budget_s(run_elapsed_s: float) -> float:
    """Seconds the measurement may take in a run that has lasted ``run_elapsed_s``: 3 s or 5%."""
    elapsed = run_elapsed_s if run_elapsed_s == run_elapsed_s and run_elapsed_s > 0 else 0.0
    return max(BUDGET_S, BUDGET_FRACTION * elapsed)


def run_budget_s(run_dir) -> float:
    """``budget_s`` of the run recorded in ``run_dir``, from its start (run.json's ``started_ns``:
    the launch under ``scaldiag profile``, else the first fit) to now; 3 s when the start cannot be
    read."""
    from scaldiag.record import run_json

    started_ns = run_json.read(run_dir).started_ns
    elapsed = (time.time_ns() - started_ns) / 1e9 if started_ns is not None else 0.0
    return budget_s(elapsed)


def measure(
    model,
    batch,
    backend: str,
    step_s: float,
    parameter_bytes: int | None,
    budget_s: float = BUDGET_S,
) -> dict:
    """{"step_ms", "step_ms_min", "step_ms_max", "steps_per_epoch", "epochs_timed", "seconds",
    "budget_s", "compile_s", "method", "source"}.

    ``step_s``: the steady period between batch hooks seen in training (one execution of
    ``steps_per_execution`` batches), to size the epochs. ``budget_s``: the most seconds the whole
    measurement may take (``budget_s(run_elapsed_s)``). Raises Skipped with the reason when it
    cannot be measured within it.
    """
    import keras

    global _measured_in_this_process
    if _measured_in_this_process:
        raise Skipped("measured once per process, at the first fit")
    if batch is None:
        raise Skipped("no batch of the input was kept")
    if parameter_bytes and parameter_bytes > MAX_PARAMETER_BYTES:
        raise Skipped(
            f"the model has {parameter_bytes / 2**20:.0f} MiB of parameters; a clone could exhaust"
            " memory"
        )
    per_execution = keras_info.steps_per_execution(model)
    batch_s = step_s / per_execution  # Keras calls a batch hook once per execution of K batches
    # a warm-up (or compile), then 3 epochs of one execution
    least_s = batch_s * per_execution * (TIMED_EPOCHS + 1)
    if least_s > budget_s:
        raise Skipped(
            f"steps of {batch_s:.2f} s: timing {TIMED_EPOCHS} epochs would take over the "
            f"{budget_s:.0f} s budget"
        )
    _measured_in_this_process = True
    started = time.perf_counter()
    # The clone's initializers and seeds draw on the global generators: the user's script after fit
    # must see the same random numbers as without scaldiag.
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        timing = _Timing(started, budget_s, batch_s, per_execution)
        if _own_step_applies(model, backend):
            _time_own_step(model, batch, keras, timing)
            method, source = "own_step", OWN_STEP
        else:
            _time_clone(model, batch, backend, keras, timing)
            method, source = "clone", CLONE
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
    timed = sorted(seconds / steps * 1e3 for seconds, steps in timing.epochs)
    return {
        "step_ms": timed[len(timed) // 2],
        "step_ms_min": timed[0],
        "step_ms_max": timed[-1],
        "steps_per_epoch": max(steps for _, steps in timing.epochs),
        "epochs_timed": len(timed),
        "seconds": time.perf_counter() - started,
        "budget_s": budget_s,
        "compile_s": timing.compile_s,
        "method": method,
        "source": source,
    }


def _whole(steps: int, per_execution: int) -> int:
    return -(-steps // per_execution) * per_execution


class _Timing:
    """The epochs timed so far and the size of the next one, within the budget."""

    def __init__(self, started: float, budget: float, batch_s: float, per_execution: int):
        self.deadline = started + budget
        self.budget = budget
        self.batch_s = batch_s if batch_s > 0 else 0.0
        self.per_execution = per_execution
        self.compile_s = 0.0
        self.epochs: list[tuple[float, int]] = []  # (seconds, steps)

    def compiled(self, seconds: float) -> None:
        """The compile (or warm-up) took ``seconds``: is there room left for the timed epochs?"""
        self.compile_s = seconds
        left = self.deadline - time.perf_counter()
        if left < self.batch_s * self.per_execution * TIMED_EPOCHS:
            raise Skipped(
                f"compiling took {seconds:.1f} s of the {self.budget:.1f} s budget: "
                "no time left to time the step"
            )

    def next_epoch_s(self) -> float:
        """Seconds for the next epoch: the epochs left share what is left of the budget, each at
        most TIMED_SECONDS; 0 when the timing is done, or when what is left cannot hold one
        execution an epoch.
        """
        todo = TIMED_EPOCHS - len(self.epochs)
        if todo <= 0:
            return 0.0
        if self.epochs:  # the step as measured, not as training saw it (the input included)
            seconds, steps = self.epochs[-1]
            self.batch_s = seconds / steps
        left = self.deadline - time.perf_counter()
        epoch_s = min(TIMED_SECONDS, BUDGET_SPENT * left / todo)
        if (
            self.epochs and epoch_s < self.batch_s * self.per_execution
        ):  # (training's step may overstate it)
            return 0.0
        return epoch_s

    def add(self, seconds: float, steps: int) -> None:
        self.epochs.append((seconds, steps))

    def check(self) -> None:
        if len(self.epochs) < TIMED_EPOCHS:
            raise Skipped(
                f"the epochs would take over the {self.budget:.1f} s budget: stopped after "
                f"{len(self.epochs)} of {TIMED_EPOCHS}"
            )


# --- the model's own compiled step (TensorFlow)
# -------------------------------------------------------


def _own_step_applies(model, backend: str) -> bool:
    if (
        backend != "tensorflow"
        or getattr(model, "train_function", None) is None
        or getattr(model, "run_eagerly", False)
    ):
        return False
    strategy = getattr(model, "distribute_strategy", None)
    # One device: the default strategy (a mirrored one would need the state copied per replica).
    return strategy is None or type(strategy).__name__ == "_DefaultDistributionStrategy"


def _state(model) -> list:
    """Every variable a train step can change: weights, random seeds, optimizer slots and step,
    metrics."""
    found, seen = [], set()
    groups = [
        getattr(model, "variables", []),
        getattr(model.optimizer, "variables", []) if model.optimizer else [],
        getattr(model, "metrics_variables", []),
    ]
    for variable in (v for group in groups for v in group):
        if id(variable) not in seen:
            seen.add(id(variable))
            found.append(variable)
    return found


def _time_own_step(model, batch, keras, timing: _Timing) -> None:
    state = _state(model)
    saved = [np.array(v.numpy(), copy=True) for v in state]
    try:
        data = _on_device(batch, keras)
        iterator = iter(_repeated(data, "tensorflow"))
        step = model.train_function
        counter = model.optimizer.iterations if model.optimizer is not None else state[0]
        t0 = time.perf_counter()
        # warm-up: the step was traced in training; a first call may still build caches
        step(iterator)
        counter.numpy()
        timing.compiled(time.perf_counter() - t0)

        while epoch_s := timing.next_epoch_s():
            t0 = now = time.perf_counter()
            end, steps, executions = t0 + epoch_s, 0, 0
            # Steps while the next one fits in the epoch's time (not a count sized beforehand: the
            # machine's speed changes under other work), at least one execution, at most MAX_STEPS.
            while executions == 0 or (steps < MAX_STEPS and now + (now - t0) / executions <= end):
                step(iterator)
                steps, executions = steps + timing.per_execution, executions + 1
                now = time.perf_counter()
            counter.numpy()  # reads the last step's update: waits for the device
            timing.add(time.perf_counter() - t0, steps)
    except Skipped:
        raise
    except Exception as exc:
        raise Skipped(f"timing the model's step failed ({type(exc).__name__}: {exc})") from exc
    finally:
        for variable, value in zip(state, saved):
            variable.assign(value)
    timing.check()


# --- a clone
# -------------------------------------------------------------------------------------------


def _time_clone(model, batch, backend: str, keras, timing: _Timing) -> None:
    with _tensorflow_left_unimported(backend):
        clone = _clone(model, keras)
    try:
        data = _repeated(_on_device(batch, keras), backend)
        # scaldiag's own hook on fit must not observe the clone
        fit = inspect.unwrap(keras.Model.fit)
        t0 = time.perf_counter()
        # compiles
        fit(clone, data, steps_per_epoch=timing.per_execution, epochs=1, verbose=0, shuffle=False)
        timing.compiled(time.perf_counter() - t0)

        most = _whole(MAX_STEPS, timing.per_execution)
        while epoch_s := timing.next_epoch_s():
            timer = _epoch_timer(keras, epoch_s, timing.per_execution)
            fit(
                clone,
                data,
                steps_per_epoch=most,
                epochs=1,
                verbose=0,
                shuffle=False,
                callbacks=[timer],
            )
            timing.add(timer.epoch_s, timer.steps)
    except Skipped:
        raise
    except Exception as exc:
        raise Skipped(f"training the clone failed ({type(exc).__name__}: {exc})") from exc
    finally:
        del clone
        gc.collect()
    timing.check()


@contextlib.contextmanager
def _tensorflow_left_unimported(backend: str):
    """Keras's serialiser asks ``tf.available`` of every object it clones, which imports
    TensorFlow: on Keras's torch backend the clone imported it into the user's process (7 s, and
    its log lines on the script's stderr). Where the backend is not TensorFlow and the script has
    not imported it, no object can be TensorFlow's: Keras is told it is not there meanwhile."""
    import sys

    lazy = getattr(sys.modules.get("keras.src.utils.module_utils"), "tensorflow", None)
    told = (
        backend != "tensorflow"
        and "tensorflow" not in sys.modules
        and getattr(lazy, "_available", False) is None
    )
    if told:
        lazy._available = False
    try:
        yield
    finally:
        if told and "tensorflow" not in sys.modules:
            lazy._available = None  # asked again, as Keras would, if the script needs it later


def _clone(model, keras):
    # TensorFlow: the clone's variables mirror the same way
    strategy = getattr(model, "distribute_strategy", None)
    scope = (
        strategy.scope()
        if strategy is not None and hasattr(strategy, "scope")
        else contextlib.nullcontext()
    )
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
            raise Skipped(
                f"the clone cannot be compiled as the model was ({type(exc).__name__}: {exc})"
            ) from exc
    return clone


def _on_device(batch, keras):
    """The batch as backend tensors, once: the steps then take no input work at all."""
    if isinstance(batch, list):
        batch = tuple(batch)
    return keras.tree.map_structure(
        lambda a: keras.ops.convert_to_tensor(a) if a is not None else None, batch
    )


def _repeated(data, backend: str):
    if backend == "tensorflow":
        import tensorflow as tf

        # Native tf.data: no Python per batch (a generator would add its own cost back). No
        # autotuning: there is nothing to tune, and dropping an iterator waits for its autotuning
        # thread (0.7-2.2 s measured here, after the timing, inside the budget).
        options = tf.data.Options()
        options.autotune.enabled = False
        return tf.data.Dataset.from_tensors(data).repeat().with_options(options)
    return _forever(data)


def _forever(data):
    while True:
        yield data


def _epoch_timer(keras, epoch_s: float, per_execution: int):
    """A callback timing one epoch, from its beginning to Keras's epoch-end synchronisation, that
    ends the epoch with the last execution that fits in ``epoch_s`` (at least one): decided at a
    batch's beginning, which Keras calls without waiting for the device (no batch end: that would
    read the logs every step)."""

    class EpochTimer(keras.callbacks.Callback):
        epoch_s, steps = 0.0, 0

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()
            self._end = self._t0 + epoch_s

        def on_train_batch_begin(self, batch, logs=None):
            done = self.steps // per_execution
            self.steps += per_execution  # the execution this hook begins runs, stopped or not
            now = time.perf_counter()
            if (
                done and now + 2 * (now - self._t0) / done > self._end
            ):  # this one, and one more, would not fit
                self.model.stop_training = True

        def on_epoch_end(self, epoch, logs=None):  # Keras has synchronised with the device here
            self.epoch_s = time.perf_counter() - self._t0

    return EpochTimer()
