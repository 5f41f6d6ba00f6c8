"""``scaldiag report RUN_DIR``: the report of a captured run or sweep (also of a partial one)."""

from __future__ import annotations

import argparse

from scaldiag.commands.output import emit
from scaldiag.pipeline import diagnose


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("report", help="report a run directory written by `scaldiag profile` or the callback",
                              description="Report a captured run: steady-state throughput with its spread, "
                                          "GPU and host samples, and the diagnosis of its trace window.")
    p.add_argument("run_dir", help="a run directory (scaldiag_runs/<time>-<script>)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-' for stdout only)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    emit(diagnose(args.run_dir), args.json)
    return 0
