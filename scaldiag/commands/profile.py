"""``scaldiag profile train.py [-- ARGS]``: run a training script under capture, then report it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scaldiag.collect.launcher import launch
from scaldiag.collect.session import new_run_dir
from scaldiag.commands import report
from scaldiag.errors import ScaldiagError


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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    script = Path(args.script)
    if not script.is_file():
        raise ScaldiagError(f"no such script: {script}")
    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    run_dir = new_run_dir(args.out, script.stem)
    code = launch(run_dir, str(script), script_args)
    print(file=sys.stderr)
    try:
        report.show(run_dir, args.json)
    except ScaldiagError as exc:  # the run is kept even when its report cannot be made
        print(f"scaldiag: no report: {exc}", file=sys.stderr)
    print(f"scaldiag: run directory {run_dir}  (scaldiag report {run_dir})", file=sys.stderr)
    return code if code >= 0 else 128 - code  # killed by signal N: exit 128 + N, as shells report it
