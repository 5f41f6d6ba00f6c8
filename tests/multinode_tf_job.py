"""A tiny Keras 3 (TensorFlow backend) job under MultiWorkerMirroredStrategy, for the TF multi-node
tests.

    TF_CONFIG='{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": K}}' \
        scaldiag profile --out DIR multinode_tf_job.py -- --steps 12 [--slow-input-worker K --slow-input-ms MS]

Each worker runs this with its own TF_CONFIG (tests/test_multinode_tf.py starts two on localhost).
Synthetic data from a Python generator; ``--slow-input-worker K``: worker K's generator sleeps MS
before each batch, as a slow disk or decoder on that machine would.
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

WIDTH = 64  # a few small dense layers: the job is about the collectives, not the compute
BATCH = 32  # global batch: each of two workers computes 16 samples a step
_SPEC = (tf.TensorSpec((BATCH, WIDTH), tf.float32), tf.TensorSpec((BATCH, 1), tf.float32))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--slow-input-worker", type=int, default=-1)
    p.add_argument("--slow-input-ms", type=float, default=0.0)
    args = p.parse_args()
    # One core a worker (the test machine has two): fewer threads fighting for them.
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    # RING: gRPC between the workers, the one implementation on CPU (NCCL needs GPUs).
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    worker = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    delay_s = args.slow_input_ms / 1e3 if worker == args.slow_input_worker else 0.0

    with strategy.scope():
        model = MultiWorkerModel(
            [
                keras.Input((WIDTH,)),
                keras.layers.Dense(WIDTH, activation="relu"),
                keras.layers.Dense(WIDTH, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer="sgd", loss="mse")
    model.fit(_dataset(delay_s), epochs=1, steps_per_epoch=args.steps, verbose=0)


class MultiWorkerModel(keras.Sequential):
    """Keras 3's fit under MultiWorkerMirroredStrategy, around its two known failures there
    (keras-team/keras#20585): it builds its state from the first batch reduced across the workers as
    one value, which the strategy cannot reduce (built from the batch's shapes instead: Keras's
    _symbolic_build reads only shapes and dtypes); and it reduces each step's logs along axis 0,
    which a scalar loss has not (each log given that axis)."""

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=_SPEC)

    def train_step(self, data):
        return {k: tf.reshape(v, [1]) for k, v in super().train_step(data).items()}


def _dataset(delay_s: float) -> tf.data.Dataset:
    """Synthetic global batches from Python. Sharded by data: each worker reads every global batch
    and
    keeps its replica's half, so its generator runs once a step (unsharded, each worker would take
    both halves of a global batch in turn, the generator running every other step)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, WIDTH)).astype("float32")
    y = x.sum(1, keepdims=True)

    def batches():
        while True:
            if delay_s:
                time.sleep(delay_s)
            yield x, y

    ds = tf.data.Dataset.from_generator(batches, output_signature=_SPEC)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(opts)


if __name__ == "__main__":
    main()
