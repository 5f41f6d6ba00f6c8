"""``scaldiag compare RUN_A RUN_B``: before and after a fix, side by side."""

from __future__ import annotations

import argparse

from scaldiag.commands.output import emit, output_path
from scaldiag.pipeline import diagnose
from scaldiag.rules.compare import compare


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="compare two runs or two sweeps (before and after a fix)",
        description=(
            "Two runs (or two sweeps) side by side: throughput, step time, the "
            "whole-run accounting, each category's per-step time, scaling per device "
            "count; what changed most, and how the first run's forecasts held."
        ),
    )
    p.add_argument("before", metavar="RUN_A", help="the run or sweep before")
    p.add_argument("after", metavar="RUN_B", help="the run or sweep after")
    p.add_argument(
        "--json",
        metavar="FILE",
        type=output_path,
        help="also write the comparison as JSON ('-' for stdout only)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    emit(compare(diagnose(args.before), diagnose(args.after)), args.json)
    return 0
