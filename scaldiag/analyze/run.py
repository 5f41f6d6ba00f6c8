"""A captured run, analysed: steady-state steps and throughput, GPU and host samples.

Pure functions over the run record's plain data (``RunRecord``); reading the
files is ``scaldiag.record.reader``'s job.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field, replace

import numpy as np

from scaldiag.analyze import inflation, recorded_steps
from scaldiag.analyze.accounting import Accounting, account
from scaldiag.analyze.batch_memory import DeviceMemory, device_memory
from scaldiag.analyze.capture_cost import CaptureCost, capture_cost
from scaldiag.analyze.clock import Clock, clock
from scaldiag.analyze.epochs import EpochStats, epoch_stats
from scaldiag.analyze.input_cost import InputCost, input_cost, with_input_cost
from scaldiag.analyze.printed_clock import PrintedClock, bar_style, printed_clock
from scaldiag.analyze.printed_clock import read as read_printed
from scaldiag.analyze.printed_headline import followed
from scaldiag.analyze.profile import ProfileAnalysis
from scaldiag.analyze.stats import Summary, ci95_half_width
from scaldiag.analyze.trace_window import TraceWindow, trace_window
from scaldiag.record.run_json import RunJson
from scaldiag.record.types import RunRecord

# NVML clocks-event reasons (nvmlClocksEventReasons*, nvml.h): the bits that
# mean the GPU is held below its clocks for a reason other than being idle.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


@dataclass(frozen=True)
class StepStats:
    recorded: int
    steady: int
    excluded: dict[str, list[int]]  # reason -> step numbers
    step_time_ms: Summary  # steady steps, begin to next begin
    samples_per_step: int | None
    samples_per_s: float | None
    samples_per_s_low: float | None  # from the 95% CI of the mean step time
    samples_per_s_high: float | None  # None with a low end: no upper bound at 95%
    window_ns: tuple[int, int]  # first steady begin, last steady end
    traced_step_ms: float | None = None  # mean period inside the profiler window (it slows steps)
    profiler_inflation: float | None = (
        None  # traced_step_ms / the steady step time; None: not measurable
    )
    epoch_end_steps: int = 0  # steady steps that end an epoch (and hold the device's catch-up)
    clock: str = (
        "host"  # "device": step times from the device's own clock (CUDA events), else the host's
    )
    # steady steps far off the rest: reported, never dropped
    outliers: list[int] = field(default_factory=list)
    inflation_note: str | None = None  # why the inflation is not measurable, when it is not
    # steady steps that compiled: compiles recur in most steps (recorded_steps)
    compiling_steady: int = 0


@dataclass(frozen=True)
class GpuSummary:
    index: int
    name: str | None
    samples: int
    sample_hz: float
    util_pct: float | None
    mem_used_max_bytes: int | None
    pcie_tx_bytes_per_s: float | None
    pcie_rx_bytes_per_s: float | None
    nvlink_tx_bytes_per_s: float | None
    nvlink_rx_bytes_per_s: float | None
    sm_clock_mhz_min: int | None
    sm_clock_mhz_max: int | None
    power_w: float | None
    clock_event_reasons: list[str]
    pcie_gen_max_seen: int | None = None  # highest PCIe generation read while training
    pcie_width_max_seen: int | None = None


@dataclass(frozen=True)
class HostSummary:
    samples: int
    cores: int
    core_pct_mean: float  # over all cores
    busiest_core_pct: float  # mean of the busiest core at each sample
    process_cpu_pct: float  # the training process tree, 100 = one core
    rss_max_bytes: int
    core_pct_mean_ci95: float = 0.0  # 95% half-width of core_pct_mean over the samples
    processes_max: int = 1  # the training process tree's processes (DataLoader workers included)


@dataclass(frozen=True)
class RunAnalysis:
    run: RunJson
    training: dict
    inventory: dict
    steps: StepStats | None
    gpus: list[GpuSummary]
    host: HostSummary | None
    # corrected for the profiler's inflation when untraced steps are known
    trace: ProfileAnalysis | None
    missing: list[str] = field(default_factory=list)
    accounting: Accounting | None = None
    # every rank's steady steps, rank 0 included
    ranks: dict[int, StepStats] = field(default_factory=dict)
    input_cost: InputCost | None = (
        None  # the steady step against the input-free step (analyze/input_cost.py)
    )
    epochs: EpochStats | None = (
        None  # whole epochs as Keras's progress bar times them (analyze/epochs.py)
    )
    clock: Clock | None = None  # a step at each scope, the user's own first (analyze/clock.py)
    # the script's printed clocks beside those figures (analyze/printed_clock.py); None: no record
    printed: PrintedClock | None = None
    # The fullest device's peak memory (analyze/batch_memory.py), trace or not.
    device_memory: DeviceMemory | None = None
    # `scaldiag try` on this run (try.json, as the record holds it): {} where never tried.
    tried: dict = field(default_factory=dict)
    # (rank, excess over the fastest rank as a fraction): the rank slower than the others beyond the
    # noise
    slow_rank: tuple[int, float] | None = None
    # PyTorch: the optimizers that led the steps, one phase each (analyze/recorded_steps.py)
    phases: list[recorded_steps.Phase] = field(default_factory=list)
    # the trace window as it ran: planned and traced steps, what ended it (analyze/trace_window.py)
    trace_window: TraceWindow | None = None
    # what the capture measured of its own cost in this run (analyze/capture_cost.py)
    capture_cost: CaptureCost | None = None


# One rank's steady step this much slower than the fastest rank's, beyond both intervals, is named
# as the rank the others wait for (as SD206 does for devices).
SLOW_RANK_EXCESS = 0.05


def slow_rank(ranks: dict[int, StepStats]) -> tuple[int, float] | None:
    """(rank, excess over the fastest rank as a fraction) when one rank is slower beyond the
    noise."""
    timed = {r: s.step_time_ms for r, s in ranks.items() if s is not None}
    if len(timed) < 2:
        return None
    slow = max(timed, key=lambda r: timed[r].mean)
    fast = min(timed, key=lambda r: timed[r].mean)
    excess = timed[slow].mean - timed[fast].mean
    noise = timed[slow].ci95 + timed[fast].ci95
    if not math.isfinite(noise) or excess <= noise or excess < SLOW_RANK_EXCESS * timed[fast].mean:
        return None
    return slow, excess / timed[fast].mean


def step_stats(steps: list[dict], training: dict, marks: list[dict] = ()) -> StepStats | None:
    """Steady-state step times: warm-up, compile/retrace (with the framework's evidence) and
    trace-window steps left out, each listed."""
    return _step_stats(recorded_steps.periods(steps, training, marks), training)


# A steady step this many times the steady median is listed as an outlier in the report. It stays in
# every figure: the user's stopwatch paid for it (only the framework's evidence takes a step out).
OUTLIER_FACTOR = 3.0


def _step_stats(found: list[recorded_steps.Period], training: dict) -> StepStats | None:
    steady = [p for p in found if p.kind == recorded_steps.STEADY]
    if not steady:
        return None
    excluded: dict[str, list[int]] = {}
    for p in found:
        if p.kind != recorded_steps.STEADY:
            excluded.setdefault(p.kind, []).extend(range(p.first_batch, p.first_batch + p.batches))
    per_batch_ms = np.array([p.ns_per_batch for p in steady]) / 1e6
    # The mean is total time over total batches: a stopwatch around the steady steps.
    mean_ms = sum(p.duration_ns for p in steady) / sum(p.batches for p in steady) / 1e6
    time_ms = replace(Summary.of(per_batch_ms), mean=mean_ms)
    time_ms = replace(time_ms, ci95=max(time_ms.ci95, _between_epochs_ci95(steady)))
    per_step = _samples_per_step(training)
    rate = low = high = None
    if (
        per_step and time_ms.mean > 0
    ):  # (damaged steps can all be zero long: no rate, not a division by 0)
        rate = per_step / (time_ms.mean / 1e3)
        if math.isfinite(time_ms.ci95):
            low = per_step / ((time_ms.mean + time_ms.ci95) / 1e3)
            # An interval reaching a step of zero bounds the rate from below only: no upper end.
            high = (
                per_step / ((time_ms.mean - time_ms.ci95) / 1e3)
                if time_ms.ci95 < time_ms.mean
                else None
            )
    traced_ms = _traced_ms(found)
    ratio, note = _inflation(traced_ms, time_ms.mean)
    median = float(np.median(per_batch_ms))
    return StepStats(
        recorded=sum(p.batches for p in found),
        steady=sum(p.batches for p in steady),
        excluded=excluded,
        step_time_ms=time_ms,
        samples_per_step=per_step,
        samples_per_s=rate,
        samples_per_s_low=low,
        samples_per_s_high=high,
        window_ns=(steady[0].begin_ns, steady[-1].end_ns),
        traced_step_ms=traced_ms,
        profiler_inflation=ratio,
        inflation_note=note,
        epoch_end_steps=sum(p.batches for p in steady if p.ends_epoch),
        clock="device" if all(p.device_ns is not None for p in steady) else "host",
        outliers=[p.first_batch for p in steady if p.ns_per_batch / 1e6 > OUTLIER_FACTOR * median],
        compiling_steady=sum(p.batches for p in steady if p.compiled),
    )


# Epochs with steady steps needed for their spread to say something (two give a t of 12.7).
MIN_EPOCHS_FOR_SPREAD = 3


def _between_epochs_ci95(steady: list[recorded_steps.Period]) -> float:
    """The 95% half-width of the mean step from the epochs' own means, where there are enough
    epochs.

    Each epoch ends at a synchronisation, so its steady mean is a stopwatch of its own;
    epoch-to-epoch change (the machine's load, a slower epoch) is spread the per-step interval does
    not see."""
    epochs: dict[int, list[int]] = {}
    for p in steady:
        totals = epochs.setdefault(p.epoch, [0, 0])
        totals[0] += p.duration_ns
        totals[1] += p.batches
    means = np.array([ns / batches for ns, batches in epochs.values()]) / 1e6
    if len(means) < MIN_EPOCHS_FOR_SPREAD:
        return 0.0
    return ci95_half_width(means)


def _traced_ms(found: list[recorded_steps.Period]) -> float | None:
    """Mean step time inside the profiler window (steps that end an epoch hold a catch-up: left
    out)."""
    traced = [p.ns_per_batch for p in found if p.traced and not p.ends_epoch]
    return float(np.mean(traced)) / 1e6 if traced else None


def _inflation(traced_ms: float | None, untraced_ms: float) -> tuple[float | None, str | None]:
    """traced / untraced step time, or None and why it is not measurable.

    Tracing only adds work, so a ratio under 1 says the two clocks measured different things (the
    host running ahead of the device in the window, a loaded machine): nothing is corrected with it.
    """
    if not traced_ms or not untraced_ms > 0:
        return None, None
    ratio = traced_ms / untraced_ms
    if ratio >= 1:
        return ratio, None
    return (
        None,
        (
            "profiler inflation not measurable here: steps in the profiler window took"
            f" {traced_ms:.3f} ms, {ratio:.2f}x the untraced step, which tracing cannot cause"
            " (steps that end before their work does, or a change in the machine's load); the"
            " trace's shares are shown as traced"
        ),
    )


def _samples_per_step(training: dict) -> int | None:
    """Samples per step, a step being one batch."""
    batch = training.get("global_batch")
    return int(batch) if batch else None


def gpu_summaries(
    samples: list[dict],
    inventory: dict,
    window_ns: tuple[int, int] | None,
    training_ns: tuple[int, int] | None = None,
) -> list[GpuSummary]:
    """Per GPU over the steady window; the PCIe link over all of training
    (it is read once a second, too rarely for a short steady window)."""
    names = {g.get("index"): g.get("name") for g in inventory.get("gpus", [])}
    by_gpu: dict[int, list[dict]] = {}
    for row in samples:
        by_gpu.setdefault(row["gpu"], []).append(row)
    return [
        _gpu_summary(index, names.get(index), rows, window_ns, training_ns)
        for index, rows in sorted(by_gpu.items())
    ]


def _gpu_summary(index, name, rows, window_ns, training_ns=None) -> GpuSummary:
    span_s = (rows[-1]["t_ns"] - rows[0]["t_ns"]) / 1e9 if len(rows) > 1 else 0.0
    # The steady window; a window too short to hold a sample falls back to the whole run.
    inside = within(rows, window_ns) or rows

    def values(key):
        return [r[key] for r in inside if key in r]

    def mean(key, scale=1.0):
        v = values(key)
        return float(np.mean(v)) * scale if v else None

    reasons = 0
    for r in inside:
        reasons |= int(r.get("clocks_event_reasons", 0))
    clocks = values("sm_clock_mhz")
    mem = values("mem_used_bytes")
    training = within(rows, training_ns)
    gens = [r["pcie_gen"] for r in training if "pcie_gen" in r]
    widths = [r["pcie_width"] for r in training if "pcie_width" in r]
    return GpuSummary(
        index=index,
        name=name,
        samples=len(rows),
        sample_hz=(len(rows) - 1) / span_s if span_s else 0.0,
        util_pct=mean("util_pct"),
        mem_used_max_bytes=max(mem) if mem else None,
        pcie_tx_bytes_per_s=counter_rate(inside, "pcie_tx_bytes"),
        pcie_rx_bytes_per_s=counter_rate(inside, "pcie_rx_bytes"),
        nvlink_tx_bytes_per_s=counter_rate(inside, "nvlink_tx_kib", 1024),
        nvlink_rx_bytes_per_s=counter_rate(inside, "nvlink_rx_kib", 1024),
        sm_clock_mhz_min=min(clocks) if clocks else None,
        sm_clock_mhz_max=max(clocks) if clocks else None,
        power_w=mean("power_mw", 1e-3),
        clock_event_reasons=[
            n for bit, n in CLOCK_EVENT_REASONS.items() if reasons & bit and n != "gpu_idle"
        ],
        pcie_gen_max_seen=max(gens) if gens else None,
        pcie_width_max_seen=max(widths) if widths else None,
    )


def within(rows: list[dict], window_ns: tuple[int, int] | None) -> list[dict]:
    """The sample rows taken inside [start, end] (all of them without a window)."""
    if window_ns is None:
        return rows
    return [r for r in rows if window_ns[0] <= r["t_ns"] <= window_ns[1]]


def counter_rate(rows: list[dict], key: str, unit: float = 1.0) -> float | None:
    """Rate of a cumulative counter over the rows, per second (times ``unit``)."""
    points = [(r["t_ns"], r[key]) for r in rows if key in r]
    if len(points) < 2 or points[-1][0] == points[0][0]:
        return None
    return (points[-1][1] - points[0][1]) * unit / ((points[-1][0] - points[0][0]) / 1e9)


def host_summary(samples: list[dict], window_ns: tuple[int, int] | None) -> HostSummary | None:
    rows = within(samples, window_ns) or samples
    rows = [r for r in rows if r.get("core_pct")]
    if not rows:
        return None
    # One machine has one number of cores: a row of another length is damaged (a flipped byte), left
    # out.
    cores_seen = collections.Counter(len(r["core_pct"]) for r in rows).most_common(1)[0][0]
    rows = [r for r in rows if len(r["core_pct"]) == cores_seen]
    cores = np.array([r["core_pct"] for r in rows], float)
    per_sample = cores.mean(axis=1)
    ci = ci95_half_width(per_sample) if len(rows) > 1 else math.nan
    return HostSummary(
        samples=len(rows),
        cores=cores.shape[1],
        core_pct_mean=float(cores.mean()),
        core_pct_mean_ci95=ci,
        processes_max=int(max(r.get("processes") or 1 for r in rows)),
        busiest_core_pct=float(cores.max(axis=1).mean()),
        process_cpu_pct=float(np.mean([r["proc_cpu_pct"] for r in rows])),
        rss_max_bytes=int(max(r["proc_rss_bytes"] for r in rows)),
    )


def analyze_record(
    record: RunRecord,
    trace: ProfileAnalysis | None,
    trace_missing: list[str],
    other_ranks: dict[int, RunRecord] | None = None,
) -> RunAnalysis:
    """``other_ranks``: the records of ranks > 0 of a multi-process job (this record is rank 0)."""
    every = _periods(record)
    epochs = epoch_stats(every, record.marks)
    # Several models trained (Keras: fits keyed by model): the steps and clocks are one model's,
    # the one the epochs' figures are of; the accounting keeps every step.
    kept = epochs.model_epochs if epochs is not None else None
    found = every if kept is None else [p for p in every if p.epoch in kept]
    steps = _step_stats(found, record.training)
    if steps is not None and trace is not None:
        steps = _with_trace_inflation(steps, trace, record.training)
    window = steps.window_ns if steps else None
    cost = (
        input_cost(
            steps.step_time_ms.mean, steps.step_time_ms.ci95, record.training.get("input_free")
        )
        if steps
        else None
    )
    memory = device_memory(record.training, record.gpu_samples, record.inventory)
    trace = _run_trace(record, trace, steps, cost, memory)
    missing = _missing(record, trace_missing)
    training_ns = (
        (record.steps[0]["begin_ns"], record.steps[-1]["end_ns"]) if record.steps else None
    )
    scopes, printed = _clocks(record, found, every, epochs, steps)
    ranks = (
        {0: steps, **{r: _record_steps(rec) for r, rec in other_ranks.items()}}
        if other_ranks
        else {}
    )
    accounting = account(record.run, record.marks, every)
    wall_s = accounting.wall_s if accounting is not None else None
    traced = trace_window(record.training, record.steps, record.marks, wall_s)
    return RunAnalysis(
        run=record.run,
        training=record.training,
        inventory=record.inventory,
        steps=steps,
        gpus=gpu_summaries(record.gpu_samples, record.inventory, window, training_ns),
        host=host_summary(record.host_samples, window),
        trace=trace,
        missing=missing,
        accounting=accounting,
        input_cost=cost,
        epochs=epochs,
        clock=scopes,
        printed=printed,
        ranks=ranks,
        slow_rank=slow_rank(ranks),
        device_memory=memory,
        tried=record.tried,
        phases=recorded_steps.phase_figures(every, record.marks),
        trace_window=traced,
        capture_cost=capture_cost(
            record.run.samplers, wall_s, traced.seconds if traced is not None else None
        ),
    )


def _run_trace(
    record: RunRecord,
    trace: ProfileAnalysis | None,
    steps: StepStats | None,
    cost: InputCost | None,
    memory: DeviceMemory | None,
) -> ProfileAnalysis | None:
    """The trace's analysis with what the record adds: the host's fresh-page cost, the devices'
    memory, the inflation correction to the untraced step and the input's measured cost."""
    fresh = record.run.fresh_page_ns_per_byte
    if trace is not None and fresh is not None:
        trace = replace(trace, fresh_page_ns_per_byte=float(fresh))
    if trace is not None and memory is not None:
        trace = replace(
            trace, device_memory=memory, per_replica_batch=record.training.get("per_replica_batch")
        )
    if trace is not None and steps is not None:
        trace = _corrected(trace, steps, record.training)
        if cost is not None:
            trace = with_input_cost(
                trace, cost, int(record.training.get("steps_per_execution") or 1)
            )
    return trace


def _missing(record: RunRecord, trace_missing: list[str]) -> list[str]:
    """What the record lacks, in words: the run's and the trace's, then steps and samples."""
    missing = [*record.run.missing, *trace_missing]
    if not record.steps:
        missing.append(
            "steps: no training step was recorded (did the script call model.fit, "
            "or use scaldiag.loop.capture?)"
        )
    others = record.training.get("other_training_processes")
    if others and isinstance(others, list):  # PyTorch: processes forked from the script trained
        missing.append(
            f"steps: {len(others)} other process(es) of the script trained too, each recorded in"
            f" its own directory ({', '.join(map(str, others[:4]))}"
            f"{', ...' if len(others) > 4 else ''}: scaldiag report RUN_DIR/<it>); their steps"
            " are not in these figures, and they shared this machine with them"
        )
    graphed = record.training.get("cuda_graph_steps")
    if graphed:
        missing.append(
            f"steps: {graphed} optimizer step(s) were captured into CUDA graphs; a graph's replays"
            " call no optimizer.step(), so only the steps run outside graphs are recorded (the"
            " script's own clock times the replays)"
        )
    if not record.gpu_samples and not any(m.startswith("nvml") for m in missing):
        missing.append("nvml: no GPU samples")
    return missing


def _clocks(
    record: RunRecord,
    found: list[recorded_steps.Period],
    every: list[recorded_steps.Period],
    epochs: EpochStats | None,
    steps: StepStats | None,
) -> tuple[Clock | None, PrintedClock | None]:
    """The clock scopes, the headline following the script's own printed clock where one agrees,
    and what the script printed."""
    # the clocks the script printed: Keras's bar's style is the headline's scope (verbose=2 times
    # whole epochs, verbose=1 leaves each one's first step out)
    readings = (
        read_printed(record.printed, record.training, record.marks)
        if record.printed is not None
        else None
    )
    scopes = clock(
        found,
        record.marks,
        record.training,
        epochs,
        steps.step_time_ms.mean if steps else None,
        steps.step_time_ms.ci95 if steps else math.nan,
        bar_style(readings),
    )
    # the headline follows the script's own clock where one agrees (the family's guess elsewhere)
    return followed(
        scopes,
        printed_clock(
            record.printed, scopes, found, record.marks, epochs, record.training, every, readings
        ),
        found,
    )


def _periods(record: RunRecord) -> list[recorded_steps.Period]:
    return recorded_steps.periods(
        record.steps,
        record.training,
        record.marks,
        recorded_steps.device_times(record.device_steps),
    )


def _record_steps(record: RunRecord) -> StepStats | None:
    return _step_stats(_periods(record), record.training)


def _with_trace_inflation(steps: StepStats, trace: ProfileAnalysis, training: dict) -> StepStats:
    """The inflation against the traced step as the device saw it, where the trace shows the device.

    Where the host runs ahead (JAX, CUDA), a traced step's host period is the time to queue it; the
    device's busy time a step in the trace is a lower bound of what the step really took there."""
    if steps.traced_step_ms is None:
        return steps
    per_execution = int(training.get("steps_per_execution") or 1)
    device_ms = [
        u.busy_pct / 100 * u.step_time_ms.mean / per_execution
        for u in trace.units
        if u.kind == "gpu" and u.step_time_ms.mean > 0
    ]
    traced_ms = max([steps.traced_step_ms, *device_ms])
    if traced_ms == steps.traced_step_ms and steps.inflation_note is None:
        return steps
    ratio, note = _inflation(traced_ms, steps.step_time_ms.mean)
    return replace(steps, traced_step_ms=traced_ms, profiler_inflation=ratio, inflation_note=note)


def _corrected(trace: ProfileAnalysis, steps: StepStats, training: dict) -> ProfileAnalysis:
    """The trace's breakdown scaled to the untraced steady step (analyze/inflation.py)."""
    traced = [u.step_time_ms.mean for u in trace.units if u.step_time_ms.mean > 0]
    # A traced step is one call of the train function: steps_per_execution batches.
    untraced_ms = steps.step_time_ms.mean * int(training.get("steps_per_execution") or 1)
    if not traced or trace.steps_method == "none" or not untraced_ms > 0:
        return trace
    # One figure of the inflation for the run: the recorded traced / untraced step periods.
    ratio = steps.profiler_inflation
    if (
        ratio is None and steps.inflation_note is None
    ):  # no traced step recorded: the trace's own steps
        ratio, note = _inflation(float(np.mean(traced)), untraced_ms)
        if note:
            return inflation.not_measurable(trace, note)
    if ratio is None:
        return (
            inflation.not_measurable(trace, steps.inflation_note) if steps.inflation_note else trace
        )
    return inflation.correct(trace, untraced_ms, ratio)
