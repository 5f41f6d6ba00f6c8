"""Planted: host/launch overhead. Many tiny layers on a batch of 16: each step is a few microseconds of
device work behind the host's dispatch. Expected top cause: host_overhead (SD105). Twin (--fixed):
steps_per_execution=32, so one host call runs 32 steps.

    python bench/zoo/host_launch.py [--fixed]
"""

import argparse

import keras
import numpy as np
from zoo_common import compile_model, fit_and_time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=320)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((a.batch * a.steps, 32), dtype=np.float32)
    y = rng.integers(0, 10, len(x))
    layers = [keras.layers.Dense(32, activation="relu") for _ in range(12)]
    model = compile_model(keras.Sequential([keras.Input((32,)), *layers, keras.layers.Dense(10)]),
                          steps_per_execution=32 if a.fixed else 1)
    fit_and_time(model, x, a.batch * a.steps, epochs=4, y=y, batch_size=a.batch)


if __name__ == "__main__":
    main()
