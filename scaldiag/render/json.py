"""The reports as JSON: the public schema, mapped field by field (docs/analyze.md, docs/profile.md).

The JSON is a contract with users' scripts, so it is written out here key by
key rather than dumped from the dataclasses: adding a field to an analysis
type changes nothing public until it is named below. One schema version for
every report kind. NaN and infinity become null.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from typing import TextIO

from scaldiag.analyze.interconnect import CalibrationReport
from scaldiag.analyze.nodes import MEASURED
from scaldiag.analyze.profile import UnitAnalysis
from scaldiag.analyze.try_stats import TryReport
from scaldiag.render import words
from scaldiag.rules import Finding
from scaldiag.rules.check import CheckReport
from scaldiag.rules.report import JobReport, Report, RunReport, SweepReport

SCHEMA_VERSION = 1

# The public keys of each record type, in output order.
_SUMMARY = ("mean", "p50", "p90", "stdev", "n", "ci95")
_CATEGORY = ("exclusive_ms", "exclusive_pct", "exclusive_pct_ci95", "busy_ms")
_TRANSFERS = ("bytes_per_step", "count_per_step", "bytes_by_host_kind")
_HOST_ACTIVITY = ("name", "state", "ms_per_step")
_EVIDENCE = ("metric", "value", "unit", "threshold", "spread", "device")
_SPEEDUP = ("value", "low", "high", "arithmetic", "kind", "fits")
_STEPS = (
    "recorded",
    "steady",
    "excluded",
    "samples_per_step",
    "samples_per_s",
    "samples_per_s_low",
    "samples_per_s_high",
    "window_ns",
    "traced_step_ms",
    "profiler_inflation",
    "epoch_end_steps",
    "clock",
    "outliers",
    "inflation_note",
    "compiling_steady",
)
_GPU = (
    "index",
    "name",
    "samples",
    "sample_hz",
    "util_pct",
    "mem_used_max_bytes",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
    "sm_clock_mhz_min",
    "sm_clock_mhz_max",
    "power_w",
    "clock_event_reasons",
    "pcie_gen_max_seen",
    "pcie_width_max_seen",
)
_INPUT_COST = (
    "step_ms",
    "input_free_ms",
    "input_free_min_ms",
    "input_free_max_ms",
    "cost_ms",
    "share_pct",
    "noise_ms",
    "significant",
    "source",
)
_HOST = (
    "samples",
    "cores",
    "core_pct_mean",
    "busiest_core_pct",
    "process_cpu_pct",
    "rss_max_bytes",
)
_POINT = (
    "gpus",
    "runs",
    "global_batch",
    "per_replica_batch",
    "step_time_ms",
    "step_time_ci95_ms",
    "samples_per_s",
    "speedup",
    "speedup_ci95",
    "efficiency",
    "ideal_speedup",
    "collective_ms",
    "parameter_bytes",
    "link_bytes_per_s",
)
_CAUSE = ("category", "lost_speedup", "spread", "within_noise")
_PREDICTION = (
    "gpus",
    "from_gpus",
    "step_time_ms",
    "samples_per_s",
    "samples_per_s_low",
    "samples_per_s_high",
    "noise_samples_per_s_low",
    "noise_samples_per_s_high",
    "assumptions",
    "measured_samples_per_s",
    "error_pct",
)


def pick(obj, keys: tuple[str, ...]) -> dict:
    """``obj``'s attributes named by ``keys``, in their order: a record's public keys."""
    return {k: getattr(obj, k) for k in keys}


def finding(f: Finding) -> dict:
    return {
        "id": f.id,
        "title": f.title,
        "severity": f.severity,
        "category": f.category,
        "summary": f.summary,
        "evidence": [pick(e, _EVIDENCE) for e in f.evidence],
        "fix": dict(f.fix),
        "predicted_speedup": pick(f.predicted_speedup, _SPEEDUP) if f.predicted_speedup else None,
        "forecast": pick(f.forecast, _SPEEDUP) if f.forecast else None,
        "notes": list(f.notes),
    }


def _unit(u: UnitAnalysis) -> dict:
    return {
        "name": u.name,
        "kind": u.kind,
        "steps": u.steps,
        "step_time_ms": pick(u.step_time_ms, _SUMMARY),
        "busy_pct": u.busy_pct,
        "categories": {c: pick(t, _CATEGORY) for c, t in u.categories.items()},
        "h2d_bytes_per_step": u.h2d.bytes_per_step if u.h2d else None,
        "d2h_bytes_per_step": u.d2h.bytes_per_step if u.d2h else None,
        "h2d": pick(u.h2d, _TRANSFERS) if u.h2d else None,
        "d2h": pick(u.d2h, _TRANSFERS) if u.d2h else None,
        "collective": {
            "count_per_step": u.collective_count_per_step,
            "time_ms_per_step": u.categories["collective"].busy_ms,
        },
        "input_pipeline_busy_ms": u.input_pipeline_busy_ms,
        "host_activity_while_idle": [pick(h, _HOST_ACTIVITY) for h in u.host_activity_while_idle],
    }


def trace_dict(report: Report) -> dict:
    a = report.analysis
    return {
        "schema_version": SCHEMA_VERSION,
        "run": a.run,
        "sources": a.sources,
        "hosts": a.hosts,
        "framework": a.framework,
        "event_count": a.event_count,
        "steps": {
            "method": a.steps_method,
            "description": a.steps_description,
            "count": a.units[0].steps if a.units else 0,
        },
        "verdict": report.verdict,
        "devices": [_unit(u) for u in a.units],
        "findings": [finding(f) for f in report.findings],
        "notes": a.notes,
        "profiler_inflation": a.profiler_inflation,
    }


def _steps(steps) -> dict | None:
    if steps is None:
        return None
    return {
        "scope": "steady_step",
        **pick(steps, _STEPS[:3]),
        "step_time_ms": pick(steps.step_time_ms, _SUMMARY),
        **pick(steps, _STEPS[3:]),
    }


_SCOPE = ("ms", "ms_ci95", "steps", "what", "ms_after_first", "ms_last_epoch")


_PRINTED = ("what", "scope", "ms", "scaldiag_ms", "error", "agrees")
_PRINTED_MORE = (
    "shown",
    "by",
    "spread_ms",
    "readings",
    "note",
    "begin_ns",
    "end_ns",
    "counted",
    "recorded",
    "headline",
    "headline_ms",
    "headline_agrees",
    "window",
    "own_ms",
    "batches_a_step",
    "headline_off_ms",
    "sampled_every",
)


def _printed(p) -> dict:
    """The script's own clocks beside scaldiag's figures (analyze/printed_clock.py); absent where
    the run kept no printed.jsonl."""
    if p is None:
        return {}
    return {
        "printed": [
            {
                **pick(x, _PRINTED),
                **pick(x, _PRINTED_MORE),
                "parts_ms": [{"part": part, "ms": ms} for part, ms in x.parts],
            }
            for x in p.comparisons
        ],
        "printed_headline_contradicted": p.headline_contradicted,
        "printed_dropped": p.dropped,
    }


def _clock(c, samples_per_step, printed=None) -> dict | None:
    """A step's time at each scope, the user's own first (analyze/clock.py)."""
    if c is None:
        return _printed(printed) or None
    scopes = {}
    for name, scope in c.scopes.items():
        scopes[name] = {**pick(scope, _SCOPE), "user_ms": scope.user_ms}
        if samples_per_step and scope.ms > 0:
            scopes[name]["samples_per_s"] = samples_per_step / (scope.ms / 1e3)
    return {
        "user_scope": c.user_scope,
        "user_clock": c.user_clock,
        "scopes": scopes,
        "parts_ms": [{"part": part, "ms": ms} for part, ms in c.parts_ms],
        "reported": c.reported,
        # a step that is one call looping over batches inside it (JAX's step_loop)
        "inner_loop": c.inner_loop,
        "inner_batches": c.inner_batches,
        "inner_batch_ms": c.inner_batch_ms,
        **_printed(printed),
    }


def _trace_window(w) -> dict | None:
    """The trace window as it ran (analyze/trace_window.py), its words where it was short."""
    if w is None:
        return None
    keys = ("planned_steps", "traced_steps", "traced_s", "ended_by", "limit_s", "share", "seconds")
    return {**{k: getattr(w, k) for k in keys}, "note": words.trace_window_words(w)}


def _capture_cost(c) -> dict | None:
    """What the capture measured of its own cost (analyze/capture_cost.py)."""
    if c is None:
        return None
    return {
        "sampler_cpu_s": c.sampler_cpu_s,
        "sampler_core_pct": c.sampler_core_pct,
        "window_s": c.window_s,
        "note": words.capture_cost_words(c),
    }


def _phase(p) -> dict:
    """A phase led by one optimizer (analyze/recorded_steps.py ``Phase``)."""
    return {
        **{k: getattr(p, k) for k in ("number", "first_step", "optimizer", "kind", "new")},
        **{k: getattr(p, k) for k in ("new_model", "steps", "steady", "steady_ms")},
        "in_turn": [{"optimizer": index, "kind": kind} for index, kind in p.in_turn],
    }


def _epochs(e) -> dict | None:
    """Whole epochs as Keras's progress bar times them (analyze/epochs.py)."""
    if e is None:
        return None
    return {
        "scope": "whole_epoch",
        "count": len(e.epochs),
        "compared": e.compared,
        "ms_per_step": e.ms_per_step,
        "ms_per_step_ci95": e.ms_per_step_ci95,
        "ms_per_step_after_first": e.ms_per_step_after_first,
        "validation_s_per_epoch": e.validation_s_per_epoch,
        "compiled_left_out": e.compiled_left_out,
        "model": e.model,  # several models trained: the one these figures are of, and why
        "model_why": e.model_why or None,
        "models": [
            {
                "model": m.model,
                "name": m.name,
                "epochs": m.epochs,
                "compared": m.compared,
                "ms_per_step": m.ms_per_step,
                "ms_per_step_after_first": m.ms_per_step_after_first,
            }
            for m in e.models
        ],
    }


