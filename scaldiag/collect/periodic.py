"""A periodic sampler on a background thread that never raises into its host.

A failing read is recorded once as missing evidence and sampling goes on
without it; a sampler that cannot start at all says why in ``missing``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

# Sampling yields to training. On a machine whose cores the training fills (2
# here), a sampler at normal priority preempts training threads, and a
# parallel op waits for its slowest thread (measured: 1.05x step time).
SAMPLER_NICENESS = 10


class PeriodicSampler:
    """Calls ``tick()`` every ``period_s`` on a daemon thread until stopped."""

    def __init__(self, name: str, period_s: float, tick: Callable[[], None]):
        self.name = name
        self.period_s = period_s
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"scaldiag-{name}", daemon=True)
        self.ticks = 0
        self.error: str | None = None
        self.cpu_s = 0.0  # thread CPU time spent sampling
        self.wall_s = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        _lower_this_thread_priority()
        start_wall, start_cpu = time.perf_counter(), time.thread_time()
        next_t = start_wall
        while not self._stop.is_set():
            try:
                self._tick()
                self.ticks += 1
            except Exception as exc:  # the sampler must never take training down
                self.error = f"{type(exc).__name__}: {exc}"
                break
            next_t += self.period_s
            delay = next_t - time.perf_counter()
            if delay < 0:  # fell behind: do not burst to catch up
                next_t = time.perf_counter()
                delay = 0
            # time.sleep, not Event.wait(delay): a timed wait allocates and
            # waits on a fresh lock each call, which at 100 Hz cost ~1% of a
            # core. Stopping then takes up to one period.
            time.sleep(delay)
        self.wall_s = time.perf_counter() - start_wall
        self.cpu_s = time.thread_time() - start_cpu


def _lower_this_thread_priority() -> None:
    """Nice this thread only (Linux takes a thread id where POSIX says process id)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SAMPLER_NICENESS)
    except (OSError, AttributeError):  # not permitted, or not Linux: sample at normal priority
        pass
