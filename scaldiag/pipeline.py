"""The pipeline, once: read -> analyze -> rules -> a report object.

Every command goes through here, so ``analyze``, ``report`` and ``profile``
cannot disagree on how a trace, a run or a sweep is diagnosed. Reading is
the readers' and the record's job, judging the rules'; this module only
joins them. Renderers take what it returns.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from scaldiag.analyze import interconnect as ic
from scaldiag.analyze import job_merge, ranks
from scaldiag.analyze import nodes as job_nodes
from scaldiag.analyze.interconnect import Interconnect
from scaldiag.analyze.job import GatheredRanks, JobNode, RankFiles, analyze_job
from scaldiag.analyze.profile import (
    ProfileAnalysis,
    RankReduction,
    analyze_trace,
    assemble,
    reduce_rank,
)
from scaldiag.analyze.run import RunAnalysis, analyze_record, step_stats
from scaldiag.analyze.scaling import analyze_scaling
from scaldiag.analyze.timeline import RunTimeline, run_timeline
from scaldiag.errors import TRACE_FAILURES, ScaldiagError, TraceError
from scaldiag.readers import (
    FORMATS,
    TraceFormat,
    files_notes,
    find_trace,
    format_of,
    other_formats,
    read_found,
    read_rank,
    read_trace,
    trace_files,
)
from scaldiag.readers.kineto import read_document
from scaldiag.record import nodes as job_dirs
from scaldiag.record.reader import is_sweep, rank_dirs, read_record, sweep_runs
from scaldiag.record.run_json import FINISHED, RunJson
from scaldiag.record.rundir import TRACE_DIR
from scaldiag.rules.report import (
    JobReport,
    Report,
    RunReport,
    SweepReport,
    build_job_report,
    build_report,
    build_run_report,
    build_sweep_report,
)
from scaldiag.sanitize import line
from scaldiag.trace import Trace

if TYPE_CHECKING:  # the engines are opened by the commands; the pipeline only maps over them
    from scaldiag.engines import Engine

__all__ = [
    "read_trace",
    "analyze_trace_at",
    "map_on",
    "diagnose_trace",
    "diagnose_run",
    "diagnose_sweep",
    "diagnose_job",
    "job_trace",
    "diagnose",
    "diagnose_viewed",
]


def diagnose_trace(
    path: str | os.PathLike, run: str | None = None, engine: Engine | None = None
) -> Report:
    """``scaldiag analyze``: a trace file or logdir, in any format a reader knows."""
    return build_report(analyze_trace_at(path, run, engine))


def analyze_trace_at(
    path: str | os.PathLike, run: str | None = None, engine: Engine | None = None
) -> ProfileAnalysis:
    """The analysis of the trace at ``path``; a job's rank files one rank at a time, each on
    ``engine`` (scaldiag/engines.py; None: here, one after the other), so memory holds one rank's
    events, not the job's.
    """
    return _analyze_trace_kept(path, run, engine)[0]


def _analyze_trace_kept(
    path: str | os.PathLike, run: str | None, engine: Engine | None, keep: bool = False
) -> tuple[ProfileAnalysis, Trace | None]:
    """``analyze_trace_at``'s analysis and, where ``keep``, the trace for a view that draws its
    events (Perfetto). One file is read once for both; a job's rank files, analysed one at a
    time so that memory never holds them all, are read together once more for the view."""
    fmt, name, files = find_trace(path, run)  # the tree searched once
    if len(files) < 2 or fmt.read_rank is None:
        name, trace = read_found(Path(path), fmt, name, files)
        return _analyze(trace, name), trace if keep else None
    analysis = _analyze_ranks(Path(path), fmt, name, files, engine)
    return analysis, read_found(Path(path), fmt, name, files)[1] if keep else None


def _analyze(trace: Trace, name: str) -> ProfileAnalysis:
    """The trace's analysis, with what its reader noticed about the files first among its notes."""
    return _with_notes(analyze_trace(trace, name), trace.notes)


def _with_notes(analysis: ProfileAnalysis, notes: list[str]) -> ProfileAnalysis:
    return replace(analysis, notes=[*notes, *analysis.notes]) if notes else analysis


