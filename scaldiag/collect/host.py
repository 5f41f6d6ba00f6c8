"""Host samples with psutil: per-core CPU, the training process tree's CPU, threads, RSS.

These show a CPU-saturated or GIL-bound input pipeline: one core at 100%
while the others idle, or all cores busy.
"""

from __future__ import annotations

import time

import psutil

from scaldiag.collect.sampling import PeriodicSampler
from scaldiag.record.rundir import JsonlWriter

PERIOD_S = 0.1  # 10 Hz: CPU percentages need a window to mean anything
TREE_EVERY = 10  # rescan for worker processes once a second: the scan reads all of /proc


class HostSampler:
    def __init__(self, writer: JsonlWriter, pid: int):
        self._writer = writer
        self._pid = pid
        self._processes: dict[int, psutil.Process] = {}
        self._tree_cache: list[psutil.Process] = []
        self._ticks = 0
        psutil.cpu_percent(percpu=True)  # prime: the first call has no interval to measure
        self.sampler = PeriodicSampler("host", PERIOD_S, self._tick)

    def _tree(self) -> list[psutil.Process]:
        """The training process and its children (data-loading workers), primed once each."""
        self._ticks += 1
        if self._tree_cache and self._ticks % TREE_EVERY:
            return self._tree_cache
        try:
            root = psutil.Process(self._pid)
            tree = [root] + root.children(recursive=True)
        except psutil.Error:
            return []
        for proc in tree:
            if proc.pid not in self._processes:
                self._processes[proc.pid] = proc
                try:
                    proc.cpu_percent()
                except psutil.Error:
                    pass
        self._tree_cache = [self._processes[p.pid] for p in tree]
        return self._tree_cache

    def _tick(self) -> None:
        cpu_pct, threads, rss = 0.0, 0, 0
        tree = self._tree()
        for proc in tree:
            try:
                with proc.oneshot():
                    cpu_pct += proc.cpu_percent()
                    threads += proc.num_threads()
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue
        self._writer.write({"t_ns": time.time_ns(), "core_pct": psutil.cpu_percent(percpu=True),
                            "proc_cpu_pct": cpu_pct, "proc_threads": threads, "proc_rss_bytes": rss,
                            "processes": len(tree)})
