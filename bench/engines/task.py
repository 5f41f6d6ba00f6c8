"""The benchmark's task: one rank's trace read, a small result sent back (what a per-rank reduction
returns).

A module of its own, so that every engine's workers import it by name (``bench.engines.task``), as
they import scaldiag's own reduction, instead of receiving a copy of ``__main__``.
"""

from __future__ import annotations

import gc
import os

from bench.common import rss_mib


def count_events(path: str) -> tuple[int, int, float]:
    """``(events, worker pid, the worker's RSS in MiB once the trace is freed)``: what a worker
    keeps of its heap."""
    from scaldiag.readers.kineto import read_trace

    trace = read_trace([path])
    events = trace.event_count
    del trace
    gc.collect()
    return events, os.getpid(), rss_mib(os.getpid())
