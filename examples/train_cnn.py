"""A small Keras 3 CNN on synthetic data: the bundled example that `make demo` profiles.

Runs on any Keras backend (KERAS_BACKEND=tensorflow or jax) and device. It
times its own steady-state steps so that scaldiag's numbers can be checked:

    python examples/train_cnn.py [--steps 60] [--batch 64] [--distribute]
    scaldiag profile examples/train_cnn.py -- --steps 60

--distribute trains data-parallel over all visible devices, as a user's
script would: keras.distribution.DataParallel on JAX, MirroredStrategy on TF.
--batch is then the global batch; --per-replica-batch B instead makes it
B x the number of replicas (weak scaling). --slow-input feeds the model from
a keras.utils.PyDataset that augments each batch in NumPy on the host: an
input-bound variant. --slow-read adds the wait of reading each batch from slow
storage (150 ms a batch, and no workers to hide it): the input alone then
delivers at most 64 samples every 150 ms, about what training consumes on a
2-core CPU and far less than a GPU would, so on any machine it caps what more
devices could give (the report's headline, SD207). How much of each step waits
for it depends on the machine (TensorFlow reads the next batch while the step
computes): on a busy 2-core CPU the step's input share reads from borderline to
high (SD101).
"""

import argparse
import contextlib
import time

import keras
import numpy as np

DATA_BATCHES = 100


class StepTimer(keras.callbacks.Callback):
    """The script's own timing: wall time of batches [skip, end), to the last epoch's end."""

    def __init__(self, skip):
        super().__init__()
        self.skip, self.times = skip, []

    def on_train_batch_begin(self, batch, logs=None):
        self.times.append(time.perf_counter())

    def on_epoch_end(self, epoch, logs=None):  # Keras has synchronised with the device here
        self.end = time.perf_counter()


def distribution_scope(distribute: bool):
    """(scope, replicas) for single-device or data-parallel training."""
    if not distribute:
        return contextlib.nullcontext(), 1
    if keras.backend.backend() == "jax":
        import jax

        keras.distribution.set_distribution(keras.distribution.DataParallel())
        return contextlib.nullcontext(), jax.device_count()
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy()
    return strategy.scope(), strategy.num_replicas_in_sync


class SlowBatches(keras.utils.PyDataset):
    """Batches augmented on the host, one at a time, in NumPy: the input-bound variant."""

    def __init__(self, x, y, batch_size, read_s=0.0):
        super().__init__()
        self.x, self.y, self.batch_size, self.read_s = x, y, batch_size, read_s

    def __len__(self):
        return len(self.x) // self.batch_size

    def __getitem__(self, i):
        rows = slice(i * self.batch_size, (i + 1) * self.batch_size)
        time.sleep(self.read_s)  # the batch's files arriving from slow storage
        xb = self.x[rows]
        for _ in range(4):  # a blur done the slow way
            xb = 0.5 * xb + 0.25 * (np.roll(xb, 1, 1) + np.roll(xb, 1, 2))
        return xb.astype(np.float32), self.y[rows]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--per-replica-batch", type=int, default=None)
    parser.add_argument("--distribute", action="store_true")
    parser.add_argument("--slow-input", action="store_true")
    parser.add_argument("--slow-read", action="store_true")
    args = parser.parse_args()
    scope, replicas = distribution_scope(args.distribute)
    if args.per_replica_batch:
        args.batch = args.per_replica_batch * replicas
    rng = np.random.default_rng(0)
    batches = min(args.steps, DATA_BATCHES)  # a pool of batches, repeated over epochs
    epochs = -(-args.steps // batches)
    x = rng.random((batches * args.batch, 32, 32, 3), dtype=np.float32)
    y = rng.integers(0, 10, len(x))
    with scope:
        model = keras.Sequential(
            [
                keras.Input((32, 32, 3)),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Flatten(),
                keras.layers.Dense(128, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
    timer = StepTimer(skip=10)
    if args.slow_input or args.slow_read:
        data = SlowBatches(x, y, args.batch, read_s=0.15 if args.slow_read else 0.0)
        model.fit(data, epochs=epochs, verbose=0, callbacks=[timer])
    else:
        model.fit(x, y, batch_size=args.batch, epochs=epochs, verbose=0, callbacks=[timer])
    periods = np.diff(timer.times[timer.skip :])
    steps = len(timer.times) - timer.skip
    mean_s = (timer.end - timer.times[timer.skip]) / steps if steps > 0 else float("nan")
    print(
        f"train_cnn: {len(timer.times)} steps, own timing of steps {timer.skip}+: median"
        f" {np.median(periods) * 1e3:.2f} ms/step (host begin to begin), mean {mean_s * 1e3:.2f}"
        f" ms/step to the end of training, {args.batch / mean_s:.0f} samples/s"
    )


if __name__ == "__main__":
    main()
