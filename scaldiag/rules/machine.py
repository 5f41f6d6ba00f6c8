"""Advice and forecasts fitted to the machine the run was measured on.

A trace's rules (RULES) see one trace: their fix text is general ("num_workers
= cores per rank") and their ceilings assume spare CPU. A captured run also
has its host samples (cores, how busy they were, what the training processes
used), so here the fix names this machine's numbers and the forecast of a fix
that moves input work onto other cores is bounded by the cores there are:

- worker count: the cores per rank on this host, less one for the training
  loop itself (PyTorch's DataLoader docs leave the number to the machine;
  ``num_workers=8`` on a 2-core machine ran 0.47x under profile, issue 23);
- spread over parallel workers, the step's CPU work cannot run faster than
  the cores it can use allow: at most (cores - others' use) / training's use,
  from the samples of the steady window (docs/rules.md, "Fitted to the machine");
- PyTorch's DataLoader workers share the input's time, but the training loop keeps the rest
  of the step and takes each batch from them: the batch's bytes cross
  processes into fresh pages and are copied again (pinned), at the
  hand-over's cost a byte (analyze/predict.INPUT_NS_PER_BYTE plus the host's
  measured fresh-page cost). On an H200 with 15 workers this put the step at
  9.6-10.3 ms where the ceiling said 6.5-7.1 (twins: 9.3-10.0x measured,
  bench/results/accuracy/README.md);
- Python work (``tf.py_function``, ``tf.numpy_function``) holds the GIL: a
  parallel map's threads take turns on it, so ``num_parallel_calls`` is
  forecast at 1x for that work (0.93-1.1x measured on the 2-core machine,
  issue 23); only moving it out of Python, or into processes, removes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from scaldiag.analyze.predict import INPUT_NS_PER_BYTE
from scaldiag.analyze.profile import UnitAnalysis
from scaldiag.analyze.run import HostSummary, RunAnalysis
from scaldiag.analyze.transfers import FRESH_PAGE_NS_PER_BYTE
from scaldiag.rules.base import Finding, Speedup, with_forecast_error

# Host events of Python run under the GIL from a tf.data map: TF's EagerPyFunc / PyFunc kernels.
GIL_EVENT = re.compile(r"EagerPyFunc|\bPyFunc\b|py_function|numpy_function")
# The worker counts the fix text of SD101 writes where the machine is unknown.
_WORKERS_IN_FIX = re.compile(r"(num_workers=|PyDataset\(workers=)8\b")


@dataclass(frozen=True)
class CpuBudget:
    cores: int
    training_cores: float  # what the training process tree used (cores, from its CPU %)
    other_cores: float  # what the rest of the machine used meanwhile
    ranks: int  # training processes that share this host's cores (torchrun ranks)

    @property
    def workers(self) -> int:
        """Input workers per rank: the rank's share of the cores, one left for its training loop."""
        return max(1, self.cores // self.ranks - 1)

    @property
    def parallel_ceiling(self) -> float:
        """The most the step's CPU work can speed up spread over the cores the others leave."""
        return max(1.0, (self.cores - self.other_cores) / self.training_cores)


def budget(run: RunAnalysis) -> CpuBudget | None:
    host: HostSummary | None = run.host
    if host is None or host.cores < 1 or not host.process_cpu_pct > 0:
        return None
    training = host.process_cpu_pct / 100
    busy = host.core_pct_mean * host.cores / 100
    ranks = (
        max(1, len(run.ranks))
        if (run.training.get("framework") or {}).get("name") == "pytorch"
        else 1
    )
    # The cores the training process may use (its affinity: a cpuset or taskset), where it recorded
    # them.
    usable = (run.training.get("knobs") or {}).get("cores_usable")
    cores = min(host.cores, usable) if isinstance(usable, int) and usable > 0 else host.cores
    return CpuBudget(
        cores=cores, training_cores=training, other_cores=max(0.0, busy - training), ranks=ranks
    )


@dataclass(frozen=True)
class Handover:
    """The step of the unit an input finding names, as parallel workers would change it."""

    step_ms: float
    input_ms: float
    batch_bytes: float  # copied to the device a step: what each worker hands the training loop
    ns_per_byte: float  # the hand-over's cost a byte on this host

    def step_with(self, workers: int) -> float:
        """The step with ``workers`` sharing the input: the training loop's part, or the workers' if
        longer."""
        loop = self.step_ms - self.input_ms + self.batch_bytes * self.ns_per_byte / 1e6
        return max(loop, self.input_ms / workers)


def fit_to_machine(
    findings: list[Finding],
    run: RunAnalysis,
    host_events: list[str],
    units: list[UnitAnalysis] = (),
) -> list[Finding]:
    """The input findings with this machine's worker count, and their forecast bounded by its cores.

    ``host_events``: names of the host activity the trace shows while the devices wait (GIL-holding
    work); ``units``: the trace's units, for the hand-over of the unit a finding names.
    """
    cpu = budget(run)
    if cpu is None:
        return findings
    gil = sorted({n for n in host_events if GIL_EVENT.search(n)})
    fresh = run.run.fresh_page_ns_per_byte or FRESH_PAGE_NS_PER_BYTE
    # DataLoader workers are processes: each batch crosses into the training process. (Keras'
    # PyDataset workers and tf.data's threads are in-process, and array input's slicing is itself
    # the hand-over: no second one there.)
    processes = (run.training.get("framework") or {}).get("name") == "pytorch"
    by_name = {u.name: u for u in units}
    # tf.data's autotuned map runs up to one call a core (TF's own cap), not the plan's workers
    parallel = cpu.cores if fed_tf_data(run.training) else cpu.workers
    return [
        (
            _fit(f, cpu, gil, _handover(f, by_name, INPUT_NS_PER_BYTE + fresh, processes), parallel)
            if f.category == "input"
            else f
        )
        for f in findings
    ]


TF_DATA_SOURCE = "tf.data.Dataset"  # the input ceiling's source where fit was given one


def fed_tf_data(training: dict) -> bool:
    """Whether the script gave ``fit`` a tf.data dataset of its own: the input ceiling iterated
    one (training.json). A PyDataset or arrays are not: a fix that says "feed a tf.data pipeline"
    is a rewrite there, and Keras's own pipeline for arrays is not the script's."""
    source = (training.get("input_ceiling") or {}).get("source") or ""
    return source.startswith(TF_DATA_SOURCE)


def _handover(
    f: Finding, units: dict[str, UnitAnalysis], ns_per_byte: float, processes: bool = True
) -> Handover | None:
    """The step of the unit ``f`` names, its input, and the bytes each batch crosses into the
    training process (none from in-process workers: ``processes`` False)."""
    unit = next((units[e.device] for e in f.evidence if e.device in units), None)
    if unit is None or not unit.step_time_ms.mean > 0:
        return None
    return Handover(
        unit.step_time_ms.mean,
        unit.categories["input"].exclusive_ms,
        unit.h2d.bytes_per_step if unit.h2d is not None and processes else 0.0,
        ns_per_byte,
    )


def _fit(
    f: Finding,
    cpu: CpuBudget,
    gil: list[str],
    handover: Handover | None = None,
    parallel: int | None = None,
) -> Finding:
    fix = {
        fw: _WORKERS_IN_FIX.sub(lambda m: f"{m.group(1)}{cpu.workers}", text)
        for fw, text in f.fix.items()
    }
    machine = (
        f"this machine: {cpu.cores} cores; the training processes used {cpu.training_cores:.1f},"
        f" the rest of the machine {cpu.other_cores:.1f}; {cpu.ranks} rank(s) share them, so"
        f" {cpu.workers} input worker(s) per rank, one core left for each training loop"
    )
    notes = [*f.notes, machine]
    forecast = _parallel_forecast(f.predicted_speedup, cpu, gil, handover, parallel)
    if gil:
        notes.append(
            f"Python under the GIL in the input ({', '.join(gil)}): num_parallel_calls and"
            " PyDataset threads take turns on one lock, so they give about 1x; rewrite it as"
            " TensorFlow ops or move it into the model"
        )
    return replace(f, fix=fix, notes=notes, forecast=forecast or f.forecast)


def _parallel_forecast(
    ceiling: Speedup | None,
    cpu: CpuBudget,
    gil: list[str],
    handover: Handover | None = None,
    parallel: int | None = None,
) -> Speedup | None:
    """What parallel input workers can give here: the ceiling, bounded by the cores and by the
    training loop's own part with the hand-over of every batch, the input shared by ``parallel``
    workers (the plan's; 1x for GIL-held work)."""
    workers = parallel or cpu.workers
    if ceiling is None:
        return None
    if gil:
        return with_forecast_error(
            Speedup(
                1.0,
                1.0,
                1.0,
                "parallel calls of Python under the GIL run one at a time: ~1x",
                "forecast",
            )
        )
    bound = cpu.parallel_ceiling
    said = [
        f"parallel input workers: the step's CPU work ({cpu.training_cores:.1f} cores) spread over"
        f" the {cpu.cores - cpu.other_cores:.1f} cores the rest of the machine leaves -> at most"
        f" {bound:.2f}x"
    ]
    if handover is not None and handover.input_ms > 0:
        after = handover.step_with(workers)
        bound = min(bound, handover.step_ms / after)
        taken = (
            f" and takes each batch's {handover.batch_bytes / 1e6:.1f} MB from them at "
            f"{handover.ns_per_byte:.2f} ns a byte"
            if handover.batch_bytes
            else ""
        )
        said.append(
            f"{workers} worker(s) share the input's {handover.input_ms:.1f} ms; the training"
            f" loop keeps {handover.step_ms - handover.input_ms:.1f} ms{taken}:"
            f" {handover.step_ms:.1f} / {after:.1f} ms = {handover.step_ms / after:.2f}x"
        )
    if bound >= ceiling.high:
        said.append(
            f"{'neither binds' if len(said) > 1 else 'the cores do not bind'}: the ceiling of"
            " removing the input stands"
        )
    else:
        said.append(f"under the ceiling of removing the input ({ceiling.value:.2f}x)")
    return with_forecast_error(
        Speedup(
            min(ceiling.value, bound),
            min(ceiling.low, bound),
            min(ceiling.high, bound),
            "; ".join(said),
            "forecast",
        ),
        # hard bounds: the input's removal and the cores (the workers' sharing is the model)
        cap=min(ceiling.high, cpu.parallel_ceiling),
    )


def fit_trace_report(report, run: RunAnalysis):
    """A run's trace report (rules/report.Report) with its findings fitted to the run's machine."""
    if report is None:
        return None
    events = [a.name for u in report.analysis.units for a in u.host_activity_while_idle]
    return replace(
        report, findings=fit_to_machine(report.findings, run, events, report.analysis.units)
    )
