"""Compile evidence for Keras fits: when the framework traced or compiled, as ``compile`` marks.

The analysis leaves a step out of the steady clock as "compile or retrace"
only where the framework says it compiled inside it (analyze/recorded_steps.py),
never because it was slow. The sources cost nothing on a step that compiles
nothing:

- **TensorFlow's tracing**: every ``tf.function`` trace (Keras's train
  function first, a retrace for a new shape, the last partial batch) goes
  through ``tracing_compilation._create_concrete_function``; a wrapper there
  times it. Keras binds ``model.train_step`` when it makes the train function,
  before any callback runs, so a wrapper on the model would miss it.
- **JAX's compile events**: ``jax.monitoring`` reports each jaxpr trace,
  lowering and backend compile with its duration (the recompile Keras 3 on
  JAX makes at the second epoch's first step is one, with no retrace).

Events are queued (a list append; JAX may compile on another thread) and
written as marks ``{"mark": "compile", "t_ns": begin, "end_ns": end,
"source": ...}`` at the callback's next hook on the training thread.
"""

from __future__ import annotations

import functools
import time

# jax._src.dispatch: one event per top-level jaxpr trace, per lowering, per backend compile.
JAX_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "jax trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "jax lowering",
    "/jax/core/compile/backend_compile_duration": "jax backend compile",
}
TF_SOURCE = "tf.function trace"


class CompileLog:
    """Compiles seen since the last ``drain``: (begin_ns, end_ns, source)."""

    def __init__(self):
        self.pending: list[tuple[int, int, str]] = []
        self.listening = False  # a fit is being recorded: events are kept

    def add(self, begin_ns: int, end_ns: int, source: str) -> None:
        if self.listening:
            self.pending.append((begin_ns, end_ns, source))

    def drain(self, recorder) -> None:
        """Write the queued compiles as marks (on the training thread)."""
        pending, self.pending = self.pending, []
        for begin, end, source in pending:
            recorder.mark("compile", t_ns=begin, end_ns=end, source=source)


LOG = CompileLog()
# the sources hooked in this process (once each: neither can be unhooked)
_listening_to: set[str] = set()


def listen(backend: str) -> list[str]:
    """Start keeping compile events for this fit; the sources listened to (for training.json)."""
    LOG.pending.clear()
    LOG.listening = True
    hook = {"jax": _listen_to_jax, "tensorflow": _listen_to_tensorflow}.get(backend)
    if hook is not None and backend not in _listening_to and hook():
        _listening_to.add(backend)
    return [SOURCES[backend]] if backend in _listening_to else []


def stop() -> None:
    """This fit is over: events are no longer kept (the input-free clone compiles too)."""
    LOG.listening = False


SOURCES = {"jax": "jax.monitoring compile events", "tensorflow": "tf.function traces"}


def _listen_to_jax() -> bool:
    try:
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(_on_jax_event)
        return True
    except Exception:
        return False


def _on_jax_event(event: str, duration_secs: float, **_kwargs) -> None:
    source = JAX_EVENTS.get(event)
    if source is not None and LOG.listening:
        end = time.time_ns()
        LOG.add(end - int(duration_secs * 1e9), end, source)


def _listen_to_tensorflow() -> bool:
    try:
        from tensorflow.python.eager.polymorphic_function import tracing_compilation as tracing

        create = tracing._create_concrete_function
        if getattr(create, "_scaldiag", False):
            return True

        @functools.wraps(create)
        def traced(*args, **kwargs):
            if not LOG.listening:
                return create(*args, **kwargs)
            begin = time.time_ns()
            try:
                return create(*args, **kwargs)
            finally:
                LOG.add(begin, time.time_ns(), TF_SOURCE)

        traced._scaldiag = True
        tracing._create_concrete_function = traced
        return True
    except Exception:
        return False