def run_dict(report: RunReport) -> dict:
    a = report.analysis
    steps = _steps(a.steps)
    acc = a.accounting
    return {
        "schema_version": SCHEMA_VERSION,
        "run_dir": report.run_dir,
        "accounting": (
            {
                "wall_s": acc.wall_s,
                "goodput": acc.goodput,
                "scaldiag_own_s": acc.own_s,
                "parts": [{"part": p.part, "seconds": p.seconds} for p in acc.parts],
            }
            if acc
            else None
        ),
        "run": a.run.to_dict(),
        "training": a.training,
        "inventory": a.inventory,
        "steps": steps,
        "epochs": _epochs(a.epochs),
        "phases": [_phase(p) for p in a.phases],
        "trace_window": _trace_window(a.trace_window),
        "capture_cost": _capture_cost(a.capture_cost),
        "clock": _clock(a.clock, a.steps.samples_per_step if a.steps else None, a.printed),
        "input_cost": pick(a.input_cost, _INPUT_COST) if a.input_cost else None,
        "gpus": [pick(g, _GPU) for g in a.gpus],
        "host": pick(a.host, _HOST) if a.host else None,
        "missing": a.missing,
        "ranks": {str(r): _steps(st) for r, st in sorted(a.ranks.items())},
        "slow_rank": (
            {"rank": a.slow_rank[0], "excess_pct": 100 * a.slow_rank[1]} if a.slow_rank else None
        ),
        "findings": [finding(f) for f in report.findings],
        # the run's headline: the trace's verdict, or a firm run finding over a borderline cause
        "verdict": report.verdict or None,
        "headlined": report.headlined.id if report.headlined else None,
        "trace_report": trace_dict(report.trace_report) if report.trace_report else None,
        "tried": tried_dict(a.tried),
    }