def _analyze_ranks(
    root: Path, fmt: TraceFormat, name: str, files: list[Path], engine: Engine | None
) -> ProfileAnalysis:
    """A job's rank files: each rank's evidence, the job's clock and steps from them, then each rank
    reduced (analyze/ranks.py); every pass reads one file at a time, wherever the engine runs it. A
    file that cannot be read is left out and named: the other ranks are reported (all unreadable:
    the first one's error).
    """
    read = map_on(engine, _rank_evidence, [(fmt.name, f) for f in files])
    unreadable = [(f, r) for f, r in zip(files, read) if isinstance(r, str)]
    if len(unreadable) == len(files):
        raise TraceError(
            unreadable[0][1]
            + (
                f" (and the {len(files) - 1} other rank files: none can be read)"
                if len(files) > 1
                else ""
            )
        )
    files, found = zip(*[(f, r) for f, r in zip(files, read) if not isinstance(r, str)])
    labels = fmt.rank_labels([facts for facts, _, _ in found], list(files))
    evidence = [
        replace(e, label=label, host=_host_of(facts)) for label, (facts, e, _) in zip(labels, found)
    ]
    notes = [
        f"{why}: this rank file is left out, the report is of the other {len(files)}"
        for _, why in unreadable
    ]
    notes += other_formats(root, fmt) + files_notes(
        {e.label: (e.host_stats, _span_of(e)) for e in evidence}
    )
    clock = ranks.job_clock(evidence)
    reductions = map_on(
        engine,
        _rank_reduction,
        [
            (fmt.name, f, label, clock.steps, clock.shift_ns(i))
            for i, (f, label) in enumerate(zip(files, labels))
        ],
    )
    analysis = assemble(
        name,
        [str(f) for f in files],
        labels,
        sum(count for _, _, count in found),
        reductions,
        clock,
    )
    return _with_notes(analysis, notes)


def _host_of(facts) -> str | None:
    """The machine a rank file names: Kineto's facts are (host name, rank)."""
    host = facts[0] if isinstance(facts, tuple) and facts else None
    return host if isinstance(host, str) and host else None


def map_on(engine: Engine | None, fn: Callable, items: list) -> list:
    """``fn`` over ``items`` on ``engine``, results in order; None: here, one item after the
    other."""
    return engine.map(fn, items) if engine is not None else [fn(item) for item in items]


def each_on(engine: Engine | None, fn: Callable, items: list) -> Iterator:
    """``map_on``'s results one at a time, in order (the engine's ``imap`` where it has one: each
    let go of by the engine once given)."""
    if engine is None:
        return map(fn, items)
    imap = getattr(engine, "imap", None)
    return imap(fn, items) if imap is not None else iter(engine.map(fn, items))


def _span_of(evidence: ranks.RankEvidence) -> tuple[int, int] | None:
    return None if evidence.first_ns is None else (evidence.first_ns, evidence.last_ns)


def _format(name: str) -> TraceFormat:
    return next(f for f in FORMATS if f.name == name)


def _rank_evidence(item: tuple[str, Path]) -> tuple[object, ranks.RankEvidence, int] | str:
    """One rank's file read alone: its facts for the labels, its evidence, its event count; or why
    it cannot be read (runs in a worker)."""
    fmt_name, file = item
    try:
        facts, trace = read_rank(_format(fmt_name), file)
        return facts, ranks.evidence(trace, ""), trace.event_count
    except TraceError as exc:
        return str(exc)
    except TRACE_FAILURES as exc:
        return f"{file} cannot be read ({type(exc).__name__}: {exc})"


def _rank_reduction(item: tuple) -> RankReduction:
    """One rank's file read again and reduced on the job's clock and steps (runs in a worker)."""
    fmt_name, file, label, steps, shift_ns = item
    fmt = _format(fmt_name)
    _, trace = read_rank(fmt, file)
    return reduce_rank(fmt.labelled(trace, label), steps, shift_ns)


def diagnose_run(run_dir: str | os.PathLike, engine: Engine | None = None) -> RunReport:
    """A run directory written by ``profile``, the callback or the loop API (``engine``:
    analyze_trace_at's)."""
    return build_run_report(str(run_dir), analyze_run_dir(Path(run_dir), engine))


def diagnose_sweep(
    sweep_dir: str | os.PathLike, interconnect: str | None = None, engine: Engine | None = None
) -> SweepReport:
    """A sweep directory (``profile --gpus``): one run per device count and repeat.

    ``interconnect``: the machine to predict for (``nvlink4x18``, ``pcie5x16``:
    analyze/interconnect.parse).
    """
    return _diagnose_sweep(sweep_dir, interconnect, engine)[0]


