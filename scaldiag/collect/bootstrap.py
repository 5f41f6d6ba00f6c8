"""The child process of ``scaldiag profile``: run the user's script unmodified.

    python -m scaldiag.collect.bootstrap SCRIPT [ARGS...]     (run dir in $SCALDIAG_RUN_DIR)

The script runs as ``python SCRIPT ARGS`` would run it: as ``__main__``, with
``sys.argv = [SCRIPT, *ARGS]``, the script's directory first on ``sys.path``,
the same working directory, its exit code and exceptions unchanged. Before
it starts, an import hook waits for Keras; once ``keras.Model`` exists, its
``fit`` adds a ScaldiagCallback. Nothing else of the program is touched,
except under emulation (``SCALDIAG_EMULATE_DEVICES=N``, set by ``profile
--emulate``): once TensorFlow is imported, its CPU is split into N logical
devices and ``MirroredStrategy()`` without arguments uses all of them.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import runpy
import sys

_MODEL_MODULE = "keras.src.models.model"  # where Keras 3 defines Model (both backends)
EMULATE_ENV = "SCALDIAG_EMULATE_DEVICES"
_FIT_CALLBACKS_POSITION = 5  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Find a module normally, then patch it once it has executed."""

    def __init__(self, patches: dict):
        self.patches = patches  # module name -> function(module)

    def find_spec(self, name, path=None, target=None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


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
        from scaldiag.collect import keras_info
        from scaldiag.collect.input_marks import mark_input
        from scaldiag.keras import ScaldiagCallback

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


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m scaldiag.collect.bootstrap SCRIPT [ARGS...]")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    patches = {_MODEL_MODULE: lambda module: _patch_fit(module.Model)}
    emulate = int(os.environ.get(EMULATE_ENV, "0") or 0)
    if emulate > 1:
        patches["tensorflow"] = _emulate_devices(emulate)
    sys.meta_path.insert(0, _PatchAfterImport(patches))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
