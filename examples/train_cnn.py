"""A small Keras 3 CNN on synthetic data: the bundled example that `make demo` profiles.

Runs on any Keras backend (KERAS_BACKEND=tensorflow or jax) and device. It
times its own steady-state steps so that scaldiag's numbers can be checked:

    python examples/train_cnn.py [--steps 60] [--batch 64] [--distribute]
    scaldiag profile examples/train_cnn.py -- --steps 60

--distribute trains data-parallel over all visible devices, as a user's
script would: keras.distribution.DataParallel on JAX, MirroredStrategy on TF.
--batch is then the global batch.
"""

import argparse
import contextlib
import time

import keras
import numpy as np


class StepTimer(keras.callbacks.Callback):
    """The script's own timing: wall time of batches [skip, end)."""

    def __init__(self, skip):
        super().__init__()
        self.skip, self.times = skip, []

    def on_train_batch_begin(self, batch, logs=None):
        self.times.append(time.perf_counter())


def distribution_scope(distribute: bool):
    if not distribute:
        return contextlib.nullcontext()
    if keras.backend.backend() == "jax":
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        return contextlib.nullcontext()
    import tensorflow as tf

    return tf.distribute.MirroredStrategy().scope()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--distribute", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((args.steps * args.batch, 32, 32, 3), dtype=np.float32)
    y = rng.integers(0, 10, len(x))
    with distribution_scope(args.distribute):
        model = keras.Sequential([
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timer = StepTimer(skip=10)
    model.fit(x, y, batch_size=args.batch, epochs=1, verbose=0, callbacks=[timer])
    periods = np.diff(timer.times[timer.skip:])
    print(f"train_cnn: {len(timer.times)} steps, own timing of steps {timer.skip}+: "
          f"median {np.median(periods) * 1e3:.2f} ms/step, {args.batch / np.median(periods):.0f} samples/s")


if __name__ == "__main__":
    main()