def _diagnose_sweep(
    sweep_dir: str | os.PathLike,
    interconnect: str | None,
    engine: Engine | None,
    with_timelines: bool = False,
) -> tuple[SweepReport, list[RunTimeline]]:
    """``diagnose_sweep``, and where ``with_timelines`` each run's timeline with its trace."""
    spec, found = sweep_runs(Path(sweep_dir))
    runs: dict[int, list[RunAnalysis]] = {}
    excluded, reports, timelines = [], [], []
    for gpus, run_dir in found:
        label = f"{gpus} devices ({run_dir.name})" if with_timelines else None
        analysis, timeline = _analyze_run_dir_kept(run_dir, engine, label, with_timelines)
        if timeline is not None:
            timelines.append(timeline)
        reports.append((gpus, build_run_report(str(run_dir), analysis)))
        failure = run_failure(analysis.run)
        if (
            failure
        ):  # a crashed or killed point measures the crash, not the scaling: never a speedup
            excluded.append(
                f"the run with {gpus} device{'s' if gpus > 1 else ''} ({run_dir.name}) is left out:"
                f" {failure}"
            )
            continue
        runs.setdefault(gpus, []).append(analysis)
    scaling = analyze_scaling(runs, bool(spec.get("emulate")), parse_interconnect(interconnect))
    if excluded:
        scaling = replace(scaling, notes=excluded + list(scaling.notes))
    return build_sweep_report(str(sweep_dir), scaling, runs, reports), timelines


def parse_interconnect(spec: str | None) -> Interconnect | None:
    """The ``--interconnect`` option's machine, or None; a spec it cannot read is the user's
    error."""
    if spec is None:
        return None
    try:
        return ic.parse(spec)
    except ValueError as exc:
        raise ScaldiagError(str(exc)) from None


def run_failure(run: RunJson) -> str | None:
    """Why a run's numbers are not a measurement of its configuration, or None if they are."""
    status, code = run.status, run.exit_code
    if status != FINISHED:
        return f"it did not finish (status {status or 'unknown'}" + (
            f", exit code {code})" if code is not None else ")"
        )
    if code not in (None, 0):
        return f"the script exited with code {code}"
    return None


def diagnose(
    path: str | os.PathLike | list[str | os.PathLike],
    interconnect: str | None = None,
    engine: Engine | None = None,
) -> RunReport | SweepReport | JobReport:
    """A run, a sweep or a job, whichever ``path`` is: a directory, or a list of them (a job's
    nodes' run directories, or one directory holding them); ``interconnect``: diagnose_sweep's."""
    paths = [str(p) for p in path] if isinstance(path, (list, tuple)) else [str(path)]
    if job_dirs.is_job(paths):
        return diagnose_job(paths, engine)
    path = paths[0]
    return (
        diagnose_sweep(path, interconnect, engine)
        if is_sweep(Path(path))
        else diagnose_run(path, engine)
    )


def diagnose_viewed(
    path: str | os.PathLike | list[str | os.PathLike],
    interconnect: str | None = None,
    engine: Engine | None = None,
    with_trace: bool = False,
) -> tuple[RunReport | SweepReport | JobReport, dict]:
    """``diagnose``, and what the timeline views (render.VIEW_FORMATS) draw beyond the report,
    made from what the diagnosis read: ``timelines`` (a run's; a sweep's with ``with_trace``),
    ``runs`` (a sweep's run reports), ``merged`` (a job's ranks' trace, with ``with_trace``).
    ``with_trace``: the trace's events too (the Perfetto export); else the samples and steps."""
    paths = [str(p) for p in path] if isinstance(path, (list, tuple)) else [str(path)]
    if job_dirs.is_job(paths):
        report = diagnose_job(paths, engine)
        return report, {"merged": job_trace(report)} if with_trace else {}
    if is_sweep(Path(paths[0])):
        sweep, timelines = _diagnose_sweep(paths[0], interconnect, engine, with_trace)
        return sweep, {"runs": sweep.runs, "timelines": timelines}
    run_dir = Path(paths[0])
    analysis, timeline = _analyze_run_dir_kept(run_dir, engine, run_dir.name, with_trace)
    return build_run_report(str(paths[0]), analysis), {"timelines": [timeline]}


def analyze_run_dir(run_dir: Path, engine: Engine | None = None) -> RunAnalysis:
    return _analyze_run_dir_kept(run_dir, engine)[0]


