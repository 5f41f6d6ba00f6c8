"""The pipeline, once: read -> analyze -> rules -> a report object.

Every command goes through here, so ``analyze``, ``report`` and ``profile``
cannot disagree on how a trace, a run or a sweep is diagnosed. Reading is
the readers' and the record's job, judging the rules'; this module only
joins them. Renderers take what it returns.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from scaldiag.analyze import interconnect as ic
from scaldiag.analyze.interconnect import Interconnect
from scaldiag.analyze.profile import ProfileAnalysis, analyze_trace
from scaldiag.analyze.run import RunAnalysis, analyze_record
from scaldiag.analyze.scaling import analyze_scaling
from scaldiag.errors import TRACE_FAILURES, ScaldiagError, TraceError
from scaldiag.readers import read_trace as read_any_trace
from scaldiag.record.reader import is_sweep, rank_dirs, read_record, sweep_runs
from scaldiag.record.rundir import TRACE_DIR
from scaldiag.rules.report import Report, RunReport, SweepReport, build_report, build_run_report, build_sweep_report
from scaldiag.trace import INT_STATS, SparseStat, Trace

__all__ = ["read_trace", "diagnose_trace", "diagnose_run", "diagnose_sweep", "diagnose"]




def read_trace(path: str | os.PathLike, run: str | None = None) -> tuple[str, Trace]:
    """A trace in any format a reader knows, its stats of the types the analysis reads (see ``typed_stats``)."""
    name, trace = read_any_trace(path, run)
    return name, typed_stats(trace)


def typed_stats(trace: Trace) -> Trace:
    """The trace with each wanted stat of the type its producers write, else None (absent).

    A producer may write ``step_num`` as text or ``hlo_op`` as a number; the
    analysis then sees the stat as missing rather than crashing on it.
    """
    planes = []
    for plane in trace.planes:
        lines = [replace(line, stats={k: _typed_column(k, v) for k, v in line.stats.items()}, stats_typed=True)
                 if line.stats and not line.stats_typed else line for line in plane.lines]
        planes.append(replace(plane, lines=lines))
    return replace(trace, planes=planes)


def _typed_column(name: str, column: np.ndarray | SparseStat) -> np.ndarray | SparseStat:
    if isinstance(column, SparseStat):
        values = _typed_column(name, column.values)
        keep = np.flatnonzero(values != None)  # noqa: E711
        return column if values is column.values else SparseStat(column.rows[keep], values[keep])
    present = np.flatnonzero(column != None)  # noqa: E711 (element-wise on an object array)
    if not len(present):
        return column
    present_values = column[present]
    kinds = set(map(type, present_values))  # a pass at C speed; a trace's values are of one or two types
    if kinds <= ({int} if name in INT_STATS else {str}):
        return column
    check = _as_int if name in INT_STATS else _as_text
    values = [check(v) for v in present_values]
    if all(a is b for a, b in zip(values, present_values)):
        return column
    out = column.copy()
    out[present] = values
    return out


def _as_int(value):
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return value
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def _as_text(value):
    return value if isinstance(value, str) else None


def diagnose_trace(path: str | os.PathLike, run: str | None = None) -> Report:
    """``scaldiag analyze``: a trace file or logdir, in any format a reader knows."""
    name, trace = read_trace(path, run)
    return build_report(_analyze(trace, name))


def _analyze(trace: Trace, name: str) -> ProfileAnalysis:
    """The trace's analysis, with what its reader noticed about the files first among its notes."""
    analysis = analyze_trace(trace, name)
    return replace(analysis, notes=[*trace.notes, *analysis.notes]) if trace.notes else analysis


def diagnose_run(run_dir: str | os.PathLike) -> RunReport:
    """A run directory written by ``profile``, the callback or the loop API."""
    return build_run_report(str(run_dir), analyze_run_dir(Path(run_dir)))


def diagnose_sweep(sweep_dir: str | os.PathLike, interconnect: str | None = None) -> SweepReport:
    """A sweep directory (``profile --gpus``): one run per device count and repeat.

    ``interconnect``: the machine to predict for (``nvlink4x18``, ``pcie5x16``: analyze/interconnect.parse).
    """
    spec, found = sweep_runs(Path(sweep_dir))
    runs: dict[int, list[RunAnalysis]] = {}
    excluded, reports = [], []
    for gpus, run_dir in found:
        analysis = analyze_run_dir(run_dir)
        reports.append((gpus, build_run_report(str(run_dir), analysis)))
        failure = run_failure(analysis.run)
        if failure:  # a crashed or killed point measures the crash, not the scaling: never a speedup
            excluded.append(f"the run with {gpus} device{'s' if gpus > 1 else ''} ({run_dir.name}) is left out: {failure}")
            continue
        runs.setdefault(gpus, []).append(analysis)
    scaling = analyze_scaling(runs, bool(spec.get("emulate")), parse_interconnect(interconnect))
    if excluded:
        scaling = replace(scaling, notes=excluded + list(scaling.notes))
    return build_sweep_report(str(sweep_dir), scaling, runs, reports)


def parse_interconnect(spec: str | None) -> Interconnect | None:
    """The ``--interconnect`` option's machine, or None; a spec it cannot read is the user's error."""
    if spec is None:
        return None
    try:
        return ic.parse(spec)
    except ValueError as exc:
        raise ScaldiagError(str(exc)) from None


def run_failure(run: dict) -> str | None:
    """Why a run's numbers are not a measurement of its configuration, or None if they are."""
    status, code = run.get("status"), run.get("exit_code")
    if status != "finished":
        return f"it did not finish (status {status or 'unknown'}" + (f", exit code {code})" if code is not None else ")")
    if code not in (None, 0):
        return f"the script exited with code {code}"
    return None


def diagnose(path: str | os.PathLike, interconnect: str | None = None) -> RunReport | SweepReport:
    """A run or a sweep directory, whichever ``path`` is (``interconnect``: diagnose_sweep's)."""
    return diagnose_sweep(path, interconnect) if is_sweep(Path(path)) else diagnose_run(path)


def analyze_run_dir(run_dir: Path) -> RunAnalysis:
    trace, trace_missing = _run_trace(run_dir)
    others = {rank: read_record(path) for rank, path in rank_dirs(run_dir).items()}
    return analyze_record(read_record(run_dir), trace, trace_missing, others)


def _run_trace(run_dir: Path) -> tuple[ProfileAnalysis | None, list[str]]:
    """The analysis of the run's trace window, or why there is none."""
    logdir = Path(run_dir) / TRACE_DIR
    if not logdir.exists():
        return None, ["trace: no profiler trace in this run (too few steps, or the profiler failed)"]
    try:
        name, trace = read_trace(logdir)
        return _analyze(trace, name), []
    except TraceError as exc:
        return None, [f"trace: {exc}"]
    except TRACE_FAILURES as exc:
        # A trace this decoder cannot take is a gap in the run's evidence; the steps and samples still report.
        return None, [f"trace: cannot be analysed ({type(exc).__name__}: {exc})"]
