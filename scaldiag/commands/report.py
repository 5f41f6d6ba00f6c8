"""``scaldiag report RUN_DIR``: the report of a captured run (also of a partial one)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from scaldiag.analyze.run import analyze_record
from scaldiag.commands.analyze import write_text
from scaldiag.record.reader import read_record, read_run_trace
from scaldiag.render import run_json, run_terminal


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("report", help="report a run directory written by `scaldiag profile` or the callback",
                              description="Report a captured run: steady-state throughput with its spread, "
                                          "GPU and host samples, and the diagnosis of its trace window.")
    p.add_argument("run_dir", help="a run directory (scaldiag_runs/<time>-<script>)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-' for stdout only)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    show(Path(args.run_dir), args.json)
    return 0


def show(run_dir: Path, json_path: str | None = None, console: Console | None = None) -> None:
    record = read_record(run_dir)
    trace, trace_missing = read_run_trace(run_dir)
    analysis = analyze_record(record, trace, trace_missing)
    if json_path == "-":
        sys.stdout.write(run_json.render(str(run_dir), analysis))
        return
    run_terminal.render(str(run_dir), analysis, console or Console())
    if json_path:
        write_text(Path(json_path), run_json.render(str(run_dir), analysis))
