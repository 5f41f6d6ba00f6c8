"""Forecasts: what a fix should give, from the measured breakdown and a stated model.

A larger per-replica batch (x k) on the same device: the parts of the step
that follow the samples grow k times; the parts paid once per step stay. So

    t(k) = k P + F,   samples/s speedup = k t(1) / t(k),

with P and F the measured per-sample and per-step parts of the (corrected)
step. Which parts follow the samples is read from the evidence:

- h2d, d2h: always per sample (the bytes grow with the batch);
- compute, layout, other: per sample when the device is busy at least half
  the step (its kernels fill it); else per step (kernels too small to fill
  the device take about as long on k times the data). On a host unit (the
  CPU is the device): per sample unless its compute pieces (the innermost
  host events computing) average under HOST_OP_FIXED_US, where an op is mostly
  its fixed cost (dispatch, allocation, a kernel's setup);
- input: per sample when a step copies at least 8 MiB to the device (the cost
  follows the bytes); else per step (handing over a small batch is per-call
  work: slicing, conversion, dispatch);
- host_overhead, idle, collective: per step (dispatch, launches and Python;
  waits; the same gradients all-reduced).

Measured on an H200 (Keras on JAX, bench/results/gpu_h200/accuracy): a 12-layer
MLP at batch 16, device busy 9%, input 2 KB a step; with every part but host
overhead taken as per sample the forecast for 4x the batch was 2.03x where the
twin gave 3.8-6.5x (two runs); the per-step reading gives the 4x the samples
that the same step time carries; run 5 (3 rounds): 3.97x against 3.34-4.42x.

On the 2-core development CPU (TF 2.21, the zoo's host_launch: 12 Dense layers of 32 at batch 16,
2026-12-06): TF's MKL MatMul ops took 14-16 us at 16 rows and at 64, and the step's compute (811
pieces, 0.8 us each on average) grew 1.19x for 4x the batch; taking it as per sample forecast
2.26-2.44x for 4x the batch where the twin measured 4.59x and 6.97x (bench/results/accuracy).

Fewer bytes (``fewer_bytes``, SD102): the hand-over of a heavy batch costs the same per byte copied,
plus fresh pages for arrays over glibc's 32 MiB mmap ceiling, which go when the fix brings them
under it. Measured on an H200 (run 5, zoo host_to_device): taking the whole per-byte cost as
constant forecast 3.7x for uint8 where the twin gave 5.7-6.1x; the twin's slicing cost 0.12 ns/byte
at 12.6 MB a batch against 0.23 at 50.3 MB, and the same slicing on the development machine costs
0.12-0.14 ns/byte at either size once the 50 MB batch reuses memory (bench/accuracy/fresh_pages.py).
Sweeps (``kept_batch``, SD201; ``larger_batch_at``, SD203): the same readings on the measured points
of a ``profile --gpus`` sweep.
"""

from __future__ import annotations

from dataclasses import dataclass

from scaldiag.analyze.profile import UnitAnalysis
from scaldiag.analyze.transfers import (
    FRESH_PAGE_NS_PER_BYTE,
    HEAVY_BATCH_BYTES,
    MMAP_THRESHOLD_MAX_BYTES,
    Handover,
    handover,
)

# The device fills with work from this busy share of the step (SD106's low-utilisation bound).
FULL_DEVICE_BUSY_PCT = 50.0
# HEAVY_BATCH_BYTES (analyze/transfers.py): from this many bytes a step, input follows its bytes.
ALWAYS_PER_SAMPLE = ("h2d", "d2h")
DEVICE_WORK = ("compute", "layout", "other")
# A host op shorter than this on average is mostly its fixed cost: TF's MatMul on the development
# CPU took 14-16 us at 16 rows and at 64 (the module docstring).
HOST_OP_FIXED_US = 20.0


@dataclass(frozen=True)
class BatchForecast:
    factor: float
    speedup: float  # samples/s at factor x the batch over samples/s now
    per_sample_ms: float  # P
    per_step_ms: float  # F
    per_sample_parts: tuple[str, ...]


