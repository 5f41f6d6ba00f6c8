"""Where the host sampler's CPU goes in place: each piece of its tick alone on a PeriodicSampler at
10 Hz,
beside a real training, rounds alternating the pieces.

    python3 bench/gpu/host_tick_probe.py [--seconds 15] [--rounds 2] [--pieces noop,now,...] -- TRAINING COMMAND...

A tick timed in a loop (python -m bench host_tree) runs warm; the sampler's ticks come 100 ms apart,
beside a training that fills the caches, and cost more. This runs each piece as the sampler runs it
(its own thread, niced, 10 Hz) and reads the thread's CPU time per tick: a no-op tick (the loop's
floor), the tree (ProcTree; its look for new workers alone), the cores (ProcCores; psutil's
cpu_percent), the whole tick now (HostSampler) and the tick before (psutil for the tree and the
cores).
"""  # noqa: E501

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from bench.host_tree.run import previous_tick  # noqa: E402
from scaldiag.collect.host import (
    PERIOD_S,
    Descendants,
    HostSampler,
    ProcCores,
    ProcTree,
    PsutilTree,
)  # noqa: E402
from scaldiag.collect.periodic import PeriodicSampler  # noqa: E402
from scaldiag.collect.samplers import FLUSH_EVERY_ROWS, FLUSH_MAX_DELAY_S  # noqa: E402
from scaldiag.record.rundir import JsonlWriter  # noqa: E402


def pieces(pid: int, folder: Path) -> dict:
    writer = JsonlWriter(folder / "host_samples.jsonl", FLUSH_EVERY_ROWS, FLUSH_MAX_DELAY_S)
    psutil.cpu_percent(percpu=True)
    return {
        "noop": ("no-op tick", lambda: None),
        "tree": ("tree (ProcTree)", ProcTree(Descendants.of(pid)).totals),
        "update": ("a look for new workers (Descendants.update)", Descendants.of(pid).update),
        "cores": ("cores (ProcCores)", ProcCores()),
        "psutil_cores": ("cores (psutil cpu_percent)", lambda: psutil.cpu_percent(percpu=True)),
        "now": ("whole tick now (HostSampler)", HostSampler(writer, pid)._tick),
        "before": ("whole tick before (psutil)", previous_tick(PsutilTree(pid), writer)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--settle", type=float, default=30.0, help="seconds for the training to start and compile"
    )
    p.add_argument("--pieces", default="noop,tree,update,cores,psutil_cores,now,before")
    p.add_argument("command", nargs="+")
    a = p.parse_args()
    training = subprocess.Popen(a.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    per_tick: dict[str, list[float]] = {}
    try:
        time.sleep(a.settle)
        threads = psutil.Process(training.pid).num_threads()
        with tempfile.TemporaryDirectory() as folder:
            ways = pieces(training.pid, Path(folder))
            ways = [ways[key] for key in a.pieces.split(",")]
            for _ in range(a.rounds):
                for name, tick in ways:
                    sampler = PeriodicSampler("probe", PERIOD_S, tick)
                    sampler.start()
                    time.sleep(a.seconds)
                    sampler.stop()
                    assert training.poll() is None, "the training ended during the probe"
                    per_tick.setdefault(name, []).append(
                        sampler.cpu_s / max(sampler.ticks, 1) * 1e6
                    )
    finally:
        training.kill()
        training.wait()
    print(
        f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, psutil"
        f" {psutil.__version__}; beside `{' '.join(a.command)}` ({threads} threads); {a.rounds}"
        f" rounds of {a.seconds:.0f} s a piece, alternating; {1 / PERIOD_S:.0f} Hz"
    )
    for name, values in per_tick.items():
        median = statistics.median(values)
        print(
            f"{name}: {median:.1f} us CPU a tick (rounds: {', '.join(f'{v:.1f}' for v in values)}),"
            f" {median / PERIOD_S / 1e4:.3f}% of a core"
        )


if __name__ == "__main__":
    main()
