"""The parent side of ``scaldiag profile``: start the script, sample, wait, finalise.

Sampling runs here, in the parent process, so it never competes with the
training for the child's GIL, and it outlives a crashing child. The child's
stdin, stdout and stderr are the user's terminal; its exit code is returned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from scaldiag.collect.env import RUN_DIR_ENV
from scaldiag.collect.samplers import Samplers
from scaldiag.collect.session import start_run_json
from scaldiag.record.rundir import read_json, update_json


def launch(run_dir: Path, script: str, script_args: list[str], nvml=None, env: dict | None = None) -> int:
    """Run ``python SCRIPT ARGS`` under capture; returns the script's exit code.

    ``env``: variables to set for the script on top of ours (a sweep's GPU subset).
    """
    command = [sys.executable, "-m", "scaldiag.collect.bootstrap", script, *script_args]
    start_run_json(run_dir, [sys.executable, script, *script_args])
    env = {**os.environ, **(env or {}), RUN_DIR_ENV: str(run_dir)}
    child = subprocess.Popen(command, env=env)
    samplers = Samplers(run_dir, child.pid, nvml=nvml, env=env)
    samplers.start()
    interrupted = False
    try:
        code = child.wait()
    except KeyboardInterrupt:  # Ctrl-C reached the child too (same process group); let it finish
        interrupted = True
        code = _wait_after_interrupt(child)
    stats = samplers.stop()
    missing = read_json(run_dir, "run.json").get("missing", []) + samplers.missing
    update_json(run_dir, "run.json", status=_status(code, interrupted), exit_code=code, ended_ns=time.time_ns(),
                missing=missing, samplers=stats)
    return code


def _wait_after_interrupt(child: subprocess.Popen, grace_s: float = 10.0) -> int:
    try:
        return child.wait(timeout=grace_s)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        child.send_signal(signal.SIGKILL)
        return child.wait()


def _status(code: int, interrupted: bool) -> str:
    if interrupted:
        return "interrupted"
    if code == 0:
        return "finished"
    if code < 0:
        return f"killed by signal {-code}"
    return "failed"
