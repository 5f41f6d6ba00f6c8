"""``scaldiag report RUN_DIR``: the report of a captured run (also of a partial one)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from scaldiag.analyze.report import build_report
from scaldiag.analyze.run import RunAnalysis, analyze_record
from scaldiag.analyze.scaling import analyze_scaling
from scaldiag.commands.output import emit
from scaldiag.record.reader import read_record, read_run_trace
from scaldiag.record.rundir import read_json
from scaldiag.render import run_json, run_terminal, scaling
from scaldiag.rules import RUN_RULES, SWEEP_RULES, check_all


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
    if (Path(run_dir) / "sweep.json").exists():
        return _show_sweep(Path(run_dir), json_path, console or Console())
    analysis = analyze_run_dir(run_dir)
    findings = check_all(RUN_RULES, analysis)
    trace_report = build_report(analysis.trace) if analysis.trace else None
    emit(json_path, lambda: run_json.render(str(run_dir), analysis, findings, trace_report),
         lambda: run_terminal.render(str(run_dir), analysis, findings, trace_report, console or Console()))


def analyze_run_dir(run_dir: Path) -> RunAnalysis:
    trace, trace_missing = read_run_trace(run_dir)
    return analyze_record(read_record(run_dir), trace, trace_missing)


def _show_sweep(sweep_dir: Path, json_path: str | None, console: Console) -> None:
    spec = read_json(sweep_dir, "sweep.json")
    runs: dict[int, list[RunAnalysis]] = {}
    for run in spec.get("runs", []):
        if (sweep_dir / run["dir"] / "run.json").exists():
            runs.setdefault(run["gpus"], []).append(analyze_run_dir(sweep_dir / run["dir"]))
    analysis = analyze_scaling(runs, bool(spec.get("emulate")))
    findings = check_all(SWEEP_RULES, analysis) + _largest_run_findings(runs)
    emit(json_path, lambda: scaling.to_json(str(sweep_dir), analysis, findings),
         lambda: scaling.render(str(sweep_dir), analysis, findings, console))


def _largest_run_findings(runs: dict[int, list[RunAnalysis]]) -> list:
    """The run and trace findings at the largest device count: the configuration being scaled."""
    if not runs:
        return []
    n = max(runs)
    run = runs[n][0]
    found = check_all(RUN_RULES, run) + (build_report(run.trace).findings if run.trace else [])
    return [replace(f, summary=f"[{n} devices] {f.summary}") for f in found]
