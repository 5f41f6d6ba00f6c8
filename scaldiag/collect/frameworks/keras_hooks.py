"""The Keras adapter of ``scaldiag profile``: patches applied once Keras or TensorFlow is imported.

``Model.fit`` gains a ScaldiagCallback (unless the user passed one) and its
Python input is annotated; under emulation TensorFlow's CPU is split into N
logical devices. Keras and TensorFlow are never imported here: the import
hook hands over the module once the program itself imported it.
"""

from __future__ import annotations

import functools
import sys

MODEL_MODULE = "keras.src.models.model"  # where Keras 3 defines Model (both backends)
_FIT_CALLBACKS_POSITION = 5  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)


def import_patches(emulate: int) -> dict:
    """Module name -> function(module), applied right after the module executes."""
    patches = {MODEL_MODULE: lambda module: _patch_fit(module.Model)}
    if emulate > 1:
        patches["tensorflow"] = _emulate_devices(emulate)
    return patches


def _emulate_devices(count: int):
    """A patch for ``tensorflow``: N logical CPU devices, and MirroredStrategy using them."""
    def patch(tf) -> None:
        try:
            cpus = tf.config.list_physical_devices("CPU")
            tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * count)
            devices = [f"/cpu:{i}" for i in range(count)]
            original = tf.distribute.MirroredStrategy.__init__

            @functools.wraps(original)
            def init(self, *args, **kwargs):
                # Without GPUs, MirroredStrategy() takes only CPU:0; under emulation it takes all.
                if not args and kwargs.get("devices") is None and not tf.config.list_physical_devices("GPU"):
                    kwargs["devices"] = devices
                original(self, *args, **kwargs)

            tf.distribute.MirroredStrategy.__init__ = init
        except Exception as exc:
            print(f"scaldiag: cannot emulate {count} devices ({type(exc).__name__}: {exc})", file=sys.stderr)
    return patch


def _patch_fit(model_class) -> None:
    original = model_class.fit

    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        args, kwargs = _with_callback(args, kwargs)
        return original(self, *args, **kwargs)

    model_class.fit = fit


def _with_callback(args, kwargs):
    """fit's arguments plus a ScaldiagCallback (unless the user passed one)."""
    try:
        from scaldiag.collect.frameworks import keras_info
        from scaldiag.collect.frameworks.input_marks import mark_input
        from scaldiag.collect.frameworks.keras_callback import ScaldiagCallback

        if len(args) > _FIT_CALLBACKS_POSITION:
            callbacks = list(args[_FIT_CALLBACKS_POSITION] or [])
        else:
            callbacks = list(kwargs.get("callbacks") or [])
        if any(isinstance(c, ScaldiagCallback) for c in callbacks):
            return args, kwargs
        callback = ScaldiagCallback(quiet=True)
        x = args[0] if args else kwargs.get("x")
        batch_size = args[2] if len(args) > 2 else kwargs.get("batch_size")
        callback.set_fit_arguments(x, batch_size)
        callbacks.append(callback)
        marked = mark_input(x, keras_info.backend())
        if marked is not x:
            args, kwargs = ((marked, *args[1:]), kwargs) if args else (args, {**kwargs, "x": marked})
        if len(args) > _FIT_CALLBACKS_POSITION:
            args = (*args[:_FIT_CALLBACKS_POSITION], callbacks, *args[_FIT_CALLBACKS_POSITION + 1:])
        else:
            kwargs = {**kwargs, "callbacks": callbacks}
    except Exception as exc:  # capture is optional; the user's fit is not
        print(f"scaldiag: not capturing this fit ({type(exc).__name__}: {exc})", file=sys.stderr)
    return args, kwargs
