"""Forecasts: what a fix should give, from the measured breakdown and a stated model.

A larger per-replica batch (x k) on the same device: the parts of the step
that follow the samples (device compute, layout, copies, input preparation)
grow k times; the parts paid once per step (host overhead: dispatch, launches,
Python; idle; the all-reduce of the same gradients) stay. So

    t(k) = k P + F,   samples/s speedup = k t(1) / t(k),

with P and F the measured per-sample and per-step parts of the (corrected)
step. Kernels that are too small to fill the device grow less than k times,
so where the device is mostly idle this forecast is low rather than high.
"""

from __future__ import annotations

from dataclasses import dataclass

from scaldiag.analyze.profile import UnitAnalysis

PER_SAMPLE = ("compute", "layout", "h2d", "d2h", "input", "other")
PER_STEP = ("host_overhead", "idle", "collective")


@dataclass(frozen=True)
class BatchForecast:
    factor: float
    speedup: float          # samples/s at factor x the batch over samples/s now
    per_sample_ms: float    # P
    per_step_ms: float      # F


def larger_batch(unit: UnitAnalysis, factor: float) -> BatchForecast | None:
    per_sample = sum(unit.categories[c].exclusive_ms for c in PER_SAMPLE if c in unit.categories)
    per_step = sum(unit.categories[c].exclusive_ms for c in PER_STEP if c in unit.categories)
    now = per_sample + per_step
    if now <= 0 or factor <= 0:
        return None
    return BatchForecast(factor, factor * now / (factor * per_sample + per_step), per_sample, per_step)
