"""A Keras MLP on the CPU that the host bounds (issue 35's second script).

    python tests/keras_mlp.py [--steps 600] [--batch 16] [--steps-per-execution 1]

Plain Keras, unmodified for scaldiag: a tiny Dense model, a small batch, many steps, one step per
host call (``steps_per_execution=1``, Keras's default), so each step's framework work on the host
(the call into the compiled step, its dispatch, the progress callbacks) outweighs the model's ops.
On the 2-core development machine ``steps_per_execution=32`` made such a script 1.65x faster
(issue 35): host-bound, SD105.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=600, help="training steps (one epoch)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps-per-execution", type=int, default=1)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((a.steps * a.batch, 32), dtype=np.float32)
    y = rng.integers(0, 10, a.steps * a.batch)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((32,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=a.steps_per_execution,
    )
    model.fit(x, y, batch_size=a.batch, epochs=1, verbose=2)


if __name__ == "__main__":
    main()
