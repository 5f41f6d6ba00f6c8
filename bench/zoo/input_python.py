"""Planted: input. A PyDataset augments each batch in NumPy on the training thread (no workers), for
a small convnet: the step waits for Python. Expected top cause: input (SD101, or SD207's ceiling).
Twin (--fixed): SD101's advice, the same PyDataset with workers=8, use_multiprocessing=True (worker
processes, so batches are made in parallel, ahead of the step). --fixed --threads: 8 worker threads
instead (which share the GIL with the training loop), measured beside it by bench/accuracy.

    python bench/zoo/input_python.py [--fixed [--threads]]
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
    p.add_argument("--threads", action="store_true", help="with --fixed: worker threads, not processes")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args()
    x, y = images(a.batch * a.steps, 32)
    data = Augmented(x, y, a.batch, workers=8 if a.fixed else 1, use_multiprocessing=a.fixed and not a.threads)
    model = compile_model(keras.Sequential([
        keras.Input((32, 32, 3)), keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]))
    fit_and_time(model, data, a.batch * a.steps, epochs=4)


if __name__ == "__main__":
    main()