def tried_dict(tried: dict | None) -> dict | None:
    """scaldiag try's result on a run (try.json), its rounds' directories left out."""
    return {k: v for k, v in (tried or {}).items() if k != "rounds"} or None


def sweep_dict(report: SweepReport) -> dict:
    s = report.analysis
    return {
        "schema_version": SCHEMA_VERSION,
        "sweep_dir": report.sweep_dir,
        "mode": s.mode,
        "emulated": s.emulated,
        "scaling": [pick(p, _POINT) for p in s.points],
        "attribution": [
            {
                "gpus": a.gpus,
                "ideal": a.ideal,
                "measured": a.measured,
                "causes": [pick(c, _CAUSE) for c in a.causes],
            }
            for a in s.attribution
        ],
        "validation": [pick(p, _PREDICTION) for p in s.validation],
        "predictions": [pick(p, _PREDICTION) for p in s.predictions],
        "notes": s.notes,
        "findings": [finding(f) for f in report.findings],
    }


# NodeSummary's fields in the JSON's order: the measured ones as analyze/nodes keeps them.
_NODE = (
    "node",
    "ranks",
    *MEASURED,
    "last_pct",
    "bytes_per_step",
    "steady_step_ms",
    "intra_node_ms",
)
_OFFSET = ("offset_ns", "spread_ns", "collectives")


