"""Data for scripts whose dataset loader would download (this machine and the GPU one have no
internet).

Put on PYTHONPATH by bench/clock/run.py only for manifest entries that say `shim = "mnist"`.
The script itself is untouched: when Keras's `keras.src.datasets.mnist` module is executed, its
`load_data` is replaced by one that returns synthetic arrays of MNIST's per-sample shape and
dtype (uint8 images 28x28, uint8 labels 0-9). The number of samples is reduced so that an
epoch takes seconds on a 2-core CPU: SCALDIAG_CLOCK_MNIST_N training samples (default 60000,
MNIST's own) and N // 6 test samples. Nothing else is imported or changed.
"""

import importlib.abc
import os
import sys

_TARGET = "keras.src.datasets.mnist"


def _synthetic_mnist(path="mnist.npz"):
    import numpy as np

    n = int(os.environ.get("SCALDIAG_CLOCK_MNIST_N", "60000"))
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    y_train = rng.integers(0, 10, size=(n,), dtype=np.uint8)
    x_test = rng.integers(0, 256, size=(max(n // 6, 1), 28, 28), dtype=np.uint8)
    y_test = rng.integers(0, 10, size=(max(n // 6, 1),), dtype=np.uint8)
    return (x_train, y_train), (x_test, y_test)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            module.load_data = _synthetic_mnist

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("SCALDIAG_CLOCK_SHIM") == "mnist":
    sys.meta_path.insert(0, _Finder())
