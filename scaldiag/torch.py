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

from scaldiag.collect.frameworks import torch_trace  # registers the "pytorch" profiler window
from scaldiag.collect.frameworks.torch_capture import versions, world_size
from scaldiag.collect.recorder import TRACE_STEPS, WARMUP_STEPS
from scaldiag.collect.session import Session
from scaldiag.loop import LoopRun, session_run

__all__ = ["capture", "LoopRun"]


def capture(
    run_dir=None,
    global_batch: int | None = None,
    per_replica_batch: int | None = None,
    warmup_steps: int = WARMUP_STEPS,
    trace_steps: int = TRACE_STEPS,
    sample: bool | None = None,
):
    """A capture session for the loop inside the ``with``; ``global_batch`` or
    ``per_replica_batch``: samples per step."""

    def open_session() -> Session:
        replicas = world_size()
        batch = (
            global_batch
            if global_batch is not None or not per_replica_batch
            else per_replica_batch * replicas
        )
        session = Session(
            run_dir,
            backend=torch_trace.BACKEND,
            warmup_steps=warmup_steps,
            trace_steps=trace_steps,
            sample=sample,
        )
        session.describe(
            framework={"name": "pytorch", "backend": torch_trace.BACKEND, "versions": versions()},
            global_batch=batch,
            replicas=replicas,
            steps_per_execution=1,
            rank=torch_trace.rank(),
            batch_source="capture(global_batch=)" if batch else "unknown: not given",
            per_replica_batch=batch // replicas if batch else None,
        )
        return session

    return session_run(open_session)
