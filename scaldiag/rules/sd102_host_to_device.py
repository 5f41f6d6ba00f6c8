"""SD102 host-to-device-bound: copies of input into GPU memory are on the critical path.

``MemcpyH2D`` time that no computation hides. Copies from pageable host
memory are staged and synchronous; from pinned memory they can overlap
compute. Evidence: exclusive H2D share, bytes per step, pageable bytes.
"""

from __future__ import annotations

from dataclasses import replace

from scaldiag.analyze.profile import ProfileAnalysis
from scaldiag.rules.base import Evidence, Finding
from scaldiag.rules.share_rule import ShareRule

# Same scale as input-bound (xprof counts host-to-device time as input time:
# input_ms = host_wait_input_ms + host_to_device_ms, thresholds 5% / 20%).
MODERATE_PCT = 5.0
HIGH_PCT = 20.0
# Pageable copies are named when they carry at least this share of H2D bytes.
PAGEABLE_BYTES_PCT = 10.0

FIX = {
    "tensorflow": (
        "Send less, and let it overlap:\n"
        "  ds = strategy.experimental_distribute_dataset(ds)   # each GPU gets only its shard\n"
        "  ds = ds.prefetch(tf.data.AUTOTUNE)   # or tf.data.experimental.prefetch_to_device('/gpu:0')\n"
        "Send images as uint8 and cast/normalise on the GPU (first layer: keras.layers.Rescaling(1/255))."),
    "jax": (
        "Shard the batch instead of copying it whole (jax.device_put(batch, NamedSharding(mesh, P('batch'))) "
        "or keras.distribution.DataParallel), prefetch the next batch to the devices while the step runs, "
        "and send uint8 pixels, casting on the device. Keep host arrays in pinned memory where the "
        "loader allows it (JAX copies from its own pinned staging buffers)."),
    "pytorch": (
        "Copy from pinned memory without blocking, and copy less:\n"
        "  loader = DataLoader(ds, ..., pin_memory=True)\n"
        "  x = x.to(device, non_blocking=True)   # overlaps the copy with compute\n"
        "Give each rank only its shard (DistributedSampler(ds)), send images as uint8 and convert on the "
        "GPU (x.to(device, non_blocking=True).float().div_(255))."),
}

_SHARE = ShareRule(id="SD102", title="Host-to-device copies on the critical path", category="h2d",
                   what="host-to-device copies not hidden by compute take", moderate_pct=MODERATE_PCT,
                   high_pct=HIGH_PCT, fix=FIX)


class _HostToDevice:
    id = _SHARE.id

    def check(self, analysis: ProfileAnalysis) -> Finding | None:
        finding = _SHARE.check(analysis)
        if finding is None:
            return None
        unit = next(u for u in analysis.units if u.name == finding.evidence[0].device)
        evidence = list(finding.evidence)
        notes = list(finding.notes)
        if unit.h2d is not None:
            evidence.append(Evidence("H2D bytes per step", round(unit.h2d.bytes_per_step), "bytes", device=unit.name))
            pageable = unit.h2d.bytes_by_host_kind.get("pageable", 0.0)
            if unit.h2d.bytes_per_step and 100 * pageable / unit.h2d.bytes_per_step >= PAGEABLE_BYTES_PCT:
                evidence.append(Evidence("pageable share of H2D bytes", round(100 * pageable / unit.h2d.bytes_per_step, 1),
                                         "%", threshold=PAGEABLE_BYTES_PCT, device=unit.name))
                notes.append("copies come from pageable host memory: pinned memory lets them overlap compute")
        return replace(finding, evidence=evidence, notes=notes)


RULE = _HostToDevice()
