"""Scaling across GPU counts: speedup, efficiency, and where the lost speedup went.

Pure functions over analysed runs. Definitions (DESIGN.md vocabulary):
S(N) = throughput(N) / throughput(1); E(N) = S(N) / N. *Weak* scaling keeps
the per-replica batch, *strong* keeps the global batch.

Ideal: N times the throughput of 1 device (``ideal = N``); emulated devices
share the same cores, so there the ideal is the same throughput (``ideal = 1``)
and what is lost is what distribution itself costs.

Attribution. With t1, tN the steady step times and B1, BN the global
batches, the ideal step time at N is t* = t1 (BN / B1) / ideal, and
ideal - S = ideal (tN - t*) / tN exactly. Splitting step time by category
with each run's exclusive shares f_c (from its trace window) gives
tN - t* = sum_c (f_c(N) tN - f_c(1) t*), so

    lost_c = ideal (f_c(N) tN - f_c(1) t*) / tN,     sum_c lost_c = ideal - S.

The parts add up to the gap by construction; ``idle`` (time no event covers)
is the unexplained part, shown as such. A part smaller than its spread is
marked as within the noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from scaldiag.analyze.batch_memory import DeviceMemory
from scaldiag.analyze.categories import CATEGORIES
from scaldiag.analyze.epochs import FIRST_EPOCH_COMPARED
from scaldiag.analyze.forecast import SweepForecast, kept_batch, larger_batch_at
from scaldiag.analyze.interconnect import Interconnect
from scaldiag.analyze.predict import (
    PER_STEP,
    Basis,
    Prediction,
    basis_extras,
    link_bytes_per_s,
    predict,
)
from scaldiag.analyze.run import RunAnalysis
from scaldiag.analyze.stats import ci95_half_width

UNEXPLAINED = "idle"  # the category of time that no trace event covers


@dataclass(frozen=True)
class ScalingPoint:
    gpus: int
    runs: int
    global_batch: int | None
    per_replica_batch: float | None
    step_time_ms: float
    step_time_ci95_ms: float
    samples_per_s: float | None
    speedup: float | None
    speedup_ci95: float | None
    efficiency: float | None  # speedup / ideal_speedup
    ideal_speedup: float = 1.0  # N / base devices, or 1 for emulated devices (shared cores)
    collective_ms: float | None = None  # per step, mean over the trace's devices
    parameter_bytes: int | None = None
    link_bytes_per_s: float | None = None
    replicas: int | None = None  # what the framework saw (the fewest over repeats)
    unused_devices: str | None = (
        None  # why the point is left out of speedup and efficiency, if it is
    )
    device_memory: DeviceMemory | None = None  # its first run's fullest device (batch_memory.py)

    @property
    def compared(self) -> bool:
        """In the speedups: the framework used the devices the point was given (or said nothing)."""
        return self.unused_devices is None

    @property
    def allreduce_bus_bytes_per_s(self) -> float | None:
        """NCCL's bus bandwidth of the step's all-reduce: 2(N-1)/N x bytes / time."""
        if not self.collective_ms or not self.parameter_bytes or self.gpus < 2:
            return None
        return 2 * (self.gpus - 1) / self.gpus * self.parameter_bytes / (self.collective_ms / 1e3)


@dataclass(frozen=True)
class Cause:
    category: str
    lost_speedup: float
    spread: float
    within_noise: bool


@dataclass(frozen=True)
class Attribution:
    gpus: int
    ideal: float
    measured: float
    causes: list[Cause]  # sum of lost_speedup == ideal - measured


@dataclass(frozen=True)
class ScalingAnalysis:
    mode: str  # "weak", "strong" or "mixed"
    emulated: bool
    points: list[ScalingPoint]
    attribution: list[Attribution]
    notes: list[str] = field(default_factory=list)
    # Each measured count predicted from the smallest run alone, next to what was measured.
    validation: list[Prediction] = field(default_factory=list)
    # The curve up to PREDICT_UP_TO devices, from the largest measured run.
    predictions: list[Prediction] = field(default_factory=list)
    # Batch-size fixes forecast from the measured points (analyze/forecast.py): the per-replica
    # batch of the smallest run kept at the largest count (SD201), a larger one at each count
    # (SD203).
    kept_batch: SweepForecast | None = None
    larger_batch: list[SweepForecast] = field(default_factory=list)
    # Points whose framework used fewer devices than given: named, and in no speedup
    # (unused_devices).
    left_out: list[ScalingPoint] = field(default_factory=list)


PREDICT_UP_TO = 8


def combine_repeats(runs: list[RunAnalysis]) -> tuple[float, float]:
    """Mean steady step time (ms) over repeats and its 95% half-width.

    The wider of the runs' own step-to-step interval and, with repeats, the
    run-to-run interval: the same 2-GPU run has measured 1.63x and 1.96x on
    two runs on one machine, so run-to-run noise must show.
    """
    means = np.array([r.steps.step_time_ms.mean for r in runs])
    within = max(r.steps.step_time_ms.ci95 for r in runs)
    between = ci95_half_width(means) if len(means) > 1 else 0.0
    return float(means.mean()), float(max(within, between))


def user_clock(runs: list[RunAnalysis]) -> tuple[float, float, str]:
    """The step time (ms) predictions start from and are checked against, its 95% half-width, and
    its name.

    Where every run has whole epochs from the third on (analyze/epochs.py), their ms per step: the
    clock a Keras user reads and a script's own per-epoch stopwatch counts, chosen by the epochs'
    position, as the warm-up is. A step that took 0.6-0.9 s at the start of the second epoch in both
    Keras/JAX runs of the development set, with no framework evidence of what it was (older records
    lack compile marks), weighs on the steady mean (2.7 ms against 1.1 ms a step) and on no epoch
    compared. Elsewhere the steady step.
    """
    stats = [r.epochs for r in runs]
    if stats and all(e is not None and min(e.compared) >= FIRST_EPOCH_COMPARED for e in stats):
        means = np.array([e.ms_per_step for e in stats])
        within = max(
            (e.ms_per_step_ci95 for e in stats if not math.isnan(e.ms_per_step_ci95)), default=0.0
        )
        between = ci95_half_width(means) if len(means) > 1 else 0.0
        epochs = sorted({i + 1 for e in stats for i in e.compared})
        which = f"epoch {epochs[0]}" if len(epochs) == 1 else f"epochs {epochs[0]}-{epochs[-1]}"
        return (
            float(means.mean()),
            float(max(within, between)),
            f"whole epochs' ms/step ({which}, as Keras's progress bar counts)",
        )
    t, ci = combine_repeats(runs)
    return t, ci, "the steady step"


def analyze_scaling(
    runs_by_gpus: dict[int, list[RunAnalysis]],
    emulated: bool,
    interconnect: Interconnect | None = None,
) -> ScalingAnalysis:
    """``interconnect``: the machine the predictions are for (``--interconnect``), when not the
    measured one."""
    counts = sorted(n for n, runs in runs_by_gpus.items() if runs and all(r.steps for r in runs))
    notes = []
    if not counts:
        return ScalingAnalysis("mixed", emulated, [], [], ["no run recorded steady-state steps"])
    base = counts[0]
    if base != 1:
        notes.append(f"no 1-device run: speedups are relative to {base} devices")
    every = [
        _point(n, runs_by_gpus[n], runs_by_gpus[base], 1.0 if emulated else n / base)
        for n in counts
    ]
    notes += [p.unused_devices for p in every if not p.compared]
    points = [p for p in every if p.compared or p.gpus == base]
    counts = [p.gpus for p in points]
    mode = _mode(points)
    if emulated:
        notes.append(
            "emulated devices share the same CPU cores: ideal is the same throughput as 1 device "
            "(speedup 1.0), and the lost speedup is what distribution itself costs"
        )
    attribution = [
        a
        for point in points[1:]
        if (a := _attribute(point, points[0], runs_by_gpus[point.gpus], runs_by_gpus[base], notes))
        is not None
    ]
    validation, predictions = _predictions(
        runs_by_gpus, counts, points, mode, emulated, notes, interconnect
    )
    kept, larger = _batch_forecasts(runs_by_gpus, points, emulated)
    return ScalingAnalysis(
        mode,
        emulated,
        points,
        attribution,
        notes,
        validation,
        predictions,
        kept,
        larger,
        left_out=[p for p in every if p not in points],
    )


# A larger per-replica batch is forecast for this factor (SD105's: 4x, a step users take).
LARGER_BATCH_FACTOR = 4


def _parts_ms(runs: list[RunAnalysis]) -> dict[str, float] | None:
    """Each category's part of the steady step (ms): the trace's exclusive shares of the measured
    step."""
    shares = _shares(runs)
    if shares is None:
        return None
    t, _ = combine_repeats(runs)
    return {c: f * t for c, f in shares[0].items()}


def _batch_forecasts(runs_by_gpus, points: list[ScalingPoint], emulated: bool):
    measured = [p for p in points if p.per_replica_batch and p.samples_per_s]
    larger = []
    for p in measured:
        units = [u for r in runs_by_gpus[p.gpus] if r.trace for u in r.trace.units]
        parts = _parts_ms(runs_by_gpus[p.gpus])
        if p.gpus > 1 and units and parts:
            larger.append(
                larger_batch_at(
                    parts,
                    units[0],
                    p.gpus,
                    p.per_replica_batch,
                    p.samples_per_s,
                    LARGER_BATCH_FACTOR,
                )
            )
    kept = None
    if len(measured) > 1 and measured[-1].per_replica_batch < measured[0].per_replica_batch:
        first, last = measured[0], measured[-1]
        units = [u for r in runs_by_gpus[last.gpus] if r.trace for u in r.trace.units]
        parts_1, parts_n = _parts_ms(runs_by_gpus[first.gpus]), _parts_ms(runs_by_gpus[last.gpus])
        if units and parts_1 and parts_n:
            kept = kept_batch(
                parts_1,
                parts_n,
                units[0],
                first.gpus,
                first.per_replica_batch,
                last.gpus,
                last.global_batch,
                last.samples_per_s,
                emulated,
            )
    return kept, [f for f in larger if f is not None]


def _basis(n: int, runs: list[RunAnalysis]) -> Basis | None:
    shares = _shares(runs)
    batch, _ = _batch(runs)
    if shares is None or not batch:
        return None
    t, ci, clock = user_clock(runs)
    # the global batch's bytes a step: every device's copies, one run's (the mean over repeats)
    copies = [
        sum(u.h2d.bytes_per_step for u in r.trace.units if u.h2d is not None)
        for r in runs
        if r.trace
    ]
    costs = [r.input_cost for r in runs]
    paces = None if any(c is None for c in costs) else any(c.significant for c in costs)
    # the interconnect, the framework (predict.py)
    return Basis(
        gpus=n,
        step_time_ms=t,
        step_time_ci95_ms=ci,
        clock=clock,
        input_paces=paces,
        input_bytes_per_step=float(np.mean(copies)) if copies else None,
        global_batch=batch,
        shares=shares[0],
        parameter_bytes=runs[0].training.get("parameter_bytes"),
        link_bytes_per_s=link_bytes_per_s(runs[0].inventory),
        **basis_extras(runs[0].training, runs[0].inventory),
    )


def _predictions(runs_by_gpus, counts, points, mode, emulated, notes, interconnect=None):
    # each count measured on the clock its prediction starts from (user_clock)
    measured = {
        p.gpus: (
            p.global_batch / (user_clock(runs_by_gpus[p.gpus])[0] / 1e3) if p.global_batch else None
        )
        for p in points
    }
    first, last = (
        _basis(counts[0], runs_by_gpus[counts[0]]),
        _basis(counts[-1], runs_by_gpus[counts[-1]]),
    )
    if first is None or last is None:
        notes.append("no predictions: they need the runs' traces and global batches")
        return [], []
    validation = []
    for n in counts[1:]:
        p = predict(first, n, mode, emulated)
        error = 100 * (p.samples_per_s - measured[n]) / measured[n] if measured[n] else None
        validation.append(
            Prediction(**{**p.__dict__, "measured_samples_per_s": measured[n], "error_pct": error})
        )
    targets = sorted(set(counts) | {k for k in (1, 2, 4, 8) if k <= max(PREDICT_UP_TO, counts[-1])})
    if (
        last.global_batch != first.global_batch
    ):  # two points: how host time grows with the global batch
        host = [sum(b.shares.get(c, 0.0) for c in PER_STEP) * b.step_time_ms for b in (first, last)]
        slope = max(0.0, (host[1] - host[0]) / (last.global_batch - first.global_batch))
        last = replace(last, host_ms_per_sample=slope or None)
    # validation: the measured machine; the curve: the machine named, if one is
    return validation, [predict(last, n, mode, emulated, interconnect) for n in targets]


def _batch(runs: list[RunAnalysis]) -> tuple[int | None, float | None]:
    training = runs[0].training
    return training.get("global_batch"), training.get("per_replica_batch")


def _point(
    n: int, runs: list[RunAnalysis], base_runs: list[RunAnalysis], ideal: float
) -> ScalingPoint:
    """``ideal``: the speedup perfect scaling would give (N, or 1 for emulated devices)."""
    t, ci = combine_repeats(runs)
    t1, ci1 = combine_repeats(base_runs)
    batch, per_replica = _batch(runs)
    batch1, _ = _batch(base_runs)
    rate = batch / (t / 1e3) if batch else None
    speedup = speedup_ci = efficiency = None
    if batch and batch1:
        speedup = (batch / t) / (batch1 / t1)
        speedup_ci = speedup * math.hypot(ci / t, ci1 / t1)  # relative errors add in quadrature
        efficiency = speedup / ideal
    units = [u for r in runs if r.trace for u in r.trace.units if u.kind == "gpu"]
    collective = (
        float(np.mean([u.categories["collective"].busy_ms for u in units])) if units else None
    )
    replicas = _replicas(runs)
    unused = None
    if replicas is not None and replicas < n:
        unused = (
            f"{n} devices: the framework used {replicas} replica(s) of the {n} devices given"
            " (training.json 'replicas'), so this point measures no scaling: left out of speedups"
            " and efficiency. The script must spread its work over the devices (a distribution"
            " strategy, keras.distribution, DDP)"
        )
        speedup = speedup_ci = efficiency = None
    return ScalingPoint(
        n,
        len(runs),
        batch,
        per_replica,
        t,
        ci,
        rate,
        speedup,
        speedup_ci,
        efficiency,
        ideal_speedup=ideal,
        collective_ms=collective,
        parameter_bytes=runs[0].training.get("parameter_bytes"),
        link_bytes_per_s=link_bytes_per_s(runs[0].inventory),
        replicas=replicas,
        unused_devices=unused,
        device_memory=runs[0].device_memory,
    )


def _replicas(runs: list[RunAnalysis]) -> int | None:
    """The fewest replicas the framework reported over the repeats (None where none said)."""
    seen = [r.training.get("replicas") for r in runs]
    seen = [int(x) for x in seen if isinstance(x, int) and not isinstance(x, bool) and x > 0]
    return min(seen) if seen else None


def _mode(points: list[ScalingPoint]) -> str:
    batches = {p.global_batch for p in points}
    per_replica = {p.per_replica_batch for p in points}
    if len(points) > 1 and len(batches) == 1 and None not in batches:
        return "strong"
    if len(points) > 1 and len(per_replica) == 1 and None not in per_replica:
        return "weak"
    return "mixed"


def _shares(runs: list[RunAnalysis]) -> tuple[dict[str, float], dict[str, float]] | None:
    """Mean exclusive share (fraction) and its spread per category, over runs and their devices."""
    units = [u for r in runs if r.trace for u in r.trace.units]
    if not units:
        return None
    share = {
        c: float(np.mean([u.categories[c].exclusive_pct for u in units])) / 100 for c in CATEGORIES
    }
    spread = {
        c: float(np.mean([_finite(u.categories[c].exclusive_pct_ci95) for u in units])) / 100
        for c in CATEGORIES
    }
    return share, spread


def _attribute(
    point: ScalingPoint, base: ScalingPoint, runs, base_runs, notes
) -> Attribution | None:
    """Split ``point``'s lost speedup by category, against the ``base`` point (module docstring)."""
    shares_n, shares_1 = _shares(runs), _shares(base_runs)
    if shares_n is None or shares_1 is None or point.speedup is None:
        notes.append(
            f"no attribution at {point.gpus} devices: it needs both runs' traces and global batches"
        )
        return None
    ideal = point.ideal_speedup
    t = point.step_time_ms
    t_ideal = base.step_time_ms * (point.global_batch / base.global_batch) / ideal
    causes = []
    for c in CATEGORIES:
        lost = ideal * (shares_n[0][c] * t - shares_1[0][c] * t_ideal) / t
        spread = ideal * (shares_n[1][c] * t + shares_1[1][c] * t_ideal) / t
        causes.append(Cause(c, lost, spread, abs(lost) <= spread))
    causes.sort(key=lambda cause: -cause.lost_speedup)
    return Attribution(point.gpus, ideal, point.speedup, causes)


def _finite(x: float) -> float:
    return 0.0 if math.isinf(x) or math.isnan(x) else x
