"""Host samples: per-core CPU and the training process tree's CPU, threads and RSS (from /proc on
Linux: ``ProcCores``, ``Descendants``, ``ProcTree``; psutil elsewhere).

These show a CPU-saturated or GIL-bound input pipeline: one core at 100%
while the others idle, or all cores busy.
"""

from __future__ import annotations

import functools
import operator
import os
import time

import psutil

from scaldiag.collect.periodic import PeriodicSampler
from scaldiag.record.rundir import JsonlWriter

PERIOD_S = 0.1  # 10 Hz: CPU percentages need a window to mean anything
# A tick that comes sooner after the last sample is skipped, its interval left to the next: the
# sampler, niced, runs late on a busy machine and then early (5 ms after a tick 95 ms late), and an
# interval under the kernel's 10 ms clock tick read a saturated core 0.0% busy (SD211's evidence on
# 9 processes over 2 cores fell under its threshold so, at load 4-7).
MIN_INTERVAL_S = PERIOD_S / 2
# Look for new workers once a second (ticks): on Linux by listing /proc (it grows with the machine's
# processes: beside a JAX training on the H200 host, 186 processes, a look cost 0.43 ms of CPU, more
# than the rest of a tick: `git show 6a74f68:bench/gpu/host_tick_probe.py`), elsewhere by psutil's
# rescan, which reads every process. A worker is counted from its first second on.
LOOK_EVERY = 10
PROC = "/proc"
STAT_BYTES = (
    4096  # a /proc/PID/stat line is a few hundred bytes (52 numbers; the command name at most 16)
)


class HostSampler:
    def __init__(self, writer: JsonlWriter, pid: int):
        self._writer = writer
        descendants = Descendants.of(pid)
        self._tree = (
            ProcTree(descendants) if descendants is not None and read_stat(pid) else PsutilTree(pid)
        )
        self._cores = ProcCores.or_psutil()
        self.sampler = PeriodicSampler("host", PERIOD_S, self._tick)
        self._last_s = -MIN_INTERVAL_S  # the first tick samples at once, as before

    def _tick(self) -> None:
        now_s = time.monotonic()
        if now_s - self._last_s < MIN_INTERVAL_S:
            return
        self._last_s = now_s
        cpu_pct, threads, rss, processes = self._tree.totals()
        self._writer.write(
            {
                "t_ns": time.time_ns(),
                "core_pct": self._cores(),
                "proc_cpu_pct": cpu_pct,
                "proc_threads": threads,
                "proc_rss_bytes": rss,
                "processes": processes,
            }
        )


class ProcCores:
    """Each core's busy % since the last call, from one read of /proc/stat (Linux), as psutil's
    ``cpu_percent(percpu=True)`` computes it: each field's delta at least 0 (a core's iowait may go
    back: proc(5)), busy is user + nice + system + irq + softirq + steal (guest time is inside user
    and nice), idle is idle + iowait, rounded to 0.1. psutil builds named tuples of ten fields a
    core, twice, for the same: its part of a tick grows with the cores, which a GPU host has many of
    (bench/host_tree/run.py)."""

    def __init__(self):
        self._file = _ProcFile(f"{PROC}/stat")
        self._last = _core_times(self._file.read_all())

    @classmethod
    def or_psutil(cls):
        """A callable giving the per-core list: this, or psutil's where /proc/stat cannot be
        read."""
        try:
            return cls()
        except (OSError, ValueError, IndexError):
            psutil.cpu_percent(percpu=True)  # primed: the first call has no interval to measure
            return functools.partial(psutil.cpu_percent, percpu=True)

    def __call__(self) -> list[float]:
        now = _core_times(self._file.read_all())
        last, self._last = self._last, now
        if len(last) != len(now):
            return [0.0] * len(now)  # a core came or went: no interval to measure this time
        pct = []
        for before, after in zip(last, now):
            d = tuple(map(operator.sub, after, before))
            if min(d) < 0:
                d = tuple(max(x, 0) for x in d)
            user, nice, system, idle, iowait, irq, softirq, steal = d
            busy = user + nice + system + irq + softirq + steal
            total = busy + idle + iowait
            pct.append(round(100.0 * busy / total, 1) if total else 0.0)
        return pct


