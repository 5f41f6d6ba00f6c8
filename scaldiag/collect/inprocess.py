"""A run recorded inside the process that trains (a notebook's kernel): ``profile``'s launcher and
bootstrap, for a stretch of code instead of a script.

``scaldiag.capture()`` (and a Lightning or Hugging Face callback the user made, outside
``profile``) opens one at the block's start and finishes it at its end:

- the run directory and its ``run.json``, as the launcher starts and finalises them (status,
  ``ended_ns``, the samplers' rates, the host's fresh-page cost), with ``in_process`` saying
  where it came from and ``missing`` what one process cannot know (``IN_PROCESS_UNKNOWN``);
- ``SCALDIAG_RUN_DIR`` set while it lasts, so that every session the adapters open (the Keras
  callback's, the PyTorch capture's) records into it without sampling, as under the launcher;
- the host and NVML samplers, in a thread of this process (there is no parent to run them in:
  they take the GIL a little, as the loop APIs' do);
- the script's printed lines (``printed.py``: the clocks the user reads), from this process's
  ``sys.stdout`` and ``sys.stderr``, put back at the end;
- the loop adapters (``adapters.arm``): Keras, PyTorch, Lightning, transformers, JAX loops;
  frameworks the process imported already patched at once, the others at their import; every
  patch taken back at the end (``jax.jit`` and the others JAX's adapter wraps are JAX's own
  again), so that training after the block runs as it would have and a second run works. A
  function jitted before the block (an earlier cell's ``jax.jit(f)``) is JAX's own and is not
  followed: jitted inside the block (or in an earlier block), it is.

Nothing here raises into the user's code: what fails is a line on stderr and a gap in the record.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from scaldiag.collect import host_costs, printed
from scaldiag.collect.env import RUN_DIR_ENV
from scaldiag.collect.frameworks import adapters
from scaldiag.collect.frameworks.guard import attempt, say
from scaldiag.collect.samplers import Samplers
from scaldiag.collect.session import new_run_dir, start_run_json
from scaldiag.record import run_json
from scaldiag.record.run_json import FAILED, FINISHED, INTERRUPTED
from scaldiag.record.rundir import STEPS, append_mark

IN_PROCESS_ADAPTERS = (
    adapters.KERAS,
    adapters.PYTORCH,
    adapters.LIGHTNING,
    adapters.TRANSFORMERS,
    adapters.JAX,
)
# What a run recorded in the training's own process cannot know, said in the report as missing
# evidence (run.json ``missing``), not printed.
IN_PROCESS_UNKNOWN = (
    "start-up: recorded in-process from the capture's start; the interpreter's start, the"
    " imports and what ran before it (kernel cells) are not in this record",
    "scaling: one process and the devices it sees; a sweep over GPU counts needs"
    " `scaldiag profile --gpus N,N` of a script",
)
# Where JAX was armed and no step was recorded: the likeliest reason in a notebook, said as missing
# evidence (a function jitted in an earlier cell is JAX's own: jax_loop wraps ``jax.jit`` itself).
JAX_JITTED_BEFORE = (
    "jax: no jitted step was followed; a function jitted before the block (an earlier cell's"
    " `jax.jit(f)`) is JAX's own and is not followed: run the cell that jits it inside the block"
)
DEFAULT_OUT = "scaldiag_runs"


class InProcessRun:
    """One run recorded in this process: ``start()``, the user's code, ``finish(status)``."""

    def __init__(self, out=None, label: str = "capture", api: str = "scaldiag.capture()"):
        self.out = out or DEFAULT_OUT
        self.label, self.api = label, api
        self.run_dir: Path | None = None
        # under `scaldiag profile` (or another capture) this process is recorded already
        self.inside_profile = False
        self.samplers: Samplers | None = None
        self._printed = None
        self._disarm = None
        self._env_before: str | None = None
        self._started = self._finished = False

    def start(self) -> InProcessRun:
        launched = os.environ.get(RUN_DIR_ENV)
        if launched:
            self.inside_profile, self.run_dir = True, Path(launched)
            return self
        self.run_dir = new_run_dir(self.out, self.label)  # (its failure is the caller's to say)
        start_run_json(self.run_dir, [sys.executable, *sys.argv])
        self._started = True
        run_json.update(
            self.run_dir,
            in_process={"api": self.api, "pid": os.getpid()},
            missing=list(IN_PROCESS_UNKNOWN),
        )
        self._env_before = os.environ.get(RUN_DIR_ENV)
        os.environ[RUN_DIR_ENV] = str(self.run_dir)
        append_mark(self.run_dir, "script_begin")
        self._printed = printed.start(self.run_dir)
        self.samplers = attempt(self._samplers, lambda why: say(f"no host or GPU samples ({why})"))
        self._disarm = adapters.arm(IN_PROCESS_ADAPTERS)
        return self

    def _samplers(self) -> Samplers:
        samplers = Samplers(self.run_dir, os.getpid())
        samplers.start()
        return samplers

    def finish(self, status: str = FINISHED, error: BaseException | None = None) -> None:
        """The code ended (``status``: finished, failed, interrupted): the adapters' runs closed,
        every patch taken back, the samplers stopped, run.json finalised. Once; never raises."""
        if self._finished or not self._started:
            return
        self._finished = True
        jax_armed = "jax" in adapters.armed()  # (before disarm puts the adapters before back)
        attempt(adapters.finish, lambda why: say(f"could not finish the capture ({why})"))
        if self._printed is not None:
            attempt(self._printed.finish, lambda why: say(f"printed lines: {why}"))
        attempt(lambda: append_mark(self.run_dir, "script_end"), lambda why: None)
        left = self._disarm() if self._disarm is not None else []
        for why in left:
            say(f"a patch could not be taken back ({why})")
        if self._env_before is None:
            os.environ.pop(RUN_DIR_ENV, None)
        else:
            os.environ[RUN_DIR_ENV] = self._env_before
        attempt(
            lambda: self._finalise(status, error, left, jax_armed),
            lambda why: say(f"run.json: {why}"),
        )

    def _finalise(
        self, status: str, error: BaseException | None, left: list[str], jax_armed: bool = False
    ) -> None:
        stats, missing = {}, []
        if jax_armed and not (self.run_dir / STEPS).exists():
            missing.append(JAX_JITTED_BEFORE)
        if self.samplers is not None:
            stats = attempt(self.samplers.stop, lambda why: missing.append(f"samplers: {why}"))
            missing += self.samplers.missing
        else:
            missing.append("samplers: did not start; no host or GPU samples")
        missing += [f"a patch left in place: {why}" for why in left]
        fields = dict(
            status=status,
            ended_ns=time.time_ns(),
            samplers=stats or {},
            fresh_page_ns_per_byte=host_costs.measured_or_none(),  # after training: no competition
            error=type(error).__name__ if error is not None else None,
        )

        def ended(run: run_json.RunJson) -> run_json.RunJson:
            new = [m for m in missing if m not in run.missing]
            return run.replace(missing=run.missing + new, **fields)

        run_json.update(self.run_dir, ended)


def status_of(error: BaseException | None) -> str:
    """The run's status for how the code ended, in the launcher's words."""
    if error is None:
        return FINISHED
    return INTERRUPTED if isinstance(error, KeyboardInterrupt) else FAILED
