"""Two models, each fit(verbose=1 default) then evaluate().

keras-io's knowledge distillation shape."""

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((640, 32), dtype=np.float32)
y = rng.integers(0, 10, 640)
for name, width in (("teacher", 256), ("student", 16)):
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(width, activation="relu"), keras.layers.Dense(10)],
        name=name,
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=32, epochs=3)
    model.evaluate(x[:320], y[:320])
