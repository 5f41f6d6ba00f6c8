"""Forecasts: what a fix should give, from the measured breakdown and a stated model.

A larger per-replica batch (x k) on the same device: the parts of the step
that follow the samples grow k times; the parts paid once per step stay. So

    t(k) = k P + F,   samples/s speedup = k t(1) / t(k),

with P and F the measured per-sample and per-step parts of the (corrected)
step. Which parts follow the samples is read from the evidence:

- h2d, d2h: always per sample (the bytes grow with the batch);
- compute, layout, other: per sample when the device is busy at least half
  the step (its kernels fill it); else per step (kernels too small to fill
  the device take about as long on k times the data);
- input: per sample when a step copies at least 8 MiB to the device (the cost
  follows the bytes); else per step (handing over a small batch is per-call
  work: slicing, conversion, dispatch);
- host_overhead, idle, collective: per step (dispatch, launches and Python;
  waits; the same gradients all-reduced).

Measured on an H200 (Keras on JAX, bench/results/gpu_h200/accuracy): a 12-layer
MLP at batch 16, device busy 9%, input 2 KB a step; with every part but host
overhead taken as per sample the forecast for 4x the batch was 2.03x where the
twin gave 3.8-6.5x (two runs); the per-step reading gives the 4x the samples
that the same step time carries.
"""

from __future__ import annotations

from dataclasses import dataclass

from scaldiag.analyze.profile import UnitAnalysis
from scaldiag.analyze.transfers import HEAVY_BATCH_BYTES, Handover, handover

# The device fills with work from this busy share of the step (SD106's low-utilisation bound).
FULL_DEVICE_BUSY_PCT = 50.0
# HEAVY_BATCH_BYTES (analyze/transfers.py): from this many bytes a step, input follows its bytes.
ALWAYS_PER_SAMPLE = ("h2d", "d2h")
DEVICE_WORK = ("compute", "layout", "other")


@dataclass(frozen=True)
class BatchForecast:
    factor: float
    speedup: float          # samples/s at factor x the batch over samples/s now
    per_sample_ms: float    # P
    per_step_ms: float      # F
    per_sample_parts: tuple[str, ...]


def per_sample_parts(unit: UnitAnalysis) -> tuple[str, ...]:
    parts = list(ALWAYS_PER_SAMPLE)
    if unit.kind == "host" or unit.busy_pct >= FULL_DEVICE_BUSY_PCT:
        parts += DEVICE_WORK
    if unit.h2d is not None and unit.h2d.bytes_per_step >= HEAVY_BATCH_BYTES:
        parts.append("input")
    return tuple(parts)


def larger_batch(unit: UnitAnalysis, factor: float) -> BatchForecast | None:
    scaled = per_sample_parts(unit)
    per_sample = sum(t.exclusive_ms for c, t in unit.categories.items() if c in scaled)
    per_step = sum(t.exclusive_ms for c, t in unit.categories.items() if c not in scaled)
    now = per_sample + per_step
    if now <= 0 or factor <= 0:
        return None
    return BatchForecast(factor, factor * now / (factor * per_sample + per_step), per_sample, per_step, scaled)


def unit_handover(unit: UnitAnalysis) -> Handover | None:
    """The unit's input read as the host side of a heavy host-to-device copy (analyze/transfers.py)."""
    if unit.h2d is None:
        return None
    return handover(unit.h2d.bytes_per_step, unit.categories["input"].exclusive_ms,
                    unit.categories["h2d"].exclusive_ms)


@dataclass(frozen=True)
class BytesForecast:
    factor: float        # the bytes per step divided by this
    speedup: float
    handover_ms: float   # input + copy time per step now, which follows the bytes
    step_ms: float


def fewer_bytes(unit: UnitAnalysis, factor: float) -> BytesForecast | None:
    """The step with ``factor`` x fewer bytes copied (float32 pixels sent as uint8: 4x).

    Model: the hand-over (input and copy time per step) costs what it costs per byte now
    (measured), so it shrinks ``factor`` times; the rest of the step stays.
    """
    h = unit_handover(unit)
    step = sum(t.exclusive_ms for t in unit.categories.values())
    if h is None or step <= 0 or factor <= 1:
        return None
    after = step - h.ms * (1 - 1 / factor)
    return BytesForecast(factor, step / after, h.ms, step) if after > 0 else None