def _core_times(data: bytes) -> list[tuple[int, ...]]:
    """The first eight fields (user ... steal, clock ticks) of each core's ``cpuN`` line of
    /proc/stat (proc(5))."""
    cores = []
    for line in data.split(b"\n")[1:]:  # (the first line is all cores together)
        if not line.startswith(b"cpu"):
            break
        fields = tuple(map(int, line.split()[1:9]))
        if len(fields) != 8:
            raise ValueError(f"a /proc/stat line with {len(fields)} fields")
        cores.append(fields)
    if not cores:
        raise ValueError("no cpuN line in /proc/stat")
    return cores


class ProcTree:
    """The tree's CPU, threads and RSS from one read of /proc/PID/stat per process (Linux). psutil
    reads three files a process for the same (stat, status, statm: 120 us against ~20 here), and a
    DataLoader's workers are each a process. Each member's file stays open (``_ProcFile``)."""

    def __init__(self, descendants: Descendants):
        self._descendants = descendants
        self._pids = descendants.update()
        self._ticks = 0
        self._last: dict[int, tuple[int, float, float]] = {}  # pid: (start, CPU seconds, when)
        self._files: dict[int, _ProcFile] = {}

    def totals(self) -> tuple[float, int, int, int]:
        self._ticks += 1
        if self._ticks % LOOK_EVERY == 0:
            self._pids = self._descendants.update()
        now = time.monotonic()
        last, self._last = self._last, {}
        files, self._files = self._files, {}
        cpu_pct, threads, rss, processes = 0.0, 0, 0, 0
        for pid in self._pids:
            file = files.pop(pid, None) or _ProcFile.of(f"{PROC}/{pid}/stat")
            stat = _parse_stat(file.read(STAT_BYTES)) if file is not None else None
            if (
                stat is None
            ):  # it ended: it leaves the tree for good (its PID may be given to another process)
                if file is not None:
                    file.close()
                self._descendants.forget(pid)
                continue
            self._files[pid] = file
            start, cpu_s, n_threads, rss_bytes = stat
            processes += 1
            threads += n_threads
            rss += rss_bytes
            before = last.get(pid)
            if (
                before is not None and before[0] == start and now > before[2]
            ):  # (a first sight counts 0, as psutil's)
                cpu_pct += 100.0 * (cpu_s - before[1]) / (now - before[2])
            self._last[pid] = (start, cpu_s, now)
        for file in files.values():
            file.close()  # it left the tree
        self._pids = [pid for pid in self._pids if pid in self._files]
        return cpu_pct, threads, rss, processes


class _ProcFile:
    """A /proc file kept open and read again from its start (``pread``): the kernel makes its text
    afresh at each read from offset 0, and the path lookup, the open and Python's file object are
    saved (on the 2-core machine /proc/stat 34 -> 13 us a read, /proc/PID/stat 28 -> 6 us). A
    process's file read after the process ended gives an error, never another process's text: the
    descriptor holds on to the process (and ``ProcTree`` then drops its PID for good, so that a
    process given the PID later is not taken for it)."""

    __slots__ = ("fd",)

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDONLY)

    @classmethod
    def of(cls, path: str) -> _ProcFile | None:
        try:
            return cls(path)
        except OSError:
            return None

    def read(self, size: int = 1 << 16) -> bytes:
        """The first ``size`` bytes of the file's text now; empty where it cannot be read (a process
        gone)."""
        try:
            return os.pread(self.fd, size, 0)
        except OSError:
            return b""

    def read_all(self) -> bytes:
        """All of the file's text now (a read as long as it asked for may have left some: ask for
        more)."""
        size = 1 << 16
        data = self.read(size)
        while len(data) == size:
            size *= 2
            data = self.read(size)
        return data

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass  # (at interpreter exit)


