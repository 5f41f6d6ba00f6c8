"""The PyTorch profiler window: ``torch.profiler`` over a few steady steps, written as Kineto JSON.

No schedule (the recorder decides when the window opens and closes); each
traced step is a ``record_function("ProfilerStep#N")``, the marker Kineto
itself writes under a schedule, so the trace reads like any other
``torch.profiler`` trace. On stop the trace is exported to
``RUN_DIR/trace/plugins/profile/torch/rank<R>.pt.trace.json`` (the run's
root directory for every rank of a ``torchrun`` job), the layout
``readers/kineto.py`` finds. Importing this module registers the window
under the backend name ``pytorch``.
"""

from __future__ import annotations

import os
from pathlib import Path

from scaldiag.collect.frameworks import tracing
from scaldiag.record.rundir import TRACE_DIR

BACKEND = "pytorch"
RUN_ROOT_ENV = "SCALDIAG_RUN_ROOT"  # a torchrun job's run directory; ranks > 0 record in RUN_ROOT/rank<R>
TRACE_RUN = "torch"                  # plugins/profile/<run>: the same for every rank, so they merge


def rank() -> int:
    value = os.environ.get("RANK", "0")
    return int(value) if value.isdigit() else 0


def trace_file(logdir: Path) -> Path:
    """Where this rank's trace goes: under the job's root run directory when there is one."""
    root = os.environ.get(RUN_ROOT_ENV)
    base = Path(root) / TRACE_DIR if root else Path(logdir)
    return base / "plugins" / "profile" / TRACE_RUN / f"rank{rank()}.pt.trace.json"


class TorchTraceWindow(tracing.TraceWindow):
    backend = BACKEND

    def __init__(self, logdir: Path):
        super().__init__(logdir)
        self._profiler = None
        self.file: Path | None = None

    def _start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        # Shapes, stacks and memory off: each costs host time per op that the untraced run does not have.
        self._profiler = profile(activities=activities, record_shapes=False, with_stack=False, profile_memory=False)
        self._profiler.start()

    def _stop(self) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        profiler.stop()
        file = trace_file(self.logdir)
        file.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(file))
        self.file = file

    def _begin_marker(self, step: int) -> None:
        from torch.profiler import record_function

        self._marker = record_function(f"ProfilerStep#{step}")
        self._marker.__enter__()


tracing.WINDOWS.setdefault(BACKEND, TorchTraceWindow)
