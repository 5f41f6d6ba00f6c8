"""Report a captured run: steady-state throughput with its spread, GPU and host samples, and the
diagnosis of its trace window."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scaldiag.analyze.timeline import RunTimeline, run_timeline
from scaldiag.commands.output import (
    add_engine,
    add_interconnect,
    add_json,
    add_verbose,
    emit,
    engine_of,
    output_path,
)
from scaldiag.errors import TRACE_FAILURES, ScaldiagError
from scaldiag.pipeline import diagnose, diagnose_viewed, job_trace, read_trace
from scaldiag.record.reader import read_record
from scaldiag.record.rundir import RECORD_FILES, TRACE_DIR
from scaldiag.render import VIEW_FORMATS
from scaldiag.rules.report import JobReport, RunReport, SweepReport
from scaldiag.sanitize import line

HELP = "report a run directory written by `scaldiag profile` or the callback"

# --format names: "term" is the terminal renderer.
FORMAT_NAMES = {"term": "terminal", "json": "json", "html": "html", "perfetto": "perfetto"}
# Where a file format goes when no -o is given.
DEFAULT_FILE = {"html": "scaldiag_report.html", "perfetto": "scaldiag_trace.json"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("report", help=HELP, description=__doc__)
    p.add_argument(
        "run_dir",
        metavar="RUN_OR_SWEEP",
        nargs="+",
        help=(
            "a run directory (scaldiag_runs/<time>-<script>) or a sweep directory; for a job over "
            "several machines, every node's run directory (or the shared --out holding them): one "
            "merged report (docs/multinode.md)"
        ),
    )
    p.add_argument(
        "--format",
        choices=list(FORMAT_NAMES),
        default="term",
        help=(
            "term (default), json, html (one self-contained file with plots) or perfetto "
            "(Chrome trace-event JSON of the trace window with the samples as counters: "
            "open it in ui.perfetto.dev)"
        ),
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        type=output_path,
        help="where the report goes ('-': stdout). Default: stdout for term and json, "
        + ", ".join(f"{v} for {k}" for k, v in DEFAULT_FILE.items()),
    )
    add_json(p)
    add_verbose(p)
    add_interconnect(p)
    add_engine(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fmt = FORMAT_NAMES[args.format]
    refuse_inputs_as_outputs(args.run_dir, [args.output, args.json])
    with engine_of(args) as engine:
        if fmt in VIEW_FORMATS:  # the timelines made from what the diagnosis read
            report, views = diagnose_viewed(
                args.run_dir, args.interconnect, engine, with_trace=fmt == "perfetto"
            )
        else:
            report, views = diagnose(args.run_dir, args.interconnect, engine), {}
    output = args.output or DEFAULT_FILE.get(fmt, "-")
    emit(report, args.json, args.verbose, fmt, output, **views)
    if output != "-":
        print(line(f"scaldiag: {args.format} report written to {output}"), file=sys.stderr)
    return 0


def refuse_inputs_as_outputs(inputs: list[str], outputs: list[str | None]) -> None:
    """Refuse, before anything is read or written, an output that is one of the files the report
    reads (``-o`` naming a rank's trace truncated it, then the merge failed reading it)."""
    dirs = [Path(p).resolve() for p in inputs]
    for out in outputs:
        if out in (None, "-"):
            continue
        target = Path(out).resolve()
        for d in dirs:
            if target == d or (target.is_relative_to(d) and _is_read(target.relative_to(d))):
                raise ScaldiagError(
                    f"{out}: is an input of this report ({d.name}'s record); "
                    "write the report elsewhere"
                )


def _is_read(inside: Path) -> bool:
    return TRACE_DIR in inside.parts or inside.name in RECORD_FILES


def report_views(path: Path, report: RunReport | SweepReport | JobReport, fmt: str) -> dict:
    """What the timeline views need beyond a report diagnosed earlier (the notebook API's), read
    from the record again (a job's: its ranks' merged trace, for the Perfetto export); ``report``
    itself takes them from its diagnosis (pipeline.diagnose_viewed)."""
    with_trace = fmt == "perfetto"  # the HTML plots samples; the Perfetto export every trace event
    if isinstance(report, JobReport):
        return {"merged": job_trace(report)} if with_trace else {}
    if isinstance(report, SweepReport):
        runs = report.runs  # analysed once, by diagnose_sweep
        timelines = (
            [
                timeline(Path(r.run_dir), f"{gpus} devices ({Path(r.run_dir).name})", r, with_trace)
                for gpus, r in runs
            ]
            if with_trace
            else []
        )
        return {"runs": runs, "timelines": timelines}
    return {"timelines": [timeline(path, path.name, report, with_trace)]}


def timeline(run_dir: Path, label: str, report: RunReport, with_trace: bool) -> RunTimeline:
    record = read_record(run_dir)
    steps = report.analysis.steps
    window = steps.window_ns if steps else None
    # A trace the report went without (its gap is named there) is not read again.
    if with_trace and report.trace_report is not None and (run_dir / TRACE_DIR).exists():
        try:
            return run_timeline(
                label,
                record.steps,
                record.gpu_samples,
                record.host_samples,
                window,
                read_trace(run_dir / TRACE_DIR)[1],
            )
        except TRACE_FAILURES:
            pass  # as the report: the samples and steps without the trace
    return run_timeline(label, record.steps, record.gpu_samples, record.host_samples, window)
