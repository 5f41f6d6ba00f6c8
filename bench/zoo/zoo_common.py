"""What the zoo scripts share: synthetic data, a compile, a fit with a stopwatch. Not a scaldiag
import:
the scripts are plain Keras 3 programs that `scaldiag profile` runs unmodified."""

import json
import os
import time

import keras
import numpy as np


class EpochStopwatch(keras.callbacks.Callback):
    """The script's own synchronized timing: wall time of each epoch (Keras syncs at its end)."""

    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.t = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(time.perf_counter() - self.t)


def fit_and_time(model, data, samples_per_epoch: int, epochs: int, **fit_kwargs) -> float:
    """Train; print and return the samples/s of the epochs after the first."""
    watch = EpochStopwatch()
    model.fit(data, epochs=epochs, verbose=0, callbacks=[watch], **fit_kwargs)
    later = watch.epochs[1:] or watch.epochs
    rate = samples_per_epoch * len(later) / sum(later)
    print(f"zoo stopwatch: {rate:,.0f} samples/s")
    out = os.environ.get("ZOO_STOPWATCH")
    if out:
        with open(out, "w") as f:
            json.dump({"samples_per_s": rate, "epochs_s": watch.epochs}, f)
    return rate


def images(n: int, size: int, dtype="float32", seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    return (x if dtype == "uint8" else x.astype(dtype) / 255.0), rng.integers(0, 10, n)


def compile_model(model, **kwargs):
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        **kwargs,
    )
    return model
