"""Host samples with psutil: per-core CPU, the training process tree's CPU, threads, RSS.

These show a CPU-saturated or GIL-bound input pipeline: one core at 100%
while the others idle, or all cores busy.
"""

from __future__ import annotations

import os
import time

import psutil

from scaldiag.collect.sampling import PeriodicSampler
from scaldiag.record.rundir import JsonlWriter

PERIOD_S = 0.1  # 10 Hz: CPU percentages need a window to mean anything
TREE_EVERY = 10  # where /proc cannot be listed: rescan with psutil once a second (it reads every process)
UPDATE_EVERY = 2  # on Linux: look for new workers every 0.2 s (listing /proc grows with the machine's processes)
PROC = "/proc"


class HostSampler:
    def __init__(self, writer: JsonlWriter, pid: int):
        self._writer = writer
        self._pid = pid
        self._processes: dict[int, psutil.Process] = {}
        self._tree_cache: list[psutil.Process] = []
        self._ticks = 0
        self._descendants = Descendants.of(pid)
        psutil.cpu_percent(percpu=True)  # prime: the first call has no interval to measure
        self.sampler = PeriodicSampler("host", PERIOD_S, self._tick)

    def _tree(self) -> list[psutil.Process]:
        """The training process and its children (data-loading workers), primed once each."""
        self._ticks += 1
        if self._tree_cache and self._ticks % (UPDATE_EVERY if self._descendants is not None else TREE_EVERY):
            return self._tree_cache
        pids = self._descendants.update() if self._descendants is not None else _psutil_tree(self._pid)
        tree = []
        for pid in pids:
            proc = self._processes.get(pid)
            if proc is None:
                try:
                    proc = self._processes[pid] = psutil.Process(pid)
                    proc.cpu_percent()
                except psutil.Error:
                    continue
            tree.append(proc)
        if len(self._processes) > 2 * len(tree) + 16:  # forget the processes that ended
            self._processes = {proc.pid: proc for proc in tree}
        self._tree_cache = tree
        return tree

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


def _psutil_tree(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [pid] + [child.pid for child in root.children(recursive=True)]
    except psutil.Error:
        return []


class Descendants:
    """A process and its descendants, kept up to date from the processes that appeared in /proc since
    the last look (Linux): each new one's parent is read from /proc/PID/stat, and it joins if that
    parent is a member. psutil's ``children(recursive=True)`` reads every process's stat file instead:
    2.7 ms a scan with 65 processes on the 2-core machine, 23x an update (bench/bench_host_tree.py), so
    the tree is looked at five times a second rather than once, for less CPU."""

    def __init__(self, root: int, members: list[int], seen: set[int]):
        self.root = root
        self.members = dict.fromkeys(members)  # ordered: the root first
        self._seen = seen

    @classmethod
    def of(cls, root: int) -> Descendants | None:
        """None where /proc cannot be listed (not Linux): the sampler then rescans with psutil."""
        try:
            seen = _pids()
        except OSError:
            return None
        return cls(root, _psutil_tree(root) or [root], seen)  # the processes already there: found once

    def update(self) -> list[int]:
        try:
            pids = _pids()
        except OSError:
            return list(self.members)
        new, self._seen = sorted(pids - self._seen), pids
        parents = {pid: _parent(pid) for pid in new}
        joined = True
        while joined:  # parents first: PIDs grow (and a wrapped-around child waits for a later round)
            joined = False
            for pid in new:
                if pid not in self.members and parents[pid] in self.members:
                    self.members[pid] = None
                    joined = True
        for pid in [p for p in self.members if p not in pids]:
            del self.members[pid]  # it ended
        return list(self.members)


def _pids() -> set[int]:
    return {int(name) for name in os.listdir(PROC) if name.isdigit()}


def _parent(pid: int) -> int:
    """The parent's PID, from /proc/PID/stat (after the command name, which may hold spaces and
    parentheses: its last ')' ends it); -1 where the process has already gone."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split(None, 2)[1])
    except (OSError, ValueError, IndexError):
        return -1

