"""``scaldiag profile --gpus 1,2,4``: the same script once per GPU count (and repeat).

Each run sees only its first N GPUs (``CUDA_VISIBLE_DEVICES``) and is told N
in ``SCALDIAG_NUM_GPUS``. With ``--emulate`` the runs get N logical CPU
devices instead: TensorFlow's CPU is split (see bootstrap.py) and JAX gets
``--xla_force_host_platform_device_count=N``; they share the same cores.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from scaldiag.collect.env import EMULATE_ENV, NUM_GPUS_ENV, TORCHRUN_ENV
from scaldiag.collect.launcher import launch
from scaldiag.errors import ScaldiagError
from scaldiag.record.rundir import SWEEP_JSON, write_json


def available_gpus(env: dict) -> list[str]:
    """The GPU ids a sweep may hand out: CUDA_VISIBLE_DEVICES, else every GPU NVML sees."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [v.strip() for v in visible.split(",") if v.strip()]
    try:
        from scaldiag.collect.nvml import load_nvml

        return [str(i) for i in range(load_nvml().nvmlDeviceGetCount())]
    except Exception:
        return []


def run_env(n: int, emulate: bool, gpus: list[str], env: dict, torchrun: bool = False) -> dict:
    """The environment of the run with ``n`` devices (``torchrun``: under torchrun, one process per
    device)."""
    extra = {NUM_GPUS_ENV: str(n)}
    if torchrun:
        extra[TORCHRUN_ENV] = str(n)
    if emulate:
        extra.update({EMULATE_ENV: str(n), "CUDA_VISIBLE_DEVICES": ""})
        if env.get("KERAS_BACKEND") == "jax":
            flags = env.get("XLA_FLAGS", "")
            extra.update(
                {
                    "JAX_PLATFORMS": "cpu",
                    "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={n}".strip(),
                }
            )
    else:
        extra["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[:n])
    return extra


def gpus_for(counts: list[int], emulate: bool) -> list[str]:
    """The GPUs a sweep will hand out; raises before anything starts if there are too few."""
    if emulate:
        return []
    gpus = available_gpus(dict(os.environ))
    if max(counts) > len(gpus):
        raise ScaldiagError(
            f"--gpus asks for {max(counts)} GPUs but {len(gpus)} are visible"
            + ("" if gpus else "; on a machine without GPUs use --emulate")
        )
    return gpus


def sweep(
    sweep_dir: Path,
    script: str,
    script_args: list[str],
    counts: list[int],
    emulate: bool,
    gpus: list[str],
    repeat: int = 1,
    torchrun: bool = False,
    stdout: int | None = None,
    progress_every_s: float | None = None,
) -> list[int]:
    """Run every (count, repeat); returns the exit codes. Stops at the first failing run."""
    env = dict(os.environ)
    runs = [
        {"gpus": n, "repeat": r, "dir": f"gpus{n}" + (f"-r{r}" if repeat > 1 else "")}
        for r in range(repeat)
        for n in counts
    ]
    write_json(
        sweep_dir,
        SWEEP_JSON,
        {
            "counts": counts,
            "emulate": emulate,
            "repeat": repeat,
            "runs": runs,
            "script": script,
            "args": script_args,
            "torchrun": torchrun,
        },
    )
    codes = []
    for i, run in enumerate(runs, 1):
        what = (
            f"{run['gpus']}"
            f" {'emulated device' if emulate else 'GPU'}{'s' if run['gpus'] > 1 else ''}"
        )
        print(
            f"scaldiag: [{i}/{len(runs)}] {what}, repeat {run['repeat'] + 1} of {repeat}",
            file=sys.stderr,
        )
        run_dir = sweep_dir / run["dir"]
        run_dir.mkdir()
        codes.append(
            launch(
                run_dir,
                script,
                script_args,
                env=run_env(run["gpus"], emulate, gpus, env, torchrun),
                stdout=stdout,
                progress_every_s=progress_every_s,
            )
        )
        if codes[-1] != 0:
            print(
                f"scaldiag: the run with {what} failed (exit code {codes[-1]}); stopping the sweep",
                file=sys.stderr,
            )
            break
    return codes