def per_sample_parts(unit: UnitAnalysis) -> tuple[str, ...]:
    parts = list(ALWAYS_PER_SAMPLE)
    if (unit.kind == "host" and not host_ops_are_fixed_cost(unit)) or (
        unit.kind != "host" and unit.busy_pct >= FULL_DEVICE_BUSY_PCT
    ):
        parts += DEVICE_WORK
    if unit.h2d is not None and unit.h2d.bytes_per_step >= HEAVY_BATCH_BYTES:
        parts.append("input")
    return tuple(parts)


def host_op_us(unit: UnitAnalysis) -> float | None:
    """A host unit's mean compute piece in microseconds (None: not counted)."""
    if unit.kind != "host" or unit.compute_pieces_per_step <= 0:
        return None
    return 1e3 * unit.categories["compute"].busy_ms / unit.compute_pieces_per_step


def host_ops_are_fixed_cost(unit: UnitAnalysis) -> bool:
    us = host_op_us(unit)
    return us is not None and us < HOST_OP_FIXED_US


def larger_batch(unit: UnitAnalysis, factor: float) -> BatchForecast | None:
    scaled = per_sample_parts(unit)
    per_sample = sum(t.exclusive_ms for c, t in unit.categories.items() if c in scaled)
    per_step = sum(t.exclusive_ms for c, t in unit.categories.items() if c not in scaled)
    now = per_sample + per_step
    if now <= 0 or factor <= 0:
        return None
    return BatchForecast(
        factor, factor * now / (factor * per_sample + per_step), per_sample, per_step, scaled
    )


def unit_handover(unit: UnitAnalysis) -> Handover | None:
    """The unit's input read as the host side of a heavy host-to-device copy
    (analyze/transfers.py)."""
    if unit.h2d is None:
        return None
    return handover(
        unit.h2d.bytes_per_step,
        unit.categories["input"].exclusive_ms,
        unit.categories["h2d"].exclusive_ms,
    )


@dataclass(frozen=True)
class BytesForecast:
    factor: float  # the bytes per step divided by this
    speedup: float
    handover_ms: float  # input + copy time per step now, which follows the bytes
    step_ms: float
    fresh_ms: float  # of handover_ms: fresh pages for arrays over glibc's mmap ceiling, now
    fresh_gone: bool  # those arrays fall to the ceiling or under with the fix: the fresh pages go
    after_ms: float  # the step after the fix


def fewer_bytes(
    unit: UnitAnalysis, factor: float, fresh_page_ns_per_byte: float = FRESH_PAGE_NS_PER_BYTE
) -> BytesForecast | None:
    """The step with ``factor`` x fewer bytes copied (float32 pixels sent as uint8: 4x).

    Model: the hand-over (input and copy time per step; analyze/transfers.py's ``handover``) is the
    host moving the batch's bytes, at a cost per byte with two parts. Copying costs the same per
    byte whatever the batch, so it shrinks ``factor`` times. Arrays of more than 32 MiB (glibc's
    mmap ceiling) are also written into fresh pages every step, ``fresh_page_ns_per_byte`` on each
    of their bytes (measured on the run's host, collect/host_costs.py; else analyze/transfers.py's
    FRESH_PAGE_NS_PER_BYTE): that part goes away when the fix brings the largest copy to the ceiling
    or under (the allocator then reuses freed memory), and shrinks ``factor`` times with the rest
    when it does not. The rest of the step stays.
    """
    h = unit_handover(unit)
    step = sum(t.exclusive_ms for t in unit.categories.values())
    if h is None or step <= 0 or factor <= 1:
        return None
    large = unit.h2d.large_bytes_per_step if unit.h2d is not None else 0.0
    fresh = min(h.input_ms, large * fresh_page_ns_per_byte / 1e6)
    gone = fresh > 0 and unit.h2d.largest_bytes / factor <= MMAP_THRESHOLD_MAX_BYTES
    after_handover = (h.ms - fresh) / factor + (0.0 if gone else fresh / factor)
    after = step - h.ms + after_handover
    if after <= 0:
        return None
    return BytesForecast(factor, step / after, h.ms, step, fresh, gone, after)


