"""``scaldiag analyze PATH``: diagnose an existing TensorBoard/XPlane profile."""

from __future__ import annotations

import argparse

from rich.console import Console

from scaldiag.analyze.profile import analyze_trace
from scaldiag.analyze.report import build_report
from scaldiag.commands.output import emit
from scaldiag.render import json_report, terminal
from scaldiag.xplane.read import find_run, read_trace


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze", help="diagnose an existing profile (.xplane.pb or TensorBoard logdir)",
        description="Diagnose an existing TensorFlow/JAX profile: per-step breakdown, copies, "
                    "collectives and findings. Needs no framework installed.")
    p.add_argument("path", help="an .xplane.pb file, a run directory, or a TensorBoard logdir")
    p.add_argument("--run", help="run name under plugins/profile/ (default: the latest)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-' for stdout only)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_name, files = find_run(args.path, args.run)
    report = build_report(analyze_trace(read_trace(files), run_name))
    emit(args.json, lambda: json_report.render(report), lambda: terminal.render(report, Console()))
    return 0
