"""``scaldiag report RUN_OR_SWEEP``: the report of a captured run or sweep (also of a partial one),
in any format of the render table: the terminal, JSON, HTML, a Perfetto timeline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scaldiag.analyze.timeline import RunTimeline, run_timeline
from scaldiag.commands import job
from scaldiag.commands.output import add_engine, add_interconnect, add_verbose, emit, engine_of, write_text
from scaldiag.errors import TRACE_FAILURES, ScaldiagError
from scaldiag.pipeline import diagnose, read_trace
from scaldiag.record.reader import read_record
from scaldiag.record.rundir import TRACE_DIR
from scaldiag.render import VIEW_FORMATS, write
from scaldiag.render import json as json_format
from scaldiag.rules.report import RunReport, SweepReport
from scaldiag.sanitize import line

# --format names: "term" is the terminal renderer.
FORMAT_NAMES = {"term": "terminal", "json": "json", "html": "html", "perfetto": "perfetto"}
# Where a file format goes when no -o is given.
DEFAULT_FILE = {"html": "scaldiag_report.html", "perfetto": "scaldiag_trace.json"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("report", help="report a run directory written by `scaldiag profile` or the callback",
                              description="Report a captured run: steady-state throughput with its spread, "
                                          "GPU and host samples, and the diagnosis of its trace window.")
    p.add_argument("run_dir", metavar="RUN_OR_SWEEP", nargs="+",
                   help="a run directory (scaldiag_runs/<time>-<script>) or a sweep directory; for a job over "
                        "several machines, every node's run directory (or the shared --out holding them): one "
                        "merged report (docs/multinode.md)")
    p.add_argument("--format", choices=list(FORMAT_NAMES), default="term",
                   help="term (default), json, html (one self-contained file with plots) or perfetto "
                        "(Chrome trace-event JSON of the trace window with the samples as counters: "
                        "open it in ui.perfetto.dev)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where the report goes ('-': stdout). Default: stdout for term and json, "
                        + ", ".join(f"{v} for {k}" for k, v in DEFAULT_FILE.items()))
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-' for stdout only)")
    add_verbose(p)
    add_interconnect(p)
    add_engine(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fmt = FORMAT_NAMES[args.format]
    if job.is_job(args.run_dir):
        return _job(args, fmt)
    with engine_of(args) as engine:
        report = diagnose(args.run_dir[0], args.interconnect, engine)
    if fmt == "terminal" and args.output in (None, "-"):
        emit(report, args.json, args.verbose)
        return 0
    output = args.output or DEFAULT_FILE.get(fmt, "-")
    views = report_views(Path(args.run_dir[0]), report, fmt) if fmt in VIEW_FORMATS else {}
    if output == "-":
        write(report, fmt, sys.stdout, **views)
    else:
        with _open(Path(output)) as stream:
            write(report, fmt, stream, **views)
        print(line(f"scaldiag: {args.format} report written to {output}"), file=sys.stderr)
    if args.json:
        write_text(Path(args.json), json_format.render(report)) if args.json != "-" else write(report, "json")
    return 0


def _job(args: argparse.Namespace, fmt: str) -> int:
    """Several nodes' run directories: the merged job report (terminal or JSON), or its merged trace."""
    if fmt not in ("terminal", "json", "perfetto"):
        raise ScaldiagError(f"a job over several nodes is reported as term, json or perfetto (the merged trace), "
                            f"not {args.format}; report each node's directory alone for HTML")
    with engine_of(args) as engine:
        report = job.diagnose_job(args.run_dir, engine)
    if fmt == "perfetto":
        output = args.output or DEFAULT_FILE["perfetto"]
        if output == "-":
            job.write_merged_trace(report, sys.stdout)
        else:
            with _open(Path(output)) as stream:
                job.write_merged_trace(report, stream)
            print(line(f"scaldiag: the merged trace of {len(report.rank_files)} ranks written to {output}"),
                  file=sys.stderr)
        return 0
    text = job.to_json(report)
    if fmt == "json" or args.json == "-":
        if args.output not in (None, "-"):
            write_text(Path(args.output), text)
        else:
            sys.stdout.write(text)
        return 0
    if args.output not in (None, "-"):
        with _open(Path(args.output)) as stream:
            job.write_terminal(report, stream)
    else:
        job.write_terminal(report)
    if args.json:
        write_text(Path(args.json), text)
    return 0


def _open(path: Path):
    try:
        return path.open("w", encoding="utf-8")
    except OSError as exc:
        raise ScaldiagError(f"cannot write {path}: {exc.strerror}") from exc


def report_views(path: Path, report: RunReport | SweepReport, fmt: str) -> dict:
    """What the timeline views need beyond the report, read from the record."""
    with_trace = fmt == "perfetto"  # the HTML plots samples; the Perfetto export every trace event
    if isinstance(report, SweepReport):
        runs = report.runs  # analysed once, by diagnose_sweep
        timelines = [timeline(Path(r.run_dir), f"{gpus} devices ({Path(r.run_dir).name})", r, with_trace)
                     for gpus, r in runs] if with_trace else []
        return {"runs": runs, "timelines": timelines}
    return {"timelines": [timeline(path, path.name, report, with_trace)]}


def timeline(run_dir: Path, label: str, report: RunReport, with_trace: bool) -> RunTimeline:
    record = read_record(run_dir)
    steps = report.analysis.steps
    window = steps.window_ns if steps else None
    # A trace the report went without (its gap is named there) is not read again.
    if with_trace and report.trace_report is not None and (run_dir / TRACE_DIR).exists():
        try:
            return run_timeline(label, record.steps, record.gpu_samples, record.host_samples, window,
                                read_trace(run_dir / TRACE_DIR)[1])
        except TRACE_FAILURES:
            pass  # as the report: the samples and steps without the trace
    return run_timeline(label, record.steps, record.gpu_samples, record.host_samples, window)