def _node(n) -> dict:
    """A node's figures; each ``*_ms`` a summary over steps (None: not measured)."""
    return {
        k: pick(v, _SUMMARY) if k.endswith("_ms") and v is not None else v
        for k, v in pick(n, _NODE).items()
    }


def job_dict(report: JobReport, each=None) -> dict:
    """A job over several nodes (analyze/job.py): its nodes on node 0's clock, each node's
    figures. ``each(items, make)``: the list of ``make(item)``, a plain list unless given (``write``
    gives ``Made``: the per-node lists made as they are written)."""
    each = each or _made_now
    a = report.analysis
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "job",
        "node_dirs": report.node_dirs,
        "framework": report.framework,
        "analysis": {
            "nodes": each(a.nodes, _node),
            "offsets": each(a.offsets, _offset),
            "matched_collectives": a.matched_collectives,
            "notes": a.notes,
            "ranks_per_node": a.ranks_per_node,
            "one_network_stack": a.one_network_stack,
        },
        "findings": [finding(f) for f in report.findings],
        "rank_files": each(report.rank_files, list),
    }


def _offset(o) -> dict:
    """A node's clock (analyze/clock_skew.Offset): its name is the node's."""
    return {"node": o.name, **pick(o, _OFFSET)}


def _made_now(items, make) -> list:
    return [make(x) for x in items]


class Made(list):
    """A JSON list whose items are made (and cleaned) one at a time as the encoder reaches them:
    ``dump`` writes each before the next is made, so a job's per-node lists are never held whole
    (as dicts they were about 5 KB a rank, and as many again in ``clean``'s copy: most of the job
    merge's peak at 4,096 ranks, bench/results/job_merge.md). A list to the encoder (which asks
    only its length and its items); ``dumps`` writes it as the plain list's bytes."""

    def __init__(self, items, make) -> None:
        super().__init__()
        self._items, self._make = items, make

    def __iter__(self):
        return (clean(self._make(x)) for x in self._items)

    def __len__(self) -> int:
        return len(self._items)


def check_dict(report: CheckReport) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "passed": not report.failed,
        "results": [
            {"check": r.check, "passed": r.passed, "reason": r.reason} for r in report.results
        ],
    }


_BY_KIND = {
    Report: trace_dict,
    RunReport: run_dict,
    SweepReport: sweep_dict,
    JobReport: job_dict,
    CheckReport: check_dict,
    CalibrationReport: lambda report: report.doc,  # the file calibrate saved, as saved
    TryReport: lambda report: report.result,  # try.json's document
}


def to_dict(report: Report | RunReport | SweepReport | JobReport) -> dict:
    return _BY_KIND[type(report)](report)


def dumps(data: dict) -> str:
    """Every JSON document scaldiag writes: NaN and infinity as null, indented."""
    return json.dumps(clean(data), indent=2, allow_nan=False) + "\n"


def render(report: Report | RunReport | SweepReport | JobReport) -> str:
    return dumps(to_dict(report))


def dump(data: dict, stream: TextIO) -> None:
    """``dumps``' bytes, written to ``stream`` as the encoder makes them: no whole document in
    memory (a job of 4,096 ranks held its 7.5 MB text and the encoder's pieces of it at once, about
    12 KB a rank of the merge's peak; bench/results/job_merge.md). The encoder's small pieces are
    joined a batch at a time (a write call each was 0.2 s of a 4,096-rank job's JSON)."""
    pieces = json.JSONEncoder(indent=2, allow_nan=False).iterencode(clean(data))
    while batch := list(itertools.islice(pieces, _PIECES_A_WRITE)):
        stream.write("".join(batch))
    stream.write("\n")


# Encoder pieces joined into one write: a few hundred KB of text at most.
_PIECES_A_WRITE = 16384


def write(
    report: Report | RunReport | SweepReport | JobReport,
    stream: TextIO | None = None,
    width: int | None = None,
    **_views,
) -> None:
    """The report as JSON (``width`` and the views: the other formats'; the JSON holds everything).
    A job's per-node lists are made as they are written (``Made``)."""
    data = job_dict(report, Made) if isinstance(report, JobReport) else to_dict(report)
    dump(data, stream or sys.stdout)


def clean(value):
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, Made):
        return value  # its items are cleaned as they are made
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value
