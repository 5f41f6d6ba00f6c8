"""Record a custom training loop:

    from scaldiag.loop import capture

    with capture(global_batch=256) as run:
        for batch in dataset:
            with run.step():
                loss = train_step(batch)

Each ``run.step()`` records the step's wall time and, inside the profiler
window, marks the step in the trace (TensorFlow or JAX, whichever the
program imported, or ``backend=``). Errors in recording never reach the loop.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

from scaldiag.collect.frameworks.guard import attempt, say
from scaldiag.collect.recorder import TRACE_STEPS, WARMUP_STEPS
from scaldiag.collect.session import Session
from scaldiag.record.run_json import FAILED, FINISHED, INTERRUPTED


def _imported_backend() -> str:
    if "tensorflow" in sys.modules:
        return "tensorflow"
    if "jax" in sys.modules:
        return "jax"
    return "none"


class LoopRun:
    def __init__(self, session: Session | None):
        self.session = session
        self.error: str | None = None

    @property
    def run_dir(self):
        return self.session.run_dir if self.session else None

    @contextlib.contextmanager
    def step(self):
        self._safely(lambda: self.session.recorder.begin())
        try:
            yield
        finally:
            self._safely(lambda: self.session.recorder.end())

    def _safely(self, action) -> None:
        if self.session is None or self.error:
            return
        attempt(action, self._failed)

    def _failed(self, why: str) -> None:
        self.error = why
        say(f"capture disabled, training continues ({why})")


@contextlib.contextmanager
def session_run(open_session: Callable[[], Session]):
    """What every loop API shares: open the session (a failure disables capture, never the loop),
    yield a LoopRun, and close the session with the loop's status, whatever happened in it."""
    try:
        session = open_session()
        session.recorder.mark("fit_begin")
    except Exception as exc:
        print(
            f"scaldiag: capture disabled, training continues ({type(exc).__name__}: {exc})",
            file=sys.stderr,
        )
        session = None
    run = LoopRun(session)
    status = FAILED
    try:
        yield run
        status = FINISHED
    except KeyboardInterrupt:
        status = INTERRUPTED
        raise
    finally:
        if session is not None:
            try:  # even after a recording error: stop the samplers, write the status
                session.recorder.mark("fit_end")
                session.close(status)
            except Exception as exc:
                print(
                    f"scaldiag: could not close the run ({type(exc).__name__}: {exc})",
                    file=sys.stderr,
                )


def capture(
    run_dir=None,
    global_batch: int | None = None,
    replicas: int | None = None,
    backend: str | None = None,
    warmup_steps: int = WARMUP_STEPS,
    trace_steps: int = TRACE_STEPS,
    sample: bool | None = None,
):
    name = backend or _imported_backend()

    def open_session() -> Session:
        session = Session(
            run_dir, backend=name, warmup_steps=warmup_steps, trace_steps=trace_steps, sample=sample
        )
        session.describe(
            framework={"name": "custom loop", "backend": name},
            global_batch=global_batch,
            batch_source="capture(global_batch=)" if global_batch else "unknown: not given",
            replicas=replicas,
            steps_per_execution=1,
            per_replica_batch=global_batch // replicas if global_batch and replicas else None,
        )
        return session

    return session_run(open_session)
