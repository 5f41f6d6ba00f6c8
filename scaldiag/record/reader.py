"""Read a run or sweep directory (possibly partial: a killed run) into plain data. Facts only."""

from __future__ import annotations

from pathlib import Path

from scaldiag.errors import ScaldiagError
from scaldiag.record.rundir import GPU_SAMPLES, HOST_SAMPLES, STEPS, SWEEP_JSON, read_json, read_jsonl
from scaldiag.record.types import RunRecord


def read_record(run_dir: Path) -> RunRecord:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ScaldiagError(f"no such run directory: {run_dir}")
    run = read_json(run_dir, "run.json")
    if not run:
        raise ScaldiagError(f"{run_dir} is not a scaldiag run directory (no run.json)")
    return RunRecord(run=run, training=read_json(run_dir, "training.json"),
                     inventory=read_json(run_dir, "inventory.json"),
                     steps=read_jsonl(run_dir / STEPS), gpu_samples=read_jsonl(run_dir / GPU_SAMPLES),
                     host_samples=read_jsonl(run_dir / HOST_SAMPLES))


def is_sweep(path: Path) -> bool:
    return (Path(path) / SWEEP_JSON).exists()


def sweep_runs(sweep_dir: Path) -> tuple[dict, list[tuple[int, Path]]]:
    """The sweep's spec and its recorded runs as (device count, run directory)."""
    spec = read_json(sweep_dir, SWEEP_JSON)
    runs = [(run["gpus"], Path(sweep_dir) / run["dir"]) for run in spec.get("runs", [])
            if (Path(sweep_dir) / run["dir"] / "run.json").exists()]
    return spec, runs
