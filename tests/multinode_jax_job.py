"""A tiny Keras 3 (JAX backend) job over two processes joined by ``jax.distributed.initialize``, for
the JAX
multi-node tests.

    JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=K JAX_COORDINATOR_ADDRESS=127.0.0.1:PORT \
        scaldiag profile --out DIR multinode_jax_job.py -- --steps 12 [--slow-input-process K --slow-input-ms MS]

Each process runs this with its own JAX_PROCESS_ID (tests/test_multinode_jax.py starts two on
localhost). Data parallel over one CPU device a process (``keras.distribution.DataParallel`` over
the job's devices), the gradients all-reduced by XLA through gloo over TCP. Synthetic data from a
Python generator, each process yielding its part of the global batch; ``--slow-input-process K``:
process K's generator sleeps MS before each batch, as a slow disk or decoder on that machine would.
"""  # noqa: E501

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--width", type=int, default=256)
    p.add_argument(
        "--batch", type=int, default=4096, help="global batch: each process computes its share"
    )
    p.add_argument("--slow-input-process", type=int, default=-1)
    p.add_argument("--slow-input-ms", type=float, default=0.0)
    args = p.parse_args()
    # Cross-process collectives on CPU: gloo over TCP (jax 0.10's default; named so that it stays
    # so).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
    )
    # Each process's generator yields its own part of the global batch: nothing for Keras to shard.
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=jax.devices(), auto_shard_dataset=False)
    )
    keras.utils.set_random_seed(
        0
    )  # the same initial weights on every process: JAX checks that they are
    model = keras.Sequential(
        [
            keras.Input((args.width,)),
            keras.layers.Dense(args.width, activation="relu"),
            keras.layers.Dense(args.width, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    delay_s = args.slow_input_ms / 1e3 if jax.process_index() == args.slow_input_process else 0.0
    model.fit(
        _batches(args.batch // jax.process_count(), args.width, delay_s),
        epochs=1,
        steps_per_epoch=args.steps,
        verbose=0,
        callbacks=[StepLoss()],
    )
    jax.distributed.shutdown()


class StepLoss(keras.callbacks.Callback):
    """Reads each step's loss, as a progress bar does: the step then ends when its execution does.
    Without
    it JAX dispatches steps ahead of their execution, and a trace window of a few dispatched steps
    held none of their execution here (no XLA event in it, jax 0.10.2 on CPU)."""

    def __init__(self):
        super().__init__()
        self.losses: list[float] = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def _batches(local_batch: int, width: int, delay_s: float):
    """This process's part of every global batch, from Python (Keras builds the global array from
    each
    process's part)."""
    rng = np.random.default_rng(jax.process_index())
    x = rng.standard_normal((local_batch, width)).astype("float32")
    y = x.sum(1, keepdims=True)
    while True:
        if delay_s:
            time.sleep(delay_s)
        yield x, y


if __name__ == "__main__":
    main()
