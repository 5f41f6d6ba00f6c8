"""SD102 host-to-device-bound: copies of input into GPU memory are on the critical path.

``MemcpyH2D`` time that no computation hides, and, for a heavy batch (8 MiB or
more a step), the host's hand-over of it: when the step's input time costs at
most 2 ns per byte copied, the host is moving the bytes (slicing, converting,
staging them for the copy), not computing them, and that time is the copy's
too. Copies from pageable host memory are staged and synchronous; from pinned
memory they can overlap compute. Evidence: the share, the input's cost per
byte, bytes per step, pageable bytes. Forecast: the same step with a quarter
of the bytes (float32 pixels sent as uint8): copying shrinks 4x, and arrays
over glibc's 32 MiB mmap ceiling, written into fresh pages every step, lose
that cost when a quarter of them fits under it (analyze/forecast.py).
"""

from __future__ import annotations

import math

from scaldiag.analyze.forecast import fewer_bytes, unit_handover
from scaldiag.analyze.profile import ProfileAnalysis, UnitAnalysis
from scaldiag.analyze.transfers import (
    FRESH_PAGE_NS_PER_BYTE,
    HANDOVER_MAX_NS_PER_BYTE,
    HEAVY_BATCH_BYTES,
    Handover,
)
from scaldiag.rules.base import (
    Evidence,
    Finding,
    RuleFacts,
    Speedup,
    removal_speedup,
    seen_speedup,
    share_evidence,
    share_severity,
    spread_note,
    with_forecast_error,
)

# Same scale as input-bound (xprof counts host-to-device time as input time:
# input_ms = host_wait_input_ms + host_to_device_ms, thresholds 5% / 20%).
MODERATE_PCT = 5.0
HIGH_PCT = 20.0
# Pageable copies are named when they carry at least this share of H2D bytes.
PAGEABLE_BYTES_PCT = 10.0

FIX = {
    "tensorflow": (
        "Send less, and let it overlap:\n  ds = strategy.experimental_distribute_dataset(ds)   #"
        " each GPU gets only its shard\n  ds = ds.prefetch(tf.data.AUTOTUNE)   # or"
        " tf.data.experimental.prefetch_to_device('/gpu:0')\nSend images as uint8 and"
        " cast/normalise on the GPU (first layer: keras.layers.Rescaling(1/255))."
    ),
    "jax": (
        "Shard the batch instead of copying it whole (jax.device_put(batch, NamedSharding(mesh,"
        " P('batch'))) or keras.distribution.DataParallel), prefetch the next batch to the devices"
        " while the step runs, and send uint8 pixels, casting on the device. Keep host arrays in"
        " pinned memory where the loader allows it (JAX copies from its own pinned staging"
        " buffers)."
    ),
    "pytorch": (
        "Copy from pinned memory without blocking, and copy less:\n  loader = DataLoader(ds, ...,"
        " pin_memory=True)\n  x = x.to(device, non_blocking=True)   # overlaps the copy with"
        " compute\nGive each rank only its shard (DistributedSampler(ds)), send images as uint8 and"
        " convert on the GPU (x.to(device, non_blocking=True).float().div_(255))."
    ),
}

# The fix the forecast is for: float32 pixels sent as uint8 carry a quarter of the bytes.
BYTES_FACTOR = 4

# In every framework's words: the framework's own line for casting on the device follows it (FIX).
_FEWER_BYTES = (
    "Each step moves {mb:.0f} MB to the device and the host spends {ns:.2f} ns per byte preparing "
    "them: send fewer bytes. Images as uint8 (a quarter of float32), cast and scaled on the device "
    "after the copy (as below); or a smaller dtype (bfloat16) for other features.\n"
)


class _HostToDevice(RuleFacts):
    """The copies' exclusive share, plus the host's hand-over of a heavy batch when its input time
    is what moving the bytes costs (analyze/transfers.py): that input is the host side of the
    copy."""

    id = "SD102"
    title = "Host-to-device copies on the critical path"
    category = "h2d"

    def check(self, analysis: ProfileAnalysis) -> Finding | None:
        scored = [(u, *_share(u)) for u in analysis.units]
        if not scored:
            return None
        unit, pct, spread, h = max(scored, key=lambda s: s[1])
        graded = share_severity(pct, spread, MODERATE_PCT, HIGH_PCT)
        if graded is None:
            return None
        grade, tail = graded
        what = (
            "host-to-device copies and the host's hand-over of the batch"
            if h
            else "host-to-device copies"
        )
        copy = unit.categories["h2d"]
        summary = (
            f"{unit.name}: {what} take {pct:.1f}% of step time ({copy.exclusive_ms:.2f} ms of"
            " copies"
        )
        summary += (
            f", {h.input_ms:.2f} ms preparing {h.bytes_per_step / 1e6:.1f} MB at"
            f" {h.ns_per_byte:.2f} ns/byte"
            if h
            else ""
        ) + f" in {unit.step_time_ms.mean:.2f} ms per step){tail}"
        return self.finding(
            severity=grade,
            summary=summary,
            evidence=_evidence(unit, h, pct, spread),
            fix=_fix(h),
            predicted_speedup=removal_speedup(
                pct, spread, "host-to-device (copies and hand-over)" if h else "h2d"
            ),
            notes=spread_note(spread) + _notes(unit, h),
            forecast=_forecast(unit, analysis.fresh_page_ns_per_byte),
            seen_speedup=seen_speedup(pct, unit.categories["input"].beyond_trace_pct if h else 0.0),
        )


