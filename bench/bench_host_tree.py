"""Benchmark: the host sampler's look at the training process tree, psutil's way and scaldiag's, side by side.

    python bench/bench_host_tree.py [--rounds 5] [--calls 200] [--threads 100]

The host sampler sums CPU over the training process and its workers. psutil's
``children(recursive=True)`` reads the stat file of every process on the machine, so the sampler used
to rescan once a second; ``host.Descendants`` lists /proc and reads only the processes that appeared
since its last look. psutil reads three files a process for its CPU, threads and RSS
(``PsutilTree``, the sampler's way before and still where /proc is missing); ``ProcTree`` reads one.
Timed here on a stand-in training process (``--threads`` idle threads, two worker processes), in
rounds that alternate the ways: CPU time per call of each, and the ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scaldiag.collect.host import UPDATE_EVERY, Descendants, ProcTree, PsutilTree, _psutil_tree  # noqa: E402

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
        found = {"psutil": len(_psutil_tree(pid)), "descendants": len(tree.update())}
        old_way, new_way = PsutilTree(pid), ProcTree(Descendants.of(pid))
        scan, update, old_tick, new_tick = [], [], [], []
        for _ in range(a.rounds):
            scan.append(cpu_us(lambda: _psutil_tree(pid), max(1, a.calls // 10)))
            update.append(cpu_us(tree.update, a.calls))
            old_tick.append(cpu_us(old_way.totals, a.calls))
            new_tick.append(cpu_us(new_way.totals, a.calls))
    finally:
        stand_in.kill()
        stand_in.wait()
    processes = len([n for n in os.listdir("/proc") if n.isdigit()])
    print(f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}; {processes} processes on the "
          f"machine; stand-in with {a.threads} threads and 2 workers (found: {found}); {a.rounds} rounds")
    for name, values in (("psutil children(recursive=True)", scan), ("Descendants.update", update),
                         ("the tree's totals a tick, psutil (PsutilTree: rescan once a second)", old_tick),
                         (f"the tree's totals a tick, /proc (ProcTree: update every {UPDATE_EVERY} ticks)", new_tick)):
        print(f"{name}: {statistics.median(values):.1f} us CPU a call (min-max {min(values):.1f}-{max(values):.1f})")
    for name, before, after in (("psutil scan / Descendants.update", scan, update),
                                ("PsutilTree / ProcTree a tick", old_tick, new_tick)):
        ratios = [b / n for b, n in zip(before, after)]
        print(f"{name}, per round: {', '.join(f'{r:.1f}' for r in ratios)} (median {statistics.median(ratios):.1f}x)")
    print(f"At 10 ticks a second: {10 * statistics.median(old_tick) / 1e4:.3f}% of a core before, "
          f"{10 * statistics.median(new_tick) / 1e4:.3f}% now, for the tree (per-core CPU is read alike in both).")

if __name__ == "__main__":
    main()
