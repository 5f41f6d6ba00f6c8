"""The host sampler's tick, reading /proc itself, costs a fraction of psutil's way
(docs/profile.md).

Benchmark: the host sampler's look at the training process tree, psutil's way and scaldiag's, side
by side.

    python -m bench host_tree [--rounds 5] [--calls 200] [--threads 100] [--pid PID]

The host sampler sums CPU over the training process and its workers. psutil's
``children(recursive=True)`` reads the stat file of every process on the machine, so the sampler
used to rescan once a second; ``host.Descendants`` lists /proc and reads only the processes that
appeared since its last look. psutil reads three files a process for its CPU, threads and RSS
(``PsutilTree``, the sampler's way before and still where /proc is missing); ``ProcTree`` reads one.
Each core's busy share: psutil's ``cpu_percent(percpu=True)`` against ``ProcCores`` (one read of
/proc/stat, plain pairs where psutil builds named tuples); and the whole tick, before and now. Timed
on a stand-in training process (``--threads`` idle threads, two worker processes) or on a real one
(``--pid``), in rounds that alternate the ways: CPU time per call of each, and the ratios.
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

from bench.common import record

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from scaldiag.collect.host import (  # noqa: E402
    LOOK_EVERY,
    Descendants,
    HostSampler,
    ProcCores,
    ProcTree,
    PsutilTree,
    _psutil_tree,
)
from scaldiag.collect.samplers import FLUSH_EVERY_ROWS, FLUSH_MAX_DELAY_S  # noqa: E402
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


def previous_tick(tree: PsutilTree, writer: JsonlWriter):
    """The host sampler's tick before ProcTree and ProcCores: psutil for the tree and the cores."""

    def tick() -> None:
        cpu_pct, threads, rss, processes = tree.totals()
        writer.write(
            {
                "t_ns": time.time_ns(),
                "core_pct": psutil.cpu_percent(percpu=True),
                "proc_cpu_pct": cpu_pct,
                "proc_threads": threads,
                "proc_rss_bytes": rss,
                "processes": processes,
            }
        )

    return tick


def measure(pid: int, rounds: int, calls: int) -> dict[str, list[float]]:
    """CPU us a call of each way, rounds alternating."""
    tree = Descendants.of(pid)
    old_way, new_way, cores = PsutilTree(pid), ProcTree(Descendants.of(pid)), ProcCores()
    writer = JsonlWriter(Path(os.devnull), FLUSH_EVERY_ROWS, FLUSH_MAX_DELAY_S)
    old_whole, new_whole = previous_tick(PsutilTree(pid), writer), HostSampler(writer, pid)._tick
    psutil.cpu_percent(percpu=True)
    ways = {
        "scan": lambda: _psutil_tree(pid),
        "update": tree.update,
        "old_tree": old_way.totals,
        "new_tree": new_way.totals,
        "old_cores": lambda: psutil.cpu_percent(percpu=True),
        "new_cores": cores,
        "old_tick": old_whole,
        "new_tick": new_whole,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, fn in ways.items():
            times[name].append(cpu_us(fn, max(1, calls // 10) if name == "scan" else calls))
    return times


def _main(argv: list[str]) -> int | None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--threads", type=int, default=100)
    p.add_argument(
        "--pid", type=int, help="look at this process (a real training) instead of a stand-in"
    )
    a = p.parse_args(argv)
    if a.pid:
        subject = f"process {a.pid} ({psutil.Process(a.pid).num_threads()} threads)"
        found = {
            "psutil": len(_psutil_tree(a.pid)),
            "descendants": len(Descendants.of(a.pid).update()),
        }
        t = measure(a.pid, a.rounds, a.calls)
    else:
        stand_in = subprocess.Popen(
            [sys.executable, "-c", STAND_IN.format(threads=a.threads)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            stand_in.stdout.readline()
            subject = f"stand-in with {a.threads} threads and 2 workers"
            found = {
                "psutil": len(_psutil_tree(stand_in.pid)),
                "descendants": len(Descendants.of(stand_in.pid).update()),
            }
            t = measure(stand_in.pid, a.rounds, a.calls)
        finally:
            stand_in.kill()
            stand_in.wait()
    processes = len([n for n in os.listdir("/proc") if n.isdigit()])
    print(
        f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, psutil"
        f" {psutil.__version__}; {processes} processes on the machine; {subject} (found: {found});"
        f" {a.rounds} rounds"
    )
    names = {
        "scan": "psutil children(recursive=True)",
        "update": "Descendants.update",
        "old_tree": "the tree's totals a tick, psutil (PsutilTree: rescan once a second)",
        "new_tree": (
            f"the tree's totals a tick, /proc (ProcTree: a look for workers every {LOOK_EVERY}"
            " ticks)"
        ),
        "old_cores": "each core's busy share a tick, psutil cpu_percent(percpu=True)",
        "new_cores": "each core's busy share a tick, ProcCores",
        "old_tick": "the whole tick before (psutil for both; the row encoded)",
        "new_tick": "the whole tick now (HostSampler._tick)",
    }
    for key, name in names.items():
        values = t[key]
        print(
            f"{name}: {statistics.median(values):.1f} us CPU a call (min-max"
            f" {min(values):.1f}-{max(values):.1f})"
        )
    for name, before, after in (
        ("psutil scan / Descendants.update", "scan", "update"),
        ("PsutilTree / ProcTree a tick", "old_tree", "new_tree"),
        ("psutil cpu_percent / ProcCores a tick", "old_cores", "new_cores"),
        ("the whole tick, before / now", "old_tick", "new_tick"),
    ):
        ratios = [b / n for b, n in zip(t[before], t[after])]
        print(
            f"{name}, per round: {', '.join(f'{r:.1f}' for r in ratios)} (median"
            f" {statistics.median(ratios):.1f}x)"
        )
    print(
        f"At 10 ticks a second: {statistics.median(t['old_tick']) / 1e3:.3f}% of a core before, "
        f"{statistics.median(t['new_tick']) / 1e3:.3f}% now (the sampler's own loop aside)."
    )


def main(argv: list[str]) -> int:
    """``python -m bench host_tree [ARGS]``: the run, its output kept as bench/results/host_tree.md.
    """
    return record("host_tree", __doc__, argv, lambda: _main(argv))
