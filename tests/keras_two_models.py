"""Two models trained one after the other in one script (keras-io's examples compare a baseline
with a second model so): each its own ``compile`` and ``fit``, each epoch timed by the script.

    python tests/keras_two_models.py [--epochs 3] [--samples 2048]
"""

import argparse
import time

import keras
import numpy as np


def build(name: str, width: int) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(10),
        ],
        name=name,
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


class EpochTimer(keras.callbacks.Callback):
    """The script's own clock: each epoch's wall time over its steps."""

    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self.t0
        steps = self.params["steps"]
        print(f"[{self.model.name}] epoch {epoch + 1}: {1000 * seconds / steps:.2f} ms/step")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2048)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((args.samples, 32), dtype=np.float32)
    y = rng.integers(0, 10, args.samples)
    for name, width in (("baseline", 32), ("wider", 256)):
        model = build(name, width)
        model.fit(x, y, batch_size=32, epochs=args.epochs, verbose=2, callbacks=[EpochTimer()])


if __name__ == "__main__":
    main()