def _share(unit: UnitAnalysis) -> tuple[float, float, Handover | None]:
    """Exclusive share (%) and its spread: the copies, plus the input when it is their hand-over."""
    h = unit_handover(unit)
    parts = [unit.categories["h2d"]] + ([unit.categories["input"]] if h else [])
    # The parts' per-step spreads are not independent (one batch): add them, the wider bound.
    return sum(p.exclusive_pct for p in parts), sum(p.exclusive_pct_ci95 for p in parts), h


def _evidence(unit: UnitAnalysis, h: Handover | None, pct: float, spread: float) -> list[Evidence]:
    evidence = [share_evidence(unit, "h2d", MODERATE_PCT)]
    if h:
        evidence = [
            Evidence(
                "exclusive h2d + hand-over (input) share of step time",
                round(pct, 2),
                "%",
                threshold=MODERATE_PCT,
                spread=None if math.isinf(spread) else round(spread, 2),
                device=unit.name,
            ),
            Evidence(
                "input time per byte copied",
                round(h.ns_per_byte, 3),
                "ns/byte",
                threshold=HANDOVER_MAX_NS_PER_BYTE,
                device=unit.name,
            ),
        ] + evidence
    if unit.h2d is not None:
        evidence.append(
            Evidence(
                "H2D bytes per step",
                round(unit.h2d.bytes_per_step),
                "bytes",
                threshold=HEAVY_BATCH_BYTES if h else None,
                device=unit.name,
            )
        )
        pageable = unit.h2d.bytes_by_host_kind.get("pageable", 0.0)
        if (
            unit.h2d.bytes_per_step
            and 100 * pageable / unit.h2d.bytes_per_step >= PAGEABLE_BYTES_PCT
        ):
            evidence.append(
                Evidence(
                    "pageable share of H2D bytes",
                    round(100 * pageable / unit.h2d.bytes_per_step, 1),
                    "%",
                    threshold=PAGEABLE_BYTES_PCT,
                    device=unit.name,
                )
            )
    return evidence


def _notes(unit: UnitAnalysis, h: Handover | None) -> list[str]:
    notes = []
    if h:
        notes.append(
            f"the step's input ({h.input_ms:.2f} ms) costs {h.ns_per_byte:.2f} ns per byte copied,"
            f" at most {HANDOVER_MAX_NS_PER_BYTE:g}: the host moving the batch (slicing,"
            " converting, staging), not computing it, so it is counted with the copy"
        )
    pageable = unit.h2d.bytes_by_host_kind.get("pageable", 0.0) if unit.h2d else 0.0
    if (
        unit.h2d
        and unit.h2d.bytes_per_step
        and 100 * pageable / unit.h2d.bytes_per_step >= PAGEABLE_BYTES_PCT
    ):
        notes.append(
            "copies come from pageable host memory: pinned memory lets them overlap compute"
        )
    return notes


def _fix(h: Handover | None) -> dict[str, str]:
    if h is None:
        return FIX
    first = _FEWER_BYTES.format(mb=h.bytes_per_step / 1e6, ns=h.ns_per_byte)
    return {fw: first + text for fw, text in FIX.items()}


def _forecast(unit: UnitAnalysis, measured_ns_per_byte: float | None) -> Speedup | None:
    """``measured_ns_per_byte``: the fresh-page cost measured on the run's host (None: a trace
    alone)."""
    per_byte = FRESH_PAGE_NS_PER_BYTE if measured_ns_per_byte is None else measured_ns_per_byte
    f = fewer_bytes(unit, BYTES_FACTOR, per_byte)
    if f is None:
        return None
    copying = f.handover_ms - f.fresh_ms
    if f.fresh_ms > 0 and f.fresh_gone:
        source = (
            "measured on this run's host"
            if measured_ns_per_byte is not None
            else "a development machine's: a machine property; a profiled run measures its host's"
        )
        pages = (
            f"; of it {f.fresh_ms:.3f} ms is fresh pages for arrays over glibc's 32 MiB mmap"
            f" ceiling ({per_byte:g} ns/byte, {source}), gone once the largest copy"
            f" ({unit.h2d.largest_bytes / 2**20:.0f} MiB) is a quarter"
        )
        shrunk = f"{copying:.3f} / {BYTES_FACTOR}"
    else:
        pages = ""
        shrunk = f"{f.handover_ms:.3f} / {BYTES_FACTOR}"
    return with_forecast_error(
        Speedup(
            f.speedup,
            f.speedup,
            f.speedup,
            f"uint8 instead of float32 ({BYTES_FACTOR}x fewer bytes): the hand-over and copies take"
            f" {f.handover_ms:.3f} ms{pages}; copying shrinks {BYTES_FACTOR}x, the rest of the step"
            f" stays: {f.step_ms:.3f} / ({f.step_ms:.3f} - {f.handover_ms:.3f} + {shrunk}) ="
            f" {f.speedup:.2f}x samples/s",
            kind="forecast",
        )
    )


RULE = _HostToDevice()