class PsutilTree:
    """The same with psutil, where /proc cannot be read (not Linux): the tree rescanned once a
    second."""

    def __init__(self, pid: int):
        self._pid = pid
        self._processes: dict[int, psutil.Process] = {}
        self._tree: list[psutil.Process] = []
        self._ticks = 0

    def _members(self) -> list[psutil.Process]:
        self._ticks += 1
        if self._tree and self._ticks % LOOK_EVERY:
            return self._tree
        tree = []
        for pid in _psutil_tree(self._pid):
            proc = self._processes.get(pid)
            if proc is None:
                try:
                    proc = self._processes[pid] = psutil.Process(pid)
                    proc.cpu_percent()  # primed: a first sight counts 0
                except psutil.Error:
                    continue
            tree.append(proc)
        self._processes = {
            proc.pid: proc for proc in tree
        }  # the processes that ended are forgotten
        self._tree = tree
        return tree

    def totals(self) -> tuple[float, int, int, int]:
        cpu_pct, threads, rss, processes = 0.0, 0, 0, 0
        for proc in self._members():
            try:
                with proc.oneshot():
                    cpu_pct += proc.cpu_percent()
                    threads += proc.num_threads()
                    rss += proc.memory_info().rss
                processes += 1
            except psutil.Error:
                continue
        return cpu_pct, threads, rss, processes


def _psutil_tree(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [pid] + [child.pid for child in root.children(recursive=True)]
    except psutil.Error:
        return []


class Descendants:
    """A process and its descendants, kept up to date from the processes that appeared in /proc
    since the last look (Linux): each new one's parent is read from /proc/PID/stat, and it joins if
    that parent is a member. psutil's ``children(recursive=True)`` reads every process's stat file
    instead: 2.7 ms a scan with 65 processes on the 2-core machine, 22x an update
    (bench/host_tree/run.py). The sampler looks once a second (``LOOK_EVERY``), as it rescanned with
    psutil before."""

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
        # the processes already there: found once
        return cls(root, _psutil_tree(root) or [root], seen)

    def forget(self, pid: int) -> None:
        """``pid`` has ended: a process given the same PID before the next look is not a member (a
        reused PID that is not new since the last look would not be looked at again)."""
        self.members.pop(pid, None)

    def update(self) -> list[int]:
        try:
            pids = _pids()
        except OSError:
            return list(self.members)
        new, self._seen = sorted(pids - self._seen), pids
        parents = {pid: _parent(pid) for pid in new}
        joined = True
        while (
            joined
        ):  # parents first: PIDs grow (and a wrapped-around child waits for a later round)
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


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _stat_fields(data: bytes) -> list[bytes] | None:
    """The fields of a /proc/PID/stat text from field 3 on (proc(5); after the command name, which
    may hold spaces and parentheses: its last ')' ends it), or None where there is none."""
    end = data.rfind(b")")
    return data[end + 2 :].split() if end >= 0 else None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""  # it has already gone


def _parse_stat(data: bytes) -> tuple[int, float, int, int] | None:
    """(start time in clock ticks, user + system CPU seconds, threads, RSS bytes) of a process from
    its /proc/PID/stat text (fields 22, 14 + 15, 20, 24); None where the text has none."""
    fields = _stat_fields(data)
    try:
        return (
            int(fields[19]),
            (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS,
            int(fields[17]),
            int(fields[21]) * _PAGE_BYTES,
        )
    except (TypeError, ValueError, IndexError):
        return None


def read_stat(pid: int) -> tuple[int, float, int, int] | None:
    """``_parse_stat`` of a process by its PID; None where it cannot be read."""
    return _parse_stat(_read(f"{PROC}/{pid}/stat"))


def _parent(pid: int) -> int:
    """The parent's PID (field 4), -1 where the process has already gone."""
    fields = _stat_fields(_read(f"{PROC}/{pid}/stat"))
    try:
        return int(fields[1])
    except (TypeError, ValueError, IndexError):
        return -1
