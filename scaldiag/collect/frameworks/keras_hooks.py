"""The Keras adapter of ``scaldiag profile``: patches applied once Keras or TensorFlow is imported.

``Model.fit`` gains a ScaldiagCallback (unless the user passed one) and its
Python input is annotated; under emulation TensorFlow's CPU is split into N
logical devices. Keras and TensorFlow are never imported here: the import
hook hands over the module once the program itself imported it.
"""

from __future__ import annotations

import functools
import os
import sys

from scaldiag.collect.env import EMULATE_ENV, RUN_DIR_ENV
from scaldiag.collect.frameworks.guard import replace, undoable
from scaldiag.record.rundir import append_mark

MODEL_MODULE = "keras.src.models.model"  # where Keras 3 defines Model (both backends)
_FIT_CALLBACKS_POSITION = 5  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)
# Keras fits running now: Keras 3 on JAX jits and differentiates its own train step, which the JAX
# loop adapter (jax_loop) must then leave to this adapter (read per jitted call: a plain int).
FITS_RUNNING = 0


def patches() -> dict:
    """Module name -> function(module), applied right after the module executes (adapters.py);
    TensorFlow's only under emulation (``profile --emulate``)."""
    from scaldiag.collect.frameworks import try_fixes

    emulate = int(os.environ.get(EMULATE_ENV, "0") or 0)
    found = {MODEL_MODULE: _on_keras_import}
    if emulate > 1:
        found["tensorflow"] = _emulate_devices(emulate)
    if try_fixes.keras_overrides():  # `scaldiag try`'s fixed rounds only
        found[try_fixes.PYDATASET_MODULE] = try_fixes.patch_pydataset
        found[try_fixes.TF_DATA_MODULE] = try_fixes.patch_tf_data
    return found


def _on_keras_import(module) -> None:
    from scaldiag.collect.frameworks.try_fixes import patch_compile, patch_fit_batch

    append_mark(os.environ.get(RUN_DIR_ENV), "keras_imported")
    patch_fit(module.Model, add_callback=True)
    patch_compile(module.Model)  # scaldiag try's fixes, where it set them
    patch_fit_batch(module.Model)


def _emulate_devices(count: int):
    """A patch for ``tensorflow``: N logical CPU devices, and MirroredStrategy using them."""

    def patch(tf) -> None:
        try:
            cpus = tf.config.list_physical_devices("CPU")
            tf.config.set_logical_device_configuration(
                cpus[0], [tf.config.LogicalDeviceConfiguration()] * count
            )
            devices = [f"/cpu:{i}" for i in range(count)]
            original = tf.distribute.MirroredStrategy.__init__

            @functools.wraps(original)
            def init(self, *args, **kwargs):
                # Without GPUs, MirroredStrategy() takes only CPU:0; under emulation it takes all.
                if (
                    not args
                    and kwargs.get("devices") is None
                    and not tf.config.list_physical_devices("GPU")
                ):
                    kwargs["devices"] = devices
                original(self, *args, **kwargs)

            tf.distribute.MirroredStrategy.__init__ = init
        except Exception as exc:
            print(
                f"scaldiag: cannot emulate {count} devices ({type(exc).__name__}: {exc})",
                file=sys.stderr,
            )

    return patch


def patch_fit(model_class, add_callback: bool) -> None:
    """``fit`` hands its data and batch size to every ScaldiagCallback it is given, and
    annotates Python input for them; with ``add_callback`` it adds one when there is none.

    ``scaldiag profile`` patches with ``add_callback=True``; importing
    ``scaldiag.keras`` patches with ``False``, so that a callback the user
    constructs learns the batch size, the input and its ceiling too.
    """
    original = model_class.fit
    if getattr(original, "_scaldiag_adds_callback", None) is not None:
        before = original._scaldiag_adds_callback
        original._scaldiag_adds_callback |= add_callback
        undoable(lambda: setattr(original, "_scaldiag_adds_callback", before))
        return

    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        global FITS_RUNNING
        args, kwargs, ours = _with_callback(self, args, kwargs, fit._scaldiag_adds_callback)
        FITS_RUNNING += 1
        try:
            return original(self, *args, **kwargs)
        except BaseException as exc:
            # Keras calls no on_train_end when fit raises: without this, the profiler of a fit
            # interrupted in its window traced on, and a notebook's next fit could not trace.
            for callback in ours:
                callback.fit_raised(exc)
            raise
        finally:
            FITS_RUNNING -= 1

    fit._scaldiag_adds_callback = add_callback
    replace(model_class, "fit", fit)


def _with_callback(model, args, kwargs, add: bool):
    """fit's arguments, its ScaldiagCallbacks told about the data (one added first if ``add``), and
    those callbacks.

    Runs once per ``fit`` call, not per step. ``callbacks`` may be a list or a Keras
    ``CallbackList`` (which fit uses as it is: one of ours is then added into it)."""
    ours = []
    try:
        import keras

        from scaldiag.collect.frameworks import keras_info
        from scaldiag.collect.frameworks.input_marks import annotate_array_batches, mark_input
        from scaldiag.collect.frameworks.keras_callback import ScaldiagCallback

        given = (
            args[_FIT_CALLBACKS_POSITION]
            if len(args) > _FIT_CALLBACKS_POSITION
            else kwargs.get("callbacks")
        )
        container = given if isinstance(given, keras.callbacks.CallbackList) else None
        callbacks = container.callbacks if container is not None else list(given or [])
        ours = [c for c in callbacks if isinstance(c, ScaldiagCallback)]
        if not ours and not add:
            return args, kwargs, []
        if not ours:
            # First in the list: its epoch-end hook then runs before other callbacks' (a checkpoint
            # save), so the step that ends the epoch ends where Keras synchronised, not after the
            # save.
            ours = [ScaldiagCallback(quiet=True)]
            callbacks.insert(0, ours[0])
            if (
                container is not None
            ):  # fit calls neither set_model nor set_params on a CallbackList's members
                ours[0].set_model(model)
                ours[0].set_params(container.params)
        x = args[0] if args else kwargs.get("x")
        y = args[1] if len(args) > 1 else kwargs.get("y")
        batch_size = args[2] if len(args) > 2 else kwargs.get("batch_size")
        for callback in ours:
            callback.set_fit_arguments(
                x, batch_size, y=y, sample_weight=kwargs.get("sample_weight")
            )
        # once; Keras is whole by the time fit is called
        annotate_array_batches(keras_info.backend())
        marked = mark_input(
            x, keras_info.backend(), on_first_batch=lambda b: [c.observe_batch(b) for c in ours]
        )
        if marked is not x:
            args, kwargs = (
                ((marked, *args[1:]), kwargs) if args else (args, {**kwargs, "x": marked})
            )
        if container is None:  # (a CallbackList was changed in place: fit gets the same one)
            if len(args) > _FIT_CALLBACKS_POSITION:
                args = (
                    *args[:_FIT_CALLBACKS_POSITION],
                    callbacks,
                    *args[_FIT_CALLBACKS_POSITION + 1 :],
                )
            else:
                kwargs = {**kwargs, "callbacks": callbacks}
    except Exception as exc:  # capture is optional; the user's fit is not
        print(f"scaldiag: not capturing this fit ({type(exc).__name__}: {exc})", file=sys.stderr)
    # (ours found so far: one already in a CallbackList still runs in this fit)
    return (
        args,
        kwargs,
        ours,
    )
