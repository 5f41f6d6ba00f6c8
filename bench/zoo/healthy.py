"""Healthy: a convnet with a large batch from arrays; the device computes most of each step.
Expected: no high-severity finding. (--fixed is accepted and changes nothing: the twin of a healthy
script is itself, which measures the run-to-run noise of the benchmark.)

    python bench/zoo/healthy.py [--fixed]
"""

import argparse

import keras
from zoo_common import compile_model, fit_and_time, images


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args()
    x, y = images(a.batch * a.steps, 32)
    model = compile_model(
        keras.Sequential(
            [
                keras.Input((32, 32, 3)),
                keras.layers.Conv2D(128, 3, activation="relu"),
                keras.layers.Conv2D(128, 3, activation="relu"),
                keras.layers.Conv2D(128, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(10),
            ]
        )
    )
    fit_and_time(model, x, a.batch * a.steps, epochs=4, y=y, batch_size=a.batch)


if __name__ == "__main__":
    main()
