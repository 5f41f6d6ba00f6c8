"""Benchmark: finding the training process's descendants each host-sampler tick, two ways, side by side.

    python bench/bench_host_tree.py [--rounds 5] [--calls 200] [--threads 100]

The host sampler sums CPU over the training process and its workers. psutil's
``children(recursive=True)`` reads the stat file of every process on the machine, so the sampler used
to rescan once a second; ``host.Descendants`` lists /proc and reads only the processes that appeared
since its last look. Timed here on a stand-in training process (``--threads`` idle threads, two
worker processes), in rounds that alternate the two ways: CPU time per call of each, their ratio, and
a whole ``HostSampler`` tick (per-core CPU, the tree's CPU, threads and RSS) for scale.
"""

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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scaldiag.collect.host import UPDATE_EVERY, Descendants, HostSampler, _psutil_tree  # noqa: E402
from scaldiag.record.rundir import JsonlWriter  # noqa: E402

STAND_IN = """
import multiprocessing, threading, time
def idle():
    time.sleep(120)
if __name__ == "__main__":
    ev = threading.Event()
    for _ in range({threads}):
        threading.Thread(target=ev.wait, daemon=True).start()
    workers = [multiprocessing.Process(target=idle, daemon=True) for _ in range(2)]
    [w.start() for w in workers]
    print("ready", flush=True)
    time.sleep(120)
"""


def cpu_us(fn, calls: int) -> float:
    t0 = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - t0) / calls * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--threads", type=int, default=100)
    a = p.parse_args()
    stand_in = subprocess.Popen([sys.executable, "-c", STAND_IN.format(threads=a.threads)], stdout=subprocess.PIPE,
                                text=True)
    try:
        stand_in.stdout.readline()
        pid = stand_in.pid
        tree = Descendants.of(pid)
        sampler = HostSampler(JsonlWriter(Path(tempfile.mkdtemp()) / "host.jsonl", 100, 1.0), pid)
        found = {"psutil": len(_psutil_tree(pid)), "descendants": len(tree.update())}
        scan, update, tick = [], [], []
        for _ in range(a.rounds):
            scan.append(cpu_us(lambda: _psutil_tree(pid), max(1, a.calls // 10)))
            update.append(cpu_us(tree.update, a.calls))
            tick.append(cpu_us(sampler._tick, a.calls))
    finally:
        stand_in.kill()
        stand_in.wait()
    processes = len([n for n in os.listdir("/proc") if n.isdigit()])
    print(f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}; {processes} processes on the "
          f"machine; stand-in with {a.threads} threads and 2 workers (found: {found}); {a.rounds} rounds")
    for name, values in (("psutil children(recursive=True)", scan), ("Descendants.update", update),
                         ("a whole HostSampler tick (with Descendants)", tick)):
        print(f"{name}: {statistics.median(values):.1f} us CPU a call (min-max {min(values):.1f}-{max(values):.1f})")
    ratios = [s / u for s, u in zip(scan, update)]
    print(f"psutil scan / Descendants.update, per round: {', '.join(f'{r:.1f}' for r in ratios)} "
          f"(median {statistics.median(ratios):.1f}x). The sampler used to scan once a second; it now updates "
          f"every {UPDATE_EVERY} ticks: per second {statistics.median(scan):.0f} us before, "
          f"{10 / UPDATE_EVERY * statistics.median(update):.0f} us now.")


if __name__ == "__main__":
    main()
