"""Planted: host-to-device copies. Large float32 images (128x128x3) for a tiny model: each step
copies 4 bytes per pixel to the device and computes little. Expected top cause: h2d (SD102) or the
input hand-over that feeds it. Twin (--fixed): the same pixels as uint8 (4x fewer bytes), cast and
scaled on the device by the model's first layer.

    python bench/zoo/host_to_device.py [--fixed]
"""

import argparse

import keras
from zoo_common import compile_model, fit_and_time, images


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args()
    x, y = images(a.batch * a.steps, 128, dtype="uint8" if a.fixed else "float32")
    first = [keras.layers.Rescaling(1 / 255.0)] if a.fixed else []
    model = compile_model(
        keras.Sequential(
            [
                keras.Input((128, 128, 3), dtype="uint8" if a.fixed else "float32"),
                *first,
                keras.layers.AveragePooling2D(8),
                keras.layers.Flatten(),
                keras.layers.Dense(10),
            ]
        )
    )
    fit_and_time(model, x, a.batch * a.steps, epochs=4, y=y, batch_size=a.batch)


if __name__ == "__main__":
    main()
