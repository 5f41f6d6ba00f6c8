"""``scaldiag report NODE_DIR NODE_DIR ...``: the nodes of one job merged into one report.

Reading (each node's run directory and its ranks' trace files), the pure
analysis (analyze/nodes.py), the job's rules (SD209, SD210) and a terminal
and JSON rendering of the result. A node is a run directory whose run.json
says ``node`` (``profile --nnodes``, SLURM, TF_CONFIG, JAX); a directory
holding several of them (a shared ``--out``) stands for all of them.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from scaldiag.analyze import nodes as job_nodes
from scaldiag.analyze.run import step_stats
from scaldiag.analyze.stats import Summary
from scaldiag.errors import TRACE_FAILURES, ScaldiagError, TraceError
from scaldiag.pipeline import map_on, read_trace
from scaldiag.readers.files import gunzip, is_gzip, read_bytes
from scaldiag.record.reader import rank_dirs, read_record
from scaldiag.record.rundir import TRACE_DIR, read_json
from scaldiag.rules import JOB_RULES, check_all, rank
from scaldiag.rules.base import Finding
from scaldiag.sanitize import line

TRACE_PATTERNS = ("*.pt.trace.json", "*.pt.trace.json.gz", "*.xplane.pb")


@dataclass(frozen=True)
class JobReport:
    node_dirs: list[str]
    analysis: job_nodes.JobAnalysis
    findings: list[Finding]
    rank_files: list[tuple[str, str, str]] = ()  # (node, rank, trace file): for the merged trace
    framework: str = "pytorch"  # whose fix the terminal shows: pytorch, tensorflow or jax (node 0's record)


def node_dirs(paths: list[str], left_out: list[str] | None = None) -> list[Path]:
    """The node run directories named or held by ``paths``, node 0 first. A directory whose run.json does
    not say its place in the job (``node_rank`` not a node number) is left out, its reason added to
    ``left_out``; two directories of one node rank, or of different node counts, are not one job."""
    found: dict[Path, Path] = {}
    for p in map(Path, paths):
        if not p.is_dir():
            raise ScaldiagError(f"no such run directory: {p}")
        for d in [p] if _node(p) is not None else [c for c in _children(p) if _node(c)]:
            found.setdefault(d.resolve(), d)  # a directory named twice is one node
    placed = {}
    for d in found.values():
        place = _place(d)
        if isinstance(place, str):
            (left_out if left_out is not None else []).append(f"{d}: {place}: this node is left out")
        else:
            placed[d] = place
    ranks = [r for r, _ in placed.values()]
    twice = sorted({r for r in ranks if ranks.count(r) > 1})
    if twice:
        raise ScaldiagError(f"node rank {twice[0]} is in more than one of these directories: give one run "
                            "directory a node, all of the same job")
    sizes = {n for _, n in placed.values()}
    if len(sizes) > 1:
        raise ScaldiagError(f"these directories are not of one job: their nodes say {sorted(sizes, key=str)} nodes")
    if len(placed) < 2:
        why = f" ({'; '.join(left_out)})" if left_out else ""
        raise ScaldiagError("a job report needs the run directories of two or more nodes (written by "
                            "`scaldiag profile --nnodes N ...`, or under SLURM, TF_CONFIG or JAX); found "
                            f"{len(placed)} in {', '.join(paths)}{why}")
    return sorted(placed, key=lambda d: (placed[d][0], str(d)))


def _children(p: Path) -> list[Path]:
    try:
        return [c for c in sorted(p.iterdir()) if c.is_dir()]
    except OSError as exc:
        raise ScaldiagError(f"cannot read {p}: {exc.strerror or exc}") from None


# A node rank or a node count past this is no job's (torchrun's largest jobs have thousands of nodes).
MAX_NODES = 1 << 20


def _place(run_dir: Path) -> tuple[int, int | None] | str:
    """(node rank, node count or None where unsaid) from the node's run.json, or why it is no place."""
    node = _node(run_dir) or {}
    rank, count = node.get("node_rank"), node.get("nnodes")
    if not _is_index(rank):
        return f"its run.json's node_rank is {_shown(rank)}, not a node number"
    if count is not None and not (_is_index(count) and count > 0):
        return f"its run.json's nnodes is {_shown(count)}, not a number of nodes"
    if count is not None and rank >= count:
        return f"its run.json's node_rank {rank} is not one of its {count} nodes"
    return rank, count


