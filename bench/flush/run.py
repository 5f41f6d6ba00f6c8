"""One flush of steps.jsonl costs the training thread tens of microseconds: under a microsecond a
step (docs/profile.md).

Benchmark: what one flush of steps.jsonl costs the training thread, per folder it is written in.

    python -m bench flush [--dirs /tmp,.,/dev/shm] [--flushes 200] [--steps 90] [--rounds 5]

The step recorder keeps steps in memory and writes them as one line at most every 0.1 s (or later
where the last write was slow, see recorder.py). `python -m bench step_hook` times
``StepRecorder.begin`` in a loop of calls, where a flush is shared by ~10^5 steps, so it cannot show
a flush's cost; in a host-bound fit (1.1 ms steps on the H200 machine) one flush is shared by ~90
steps, and a flush that takes ~1 ms is ~1% of step time. This times each flush as the recorder does
it (``--steps`` begins, then ``flush_steps``: the block's line formatted and written, the file
flushed to the OS), in each folder in turn, rounds interleaved (the machine's noise hits every
folder alike). Reported per folder: the median, 90th percentile and largest flush in microseconds,
the write alone (the same text written to a second file), and what a flush costs per step at
``--steps`` steps a flush.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import record

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scaldiag.collect import recorder as recorder_module  # noqa: E402
from scaldiag.collect.recorder import StepRecorder  # noqa: E402


def flush_times_us(folder: Path, flushes: int, steps: int) -> tuple[list[float], list[float], dict]:
    """Each flush's time, each bare write's time (us), and the cadence the recorder chose."""
    run = Path(tempfile.mkdtemp(dir=folder, prefix="scaldiag-flush-"))
    recorder = StepRecorder(run, None, 3, 0)
    bare = open(run / "bare.jsonl", "a")  # noqa: SIM115 (closed below)
    flush_us, write_us, intervals = [], [], []
    try:
        for _ in range(flushes):
            for i in range(steps):
                recorder.begin(i)
            t0 = time.perf_counter_ns()
            recorder.flush_steps()
            t1 = time.perf_counter_ns()
            flush_us.append((t1 - t0) / 1e3)
            intervals.append((recorder._due_ns - recorder._flushed_ns) / 1e6)
            text = recorder_module.block_line(
                0, 0, list(range(10**18, 10**18 + steps)), list(range(steps))
            )
            t2 = time.perf_counter_ns()
            bare.write(text)
            bare.flush()
            write_us.append((time.perf_counter_ns() - t2) / 1e3)
    finally:
        recorder.close()
        bare.close()
        for name in os.listdir(run):
            os.unlink(run / name)
        os.rmdir(run)
    return flush_us, write_us, {"interval_ms_median": statistics.median(intervals)}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _main(argv: list[str]) -> int | None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--dirs", default=f"{tempfile.gettempdir()},.,/dev/shm", help="comma-separated folders"
    )
    p.add_argument("--flushes", type=int, default=200, help="per folder and round")
    p.add_argument("--steps", type=int, default=90, help="steps per flush (0.1 s of 1.1 ms steps)")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    folders = [
        Path(d) for d in a.dirs.split(",") if d and os.path.isdir(d) and os.access(d, os.W_OK)
    ]
    flush: dict[Path, list[float]] = {f: [] for f in folders}
    write: dict[Path, list[float]] = {f: [] for f in folders}
    cadence: dict[Path, list[float]] = {f: [] for f in folders}
    for _ in range(a.rounds):
        for folder in folders:
            f_us, w_us, info = flush_times_us(folder, a.flushes, a.steps)
            flush[folder] += f_us
            write[folder] += w_us
            cadence[folder].append(info["interval_ms_median"])
    print(
        f"{platform.node()}, {platform.machine()}, {os.cpu_count()} cores, Python"
        f" {platform.python_version()}; {a.rounds} rounds x {a.flushes} flushes of {a.steps} steps"
        " per folder"
    )
    print(
        "| folder (filesystem) | flush median, us | p90 | max | bare write+flush median, us | per"
        " step, us | next flush after, ms (median) |"
    )
    print("|---|---|---|---|---|---|---|")
    for folder in folders:
        f_us, w_us = flush[folder], write[folder]
        med = statistics.median(f_us)
        print(
            f"| {folder} ({filesystem(folder)}) | {med:.1f} | {pct(f_us, 0.9):.1f} |"
            f" {max(f_us):.1f} | {statistics.median(w_us):.1f} | {med / a.steps:.3f} |"
            f" {statistics.median(cadence[folder]):.0f} |"
        )


def filesystem(folder: Path) -> str:
    """The mount's filesystem type, from /proc/mounts (the longest mount point above ``folder``)."""
    try:
        real = str(folder.resolve())
        best, kind = "", "?"
        with open("/proc/mounts") as mounts:
            for line in mounts:
                parts = line.split()
                point = parts[1]
                if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(
                    best
                ):
                    best, kind = point, parts[2]
        return kind
    except OSError:
        return "?"


def main(argv: list[str]) -> int:
    """``python -m bench flush [ARGS]``: the run, its output kept as bench/results/flush.md."""
    return record("flush", __doc__, argv, lambda: _main(argv))
