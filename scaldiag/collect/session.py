"""A capture session: the run directory, in-process samplers, the step recorder.

Used by the Keras callback and by the custom-loop API. When launched by
``scaldiag profile``, the launcher owns the samplers (in its own process, so
sampling never competes with training for the GIL) and ``SCALDIAG_RUN_DIR``
names the run; otherwise the session samples in a background thread.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

from scaldiag import __version__
from scaldiag.collect import host_costs
from scaldiag.collect.env import RUN_DIR_ENV
from scaldiag.collect.frameworks.tracing import trace_window
from scaldiag.collect.recorder import TRACE_STEPS, WARMUP_STEPS, StepRecorder
from scaldiag.record import run_json
from scaldiag.record.run_json import FINISHED, RUNNING, RunJson
from scaldiag.record.rundir import RECORD_SCHEMA_VERSION, TRACE_DIR, TRAINING_JSON, update_json
from scaldiag.sanitize import line as shown


def new_run_dir(base: str | os.PathLike = "scaldiag_runs", label: str = "run") -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        path = Path(base) / (f"{stamp}-{label}" + ("" if n == 0 else f"-{n}"))
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a run directory under {base}")


def start_run_json(run_dir: Path, command: list[str]) -> None:
    """A new run.json: the run is running, from now."""
    RunJson(
        schema_version=RECORD_SCHEMA_VERSION,
        scaldiag_version=__version__,
        status=RUNNING,
        command=command,
        cwd=os.getcwd(),
        host=platform.node(),
        python=sys.version.split()[0],
        started_ns=time.time_ns(),
    ).save(run_dir)


# run directories whose run.json a Session of this process wrote
_RUNS_STARTED_HERE: set[Path] = set()


class Session:
    """One training run being recorded."""

    def __init__(
        self,
        run_dir: str | os.PathLike | None = None,
        backend: str = "none",
        warmup_steps: int = WARMUP_STEPS,
        trace_steps: int = TRACE_STEPS,
        sample: bool | None = None,
    ):
        launched = os.environ.get(RUN_DIR_ENV)
        self.run_dir = Path(
            run_dir or launched or new_run_dir(label=Path(sys.argv[0] or "run").stem)
        )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        started_before = not run_json.read(self.run_dir).is_empty()
        # A run this process started (a callback given a run_dir, fitting again) is this session's
        # again: it samples, and its status is this fit's. A launcher's run is the launcher's.
        self.owns_run = not started_before or self.run_dir.resolve() in _RUNS_STARTED_HERE
        if not started_before:
            start_run_json(self.run_dir, [sys.executable, *sys.argv])
            _RUNS_STARTED_HERE.add(self.run_dir.resolve())
        elif self.owns_run:  # running again: the earlier fit's end is not the run's end any more
            run_json.update(self.run_dir, status=RUNNING, ended_ns=None)
        if sample is None:  # sample here unless a launcher already samples this run
            sample = self.owns_run
        # imported where a session samples: `profile`'s launcher imports this module before the
        # script starts, and psutil and NVML are not its start-up's (bench/startup/run.py)
        from scaldiag.collect.samplers import Samplers

        self.samplers = Samplers(self.run_dir, os.getpid()) if sample else None
        if self.samplers:
            self.samplers.start()
        self.window = trace_window(backend, self.run_dir / TRACE_DIR) if trace_steps > 0 else None
        self.recorder = StepRecorder(self.run_dir, self.window, warmup_steps, trace_steps)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def describe(self, **training) -> None:
        update_json(self.run_dir, TRAINING_JSON, **training)

    def close(self, status: str = FINISHED) -> None:
        """Close the run (once: a capture that failed may be closed again on its way out)."""
        if self._closed:
            return
        self._closed = True
        self.recorder.close()
        if self.samplers:
            self.samplers.stop()
        if self.window is not None and self.window.error:
            self.describe(trace_error=self.window.error)
        if self.owns_run:
            gaps = self.samplers.missing if self.samplers else []

            ended_ns = time.time_ns()
            fresh = host_costs.measured_or_none()  # training is over: it competes with nothing

            def ended(run: RunJson) -> RunJson:
                return run.replace(
                    missing=run.missing + [m for m in gaps if m not in run.missing],
                    status=status,
                    ended_ns=ended_ns,
                    fresh_page_ns_per_byte=run.fresh_page_ns_per_byte if fresh is None else fresh,
                )

            run_json.update(self.run_dir, ended)


def capture_failed(session: Session | None, reason: str) -> None:
    """A capture adapter has failed: one line on stderr, the reason in the run; the training goes
    on."""
    try:
        print(f"scaldiag: capture disabled, training continues ({shown(reason)})", file=sys.stderr)
    except Exception:
        pass  # no stderr to say it on: the run says it below
    if session is not None:
        # A profiler left tracing would trace the rest of the run; PyTorch's, left open by a failure
        # inside its window, crashed the interpreter at exit (a test: a disk filling in the window).
        try:
            # its marks where the run directory still takes them; the stop always
            session.recorder.stop_trace()
        except Exception:
            pass
    try:
        if session is not None:
            session.describe(capture_error=reason)
    except Exception:
        pass  # the run directory itself is failing: the line above is all that can be said