def _analyze_run_dir_kept(
    run_dir: Path,
    engine: Engine | None = None,
    label: str | None = None,
    with_trace: bool = False,
) -> tuple[RunAnalysis, RunTimeline | None]:
    """The run's analysis and, where ``label`` is given, its timeline (analyze/timeline.py) from
    the record and trace read for the analysis: the timeline views (HTML, Perfetto) read nothing
    again. ``with_trace``: the timeline holds the trace's events too (Perfetto's)."""
    record = read_record(run_dir)
    trace_error = record.training.get("trace_error")
    trace, trace_missing, events = _run_trace(run_dir, engine, trace_error, with_trace)
    others = {rank: read_record(path) for rank, path in rank_dirs(run_dir).items()}
    analysis = analyze_record(record, trace, trace_missing, others)
    if label is None:
        return analysis, None
    window = analysis.steps.window_ns if analysis.steps else None
    samples = (record.steps, record.gpu_samples, record.host_samples, window)
    if events is not None:
        try:
            return analysis, run_timeline(label, *samples, events)
        except TRACE_FAILURES:
            pass  # as the report: the samples and steps without the trace
    return analysis, run_timeline(label, *samples)


def _run_trace(
    run_dir: Path,
    engine: Engine | None = None,
    trace_error: str | None = None,
    keep: bool = False,
) -> tuple[ProfileAnalysis | None, list[str], Trace | None]:
    """The analysis of the run's trace window, or why there is none (``trace_error``: what the
    capture recorded of it); and the trace where ``keep`` (``_analyze_trace_kept``)."""
    logdir = Path(run_dir) / TRACE_DIR
    if not logdir.exists():
        why = trace_error or "no profiler trace in this run (too few steps, or the profiler failed)"
        return None, [f"trace: {why}"], None
    try:
        analysis, trace = _analyze_trace_kept(logdir, None, engine, keep)
        return analysis, [], trace
    except TraceError as exc:
        return None, [f"trace: {exc}"], None
    except TRACE_FAILURES as exc:
        # A trace this decoder cannot take is a gap in the run's evidence; the steps and samples
        # still report.
        return None, [f"trace: cannot be analysed ({type(exc).__name__}: {exc})"], None


# -- a job over several nodes: each node's run directory and its ranks' trace files
# ------------------------


def diagnose_job(paths: list[str], engine: Engine | None = None) -> JobReport:
    """The job's report (analyze/job.py); each rank's trace reduced to its evidence on ``engine``
    (scaldiag/engines.py; None: here, one after the other), so that one rank's events are in a
    process's memory at a time. A node that cannot be placed in the job, or one rank file that
    cannot be read, is left out and named."""
    left_out: list[str] = []
    found = job_dirs.node_records(paths, left_out)
    job_dirs.refuse_other_jobs([d for d, _ in found], [run for _, run in found])
    nodes = _job_nodes(found)  # what the merge takes of each run.json: ``found`` emptied
    merged = analyze_job(nodes, _rank_events(nodes, engine, left_out), left_out)
    framework = job_dirs.framework(merged.node_dirs[0])
    return build_job_report(merged.node_dirs, merged.analysis, merged.rank_files, framework)


def _job_nodes(found: list) -> list[JobNode]:
    """What the merge takes of each node's record (node_records' directories and run.json parts),
    equal network stacks one tuple and equal node counts one int, not one a node. ``found`` is
    emptied, each record let go of once taken (not every record held beside every JobNode)."""
    stacks: dict[tuple, tuple] = {}
    counts: dict[int | None, int | None] = {}
    nodes = []
    for i in range(len(found)):
        (d, run), found[i] = found[i], None
        node = job_dirs.node_in(run)
        key = ((node or {}).get("boot_id"), (node or {}).get("net_ns"))
        nnodes = job_dirs.place_of(node)[1]  # node_records placed every node
        nnodes = counts.setdefault(nnodes, nnodes)
        intra = job_dirs.intra_node_times_in(run) or None
        label = job_dirs.label_of(node)
        facts = _record_facts(d)
        nodes.append(JobNode(d, label, nnodes, stacks.setdefault(key, key), intra, *facts))
    found.clear()
    return nodes


