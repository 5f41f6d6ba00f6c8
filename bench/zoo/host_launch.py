"""Planted: host/launch overhead. Many tiny layers on a batch of 16: each step is a few microseconds
of
device work behind the host's dispatch. Expected top cause: host_overhead (SD105). Twin (--fixed):
a per-replica batch 4x as large (64), SD105's forecast fix; the number of samples per epoch grows
with it, and samples/s is what is compared. (steps_per_execution=32, the other fix SD105 names, gave
0.98x and 1.38x on an H200 with Keras on JAX: the per-batch Python stays per batch.)

    python bench/zoo/host_launch.py [--fixed] [--steps-per-execution N]

--steps-per-execution N: the other fix SD105 names, written by hand (bench/try's twin of what
`scaldiag try` applies to this script from outside).
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
    p.add_argument("--steps-per-execution", type=int, default=1)
    a = p.parse_args()
    batch = a.batch * (4 if a.fixed else 1)
    rng = np.random.default_rng(0)
    x = rng.random((batch * a.steps, 32), dtype=np.float32)
    y = rng.integers(0, 10, len(x))
    layers = [keras.layers.Dense(32, activation="relu") for _ in range(12)]
    model = compile_model(
        keras.Sequential([keras.Input((32,)), *layers, keras.layers.Dense(10)]),
        steps_per_execution=a.steps_per_execution,
    )
    fit_and_time(model, x, batch * a.steps, epochs=4, y=y, batch_size=batch)


if __name__ == "__main__":
    main()
