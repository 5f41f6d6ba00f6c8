"""Benchmark: the Python cost of the PyTorch device clock per step, on the CPU, with a fake event.

    python bench/torch/device_clock_cost.py [--seconds 1.0] [--rounds 5]

What `scaldiag profile` runs at each optimizer.step() boundary on CUDA is
``TorchCapture._begin_timed``: the recorder's ``begin`` and then ``DeviceClock.tick`` (one
``record`` on the pool's next event; every READ_EVERY boundaries a read: a ``query`` and an
``elapsed_time`` per step, a row written). Here the event is a fake whose methods do nothing but
keep a number, so the figure is our own code's cost; the real ``torch.cuda.Event.record`` (a Python
wrapper building the current Stream, then cudaEventRecord), ``query`` and ``elapsed_time`` add
theirs on the GPU machine (bench/gpu/check_torch_device_clock.py measures them there). Direct timing
on the calling thread, a loop of calls: a floor. Medians of the rounds (min-max), in microseconds
per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from scaldiag.collect.frameworks.torch_capture import TorchCapture  # noqa: E402
from scaldiag.collect.frameworks.torch_device_clock import (  # noqa: E402
    WRITE_EVERY_ROWS,
    DeviceClock,
)  # noqa: E402
from scaldiag.collect.recorder import StepRecorder  # noqa: E402
from scaldiag.record.rundir import DEVICE_STEPS, JsonlWriter  # noqa: E402


class FakeEvent:
    """Completes at once (the device keeps up: every read retires what was recorded)."""

    __slots__ = ("at",)

    def __init__(self):
        self.at = 0

    def record(self, stream=None):
        self.at = time.perf_counter_ns()

    def query(self):
        return True

    def elapsed_time(self, end):
        return (end.at - self.at) / 1e6

    def synchronize(self):
        pass


def per_call_us(fn, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(1000):
            fn()
        n += 1000
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return elapsed / n * 1e6


def cases(tmp: Path) -> dict:
    plain = StepRecorder(tmp / "plain", None, warmup_steps=0, trace_steps=0)
    timed = StepRecorder(tmp / "timed", None, warmup_steps=0, trace_steps=0)
    writer = JsonlWriter(
        tmp / "timed" / DEVICE_STEPS, flush_every=WRITE_EVERY_ROWS, max_delay_s=1.0
    )
    capture = TorchCapture()
    capture._recorder_begin = timed.begin
    capture.clock = DeviceClock(FakeEvent, lambda: None, writer.write, 0)
    return {
        "StepRecorder.begin (the step hook today, CPU or no clock)": plain.begin,
        "TorchCapture._begin_timed: begin + DeviceClock.tick, fake event": capture._begin_timed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("plain", "timed"):
            (Path(tmp) / name).mkdir()
        todo = cases(Path(tmp))
        results = {name: [] for name in todo}
        for _ in range(args.rounds):  # rounds interleave the cases: the machine's drift hits both
            for name, fn in todo.items():
                results[name].append(per_call_us(fn, args.seconds))
    print(f"python {sys.version.split()[0]}, {args.rounds} rounds of {args.seconds} s")
    for name, values in results.items():
        print(f"{statistics.median(values):7.3f} us  ({min(values):.3f}-{max(values):.3f})  {name}")
    plain, timed = (statistics.median(v) for v in results.values())
    print(
        f"{timed - plain:7.3f} us  the device clock's own Python per step (difference of medians)"
    )


if __name__ == "__main__":
    main()