# --- batch-size fixes in a sweep ------------------------------------------------------------------
@dataclass(frozen=True)
class SweepForecast:
    """Throughput at ``gpus`` devices with another per-replica batch, from measured parts."""

    fix: str
    gpus: int
    per_replica_batch: float
    global_batch: float
    step_time_ms: float
    samples_per_s: float
    measured_samples_per_s: float  # at ``gpus`` now
    arithmetic: str

    @property
    def speedup(self) -> float:
        return self.samples_per_s / self.measured_samples_per_s


def _sum(parts: dict[str, float], names) -> float:
    return sum(parts.get(c, 0.0) for c in names)


def kept_batch(
    parts_1: dict[str, float],
    parts_n: dict[str, float],
    unit_n: UnitAnalysis,
    m: int,
    per_replica_m: float,
    n: int,
    global_n: float,
    samples_per_s_n: float,
    emulated: bool,
) -> SweepForecast | None:
    """The N-device step with the per-replica batch of the m-device run (global = per-replica x N).

    Device work per replica is the m-device run's, measured at that very per-replica batch; on
    emulated devices the replicas share the cores, so it is the N-device run's device work times the
    growth of the global batch (what N replicas on those cores cost is measured at N: 1.4x one
    replica's per sample, on the development machine). The all-reduce is the N-device run's (the
    same gradients whatever the batch); host overhead and idle are the N-device run's, paid once per
    step; input too, times the growth of the global batch when it follows its bytes
    (per_sample_parts). ``parts_*``: each category's ms of the steady step.
    """
    global_kept = per_replica_m * n
    growth = global_kept / global_n
    device_parts = ALWAYS_PER_SAMPLE + DEVICE_WORK
    device = _sum(parts_n, device_parts) * growth if emulated else _sum(parts_1, device_parts)
    follows = "input" in per_sample_parts(unit_n)
    input_ms = parts_n.get("input", 0.0) * (growth if follows else 1.0)
    rest = _sum(parts_n, ("collective", "host_overhead", "idle"))
    step = device + input_ms + rest
    if step <= 0 or samples_per_s_n <= 0:
        return None
    rate = global_kept / (step / 1e3)
    source = (
        f"of the {n}-device run x {growth:g} (emulated: the replicas share the cores)"
        if emulated
        else f"of the {m}-device run"
    )
    return SweepForecast(
        f"per-replica batch kept at {per_replica_m:g}",
        n,
        per_replica_m,
        global_kept,
        step,
        rate,
        samples_per_s_n,
        f"per-replica batch {per_replica_m:g} at {n} devices (global {global_kept:g}): device work"
        f" {source} {device:.3f} ms + input {input_ms:.3f}"
        f" ms{' (x the global batch)' if follows else ''} + all-reduce, host and idle of the"
        f" {n}-device run {rest:.3f} ms = {step:.3f} ms a step -> {rate:,.0f} samples/s,"
        f" {rate / samples_per_s_n:.2f}x the {samples_per_s_n:,.0f} measured",
    )


def larger_batch_at(
    parts: dict[str, float],
    unit: UnitAnalysis,
    n: int,
    per_replica: float,
    samples_per_s: float,
    factor: float,
) -> SweepForecast | None:
    """The N-device step with ``factor`` x the per-replica batch: per-sample parts grow, per-step
    ones (the all-reduce of the same gradients, host overhead, idle) stay; as larger_batch."""
    scaled = per_sample_parts(unit)
    per_sample = _sum(parts, scaled)
    per_step = sum(v for c, v in parts.items() if c not in scaled)
    now = per_sample + per_step
    if now <= 0 or samples_per_s <= 0:
        return None
    step = factor * per_sample + per_step
    speedup = factor * now / step
    return SweepForecast(
        f"per-replica batch x{factor:g}",
        n,
        per_replica * factor,
        per_replica * factor * n,
        step,
        samples_per_s * speedup,
        samples_per_s,
        f"per-replica batch x{factor:g} ({per_replica:g} -> {per_replica * factor:g}) at {n}"
        f" devices: per-sample parts ({', '.join(scaled)}) {per_sample:.3f} ms grow x{factor:g},"
        f" per-step parts (all-reduce, host) {per_step:.3f} ms stay: {factor:g} x {now:.3f} /"
        f" ({factor:g} x {per_sample:.3f} + {per_step:.3f}) = {speedup:.2f}x samples/s",
    )