def _rank_events(nodes: list[JobNode], engine: Engine | None, left_out: list[str]) -> GatheredRanks:
    """Every rank's evidence, in the nodes' order, gathered into the job's columns as each is read
    (JobEvents.gathered: no rank's packed evidence held beside the others'), with its trace file
    (ranks without steps left out; a file that cannot be read left out, its reason added to
    ``left_out``). The files are held as text (a Path a rank is about 0.3 KB more while the job is
    read), each rank's node as its index (no tuple a rank beside the items')."""
    items, node_of = [], array("q")
    for k, n in enumerate(nodes):
        for f in trace_files(Path(n.dir) / TRACE_DIR):
            items.append((n.label, str(f)))
            node_of.append(k)
    found = each_on(engine, _rank_events_of, items)
    kept_at, under = array("q"), []
    dirs: set[str] = set()

    def kept() -> Iterator[job_nodes.PackedRank]:
        for (_, f), k, events in zip(items, node_of, found):
            if isinstance(events, str):
                left_out.append(f"{events}: this rank is left out")
            elif events is not None:
                dirs.add(nodes[k].dir)
                kept_at.append(k)
                under.append(RankFiles.under(nodes[k].dir, f))
                # The node's own label, not a worker's copy of it (one a rank read elsewhere)
                label = nodes[k].label
                yield events if events.node is label else replace(events, node=label)

    job = job_nodes.JobEvents.gathered(kept(), len(items))
    labels, node_dirs = [n.label for n in nodes], [n.dir for n in nodes]
    return GatheredRanks(job, RankFiles(labels, node_dirs, kept_at, job.ranks, under), dirs)


def _rank_events_of(item: tuple[str, str]) -> job_nodes.PackedRank | str | None:
    """One rank's trace read and reduced to its evidence, packed in one array (analyze/nodes.pack:
    the job holds every rank's until the merge), or why it cannot be read (runs in a worker: a
    reason, not an exception, so that no engine prints its own traceback for a damaged file)."""
    label, f = item[0], Path(item[1])
    try:
        trace = _rank_trace(f)
        events = job_nodes.rank_events(label, f"{label}/{f.name.split('.')[0]}", trace.planes)
        return None if events is None else job_nodes.pack(events)
    except TRACE_FAILURES as exc:
        return f"{f}: cannot read this rank's trace ({line(exc) or type(exc).__name__})"


def _rank_trace(file: Path) -> Trace:
    """One rank's file read as ``read_trace`` reads it: a regular file of a per-rank format
    (Kineto) straight through its ``read_rank``, the same trace without the search for a run in a
    path that is the file itself; anything else (XPlane, a directory, a FIFO) as ``read_trace``
    finds it, in its words."""
    fmt = format_of(file)
    if fmt is not None and fmt.read_rank is not None and file.is_file():
        return read_rank(fmt, file)[1]
    return read_trace(file)[1]


def _record_facts(run_dir: str) -> tuple[int | None, object, str | None]:
    """Bytes all-reduced a step (the optimizer's parameters: DDP reduces each gradient once a
    step), the node's steady step time from its first rank's record that has steps (every step,
    not only the traced ones), and what the capture said of its trace."""
    parameter_bytes, steady, trace_error = None, None, None
    for i, d in enumerate([run_dir, *rank_dirs(run_dir).values()]):
        record = read_record(d)
        trace_error = record.training.get("trace_error") if i == 0 else trace_error
        value = record.training.get("parameter_bytes")
        if parameter_bytes is None and isinstance(value, int) and value > 0:
            parameter_bytes = value
        if steady is None and record.steps:
            stats = step_stats(record.steps, record.training, record.marks)
            steady = stats.step_time_ms if stats is not None else None
    return parameter_bytes, steady, trace_error


def job_trace(report: JobReport) -> dict:
    """The job's merged trace (``report --format perfetto``): every rank's Kineto events read again,
    whole, by the Kineto reader (its caps), on node 0's clock (analyze/job_merge.merged_trace).
    Every rank is read before anything is written."""
    docs = []
    for node, rank_name, path in report.rank_files:
        fmt = format_of(Path(path))
        if fmt is None or fmt.name != "kineto":
            raise ScaldiagError(
                f"{path}: only Kineto JSON traces (PyTorch) are merged into one file; report a "
                "TensorFlow or JAX node's directory alone for its trace"
            )
        try:
            docs.append((node, rank_name, read_document(Path(path))))
        except TraceError as exc:
            raise ScaldiagError(f"cannot read this rank's trace again: {exc}") from None
    return job_merge.merged_trace(docs, report.analysis.offsets)
