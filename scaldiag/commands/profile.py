"""``scaldiag profile train.py [-- ARGS]``: run a training script under capture, then report it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scaldiag.collect.launcher import launch
from scaldiag.collect.session import new_run_dir
from scaldiag.collect.sweep import gpus_for, sweep
from scaldiag.commands.output import emit
from scaldiag.errors import ScaldiagError
from scaldiag.pipeline import diagnose_run, diagnose_sweep


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "profile", help="run an unmodified training script with capture, then report",
        description="Run SCRIPT exactly as `python SCRIPT ARGS` would, record every training step, a profiler "
                    "trace of steady-state steps, GPU (NVML) and host samples, then print the report. "
                    "Keras 3 model.fit (TensorFlow or JAX backend) is captured automatically.")
    p.add_argument("script", help="the training script")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments (after --)")
    p.add_argument("--out", default="scaldiag_runs", help="where run directories go (default: scaldiag_runs)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--gpus", metavar="N,N,...", type=_counts,
                   help="sweep: run once per GPU count (the first N visible GPUs; N is in $SCALDIAG_NUM_GPUS)")
    p.add_argument("--emulate", action="store_true",
                   help="sweep over N logical CPU devices instead of GPUs (machines without GPUs)")
    p.add_argument("--repeat", type=int, default=1, metavar="K", help="run each GPU count K times (default 1)")
    p.set_defaults(func=run)


def _counts(text: str) -> list[int]:
    try:
        counts = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU counts: {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("GPU counts must be 1 or more")
    return counts


def run(args: argparse.Namespace) -> int:
    script = Path(args.script)
    if not script.is_file():
        raise ScaldiagError(f"no such script: {script}")
    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    if args.gpus or args.emulate:
        return _sweep(args, script, script_args)
    run_dir = new_run_dir(args.out, script.stem)
    code = launch(run_dir, str(script), script_args)
    print(file=sys.stderr)
    try:
        emit(diagnose_run(run_dir), args.json)
    except ScaldiagError as exc:  # the run is kept even when its report cannot be made
        print(f"scaldiag: no report: {exc}", file=sys.stderr)
    print(f"scaldiag: run directory {run_dir}  (scaldiag report {run_dir})", file=sys.stderr)
    return code if code >= 0 else 128 - code  # killed by signal N: exit 128 + N, as shells report it


def _sweep(args, script: Path, script_args: list[str]) -> int:
    counts = args.gpus or [1, 2]
    gpus = gpus_for(counts, args.emulate)
    sweep_dir = new_run_dir(args.out, f"{script.stem}-sweep")
    codes = sweep(sweep_dir, str(script), script_args, counts, args.emulate, gpus, max(1, args.repeat))
    print(file=sys.stderr)
    emit(diagnose_sweep(sweep_dir), args.json)
    print(f"scaldiag: sweep directory {sweep_dir}  (scaldiag report {sweep_dir})", file=sys.stderr)
    failed = [c for c in codes if c != 0]
    return 0 if not failed else (failed[0] if failed[0] > 0 else 128 - failed[0])
