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
from scaldiag.errors import TRACE_FAILURES, ScaldiagError
from scaldiag.pipeline import map_on, read_trace
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


def node_dirs(paths: list[str]) -> list[Path]:
    """The node run directories named or held by ``paths``, node 0 first."""
    found: dict[Path, Path] = {}
    for p in map(Path, paths):
        if not p.is_dir():
            raise ScaldiagError(f"no such run directory: {p}")
        for d in [p] if _node(p) is not None else [c for c in sorted(p.iterdir()) if c.is_dir() and _node(c)]:
            found.setdefault(d.resolve(), d)  # a directory named twice is one node
    found = list(found.values())
    ranks = [_node(d).get("node_rank") for d in found]
    twice = sorted({r for r in ranks if ranks.count(r) > 1}, key=str)
    if twice:
        raise ScaldiagError(f"node rank {twice[0]} is in more than one of these directories: give one run "
                            "directory a node, all of the same job")
    sizes = {_node(d).get("nnodes") for d in found}
    if len(sizes) > 1:
        raise ScaldiagError(f"these directories are not of one job: their nodes say {sorted(sizes, key=str)} nodes")
    if len(found) < 2:
        raise ScaldiagError("a job report needs the run directories of two or more nodes (written by "
                            "`scaldiag profile --nnodes N ...`, or under SLURM, TF_CONFIG or JAX); found "
                            f"{len(found)} in {', '.join(paths)}")
    return sorted(found, key=lambda d: (_node(d).get("node_rank", 0), str(d)))


def is_job(paths: list[str]) -> bool:
    """Several paths, or one directory holding node directories rather than being a run itself."""
    if len(paths) > 1:
        return True
    p = Path(paths[0])
    return p.is_dir() and not (p / "run.json").exists() and any(
        c.is_dir() and _node(c) is not None for c in p.iterdir())


def _node(run_dir: Path) -> dict | None:
    try:
        node = read_json(run_dir, "run.json").get("node")
    except (OSError, ValueError):
        return None
    return node if isinstance(node, dict) else None


def diagnose_job(paths: list[str], engine=None) -> JobReport:
    """The job's report; each rank's trace reduced to its evidence on ``engine`` (scaldiag/engines.py; None:
    here, one after the other), so that one rank's events are in a process's memory at a time."""
    dirs = node_dirs(paths)
    by_node = _rank_events(dirs, engine)
    ranks, bytes_per_step, steady, intra, files = [], {}, {}, {}, []
    for d in dirs:
        label = _label(d)
        found = [r for r, _ in by_node[d]]
        files += [(label, r.rank, path) for r, path in by_node[d]]
        if not found:
            raise ScaldiagError(f"{d}: no rank's trace with steps (PyTorch's ProfilerStep markers, scaldiag's "
                                "step markers or the train function's calls): nothing to merge")
        ranks += found
        bytes_per_step[label], steady[label] = _record_facts(d)
        per_step = len(found[0].coll_key) / max(1, len(found[0].step_num))
        intra[label] = _intra_node(d, per_step)
    ref = ranks[0]
    step_ns = float(np.median(ref.step_end_ns - ref.step_start_ns))
    try:
        aligned, offsets, notes = job_nodes.align(ranks, step_ns)
    except job_nodes.MergeRefused as exc:
        raise ScaldiagError(f"the nodes are not merged: {exc}") from None
    notes += [f"{r.rank}: steps numbered {r.steps_numbered_by}; paired with the other ranks' on the assumption "
              "that every trace window began at the same step" for r in ranks if r.steps_numbered_by]
    nnodes = _node(dirs[0]).get("nnodes")
    if isinstance(nnodes, int) and nnodes > len(dirs):
        notes.append(f"{len(dirs)} of the job's {nnodes} nodes given: the others are not in this report")
    analysis = job_nodes.reduce_job(aligned, offsets, bytes_per_step, notes)
    analysis = replace(analysis, nodes=[replace(n, steady_step_ms=steady.get(n.node), intra_node_ms=intra.get(n.node))
                                        for n in analysis.nodes])
    return JobReport([str(d) for d in dirs], analysis, rank(check_all(JOB_RULES, analysis)), files,
                     _framework(dirs[0]))


