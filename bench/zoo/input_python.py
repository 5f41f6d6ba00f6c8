"""Planted: input. A PyDataset augments each batch in NumPy on the training thread (no workers), for
a small convnet: the step waits for Python. Expected top cause: input (SD101, or SD207's ceiling).
Twin (--fixed): SD101's advice, the same PyDataset with workers=8 (threads: NumPy releases the GIL in
its array loops), so batches are made ahead of the step. --fixed --processes: workers=8,
use_multiprocessing=True instead, measured beside it by bench/accuracy: on an H200 (Keras on JAX) it made
the script 2-2.5x slower (run 5, where it was the twin), each batch pickled back to the training process.

    python bench/zoo/input_python.py [--fixed [--processes]]
"""

import argparse

import keras
import numpy as np
from zoo_common import compile_model, fit_and_time, images


class Augmented(keras.utils.PyDataset):
    def __init__(self, x, y, batch, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch = x, y, batch

    def __len__(self):
        return len(self.x) // self.batch

    def __getitem__(self, i):
        xb = self.x[i * self.batch:(i + 1) * self.batch]
        for _ in range(6):  # a blur done the slow way, in Python-driven NumPy
            xb = 0.5 * xb + 0.25 * (np.roll(xb, 1, 1) + np.roll(xb, 1, 2))
        return xb.astype("float32"), self.y[i * self.batch:(i + 1) * self.batch]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--processes", action="store_true", help="with --fixed: worker processes, not threads")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args()
    x, y = images(a.batch * a.steps, 32)
    data = Augmented(x, y, a.batch, workers=8 if a.fixed else 1, use_multiprocessing=a.fixed and a.processes)
    model = compile_model(keras.Sequential([
        keras.Input((32, 32, 3)), keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]))
    fit_and_time(model, data, a.batch * a.steps, epochs=4)


if __name__ == "__main__":
    main()
