"""Two runs (or two sweeps) side by side: throughput, step time, the whole-run accounting, each
category's per-step time, scaling per device count; what changed most, and how the first run's
forecasts held."""

from __future__ import annotations

import argparse

from scaldiag.commands.output import add_json, emit
from scaldiag.pipeline import diagnose
from scaldiag.rules.compare import compare

HELP = "compare two runs or two sweeps (before and after a fix)"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("compare", help=HELP, description=__doc__)
    p.add_argument("before", metavar="RUN_A", help="the run or sweep before")
    p.add_argument("after", metavar="RUN_B", help="the run or sweep after")
    add_json(p, "comparison")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    emit(compare(diagnose(args.before), diagnose(args.after)), args.json)
    return 0