def _is_index(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_NODES


def _shown(value) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_job(paths: list[str]) -> bool:
    """Several paths, or one directory holding node directories rather than being a run itself."""
    if len(paths) > 1:
        return True
    p = Path(paths[0])
    return p.is_dir() and not (p / "run.json").exists() and any(_node(c) is not None for c in _children(p))


def _node(run_dir: Path) -> dict | None:
    try:
        node = read_json(run_dir, "run.json").get("node")
    except (OSError, ValueError):
        return None
    return node if isinstance(node, dict) else None


def diagnose_job(paths: list[str], engine=None) -> JobReport:
    """The job's report; each rank's trace reduced to its evidence on ``engine`` (scaldiag/engines.py; None:
    here, one after the other), so that one rank's events are in a process's memory at a time. A node
    that cannot be merged (no place in the job, no rank's trace with steps) is left out and named; one
    rank file that cannot be read is left out of its node and named."""
    left_out: list[str] = []
    dirs = node_dirs(paths, left_out)
    refuse_other_jobs(dirs)
    by_node = _rank_events(dirs, engine, left_out)
    for d in [d for d in dirs if not by_node[d]]:
        left_out.append(f"{d}: no rank's trace with steps (PyTorch's ProfilerStep markers, scaldiag's step "
                        "markers or the train function's calls): this node is left out")
    dirs = [d for d in dirs if by_node[d]]
    if len(dirs) < 2:
        raise ScaldiagError(f"{len(dirs)} node of the job can be merged, nothing to merge: " + "; ".join(left_out))
    ranks, bytes_per_step, steady, intra, files = [], {}, {}, {}, []
    for d in dirs:
        label = _label(d)
        found = [r for r, _ in by_node[d]]
        files += [(label, r.rank, path) for r, path in by_node[d]]
        ranks += found
        bytes_per_step[label], steady[label] = _record_facts(d)
        per_step = len(found[0].coll_key) / max(1, len(found[0].step_num))
        intra[label] = _intra_node(d, per_step)
    refuse_copies(ranks)
    ref = ranks[0]
    step_ns = float(np.median(ref.step_end_ns - ref.step_start_ns))
    try:
        aligned, offsets, notes = job_nodes.align(ranks, step_ns)
    except job_nodes.MergeRefused as exc:
        raise ScaldiagError(f"the nodes are not merged: {exc}") from None
    refuse_far_clocks(offsets)
    notes = left_out + notes + uncertain_clocks(offsets, step_ns)
    notes += [f"{r.rank}: steps numbered {r.steps_numbered_by}; paired with the other ranks' on the assumption "
              "that every trace window began at the same step" for r in ranks if r.steps_numbered_by]
    nnodes = _place(dirs[0])[1]
    if nnodes is not None and nnodes > len(dirs):
        notes.append(f"{len(dirs)} of the job's {nnodes} nodes merged: the others are not in this report")
    analysis = job_nodes.reduce_job(aligned, offsets, bytes_per_step, notes)
    analysis = replace(analysis, nodes=[replace(n, steady_step_ms=steady.get(n.node), intra_node_ms=intra.get(n.node))
                                        for n in analysis.nodes])
    return JobReport([str(d) for d in dirs], analysis, rank(check_all(JOB_RULES, analysis)), files,
                     _framework(dirs[0]))


# -- one job, not several ---------------------------------------------------------------------------------

# The hosts of one job keep their clocks within milliseconds of each other (NTP, PTP); an offset of a
# minute is another job's trace (a run an hour earlier read "offset +3276744 ms, corrected" and lost the
# real straggler), a trace without its base time (1970), or a clock nobody keeps: its verdict would rest
# on the clocks. Refused, with the offset.
MAX_CLOCK_OFFSET_NS = 60 * 10**9
# A spread of the matched ends above this share of a step makes a node's lateness (a few % of a step) no
# evidence: said.
MAX_SPREAD_OF_STEP = 0.1


def refuse_other_jobs(dirs: list[Path]) -> None:
    """Refuse node directories that say they are of different jobs: another launcher or rendezvous, or
    runs that do not overlap even allowing MAX_CLOCK_OFFSET_NS between their hosts' clocks."""
    records = [read_json(d, "run.json") for d in dirs]
    for key in ("launcher", "rdzv_endpoint"):
        said = {_shown(r["node"].get(key)) for r in records if isinstance(r.get("node"), dict)
                and r["node"].get(key) is not None}
        if len(said) > 1:
            raise ScaldiagError(f"these directories are not of one job: their nodes' {key} differ "
                                f"({', '.join(sorted(said))})")
    spans = [(d, _span_ns(r)) for d, r in zip(dirs, records)]
    spans = [(d, s) for d, s in spans if s is not None]
    for d, (start, end) in spans[1:]:
        d0, (start0, end0) = spans[0]
        if start > end0 + MAX_CLOCK_OFFSET_NS or start0 > end + MAX_CLOCK_OFFSET_NS:
            apart_s = max(start - end0, start0 - end) / 1e9
            raise ScaldiagError(f"these directories are not of one job: {d.name}'s run and {d0.name}'s do not "
                                f"overlap ({apart_s:,.0f} s apart; their clocks may differ by a minute at most)")


def _span_ns(record: dict) -> tuple[int, int] | None:
    """A finished run's (started_ns, ended_ns) where both are times (0..2^62) in order."""
    start, end = record.get("started_ns"), record.get("ended_ns")
    ok = all(isinstance(t, int) and not isinstance(t, bool) and 0 < t < 2**62 for t in (start, end))
    return (start, end) if ok and start <= end else None


def refuse_copies(ranks: list[job_nodes.RankEvents]) -> None:
    """The same trace in two places (a rank file copied into another node) is one rank, not two."""
    seen: dict[bytes, str] = {}
    for r in ranks:
        key = r.step_start_ns.tobytes() + b"|" + r.coll_end_ns.tobytes()
        if key in seen:
            raise ScaldiagError(f"{r.rank} and {seen[key]} are the same trace (every step and collective at the "
                                "same instant): a copied file is not another rank; not merged")
        seen[key] = r.rank


def refuse_far_clocks(offsets: list[job_nodes.NodeOffset]) -> None:
    for o in offsets[1:]:
        if o.offset_ns is not None and abs(o.offset_ns) > MAX_CLOCK_OFFSET_NS:
            raise ScaldiagError(f"the nodes are not merged: {o.node}'s trace is {_duration(abs(o.offset_ns))} from "
                                f"{offsets[0].node}'s (hosts of one job keep their clocks within a minute): another "
                                "job's trace, or a trace without its base time")


def uncertain_clocks(offsets: list[job_nodes.NodeOffset], step_ns: float) -> list[str]:
    return [f"{o.node}: its clock offset is uncertain: the matched collective ends spread {o.spread_ns / 1e6:.3f} ms, "
            f"{100 * o.spread_ns / step_ns:.0f}% of a step; lateness below that is not evidence"
            for o in offsets[1:] if o.spread_ns is not None and step_ns > 0
            and o.spread_ns > MAX_SPREAD_OF_STEP * step_ns]


def _duration(ns: int) -> str:
    s = ns / 1e9
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if s >= size:
            return f"{s / size:,.1f} {unit}"
    return f"{s:.1f} s"


def _framework(run_dir: Path) -> str:
    """The job's framework as its rules' fixes name it, from node 0's record (PyTorch where unsaid)."""
    said = read_record(run_dir).training.get("framework")
    if not isinstance(said, dict) or said.get("name") == "pytorch":
        return "pytorch"
    return said["backend"] if said.get("backend") in ("tensorflow", "jax") else "pytorch"


def _label(run_dir: Path) -> str:
    node = _node(run_dir) or {}
    host = node.get("host") if isinstance(node.get("host"), str) and node.get("host") else "host"
    rank = node.get("node_rank") if _is_index(node.get("node_rank")) else "?"
    return f"{host}/node{rank}"


def _rank_events(dirs: list[Path], engine, left_out: list[str]) -> dict[Path, list[tuple[job_nodes.RankEvents, str]]]:
    """Per node directory, each of its ranks' evidence with its trace file (ranks without steps left out;
    a file that cannot be read left out, its reason added to ``left_out``)."""
    where = [(d, f) for d in dirs for f in _trace_files(d)]
    items = [(_label(d), f) for d, f in where]
    found = map_on(engine, _rank_events_of, items)
    by_node: dict[Path, list] = {d: [] for d in dirs}
    for (d, f), events in zip(where, found):
        if isinstance(events, str):
            left_out.append(f"{events}: this rank is left out")
        elif events is not None:
            by_node[d].append((events, str(f)))
    return by_node


def _trace_files(run_dir: Path) -> list[Path]:
    try:
        return sorted({f for pattern in TRACE_PATTERNS for f in (run_dir / TRACE_DIR).rglob(pattern)})
    except OSError:  # a trace directory that cannot be listed: the node has no trace to merge
        return []


def _rank_events_of(item: tuple[str, Path]) -> job_nodes.RankEvents | str | None:
    """One rank's trace read and reduced to its evidence, or why it cannot be read (runs in a worker: a
    reason, not an exception, so that no engine prints its own traceback for a damaged file)."""
    label, f = item
    try:
        _, trace = read_trace(f)
        return job_nodes.rank_events(label, f"{label}/{f.name.split('.')[0]}", trace.planes)
    except TRACE_FAILURES as exc:
        return f"{f}: cannot read this rank's trace ({line(exc) or type(exc).__name__})"


def _intra_node(run_dir: Path, per_step: float):
    """The same all-reduce inside the node, as ``profile`` measured it after the script (collect/multinode.py),
    in the split nearest the job's collectives a step (its buckets)."""
    found = read_json(run_dir, "run.json").get("intra_node_allreduce")
    table = found.get("times_ns") if isinstance(found, dict) else None
    if isinstance(table, list):  # one all-reduce of every byte
        table = {"1": table}
    if not isinstance(table, dict):
        return None
    splits = {int(k): v for k, v in table.items() if k.isascii() and k.isdigit() and len(k) < 10 and int(k) > 0
              and isinstance(v, list) and v and all(_is_time_ns(t) for t in v)}
    if not splits:
        return None
    nearest = min(splits, key=lambda k: abs(math.log(k) - math.log(max(per_step, 1.0))))
    return Summary.of([t / 1e6 for t in splits[nearest]])


def _is_time_ns(t) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and 0 < t < 2**62


def _record_facts(run_dir: Path):
    """Bytes all-reduced a step (the optimizer's parameters: DDP reduces each gradient once a step) and
    the node's steady step time from its first rank's record (every step, not only the traced ones)."""
    dirs = [run_dir, *rank_dirs(run_dir).values()]
    parameter_bytes, steady = None, None
    for d in dirs:
        record = read_record(d)
        value = record.training.get("parameter_bytes")
        if parameter_bytes is None and isinstance(value, int) and value > 0:
            parameter_bytes = value
        if steady is None and record.steps:
            stats = step_stats(record.steps, record.training, record.marks)
            steady = stats.step_time_ms if stats is not None else None
    return parameter_bytes, steady


# -- rendering ------------------------------------------------------------------------------------------


def _ms(s, digits: int = 1) -> str:
    if s is None or s.n == 0 or not math.isfinite(s.mean):
        return "-"
    spread = f" ±{s.ci95:.{digits}f}" if math.isfinite(s.ci95) else " (one step)"
    return f"{s.mean:.{digits}f}{spread}"


def _pct(value: float) -> str:
    return f"{value:.0f}%" if math.isfinite(value) else "-"  # no collective matched: no share


def write_terminal(report: JobReport, stream=None) -> None:
    stream = stream or sys.stdout
    a = report.analysis
    out = [f"scaldiag job report: {len(a.nodes)} nodes, {a.ranks_per_node} rank(s) a node, "
           f"{a.matched_collectives} collectives matched on every rank"]
    out.append("clocks (against " + line(a.offsets[0].node) + "):")
    for o in a.offsets[1:]:
        out.append(f"  {line(o.node)}: " + ("not estimated" if o.offset_ns is None else
                   f"offset {o.offset_ns / 1e6:+.3f} ms (spread {o.spread_ns / 1e3:.1f} us, "
                   f"{o.collectives} collective ends), corrected"))
    out += [f"note: {line(n)}" for n in a.notes]
    out.append("per node, ms per step, mean ±95% (traced steps):")
    out.append(f"  {'node':<24} {'steady step':>14} {'traced step':>14} {'input':>12} {'all-reduce':>12} "
               f"{'link':>12} {'exposed':>12} {'in-node':>10} {'late':>12} {'last at':>8}")
    for n in a.nodes:
        out.append(f"  {line(n.node)[:24]:<24} {_ms(n.steady_step_ms):>14} {_ms(n.step_ms):>14} {_ms(n.input_ms):>12} "
                   f"{_ms(n.collective_ms):>12} {_ms(n.link_ms):>12} {_ms(n.exposed_ms):>12} {_ms(n.intra_node_ms):>10} "
                   f"{_ms(n.lateness_ms):>12} {_pct(n.last_pct):>8}")
    out.append("ranks: " + ", ".join(line(r) for n in a.nodes for r in n.ranks))
    out.append(f"findings ({len(report.findings)}):" if report.findings else
               "findings: none about the job's nodes or the network between them")
    for f in report.findings:
        out.append(f"  {f.id} {line(f.title)} [{f.severity}]: {line(f.summary)}")
        for e in f.evidence:
            spread = f" ±{e.spread:g}" if e.spread is not None else ""
            out.append(f"    {line(e.metric)}: {e.value:g}{spread} {e.unit}" + (f" ({line(e.device)})" if e.device else ""))
        if f.predicted_speedup:
            out.append(f"    ceiling {f.predicted_speedup.value:.2f}x: {line(f.predicted_speedup.arithmetic)}")
        if f.forecast:
            out.append(f"    forecast {f.forecast.value:.2f}x: {line(f.forecast.arithmetic)}")
        fw = report.framework if report.framework in f.fix else "pytorch"
        out.append(f"    fix ({fw}): {line(f.fix.get(fw, ''))}")
    stream.write("\n".join(out) + "\n")


def write_merged_trace(report: JobReport, stream) -> None:
    """Every rank's Kineto trace in one Chrome trace-event file on node 0's clock (its offsets removed), one
    process per rank and original process, named ``<node>/<rank>: <name>``: open it in ui.perfetto.dev.
    Every rank is read before the first byte is written; numbers that are not finite are left out."""
    offsets = {o.node: o.offset_ns or 0 for o in report.analysis.offsets}
    events, base0, pids = [], None, {}
    for node, rank_name, path in report.rank_files:
        doc = _kineto_doc(Path(path))
        base = doc.get("baseTimeNanoseconds")
        base = base if _is_time_ns(base) else 0
        base0 = base if base0 is None else base0
        shift_us = (base - base0 - offsets.get(node, 0)) / 1e3
        for e in doc.get("traceEvents") if isinstance(doc.get("traceEvents"), list) else []:
            if isinstance(e, dict):
                events.append(_merged_event(e, shift_us, rank_name, pids))
    try:
        text = json.dumps({"traceEvents": events, "baseTimeNanoseconds": base0 or 0, "displayTimeUnit": "ms",
                           "scaldiag": {"offsets_ns": offsets}}, allow_nan=False)
    except ValueError as exc:  # a number that is not finite left in (the parse refuses them): not written
        raise ScaldiagError(f"the merged trace cannot be written as JSON ({exc})") from None
    stream.write(text)


def _kineto_doc(path: Path) -> dict:
    """A rank's Kineto JSON read again, whole (gzip under the readers' caps); NaN, Infinity and numbers
    past a double's range read as absent (JSON has no such numbers; they broke the merged file)."""
    if not path.name.endswith((".json", ".json.gz")):
        raise ScaldiagError(f"{path}: only Kineto JSON traces (PyTorch) are merged into one file; report a "
                            "TensorFlow or JAX node's directory alone for its trace")
    try:
        data = read_bytes(path)
        doc = json.loads(gunzip(data, path) if is_gzip(data) else data, parse_constant=lambda _: None,
                         parse_float=_finite_or_none, parse_int=_int64_or_none)
    except TraceError as exc:
        raise ScaldiagError(f"{path}: cannot read this rank's trace again ({exc})") from None
    except (ValueError, RecursionError) as exc:
        raise ScaldiagError(f"{path}: cannot read this rank's trace again ({type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise ScaldiagError(f"{path}: cannot read this rank's trace again (not a JSON object)")
    return doc


def _finite_or_none(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _int64_or_none(text: str) -> int | None:
    """An integer within int64 (a longer one is no Kineto number; 10**400 overflowed the shift)."""
    return int(text) if len(text.lstrip("-")) <= 18 else None


def _merged_event(e: dict, shift_us: float, rank_name: str, pids: dict) -> dict:
    e = dict(e)
    ts = e.get("ts")
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        moved = ts + shift_us
        e["ts"] = moved if math.isfinite(moved) else None
    e["pid"] = pids.setdefault((rank_name, str(e.get("pid"))[:200]), len(pids) + 1)
    if e.get("ph") == "M" and e.get("name") == "process_name" and isinstance(e.get("args"), dict):
        e["args"] = {**e["args"], "name": f"{rank_name}: {e['args'].get('name', '')}"}
    return e


def to_json(report: JobReport) -> str:
    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value
    return json.dumps(clean({"kind": "job", "node_dirs": report.node_dirs, "framework": report.framework,
                             "analysis": asdict(report.analysis),
                             "findings": [asdict(f) for f in report.findings],
                             "rank_files": [list(f) for f in report.rank_files]}), indent=1) + "\n"
