"""Record a custom PyTorch training loop:

    from scaldiag.torch import capture

    with capture(global_batch=256) as run:
        for x, y in loader:
            with run.step():
                loss = model(x.to(device)).loss
                loss.backward()
                optimizer.step()

Each ``run.step()`` records the step's wall time and, inside the profiler
window, marks the step as ``ProfilerStep#N`` in a ``torch.profiler`` trace
(Kineto JSON under RUN_DIR/trace). ``scaldiag profile train.py`` needs none
of this: it finds the steps of an unmodified script from ``optimizer.step()``.
Under ``torchrun`` every rank records (rank R > 0 into ``RUN_DIR/rank<R>``
when launched by ``scaldiag profile``). Errors in recording never reach the loop.
"""

from __future__ import annotations

import contextlib
import sys

from scaldiag.collect.frameworks import torch_trace  # registers the "pytorch" profiler window
from scaldiag.collect.frameworks.torch_capture import versions, world_size
from scaldiag.collect.recorder import TRACE_STEPS, WARMUP_STEPS
from scaldiag.collect.session import Session
from scaldiag.loop import LoopRun

__all__ = ["capture", "LoopRun"]


@contextlib.contextmanager
def capture(run_dir=None, global_batch: int | None = None, per_replica_batch: int | None = None,
            warmup_steps: int = WARMUP_STEPS, trace_steps: int = TRACE_STEPS, sample: bool | None = None):
    """A capture session for the loop inside the ``with``; ``global_batch`` or ``per_replica_batch``: samples per step."""
    try:
        replicas = world_size()
        if global_batch is None and per_replica_batch:
            global_batch = per_replica_batch * replicas
        session = Session(run_dir, backend=torch_trace.BACKEND, warmup_steps=warmup_steps, trace_steps=trace_steps,
                          sample=sample)
        session.describe(framework={"name": "pytorch", "backend": torch_trace.BACKEND, "versions": versions()},
                         global_batch=global_batch, replicas=replicas, steps_per_execution=1, rank=torch_trace.rank(),
                         batch_source="capture(global_batch=)" if global_batch else "unknown: not given",
                         per_replica_batch=global_batch // replicas if global_batch else None)
        session.recorder.mark("fit_begin")
    except Exception as exc:
        print(f"scaldiag: capture disabled, training continues ({type(exc).__name__}: {exc})", file=sys.stderr)
        session = None
    run = LoopRun(session)
    status = "failed"
    try:
        yield run
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        if session is not None:
            try:
                session.recorder.mark("fit_end")
                session.close(status)
            except Exception as exc:
                print(f"scaldiag: could not close the run ({type(exc).__name__}: {exc})", file=sys.stderr)