def _framework(run_dir: Path) -> str:
    """The job's framework as its rules' fixes name it, from node 0's record (PyTorch where unsaid)."""
    said = read_record(run_dir).training.get("framework")
    if not isinstance(said, dict) or said.get("name") == "pytorch":
        return "pytorch"
    return said["backend"] if said.get("backend") in ("tensorflow", "jax") else "pytorch"


def _label(run_dir: Path) -> str:
    node = _node(run_dir) or {}
    return f"{node.get('host') or 'host'}/node{node.get('node_rank', '?')}"


def _rank_events(dirs: list[Path], engine) -> dict[Path, list[tuple[job_nodes.RankEvents, str]]]:
    """Per node directory, each of its ranks' evidence with its trace file (ranks without steps left out)."""
    where = [(d, f) for d in dirs for f in sorted({f for pattern in TRACE_PATTERNS for f in (d / TRACE_DIR).rglob(pattern)})]
    items = [(_label(d), f) for d, f in where]
    found = map_on(engine, _rank_events_of, items)
    by_node: dict[Path, list] = {d: [] for d in dirs}
    for (d, f), events in zip(where, found):
        if events is not None:
            by_node[d].append((events, str(f)))
    return by_node


def _rank_events_of(item: tuple[str, Path]) -> job_nodes.RankEvents | None:
    """One rank's trace read and reduced to its evidence (runs in a worker)."""
    label, f = item
    try:
        _, trace = read_trace(f)
    except TRACE_FAILURES as exc:
        raise ScaldiagError(f"{f}: cannot read this rank's trace ({exc})") from None
    return job_nodes.rank_events(label, f"{label}/{f.name.split('.')[0]}", trace.planes)


def _intra_node(run_dir: Path, per_step: float):
    """The same all-reduce inside the node, as ``profile`` measured it after the script (collect/multinode.py),
    in the split nearest the job's collectives a step (its buckets)."""
    found = read_json(run_dir, "run.json").get("intra_node_allreduce")
    table = found.get("times_ns") if isinstance(found, dict) else None
    if isinstance(table, list):  # one all-reduce of every byte
        table = {"1": table}
    if not isinstance(table, dict):
        return None
    splits = {int(k): v for k, v in table.items() if k.isdigit() and int(k) > 0 and isinstance(v, list) and v
              and all(isinstance(t, int) and t > 0 for t in v)}
    if not splits:
        return None
    nearest = min(splits, key=lambda k: abs(math.log(k) - math.log(max(per_step, 1.0))))
    return Summary.of([t / 1e6 for t in splits[nearest]])


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
                   f"{_ms(n.lateness_ms):>12} {n.last_pct:>7.0f}%")
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
    process per rank and original process, named ``<node>/<rank>: <name>``: open it in ui.perfetto.dev."""
    offsets = {o.node: o.offset_ns or 0 for o in report.analysis.offsets}
    events, base0, pids = [], None, {}
    for node, rank_name, path in report.rank_files:
        if not path.endswith(".json"):
            raise ScaldiagError(f"{path}: only Kineto JSON traces (PyTorch) are merged into one file; report a "
                                "TensorFlow or JAX node's directory alone for its trace")
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ScaldiagError(f"{path}: cannot read this rank's trace again ({exc})") from None
        base = doc.get("baseTimeNanoseconds") if isinstance(doc.get("baseTimeNanoseconds"), int) else 0
        base0 = base if base0 is None else base0
        shift_us = (base - base0 - offsets.get(node, 0)) / 1e3
        for e in doc.get("traceEvents") or []:
            if not isinstance(e, dict):
                continue
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + shift_us
            e["pid"] = pids.setdefault((rank_name, str(e.get("pid"))), len(pids) + 1)
            if e.get("ph") == "M" and e.get("name") == "process_name" and isinstance(e.get("args"), dict):
                e["args"] = {**e["args"], "name": f"{rank_name}: {e['args'].get('name', '')}"}
            events.append(e)
    json.dump({"traceEvents": events, "baseTimeNanoseconds": base0 or 0, "displayTimeUnit": "ms",
               "scaldiag": {"offsets_ns": offsets}}, stream)


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
