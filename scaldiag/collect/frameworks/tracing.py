"""Profiler adapters: start/stop a trace window and mark steps in it.

TensorFlow: ``tf.profiler.experimental`` with ``Trace("train", step_num=k, _r=1)``
markers; JAX: ``jax.profiler`` with ``StepTraceAnnotation("train", step_num=k)``.
Both write a TensorBoard logdir of XPlane files, which `analyze` reads with
the markers it knows. Frameworks are imported only when a window starts.
Any failure disables tracing and is kept in ``error``; it never reaches the
training loop.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path

from scaldiag.collect.env import HOST_TRACER_LEVEL_ENV
from scaldiag.collect.frameworks.guard import attempt

MARKER = "train"


class _ProcessWindows:
    """This process's trace windows: how many are still to start or open (``to_come``), and how many
    have finished (``finished``). Plain counts, read per batch by input_marks without a call."""

    __slots__ = ("to_come", "finished")

    def __init__(self):
        self.to_come = 0
        self.finished = 0

    def leave(self) -> None:
        self.to_come -= 1
        self.finished += 1


PROCESS_WINDOWS = _ProcessWindows()


def windows_to_come() -> bool:
    """Whether a trace window of this process is still to start or is open: input_marks annotates
    input only then, since nothing else would see the annotation."""
    return PROCESS_WINDOWS.to_come > 0


class TraceWindow:
    """Base: a no-op window (no profiler available)."""

    backend = "none"

    def __init__(self, logdir: Path):
        self.logdir = Path(logdir)
        self.error: str | None = None
        self.active = False
        self._marker = None
        PROCESS_WINDOWS.to_come += 1
        # garbage without finish: it leaves too
        self._leave = weakref.finalize(self, PROCESS_WINDOWS.leave)

    def finish(self) -> None:
        """No step of this window is to come (it has stopped, or it will not start)."""
        if self._leave.detach() is not None:  # the first time only
            PROCESS_WINDOWS.leave()

    def start(self) -> None:
        self._guard(self._start)
        self.active = self.error is None

    def stop(self) -> None:
        if self.active:
            self._end_marker()
            self._guard(self._stop)
        self.active = False

    def step_begin(self, step: int) -> None:
        if self.active:
            self._guard(lambda: self._begin_marker(step))

    def step_end(self) -> None:
        if self.active:
            self._end_marker()

    def _end_marker(self) -> None:
        marker, self._marker = self._marker, None
        if marker is not None:
            self._guard(lambda: marker.__exit__(None, None, None))

    def _guard(self, action) -> None:
        attempt(action, self._failed)  # a profiler failure is missing evidence, not a crash

    def _failed(self, why: str) -> None:
        self.error = f"{self.backend} profiler: {why}"
        self.active = False

    def _start(self) -> None:
        raise RuntimeError("no profiler for this framework")

    def _stop(self) -> None:
        pass

    def _begin_marker(self, step: int) -> None:
        pass


class TensorFlowTraceWindow(TraceWindow):
    backend = "tensorflow"

    def _start(self) -> None:
        import tensorflow as tf

        from scaldiag.collect.multinode import tf_task_untraced

        untraced = tf_task_untraced(os.environ)
        if untraced:
            raise RuntimeError(untraced)  # kept as the window's error: the report says it
        # The defaults are what we want (host tracer level 2, Python tracer
        # off, device tracer on); TF 2.21 warns when they are passed explicitly.
        tf.profiler.experimental.start(str(self.logdir))

    def _stop(self) -> None:
        import tensorflow as tf

        tf.profiler.experimental.stop()

    def _begin_marker(self, step: int) -> None:
        import tensorflow as tf

        self._marker = tf.profiler.experimental.Trace(MARKER, step_num=step, _r=1)
        self._marker.__enter__()


class JaxTraceWindow(TraceWindow):
    backend = "jax"

    def _start(self) -> None:
        import jax

        # Python tracer off: it costs microseconds per Python call and would
        # show up as host overhead that the user's run does not have.
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        level = os.environ.get(HOST_TRACER_LEVEL_ENV, "")
        if level.isdigit():  # lighter host tracing (1: user annotations only), to measure its cost
            options.host_tracer_level = int(level)
        jax.profiler.start_trace(str(self.logdir), profiler_options=options)

    def _stop(self) -> None:
        import jax

        jax.profiler.stop_trace()

    def _begin_marker(self, step: int) -> None:
        import jax

        self._marker = jax.profiler.StepTraceAnnotation(MARKER, step_num=step)
        self._marker.__enter__()


WINDOWS = {"tensorflow": TensorFlowTraceWindow, "jax": JaxTraceWindow}


def trace_window(backend: str, logdir: Path) -> TraceWindow:
    return WINDOWS.get(backend, TraceWindow)(logdir)
