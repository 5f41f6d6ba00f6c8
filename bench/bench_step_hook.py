"""Benchmark: what the step hook costs the training thread per step, in microseconds.

    python bench/bench_step_hook.py [--steps 20000] [--rounds 3]

Times, on the calling thread, ``StepRecorder.begin`` (what ScaldiagCallback's
``on_train_batch_begin`` does: two clock reads, one steps.jsonl row encoded and buffered, on disk within 0.1 s)
against the same row buffered without a flush, and a bare ``time.time_ns`` pair, so the file
system call's share is visible. Medians of the rounds; run it on the machine whose steps it is
about (a sandboxed kernel makes the system call dearer).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scaldiag.collect.recorder import StepRecorder  # noqa: E402
from scaldiag.record.rundir import JsonlWriter  # noqa: E402


def per_call_us(fn, n: int) -> float:
    t = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp())
    recorder = StepRecorder(tmp, None, 3, 0)
    buffered = JsonlWriter(tmp / "buffered.jsonl", 1 << 30, 3600.0)
    row = {"step": 1, "epoch": 0, "begin_ns": time.time_ns(), "end_ns": time.time_ns(), "traced": False, "batch": 3}
    cases = {"StepRecorder.begin (as the callback records a step)": recorder.begin,
             "the same row buffered, no flush": lambda i: buffered.write(row),
             "two time.time_ns() calls": lambda i: (time.time_ns(), time.time_ns())}
    results = {name: [] for name in cases}
    for _ in range(a.rounds):
        for name, fn in cases.items():
            results[name].append(per_call_us(fn, a.steps))
    print(f"{platform.node()}, Python {platform.python_version()}, {a.rounds} rounds of {a.steps} calls")
    for name, values in results.items():
        print(f"{name}: {statistics.median(values):.2f} us per step (min-max {min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
