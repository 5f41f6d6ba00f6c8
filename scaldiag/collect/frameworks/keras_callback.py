"""Record a Keras 3 training run from code:

    from scaldiag.keras import ScaldiagCallback
    model.fit(x, y, batch_size=256, callbacks=[ScaldiagCallback()])

Works on the TensorFlow and JAX backends. Writes a run directory (printed at
the end; ``scaldiag report RUN_DIR`` shows it again) with every step's wall
time, a profiler trace of a few steady-state steps, host samples and, where
NVML is available, GPU samples. It never raises into training: a failure
disables the callback and is written into the run as missing evidence.
"""

from __future__ import annotations

import functools
import sys

import keras

from scaldiag.collect.frameworks import input_ceiling, keras_info
from scaldiag.collect.recorder import TRACE_STEPS, WARMUP_STEPS
from scaldiag.collect.session import Session


def _guarded(method):
    """Run a callback hook; on any error, disable the callback and keep training."""
    @functools.wraps(method)
    def hook(self, *args, **kwargs):
        if self._failed:
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            self._failed = f"{method.__name__}: {type(exc).__name__}: {exc}"
            print(f"scaldiag: capture disabled, training continues ({self._failed})", file=sys.stderr)
            try:
                self.session and self.session.describe(capture_error=self._failed)
            except Exception:
                pass
            return None
    return hook


class ScaldiagCallback(keras.callbacks.Callback):
    """Record this ``fit`` call as a scaldiag run.

    Args:
        run_dir: where to write (default: ``scaldiag_runs/<time>-<script>``).
        global_batch: samples per step, when scaldiag cannot read it from the data.
        warmup_steps: steps before the trace window (compilation, warm-up).
        trace_steps: steps in the profiler trace window (0: no trace).
        sample: sample host and GPUs in a background thread (default: yes,
            unless ``scaldiag profile`` already samples this run).
        input_ceiling_s: after training, iterate the input alone for up to
            this long to measure the input ceiling (0: do not).
    """

    def __init__(self, run_dir=None, global_batch: int | None = None, warmup_steps: int = WARMUP_STEPS,
                 trace_steps: int = TRACE_STEPS, sample: bool | None = None, quiet: bool = False,
                 input_ceiling_s: float = input_ceiling.CEILING_SECONDS):
        super().__init__()
        self._options = dict(run_dir=run_dir, warmup_steps=warmup_steps, trace_steps=trace_steps, sample=sample)
        self._global_batch = (global_batch, "ScaldiagCallback(global_batch=)") if global_batch else None
        self._quiet = quiet
        self._failed: str | None = None
        self.session: Session | None = None
        self._x = None
        self._input_ceiling_s = input_ceiling_s

    def set_fit_arguments(self, x, batch_size) -> None:
        """Called by ``scaldiag profile``'s hook on fit with the data it was given."""
        self._x = x
        if self._global_batch is None:
            self._global_batch = keras_info.global_batch(x, batch_size)

    @_guarded
    def on_train_begin(self, logs=None):
        name = keras_info.backend()
        self.session = Session(backend=name, **self._options)
        batch, source = self._global_batch or (None, "unknown: not given (pass global_batch=)")
        replicas = keras_info.replicas(self.model, name)
        self.session.describe(
            framework={"name": "keras", "backend": name, "versions": keras_info.versions(name)},
            global_batch=batch, batch_source=source, replicas=replicas,
            per_replica_batch=batch // replicas if batch and replicas else None,
            steps_per_execution=keras_info.steps_per_execution(self.model),
            parameter_bytes=keras_info.parameter_bytes(self.model))

    @_guarded
    def on_epoch_begin(self, epoch, logs=None):
        self.session.recorder.epoch = epoch

    @_guarded
    def on_train_batch_begin(self, batch, logs=None):
        self.session.recorder.begin()

    # No on_train_batch_end, on purpose: Keras would then convert every step's
    # logs to Python numbers, a device sync that slows JAX training by ~30%
    # (measured on H200). A step ends where the next begins (recorder.begin).

    @_guarded
    def on_epoch_end(self, epoch, logs=None):
        self.session.recorder.end()

    @_guarded
    def on_train_end(self, logs=None):
        try:
            if self._x is not None:  # after training, so it cannot slow it
                ceiling = input_ceiling.measure(self._x, self._input_ceiling_s)
                if ceiling:
                    self.session.describe(input_ceiling=ceiling)
        except Exception as exc:  # missing evidence; the run is still closed below
            self.session.describe(input_ceiling_error=f"{type(exc).__name__}: {exc}")
        self.session.close()
        if not self._quiet and self.session.owns_run:
            print(f"scaldiag: run recorded in {self.session.run_dir} (scaldiag report {self.session.run_dir})",
                  file=sys.stderr)
