"""Read a run directory (possibly partial: a killed run) into plain data."""

from __future__ import annotations

from pathlib import Path

from scaldiag.analyze.profile import ProfileAnalysis, analyze_trace
from scaldiag.analyze.run import RunRecord
from scaldiag.errors import ScaldiagError, TraceError
from scaldiag.record.rundir import GPU_SAMPLES, HOST_SAMPLES, STEPS, TRACE_DIR, read_json, read_jsonl
from scaldiag.xplane.read import find_run, read_trace


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


def read_run_trace(run_dir: Path) -> tuple[ProfileAnalysis | None, list[str]]:
    """The analysis of the run's trace window, or why there is none."""
    logdir = Path(run_dir) / TRACE_DIR
    if not logdir.exists():
        return None, ["trace: no profiler trace in this run (too few steps, or the profiler failed)"]
    try:
        name, files = find_run(logdir)
        return analyze_trace(read_trace(files), name), []
    except TraceError as exc:
        return None, [f"trace: {exc}"]
