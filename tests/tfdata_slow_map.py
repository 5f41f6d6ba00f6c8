"""A Keras model fed by a tf.data pipeline whose map is slow and sequential: input-bound.

    python tests/tfdata_slow_map.py [--steps 60] [--map-ms 20]

Plain Keras on TensorFlow, unmodified for scaldiag: each batch goes through a Python function
(tf.py_function) that waits --map-ms, in a map without num_parallel_calls and no prefetch, so the
step waits for every batch. The fix SD101 names for it is tf.data's own: map(...,
num_parallel_calls=tf.data.AUTOTUNE) and .prefetch(tf.data.AUTOTUNE). Prints the map stage's
dataset class (a parallel map is another class), so a run shows which pipeline it built.
"""

import argparse
import time

import keras
import numpy as np
import tensorflow as tf


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--map-ms", type=float, default=20.0)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((a.steps * a.batch, 16), dtype=np.float32)
    y = rng.integers(0, 4, a.steps * a.batch)

    def slow(xb, yb):
        time.sleep(a.map_ms / 1000)  # the batch's decode, in Python
        return xb, yb

    def mapped(xb, yb):
        xb, yb = tf.py_function(slow, [xb, yb], [tf.float32, tf.int64])
        xb.set_shape([None, 16])
        yb.set_shape([None])
        return xb, yb

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(a.batch).map(mapped)
    print("map stage:", type(ds).__name__, flush=True)
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)]
    )
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ds, epochs=1, verbose=2)


if __name__ == "__main__":
    main()
