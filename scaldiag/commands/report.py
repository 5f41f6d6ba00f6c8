"""``scaldiag report RUN_OR_SWEEP``: the report of a captured run or sweep (also of a partial one),
in any format of the render table: the terminal, JSON, HTML, a Perfetto timeline."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
from pathlib import Path

from scaldiag.analyze.timeline import RunTimeline, run_timeline
from scaldiag.commands import job
from scaldiag.commands.output import add_engine, add_interconnect, add_verbose, emit, engine_of
from scaldiag.errors import TRACE_FAILURES, ScaldiagError
from scaldiag.pipeline import diagnose, read_trace
from scaldiag.record.reader import read_record
from scaldiag.record.rundir import JSON_FILES, SWEEP_JSON, TRACE_DIR
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
    refuse_inputs_as_outputs(args.run_dir, [args.output, args.json])
    if job.is_job(args.run_dir):
        return _job(args, fmt)
    with engine_of(args) as engine:
        report = diagnose(args.run_dir[0], args.interconnect, engine)
    if fmt == "terminal" and args.output in (None, "-"):
        emit(report, "-" if args.json == "-" else None, args.verbose)
        _also_json(args.json, lambda: json_format.render(report))
        return 0
    output = args.output or DEFAULT_FILE.get(fmt, "-")
    views = report_views(Path(args.run_dir[0]), report, fmt) if fmt in VIEW_FORMATS else {}
    if output == "-":
        write(report, fmt, sys.stdout, **views)
    else:
        with replacing(Path(output)) as stream:
            write(report, fmt, stream, **views)
        print(line(f"scaldiag: {args.format} report written to {output}"), file=sys.stderr)
    if args.json == "-":
        write(report, "json")
    _also_json(args.json, lambda: json_format.render(report))
    return 0


def _also_json(json_path: str | None, render) -> None:
    """``--json FILE``: the JSON report written there too (``-`` is stdout, written by the caller)."""
    if json_path and json_path != "-":
        with replacing(Path(json_path)) as stream:
            stream.write(render())


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
            with replacing(Path(output)) as stream:
                job.write_merged_trace(report, stream)
            print(line(f"scaldiag: the merged trace of {len(report.rank_files)} ranks written to {output}"),
                  file=sys.stderr)
        return 0
    text = job.to_json(report)
    if fmt == "json" or args.json == "-":
        if args.output not in (None, "-"):
            with replacing(Path(args.output)) as stream:
                stream.write(text)
        else:
            sys.stdout.write(text)
        return 0
    if args.output not in (None, "-"):
        with replacing(Path(args.output)) as stream:
            job.write_terminal(report, stream)
    else:
        job.write_terminal(report)
    _also_json(args.json, lambda: text)
    return 0


# What a run or node directory holds that a report reads: an output there would replace an input.
_READ_NAMES = frozenset((*JSON_FILES, SWEEP_JSON, "steps.jsonl", "marks.jsonl", "device_steps.jsonl",
                         "gpu_samples.jsonl", "host_samples.jsonl"))


def refuse_inputs_as_outputs(inputs: list[str], outputs: list[str | None]) -> None:
    """Refuse, before anything is read or written, an output that is one of the files the report reads
    (``-o`` naming a rank's trace truncated it, then the merge failed reading it)."""
    dirs = [Path(p).resolve() for p in inputs]
    for out in outputs:
        if out in (None, "-"):
            continue
        target = Path(out).resolve()
        for d in dirs:
            if target == d or (target.is_relative_to(d) and _is_read(target.relative_to(d))):
                raise ScaldiagError(f"{out}: is an input of this report ({d.name}'s record); "
                                    "write the report elsewhere")


def _is_read(inside: Path) -> bool:
    return TRACE_DIR in inside.parts or inside.name in _READ_NAMES


@contextlib.contextmanager
def replacing(path: Path):
    """A stream whose text replaces ``path`` only once all of it is written: a report that fails (or a
    disk that fills) leaves the file as it was, never empty or cut. A device or a FIFO (``/dev/full``,
    ``/dev/stdout``) is written in place: renaming over it would replace the device."""
    target = path.resolve() if path.is_symlink() else path
    if _is_special(target):
        with _failing_as_error(path):
            with target.open("w", encoding="utf-8") as stream:
                yield stream
        return
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with _failing_as_error(path):
            with tmp.open("w", encoding="utf-8") as stream:
                yield stream
            _keep_mode(target, tmp)
            os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _is_special(path: Path) -> bool:
    try:
        return not stat.S_ISREG(path.stat().st_mode) and not path.is_dir()
    except OSError:  # absent (a new file) or unreachable (said when it is opened)
        return False


def _keep_mode(target: Path, tmp: Path) -> None:
    with contextlib.suppress(OSError):  # a new file keeps the umask's mode
        os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))


@contextlib.contextmanager
def _failing_as_error(path: Path):
    try:
        yield
    except OSError as exc:
        raise ScaldiagError(f"cannot write {path}: {exc.strerror or exc}") from None


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
