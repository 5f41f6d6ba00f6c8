"""A Keras 3 script that times itself with a synchronized stopwatch: the reference for scaldiag's
numbers.

    python bench/accounting/timed_train.py --kind convnet|tiny|pydataset|dense|slowread [--epochs 4] [--steps 60]
        [--batch 256] [--spe 1] [--read-ms 100] [--out stopwatch.json]

slowread: the tiny model fed by a PyDataset that waits --read-ms for each batch (no host work).

The stopwatch: a callback of the script's own reads time at each epoch's
begin and end (Keras has synchronised with the device by then: it read the
metrics), so an epoch's wall time is device-true. The samples/s of the
epochs after the first (the first compiles and holds scaldiag's profiler
window) is what a user would measure. Written to --out as JSON, with the
script's whole wall time from its first line.
"""  # noqa: E501

import argparse
import json
import time

T0 = time.time()

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

# The zoo's stopwatch, one for every benchmark script (the zoo's folder: this script runs as a
# file).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "zoo"))
from zoo_common import EpochStopwatch as Stopwatch  # noqa: E402


class Augmented(keras.utils.PyDataset):
    """Input-bound: each batch is augmented in NumPy on the host, one at a time."""

    def __init__(self, x, y, batch, read_s=0.0, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch, self.read_s = x, y, batch, read_s

    def __len__(self):
        return len(self.x) // self.batch

    def __getitem__(self, i):
        xb = self.x[i * self.batch : (i + 1) * self.batch].copy()
        if self.read_s:  # slowread: the batch's files arriving from slow storage, no host work
            time.sleep(self.read_s)
            return xb, self.y[i * self.batch : (i + 1) * self.batch]
        for _ in range(3):  # host work that grows with the batch
            xb = np.flip(xb, axis=2) + np.random.normal(0, 0.01, xb.shape).astype("float32")
        return xb, self.y[i * self.batch : (i + 1) * self.batch]


def model_for(kind: str, shape):
    layers = keras.layers
    if kind == "dense":
        body = [
            layers.Flatten(),
            layers.Dense(4096, activation="relu"),
            layers.Dense(4096, activation="relu"),
        ]
    elif kind in ("tiny", "slowread"):
        body = [layers.Flatten(), layers.Dense(16, activation="relu")]
    else:
        body = [
            layers.Conv2D(64, 3, activation="relu"),
            layers.Conv2D(64, 3, activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(256, activation="relu"),
        ]
    return keras.Sequential([keras.Input(shape), *body, layers.Dense(10)])


def main():
    p = argparse.ArgumentParser()
    p.add_argument(
        "--kind", default="convnet", choices=["convnet", "tiny", "pydataset", "dense", "slowread"]
    )
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps", type=int, default=60, help="steps per epoch")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--spe", type=int, default=1, help="steps_per_execution")
    p.add_argument("--read-ms", type=float, default=100.0, help="slowread: the wait for each batch")
    p.add_argument("--out", default="stopwatch.json")
    a = p.parse_args()
    shape = (8, 8, 1) if a.kind in ("tiny", "slowread") else (32, 32, 3)
    rng = np.random.default_rng(0)
    x = rng.random((a.steps * a.batch, *shape), dtype=np.float32)
    y = rng.integers(0, 10, a.steps * a.batch)
    model = model_for(a.kind, shape)
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=a.spe,
    )
    watch = Stopwatch()
    python_input = a.kind in ("pydataset", "slowread")
    data = (
        Augmented(x, y, a.batch, read_s=a.read_ms / 1e3 if a.kind == "slowread" else 0.0)
        if python_input
        else x
    )
    kwargs = {} if python_input else {"y": y, "batch_size": a.batch}
    model.fit(data, epochs=a.epochs, verbose=0, callbacks=[watch], **kwargs)
    later = watch.epochs[1:] or watch.epochs
    samples = a.steps * a.batch
    result = {
        "kind": a.kind,
        "backend": keras.backend.backend(),
        "batch": a.batch,
        "steps_per_epoch": a.steps,
        "epochs_s": watch.epochs,
        "samples_per_s": samples * len(later) / sum(later),
        "script_wall_s": time.time() - T0,
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"stopwatch: {result['samples_per_s']:,.0f} samples/s over epochs 2..{a.epochs}")


if __name__ == "__main__":
    main()
