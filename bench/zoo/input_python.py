"""Planted: input. A PyDataset augments each batch in NumPy on the training thread (no workers), for
a small convnet: the step waits for Python. Expected top cause: input (SD101, or SD207's ceiling).

Twin (--fixed): SD101's first advice, the same augmentation moved into the model as a Keras layer
(keras.ops, so it runs on the device, compiled with the step); the PyDataset only slices. Measured
beside it by bench/accuracy (variants): --fixed --threads, the same PyDataset with workers=8 threads
(the twin before 2026-12-01: on an H200 under JAX it ran 0.87x-1.29x over runs 1-7, 1.02x in run 7:
NumPy's loops on 128x32x32x3 arrays are too short to release the GIL for long); --fixed --processes,
workers=8 with use_multiprocessing=True (0.39-0.49x: each batch pickled back to the training
process). The blur stands for a random augmentation; a real one in the model is a
keras.layers.Random* layer, active in training only.

    python bench/zoo/input_python.py [--fixed [--threads | --processes]]
"""

import argparse

import keras
import numpy as np
from zoo_common import compile_model, fit_and_time, images

BLUR_PASSES = 6


def blur_numpy(xb):
    for _ in range(BLUR_PASSES):  # a blur done the slow way, in Python-driven NumPy
        xb = 0.5 * xb + 0.25 * (np.roll(xb, 1, 1) + np.roll(xb, 1, 2))
    return xb


class Blur(keras.layers.Layer):
    """The same blur in the model: on the device, inside the compiled step."""

    def call(self, x):
        for _ in range(BLUR_PASSES):
            x = 0.5 * x + 0.25 * (keras.ops.roll(x, 1, 1) + keras.ops.roll(x, 1, 2))
        return x


class Augmented(keras.utils.PyDataset):
    def __init__(self, x, y, batch, augment=True, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch, self.augment = x, y, batch, augment

    def __len__(self):
        return len(self.x) // self.batch

    def __getitem__(self, i):
        xb = self.x[i * self.batch : (i + 1) * self.batch]
        if self.augment:
            xb = blur_numpy(xb)
        return xb.astype("float32"), self.y[i * self.batch : (i + 1) * self.batch]


def main():
    p = argparse.ArgumentParser()
    p.add_argument(
        "--fixed", action="store_true", help="the augmentation in the model (SD101's first advice)"
    )
    p.add_argument(
        "--threads", action="store_true", help="with --fixed: PyDataset workers=8 threads instead"
    )
    p.add_argument(
        "--processes", action="store_true", help="with --fixed: workers=8 processes instead"
    )
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args()
    in_model = a.fixed and not (a.threads or a.processes)
    workers = 8 if a.fixed and not in_model else 1
    x, y = images(a.batch * a.steps, 32)
    data = Augmented(
        x,
        y,
        a.batch,
        augment=not in_model,
        workers=workers,
        use_multiprocessing=a.fixed and a.processes,
    )
    model = compile_model(
        keras.Sequential(
            [
                keras.Input((32, 32, 3)),
                *([Blur()] if in_model else []),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(10),
            ]
        )
    )
    fit_and_time(model, data, a.batch * a.steps, epochs=4)


if __name__ == "__main__":
    main()
