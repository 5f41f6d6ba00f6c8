"""Record a Keras 3 training run from code:

    from scaldiag.keras import ScaldiagCallback
    model.fit(x, y, batch_size=256, callbacks=[ScaldiagCallback()])

Works on the TensorFlow and JAX backends. Writes a run directory (printed at
the end; ``scaldiag report RUN_DIR`` shows it again) with every step's wall
time, a profiler trace of a few steady-state steps, host samples and, where
NVML is available, GPU samples. It never raises into training: a failure
disables capture for the rest of that fit (the next fit is captured again)
and is written into the run as missing evidence.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref

import keras

from scaldiag.collect.env import GLOBAL_BATCH_ENV, INPUT_FREE_ENV, RUN_DIR_ENV
from scaldiag.collect.frameworks import (
    compile_marks,
    device_memory,
    input_ceiling,
    input_free,
    keras_info,
    knob_facts,
)
from scaldiag.collect.frameworks.guard import attempt
from scaldiag.collect.recorder import TRACE_STEPS, WARMUP_STEPS
from scaldiag.collect.session import Session, capture_failed
from scaldiag.record.run_json import FAILED, INTERRUPTED

HOW_TO_GIVE_BATCH = (
    "give it with `scaldiag profile --global-batch N` or ScaldiagCallback(global_batch=N)"
)


def _guarded(method):
    """Run a callback hook; on any error, disable the callback and keep training."""

    @functools.wraps(method)
    def hook(self, *args, **kwargs):
        if self._failed:
            return None
        name = method.__name__.lstrip("_")
        return attempt(
            lambda: method(self, *args, **kwargs), lambda why: self._capture_off(f"{name}: {why}")
        )

    return hook


def _from_env() -> tuple[int, str] | None:
    value = os.environ.get(GLOBAL_BATCH_ENV, "")
    return (
        (int(value), "scaldiag profile --global-batch")
        if value.isdigit() and int(value) > 0
        else None
    )


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
        input_free: after training, time a clone of the model on one cached
            batch, to measure what the input costs each step (a few seconds;
            ``SCALDIAG_INPUT_FREE=0`` turns it off too).
    """

    def __init__(
        self,
        run_dir=None,
        global_batch: int | None = None,
        warmup_steps: int = WARMUP_STEPS,
        trace_steps: int = TRACE_STEPS,
        sample: bool | None = None,
        quiet: bool = False,
        input_ceiling_s: float = input_ceiling.CEILING_SECONDS,
        input_free: bool = True,
    ):
        super().__init__()
        self._options = dict(
            run_dir=run_dir, warmup_steps=warmup_steps, trace_steps=trace_steps, sample=sample
        )
        self._global_batch = (
            (global_batch, "ScaldiagCallback(global_batch=)") if global_batch else _from_env()
        )
        self._quiet = quiet
        self._failed: str | None = None
        self.session: Session | None = None
        self._x = None
        self._y = self._sample_weight = self._first_batch = None
        self._input_ceiling_s = input_ceiling_s
        self._input_free = input_free and os.environ.get(INPUT_FREE_ENV, "1") != "0"
        self._in_fit = False
        self._replicas: int | None = None
        self._model_number = 0  # this fit's model, numbered over the run (``_model_number``)
        self._unknown_because = ""

    def set_fit_arguments(self, x, batch_size, y=None, sample_weight=None) -> None:
        """Called by ``scaldiag profile``'s hook on fit with the data it was given."""
        self._x, self._y, self._sample_weight = x, y, sample_weight
        if self._global_batch is None:
            batch, source = keras_info.global_batch(x, batch_size)
            self._global_batch = (batch, source) if batch else None
            self._unknown_because = source

    def observe_batch(self, batch) -> None:
        """The first batch training took (Python input): its size is the global batch, if still
        unknown."""
        if self._first_batch is None:
            self._first_batch = batch
        self._learn_batch(input_ceiling.batch_size(batch), "the first batch training took")

    def _learn_batch(self, size: int, source: str) -> None:
        if self._global_batch is not None or not size:
            return
        self._global_batch = (size, source)
        if self.session is not None:
            self.session.describe(**self._batch_facts())

    def _batch_facts(self) -> dict:
        if self._global_batch:
            batch, source = self._global_batch
        else:
            batch, source = (
                None,
                f"{self._unknown_because or 'unknown: fit was not seen'}; {HOW_TO_GIVE_BATCH}",
            )
        replicas = self._replicas
        return {
            "global_batch": batch,
            "batch_source": source,
            "per_replica_batch": batch // replicas if batch and replicas else None,
        }

    def on_train_begin(self, logs=None):
        # Each fit is captured afresh: one whose capture failed (a full disk, say) does not switch
        # capture off for the fits after it; a failure that lasts is said again, once a fit.
        self._failed = None
        self.session = None
        self._start_fit()

    @_guarded
    def _start_fit(self) -> None:
        name = keras_info.backend()
        options = dict(self._options)
        where = self._given_run_dir()
        if where and _run_epochs(where)["traced"]:
            options["trace_steps"] = (
                0  # fit again into the same run: an earlier fit's whole trace stands
            )
        self.session = Session(backend=name, **options)
        self._in_fit = True  # from here a session is open: on_train_end or fit_raised closes it
        recorder = self.session.recorder
        recorder.on_error = self._step_hook_failed
        self._replicas = keras_info.replicas(self.model, name)
        run = _run_epochs(self._run_key())
        # A fit is keyed by its model: two models trained one after the other are two trainings
        # (analyze/epochs.py keeps their epochs apart), a model fitted in a loop is one.
        self._model_number = _model_number(run, self.model)
        model_name = keras_info.model_name(self.model)
        self.session.recorder.mark("fit_begin", model=self._model_number, model_name=model_name)
        run["before"], run["fits"] = run["seen"], run["fits"] + 1
        from scaldiag.collect.frameworks import adapters

        self.session.describe(
            fits=run["fits"], models=run["model_names"], **adapters.evidence_facts(["keras"])
        )
        self.session.describe(
            compile_evidence=compile_marks.listen(name),
            framework={"name": "keras", "backend": name, "versions": keras_info.versions(name)},
            replicas=self._replicas,
            steps_per_execution=keras_info.steps_per_execution(self.model),
            steps_per_epoch=(self.params or {}).get("steps"),
            parameter_bytes=keras_info.parameter_bytes(self.model),
            **self._batch_facts(),
            **knob_facts.keras_facts(self._x, name),
        )
        # The step hook is the recorder's ``begin`` itself, in this instance (it shadows the method
        # below): every step pays for it, and this way it pays for one Python call, not two. Its
        # usual step cannot fail; its other steps report to ``_step_hook_failed``.
        self.on_train_batch_begin = recorder.begin

    def _given_run_dir(self):
        """The run this fit records into, where fits share one: the callback's or profile's."""
        return self._options.get("run_dir") or os.environ.get(RUN_DIR_ENV)

    def _run_key(self) -> str:
        return str(self._given_run_dir() or self.session.run_dir)

    @_guarded
    def on_epoch_begin(self, epoch, logs=None):
        # Epochs are numbered over the run: a script that calls fit(epochs=1) in a loop trains one
        # epoch a fit, and each fit's Keras counts from 0 (the run's first epochs compile).
        run = _run_epochs(self._run_key())
        number = run["before"] + epoch
        run["seen"] = max(run["seen"], number + 1)
        self.session.recorder.epoch = number
        self.session.recorder.mark(
            "epoch_begin",
            epoch=number,
            fit=run["fits"] - 1,
            fit_epoch=epoch,
            model=self._model_number,
        )

    def on_train_batch_begin(self, batch, logs=None):
        """Outside a fit, or once capture has failed: nothing (in a fit, ``on_train_begin`` puts the
        recorder's ``begin`` in this method's place)."""

    def _step_hook_failed(self, reason: str) -> None:
        self._capture_off(f"on_train_batch_begin: {reason}")

    def _capture_off(self, reason: str) -> None:
        """Capture is off for the rest of this fit: a hook failed (``_guarded``) or the recorder
        did."""
        # back to the method above: no more steps recorded
        self.__dict__.pop("on_train_batch_begin", None)
        if not self._failed:
            self._failed = reason
            capture_failed(self.session, reason)

    # No on_train_batch_end, on purpose: Keras would then convert every step's
    # logs to Python numbers, a device sync that slows JAX training by ~30%
    # (measured on H200). A step ends where the next begins (recorder.begin).

    # Keras synchronises with the device at the end of each epoch's steps (it reads the
    # metrics), then validates, then calls on_epoch_end. The step that ends the epoch
    # ends at the first of these hooks: its time is the device finishing the epoch.
    @_guarded
    def on_test_begin(self, logs=None):
        if self._in_fit:
            self.session.recorder.end()
            compile_marks.LOG.drain(self.session.recorder)
            self.session.recorder.mark("test_begin")

    @_guarded
    def on_test_end(self, logs=None):
        if self._in_fit:
            self.session.recorder.mark("test_end")

    @_guarded
    def on_epoch_end(self, epoch, logs=None):
        self.session.recorder.end()
        compile_marks.LOG.drain(self.session.recorder)
        self.session.recorder.mark(
            "epoch_end", epoch=_run_epochs(self._run_key())["before"] + epoch
        )

    def on_train_end(self, logs=None):
        self._in_fit = False
        if self.session is not None and self.session.recorder.traced_whole:
            _run_epochs(self._run_key())["traced"] = True
        self._stop_compile_marks()
        self.__dict__.pop("on_train_batch_begin", None)  # this fit's recorder is closed below
        self._end_of_fit()
        if self._failed and self.session is not None:
            # Capture failed earlier (or just now): what was recorded until then is still closed as
            # a run, with the reason in it (capture_failed), rather than left "running".
            try:
                self.session.close()
            except Exception:
                pass

    def fit_raised(self, error: BaseException) -> None:
        """``fit`` raised (an interrupt, the user's input or another callback failing): close this
        fit's run as ``on_train_end`` would have, its trace window stopped (called by the fit
        patch)."""
        if self.session is None or self.session.closed:
            # before this fit's on_train_begin (the last fit's run is closed), or after its run
            # closed
            return
        # (Also from inside on_train_end: an interrupt while the input is measured after training.)
        self._in_fit = False
        self.__dict__.pop("on_train_batch_begin", None)
        self._stop_compile_marks()
        try:
            # the step in progress did not complete: it is not a step
            self.session.recorder.drop_open()
            # (the accounting pairs it with fit_begin)
            self.session.recorder.mark("fit_end", raised=type(error).__name__)
        except Exception:
            pass  # the run directory failing too: the close below still stops the window
        try:
            self.session.close(INTERRUPTED if isinstance(error, KeyboardInterrupt) else FAILED)
        except Exception:
            pass  # the user's error is what the user must see

    def _stop_compile_marks(self) -> None:
        """This fit's compiles written, and no more kept (the input-free clone compiles too)."""
        try:
            if self.session is not None and not self._failed:
                compile_marks.LOG.drain(self.session.recorder)
        except Exception:
            pass  # lost evidence: those steps count as steady
        finally:
            compile_marks.stop()

    @_guarded
    def _end_of_fit(self) -> None:
        # the allocator's peak of training, before the measurements below allocate their own
        peaks = attempt(
            lambda: device_memory.keras_peaks(keras_info.backend()),
            lambda why: self.session.describe(device_memory_error=why),
        )
        if peaks:
            self.session.describe(device_memory=peaks)
        try:
            if self._x is not None:  # after training, so it cannot slow it
                self.session.recorder.mark("ceiling_begin")
                ceiling = input_ceiling.measure(self._x, self._input_ceiling_s)
                self.session.recorder.mark("ceiling_end")
                if ceiling:
                    self.session.describe(input_ceiling=ceiling)
                    self._learn_batch(
                        ceiling.get("first_batch_size"),
                        "the input's first batch (measured after training)",
                    )
        except Exception as exc:  # missing evidence; the run is still closed below
            self.session.describe(input_ceiling_error=f"{type(exc).__name__}: {exc}")
        if self._input_free:
            self._measure_input_free()
        self.session.recorder.mark("fit_end")
        self.session.close()
        if not self._quiet and self.session.owns_run:
            print(
                f"scaldiag: run recorded in {self.session.run_dir} (scaldiag report"
                f" {self.session.run_dir})",
                file=sys.stderr,
            )

    def _measure_input_free(self) -> None:
        """The step without its input (``input_free``), after training so that it cannot slow it."""
        self.session.recorder.mark("input_free_begin")
        try:
            begins = list(self.session.recorder.recent_begin_ns)  # the last steps' beginnings
            periods = sorted((b - a) / 1e9 for a, b in zip(begins, begins[1:]))
            if len(periods) < input_free.MIN_FIT_STEPS:
                raise input_free.Skipped(
                    f"this fit ran {len(periods) + 1} steps: too few to compare with"
                )
            _not_one_of_several()
            step_s = periods[len(periods) // 2]
            result = input_free.measure(
                self.model,
                self._a_batch(),
                keras_info.backend(),
                step_s,
                keras_info.parameter_bytes(self.model),
                budget_s=input_free.run_budget_s(self.session.run_dir),
            )
            self.session.describe(input_free=result)
        except input_free.Skipped as skipped:
            self.session.describe(input_free_skipped=str(skipped))
        except Exception as exc:
            self.session.describe(input_free_skipped=f"{type(exc).__name__}: {exc}")
        self.session.recorder.mark("input_free_end")

    def _a_batch(self):
        """One batch of the user's data: the first one training took, or one taken from ``fit``'s
        data."""
        if self._first_batch is not None:
            return self._first_batch
        x = self._x
        if x is None:
            return None
        batches, _ = input_ceiling.replayable(x)  # tf.data or a PyDataset: already batched
        if batches is not None:
            return next(batches, None)
        if keras_info.is_array_like(x) and self._global_batch:
            rows = self._global_batch[0]
            parts = [x, self._y, self._sample_weight]
            return tuple(
                _first_rows(p, rows) for p in parts[: 3 if self._sample_weight is not None else 2]
            )
        return None


# run directory -> {"fits": fits begun, "before": epochs before this fit, "seen": epochs seen,
# "traced": a fit traced its whole window (a fit that raised inside it leaves the next one to
# trace), "models": a weak reference to each model fitted, in order, "model_names": their names}
_EPOCHS: dict = {}


def _run_epochs(run_dir) -> dict:
    return _EPOCHS.setdefault(
        str(run_dir),
        {"fits": 0, "before": 0, "seen": 0, "traced": False, "models": [], "model_names": []},
    )


def _model_number(run: dict, model) -> int:
    """The model's number in this run: the same model fitted again keeps its number, another model
    gets the next. Held by weak reference, so a notebook's discarded models are not kept alive (a
    model collected and another made in its place is a new model)."""
    for number, held in enumerate(run["models"]):
        if held() is model:
            return number
    try:
        held = weakref.ref(model)
    except TypeError:  # not weakly referable: held for the run's life
        held = functools.partial(lambda m: m, model)
    run["models"].append(held)
    run["model_names"].append(keras_info.model_name(model))
    return len(run["models"]) - 1


def _first_rows(data, rows: int):
    """The first ``rows`` samples of arrays, through tuples, lists and dicts."""
    if data is None:
        return None
    if isinstance(data, dict):
        return {k: _first_rows(v, rows) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_first_rows(v, rows) for v in data)
    return data[:rows]


def _not_one_of_several() -> None:
    """Raises Skipped in a process that is one of several of a job (TF_CONFIG, JAX's processes,
    SLURM, WORLD_SIZE): the measurement re-runs training steps, whose all-reduces wait for every
    process, and the processes reach it at different times or not at all; a two-process JAX job hung
    there (issue 26).
    """
    from scaldiag.collect import multinode

    node = multinode.detect(os.environ)
    world = os.environ.get("WORLD_SIZE", "1")
    if node is not None or (world.isdigit() and int(world) > 1):
        who = f"{node.nnodes} ({node.launcher})" if node is not None else f"{world} (WORLD_SIZE)"
        raise input_free.Skipped(
            f"this process is one of {who} of a job: its steps' all-reduces would wait on "
            "processes that are not measuring, so it is not measured (it could hang the job)"
        )
