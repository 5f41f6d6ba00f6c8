"""The trace window's bounds in time: its traced steps take at most TRACE_LIMIT_S and at most
TRACE_SHARE of the run's wall so far (past SHARE_FLOOR_S of them), whichever is less.

The window is planned in steps (recorder.TRACE_STEPS), and a step of one call can be a whole epoch:
a public JAX script's jitted epoch (1,875 batches, 148 ms untraced) took 12.6 s traced, 40% of its
run's wall (issue 50). A window can only end at a step boundary, so at the end of each traced step
the recorder asks whether the next step, as long as the last one, would take the window past its
bound; if so the window ends there, short of its plan, and training.json says which bound ended it.
The first traced step always runs whole: a window of one long step is one step, and the report
says so. What is counted: the traced steps, from the first one's begin (after the profiler
started) to the end of the last; the profiler's start and its stop (the export, which grows with
the events) are the accounting's "profiler window" part, measured, not bounded here.

No framework exposes a cheap live count of the profiler's events (torch.profiler, jax.profiler and
TensorFlow's keep them inside the profiler until it stops), so there is no bound on events: time
stands for it (a traced step's events grow with its length).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from scaldiag.collect.env import TRACE_LIMIT_ENV, TRACE_SHARE_ENV

TRACE_LIMIT_S = 30.0  # issue 50: a user with a 10-minute step must not wait an hour for the window
TRACE_SHARE = 0.10  # issue 50: at most a tenth of the run's wall so far
# The default share binds only past this many seconds of traced steps: a window of a few seconds
# costs a few seconds on any run, and a short run (a test's, a demo's: a two-node job of 5 s) cut
# to one traced step by a tenth of its wall lost every finding that needs the steps' spread
# (SD209's throttled link). Set SCALDIAG_TRACE_SHARE and the share binds from the first step.
SHARE_FLOOR_S = 3.0

PLAN = "plan"  # every planned step was traced
TIME_LIMIT = "time limit"
RUN_SHARE = "share of the run"
TRAINING_ENDED = "training ended"  # the run ended (or the window was closed) before its plan


@dataclass(frozen=True)
class TraceBudget:
    limit_s: float
    share: float
    run_began_ns: int  # where the run's wall begins: the process's start, or the launcher's
    share_floor_s: float = 0.0  # the share binds past this much traced time (SHARE_FLOOR_S)

    def over(self, traced_ns: int, last_step_ns: int, now_ns: int) -> str | None:
        """Which bound the next step, as long as the last one, would take the window past (the
        time limit first), or None. ``traced_ns``: the window's traced steps so far."""
        after_ns = traced_ns + last_step_ns
        if after_ns > self.limit_s * 1e9:
            return TIME_LIMIT
        if after_ns <= self.share_floor_s * 1e9:
            return None
        if after_ns > self.share * (now_ns + last_step_ns - self.run_began_ns):
            return RUN_SHARE
        return None

    def facts(self) -> dict:
        return {"limit_s": self.limit_s, "share": self.share}


def from_env(environ=os.environ, run_began_ns: int | None = None) -> TraceBudget:
    """The bounds as set (SCALDIAG_TRACE_LIMIT_S, SCALDIAG_TRACE_SHARE), else the defaults; a value
    that is not a number >= 0 leaves the default."""
    share = _number(environ.get(TRACE_SHARE_ENV), None)
    return TraceBudget(
        _number(environ.get(TRACE_LIMIT_ENV), TRACE_LIMIT_S),
        TRACE_SHARE if share is None else share,
        process_started_ns() if run_began_ns is None else run_began_ns,
        SHARE_FLOOR_S if share is None else 0.0,
    )


def _number(text: str | None, default: float | None) -> float | None:
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        return default
    return value if value >= 0 and value == value else default


def process_started_ns() -> int:
    """When this process started, on the wall clock (Linux: /proc; elsewhere the first import of
    this module, a little later)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime (proc(5)): after boot
        ago_s = time.clock_gettime(time.CLOCK_BOOTTIME) - started_s
        return time.time_ns() - int(ago_s * 1e9)
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED_NS


_IMPORTED_NS = time.time_ns()
