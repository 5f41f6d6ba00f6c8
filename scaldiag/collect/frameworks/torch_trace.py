"""The PyTorch profiler window: ``torch.profiler`` over a few steady steps, written as Kineto JSON.

No schedule (the recorder decides when the window opens and closes); each
traced step is a ``record_function("ProfilerStep#N")``, the marker Kineto
itself writes under a schedule, so the trace reads like any other
``torch.profiler`` trace. On stop the trace is exported to
``RUN_DIR/trace/plugins/profile/torch/rank<R>.pt.trace.json`` (the run's
root directory for every rank of a ``torchrun`` job), the layout
``readers/kineto/__init__.py`` finds. Importing this module registers the window
under the backend name ``pytorch``.
"""

from __future__ import annotations

import os
from pathlib import Path

from scaldiag.collect.env import RUN_ROOT_ENV, TEARDOWN_ENV
from scaldiag.collect.frameworks import tracing
from scaldiag.record.rundir import TRACE_DIR

BACKEND = "pytorch"
TRACE_RUN = "torch"  # plugins/profile/<run>: the same for every rank, so they merge


def rank() -> int:
    value = os.environ.get("RANK", "0")
    return int(value) if value.isdigit() else 0


def trace_file(logdir: Path) -> Path:
    """Where this rank's trace goes: under the job's root run directory when there is one."""
    root = os.environ.get(RUN_ROOT_ENV)
    base = Path(root) / TRACE_DIR if root else Path(logdir)
    return base / "plugins" / "profile" / TRACE_RUN / f"rank{rank()}.pt.trace.json"


CUPTI_TEARDOWN_SAFE_CUDA = (12, 6)
# CUDA graph captures seen in this process (torch_hooks wraps CUDAGraph.capture_begin). Once a graph
# exists CUPTI's teardown is unsafe: torch itself sets TEARDOWN_CUPTI=0 for its own CUDA graphs. (A
# script that captured its step as a graph while the window was open hung at exit on an H200 with
# our TEARDOWN_CUPTI=1, and on an H100 without it, 2026-12-06: the window now closes before a
# capture, torch_capture.before_graph_capture.)
graphs_captured = 0


def graph_captured() -> None:
    global graphs_captured
    graphs_captured += 1


def teardown_cupti_at_stop(cuda_version: str | None, environ, graphs: int = 0) -> bool:
    """Ask Kineto to finalise CUPTI when the window stops, so the training after it runs at full
    speed.

    Kineto leaves CUPTI initialised after a trace unless TEARDOWN_CUPTI=1 (pytorch/pytorch#144455),
    and the steps after the window stay slower for the rest of the process: on one H200 (torch 2.11,
    CUDA 13.0; bench/results/gpu_h200/torch/torch.md#profiler_aftermathmd) a host-bound eager step
    ran 1.23x slower than in a plain process 1-55 steps after a 6-step window and 1.17x (1.07-1.32
    in each of 4 rounds) 135-375 steps after it; with TEARDOWN_CUPTI=1, 0.96-1.00x and 0.90x
    (0.68-1.12). The user's own setting stands, and torch itself sets 0 where CUDA graphs make
    teardown unsafe (inductor's cudagraphs, CUDA before 12.6); below CUDA 12.6, or once the process
    has captured a CUDA graph (``graphs``), we leave it alone too. True where it was set."""
    if TEARDOWN_ENV in environ or not cuda_version or graphs:
        return False
    try:
        version = tuple(int(part) for part in cuda_version.split(".")[:2])
    except ValueError:
        return False
    if version >= CUPTI_TEARDOWN_SAFE_CUDA:
        environ[TEARDOWN_ENV] = "1"
        return True
    return False


class TorchTraceWindow(tracing.TraceWindow):
    backend = BACKEND

    def __init__(self, logdir: Path):
        super().__init__(logdir)
        self._profiler = None
        self.file: Path | None = None
        self._teardown_set = False  # TEARDOWN_CUPTI=1 is ours (teardown_cupti_at_stop)

    def _start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        # CUDA's activities only where the script has touched CUDA by the window's start (its
        # training steps before it have): a script that trains on the CPU of a GPU machine has no
        # kernels to trace, and on an H100 such a script under profile never ended once CUPTI was
        # asked for (2026-12-08; with CUDA_VISIBLE_DEVICES= the same run took 12 s).
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
            self._teardown_set = teardown_cupti_at_stop(
                torch.version.cuda, os.environ, graphs_captured
            )
        # Shapes, stacks and memory off: each costs host time per op that the untraced run does not
        # have.
        self._profiler = profile(
            activities=activities, record_shapes=False, with_stack=False, profile_memory=False
        )
        self._profiler.start()

    def _stop(self) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        if self._teardown_set and graphs_captured:  # a graph was captured while the window was open
            os.environ[TEARDOWN_ENV] = "0"
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
