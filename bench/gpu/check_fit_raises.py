"""A functional check on Keras-on-JAX (no JAX on the development machine): a fit that raises inside
scaldiag's trace window closes its capture, and a PyDataset gets its own class back after the
window.

    python3 bench/gpu/check_fit_raises.py RUN_BASE

1. ``ScaldiagCallback(warmup_steps=1, trace_steps=6)``; another callback raises KeyboardInterrupt at
   step 4 (inside the window), the script catches it, as a notebook's user would. Before the fix the
   JAX profiler traced on: ``jax.profiler.start_trace`` then raised and the next fit had no trace.
2. The same callback fits again, fed by a PyDataset: all its steps recorded, its trace written, its
   batches annotated in the window (``scaldiag_input`` events) and the dataset's class its own
   after.
"""

import sys
from pathlib import Path

import jax
import keras
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_input_marks import input_marks  # noqa: E402

from scaldiag.collect.frameworks import tracing  # noqa: E402
from scaldiag.collect.frameworks.input_marks import INPUT_MARKER  # noqa: E402
from scaldiag.keras import ScaldiagCallback  # noqa: E402
from scaldiag.record.reader import read_steps  # noqa: E402
from scaldiag.record.rundir import read_json  # noqa: E402


class RaisesAt(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 4:
            raise KeyboardInterrupt


class Batches(keras.utils.PyDataset):
    def __init__(self):
        super().__init__()
        self.x, self.y = np.ones((64, 32), np.float32), np.ones((64, 1), np.float32)

    def __len__(self):
        return 40

    def __getitem__(self, index):
        return self.x, self.y


def main() -> None:
    run = Path(sys.argv[1]) / "fit_raises"
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse")
    ours = ScaldiagCallback(
        run_dir=run, warmup_steps=1, trace_steps=6, input_free=False, input_ceiling_s=0
    )
    x, y = np.ones((640, 32), np.float32), np.ones((640, 1), np.float32)
    try:
        model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[ours, RaisesAt()])
    except KeyboardInterrupt:
        print("fit raised KeyboardInterrupt (caught)")
    print(
        f"after the interrupted fit: status {read_json(run, 'run.json')['status']!r}, windows to"
        f" come {tracing.windows_to_come()}, step hook left {'on_train_batch_begin' in vars(ours)}"
    )
    try:
        jax.profiler.start_trace(str(run / "own_trace"))
        jax.profiler.stop_trace()
        print("jax.profiler.start_trace after it: started and stopped (no profiler left tracing)")
    except Exception as exc:
        print(f"jax.profiler.start_trace after it FAILED: {type(exc).__name__}: {exc}")
    data = Batches()
    model.fit(data, epochs=2, verbose=0, callbacks=[ours])
    steps = read_steps(run / "steps.jsonl")
    trace = read_json(run, "training.json").get("trace")
    print(
        "the next fit (PyDataset, 2 epochs of 40): status"
        f" {read_json(run, 'run.json')['status']!r}, steps recorded in the run {len(steps)} (4 + 80"
        f" expected), trace {trace}"
    )
    print(
        f"the PyDataset's class after the fit: {type(data).__name__}, its own:"
        f" {type(data) is Batches}"
    )
    print(
        f"{INPUT_MARKER} events in the run's traces:"
        f" {sum(count for _, _, count in input_marks(run / 'trace'))}"
    )


if __name__ == "__main__":
    main()
