"""Predicted throughput at other GPU counts, from measured points and a stated model.

The model splits a measured point's steady step time t by its trace's
exclusive shares and scales each part to N devices:

| part | scales with | why |
|---|---|---|
| compute, layout, h2d, d2h, other | per-replica batch b(N) | each device works on its own shard |
| collective | ring all-reduce volume 2(N-1)/N | NCCL ring: each GPU sends and receives 2(N-1)/N of the gradient bytes |
| input | global batch B(N) | one host feeds every replica |
| host_overhead, idle | constant per step, or linear in the global batch | dispatch and Python run once per step; |
|  | when two measured points give the slope | slicing and converting the batch grows with it |

Weak scaling keeps b (B = N b); strong keeps B (b = B / N). From a
single-device point the collective has no measurement to scale, so it is
estimated as 2(N-1)/N x parameter bytes / link bandwidth (nominal, per
direction: 25 GB/s per active NVLink, or the PCIe link's rate), and every
prediction says which assumptions it used. Emulated devices share the same
cores, so there the device parts scale with the global batch instead (all
replicas' work runs on the same cores).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scaldiag.analyze.categories import CATEGORIES

NVLINK_BYTES_PER_S_PER_LINK = 25e9  # NVLink 2-4: 25 GB/s per link and direction
PCIE_BYTES_PER_S_PER_LANE = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
PER_REPLICA = ("compute", "layout", "h2d", "d2h", "other")
PER_GLOBAL = ("input",)
PER_STEP = ("host_overhead", "idle")


@dataclass(frozen=True)
class Basis:
    """A measured point to predict from."""

    gpus: int
    step_time_ms: float
    global_batch: int
    shares: dict[str, float]  # exclusive fraction of step time per category
    parameter_bytes: int | None = None
    link_bytes_per_s: float | None = None
    host_ms_per_sample: float | None = None  # slope of per-step host time in the global batch


@dataclass(frozen=True)
class Prediction:
    gpus: int
    from_gpus: int
    step_time_ms: float
    samples_per_s: float
    assumptions: list[str] = field(default_factory=list)
    measured_samples_per_s: float | None = None
    error_pct: float | None = None  # (predicted - measured) / measured


def link_bytes_per_s(inventory: dict) -> float | None:
    """Nominal per-direction bandwidth between GPUs, from the NVML inventory."""
    gpus = inventory.get("gpus") or []
    if not gpus:
        return None
    links = min(g.get("nvlink_active_links") or 0 for g in gpus)
    if links:
        return links * NVLINK_BYTES_PER_S_PER_LINK
    gen, width = gpus[0].get("pcie_gen_current"), gpus[0].get("pcie_width_current")
    return PCIE_BYTES_PER_S_PER_LANE.get(gen, 0) * width if gen and width else None


def predict(basis: Basis, n: int, mode: str, emulated: bool = False) -> Prediction:
    """Step time and throughput at ``n`` devices from one measured point."""
    m = basis.gpus
    per_replica_m = basis.global_batch / m
    per_replica = per_replica_m if mode != "strong" else basis.global_batch / n
    global_batch = per_replica * n
    t = basis.step_time_ms
    parts = {c: basis.shares.get(c, 0.0) * t for c in CATEGORIES}
    assumptions = [f"{mode if mode != 'mixed' else 'weak'} scaling: per-replica batch {per_replica:g}"]
    if emulated:
        assumptions.append("emulated: device work scales with the global batch (the replicas share the cores)")
    device_scale = global_batch / basis.global_batch if emulated else per_replica / per_replica_m
    time_ms = sum(parts[c] * device_scale for c in PER_REPLICA)
    time_ms += sum(parts[c] * global_batch / basis.global_batch for c in PER_GLOBAL)
    host_ms = sum(parts[c] for c in PER_STEP)
    if basis.host_ms_per_sample:
        host_ms = max(0.0, host_ms + basis.host_ms_per_sample * (global_batch - basis.global_batch))
        assumptions.append(f"host time per step grows {basis.host_ms_per_sample * 1e3:.3f} us per sample of global "
                           "batch (fitted on two measured points)")
    time_ms += host_ms
    time_ms += _collective_ms(basis, parts["collective"], n, assumptions)
    return Prediction(gpus=n, from_gpus=m, step_time_ms=time_ms, samples_per_s=global_batch / (time_ms / 1e3),
                      assumptions=assumptions)


def _collective_ms(basis: Basis, measured_ms: float, n: int, assumptions: list[str]) -> float:
    m = basis.gpus
    if n == 1:
        return 0.0
    if m > 1:
        assumptions.append(f"collective scaled from {m} devices by ring volume 2(N-1)/N")
        return measured_ms * ((n - 1) / n) / ((m - 1) / m)
    if basis.parameter_bytes and basis.link_bytes_per_s:
        assumptions.append(f"collective estimated: 2(N-1)/N x {basis.parameter_bytes / 1e6:.1f} MB of parameters / "
                           f"{basis.link_bytes_per_s / 1e9:.0f} GB/s link (nominal)")
        return 2 * (n - 1) / n * basis.parameter_bytes / basis.link_bytes_per_s * 1e3
    assumptions.append("collective unknown (no parameter size or link bandwidth): left out, so this is optimistic")
    return 0.0
