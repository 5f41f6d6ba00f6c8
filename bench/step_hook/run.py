"""Recording a step costs the training thread microseconds: StepRecorder.begin 0.6-0.9 us a call on
the H200 host (docs/profile.md).

Benchmark: what capture costs the training thread per step, piece by piece, in microseconds.

    python -m bench step_hook [--seconds 1.0] [--rounds 5]

Direct timing on the calling thread (a loop of calls, so a floor: inside a real step the caches are
colder), each piece as ``scaldiag profile`` runs it once per step:

- ``StepRecorder.begin``: what ScaldiagCallback's ``on_train_batch_begin`` does (a clock read, the
  step's begin time kept in its block, written as one line at most 0.1 s later; the write's share is
  in it: each round runs ``--seconds``, so it holds ~10 flushes);
- Keras's ``CallbackList.on_train_batch_begin`` with ScaldiagCallback in the list, against the same
  list without it and with a no-op callback (the dispatch Keras does for any callback);
- a batch fetched through the input annotation (``input_marks``: Keras-on-JAX array batches,
  PyDataset and generators), against the bare generator, with no profiler tracing (the steady
  steps);
- the previous recorder's row encoding (``json``) and a bare ``time.time_ns`` pair, for scale.

Medians of the rounds (min-max). Run it on the machine whose steps it is about (a sandboxed kernel
makes the system call dearer). Needs Keras (either backend); the annotation rows need JAX or TF.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import record

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scaldiag.collect.recorder import StepRecorder  # noqa: E402
from scaldiag.record.reader import read_steps  # noqa: E402


def per_call_us(fn, seconds: float) -> float:
    """Mean cost of ``fn(i)`` over calls for at least ``seconds`` (batches of 1000 calls)."""
    n, t0 = 0, time.perf_counter()
    while True:
        for i in range(1000):
            fn(i)
        n += 1000
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return elapsed / n * 1e6


def keras_cases(tmp: Path) -> dict:
    import keras
    from keras.src.callbacks.callback_list import CallbackList

    from scaldiag.collect.frameworks.keras_callback import ScaldiagCallback

    class Noop(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            pass

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    ours = ScaldiagCallback(
        run_dir=tmp / "cb",
        trace_steps=0,
        sample=False,
        quiet=True,
        input_ceiling_s=0,
        input_free=False,
    )
    ours.set_model(model)
    ours.on_train_begin()
    lists = {
        name: CallbackList(cbs, add_history=True, model=model)
        for name, cbs in (("none", []), ("noop", [Noop()]), ("ours", [ours]))
    }
    return {
        "Keras CallbackList.on_train_batch_begin, no callback of ours": (
            lists["none"].on_train_batch_begin
        ),
        "  ... with a no-op callback": lists["noop"].on_train_batch_begin,
        "  ... with ScaldiagCallback": lists["ours"].on_train_batch_begin,
    }


def annotation_cases() -> dict:
    import keras

    from scaldiag.collect.frameworks import input_marks

    backend = keras.backend.backend()
    annotation = input_marks._annotation(backend)
    if annotation is None:
        return {}
    annotate, tracing = annotation

    def forever():
        while True:
            yield 1

    plain, marked = (
        forever(),
        input_marks._annotated_iterator(forever(), annotation, input_marks._FirstBatch(None)),
    )

    def annotation_alone(i):
        with annotate():
            pass

    return {
        "a batch from a bare generator": lambda i: next(plain),
        "a batch through the input annotation (no trace window)": lambda i: next(marked),
        "  ... of which: asking whether a profiler traces": lambda i: tracing(),
        f"  (the {backend} profiler annotation entered and left, no trace running: no longer paid)": (  # noqa: E501
            annotation_alone
        ),
    }


def _main(argv: list[str]) -> int | None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=1.0, help="per case and round")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    recorder = StepRecorder(tmp, None, 3, 0)
    encode = json.JSONEncoder(separators=(",", ":")).encode
    row = {
        "step": 1,
        "epoch": 0,
        "begin_ns": time.time_ns(),
        "end_ns": time.time_ns(),
        "traced": False,
        "batch": 3,
    }
    cases = {
        "StepRecorder.begin (the callback's step hook: kept in a block, written within 0.1 s)": (
            recorder.begin
        ),
        "a step row encoded with json (what the recorder did per step before)": lambda i: encode(
            row
        ),
        "two time.time_ns() calls": lambda i: (time.time_ns(), time.time_ns()),
    }
    try:
        cases.update(keras_cases(tmp))
        cases.update(annotation_cases())
    except ImportError as exc:
        print(f"(no Keras cases: {exc})")
    results = {name: [] for name in cases}
    for _ in range(a.rounds):
        for name, fn in cases.items():
            results[name].append(per_call_us(fn, a.seconds))
    recorder.close()
    steps = len(read_steps(tmp / "steps.jsonl"))
    print(
        f"{platform.node()}, Python {platform.python_version()}, {a.rounds} rounds of {a.seconds} s"
        f" per case; {steps:,} steps recorded"
    )
    for name, values in results.items():
        print(
            f"{name}: {statistics.median(values):.2f} us per call (min-max"
            f" {min(values):.2f}-{max(values):.2f})"
        )


def main(argv: list[str]) -> int:
    """``python -m bench step_hook [ARGS]``: the run, its output kept as bench/results/step_hook.md.
    """
    return record("step_hook", __doc__, argv, lambda: _main(argv))
