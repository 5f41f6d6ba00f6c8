"""Predicted throughput at other GPU counts, from measured points and a stated model.

The model splits a measured point's steady step time t by its trace's
exclusive shares into the device's own work and the time the device waited
on the host, and scales each part to N devices:

| part | scales with | why | |---|---|---| | compute, layout, h2d, d2h, other | per-replica batch
b(N) | each device works on its own shard | | collective | ring all-reduce 2(N-1)/N, exposed part
only | from a measured multi-device point, or the interconnect's curve | | input | global batch
B(N), or per-replica b(N) under DDP | one pipeline feeds every replica in one process (Keras/JAX, |
|  |  | TF MirroredStrategy); under torchrun each rank has its own | | host_overhead, idle |
constant per step, or linear in the global batch | dispatch and Python run once per step; | |  |
when two measured points give the slope | slicing and converting the batch grows with it |

Weak scaling keeps b (B = N b); strong keeps B (b = B / N).

How the parts add up. Every GPU backend here queues device work
asynchronously. Where the device waited on the host at least as long as it
worked (the step was *host-paced*), the host runs the whole step and the
device's extra work (the all-reduce) fills its idle time: the step is
max(host path, device path), the host path being t plus what the host parts
grow by. Otherwise the parts are a critical path and add up.

From a single device the all-reduce has no measurement: it is reckoned from
the interconnect (analyze/interconnect.py: read from NVML, looked up from the
GPU's product name, given by the user, or assumed from the PCIe link) and its
NCCL curve, with DDP's buckets overlapping backward (analyze/collective.py).
Every prediction says what it used. Emulated devices share the same cores, so
there the device parts scale with the global batch instead.

One process driving several devices (Keras/JAX ``DataParallel``, TF
``MirroredStrategy``) launches the step's program on every device and splits
the batch for each: its host path grows with the device count, which no
one-device run shows. On the development set's two Keras/JAX runs (two H200
SXM, ../shared/fixtures/x2_devset) the host-paced step grew 23.6% and 26.0%
from 1 to 2 devices, and their traces show why: JAX's launch moves from the
Python thread to one thread per device that the Python thread waits for
("Wait for LaunchOnDevice completion"), and the per-device launch slowed 1.3-2.5x
beside the other (docs/scaling.md). ``DISPATCH_GROWTH_PER_DEVICE`` carries
that: the host path x (1 + g (N - 1)), its range the two measurements.
Measured at 2 devices only: beyond it, a linear extrapolation, stated as such.
Under torchrun each rank is its own process: no growth.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from scaldiag.analyze import interconnect as ic
from scaldiag.analyze import model_error
from scaldiag.analyze.categories import CATEGORIES
from scaldiag.analyze.collective import exposed_ms

PER_REPLICA = ("compute", "layout", "h2d", "d2h", "other")
PER_GLOBAL = ("input",)
PER_STEP = ("host_overhead", "idle")
WAITING = PER_GLOBAL + PER_STEP  # the device waited on the host
# Host-path growth per added device when one process drives them all (module docstring): the
# development set's two Keras/JAX DataParallel runs on H200 SXM, 1 -> 2 devices, untraced
# whole-epoch clocks: 1.075 -> 1.329 ms (+23.6%) and 1.793 -> 2.260 ms (+26.0%).
DISPATCH_GROWTH_PER_DEVICE = 0.248
DISPATCH_GROWTH_RANGE = (0.236, 0.260)
# Frameworks whose data parallelism runs in one process (training.json's framework name); others say
# nothing
ONE_PROCESS_FRAMEWORKS = ("keras", "tensorflow", "jax")
# What a host pays a byte to slice, convert and place a batch: Keras on JAX on an H200 host, 50 MB
# float32 batches, 18.6 ms of input a step (analyze/transfers.py, docs/rules.md "the hand-over").
# Input time beyond bytes x this is per-call work, which does not grow with the batch.
INPUT_NS_PER_BYTE = 0.37


@dataclass(frozen=True)
class Basis:
    """A measured point to predict from."""

    gpus: int
    step_time_ms: float
    global_batch: int
    shares: dict[str, float]  # exclusive fraction of step time per category
    parameter_bytes: int | None = None
    link_bytes_per_s: float | None = (
        None  # a bare bus bandwidth (no latency), when no interconnect is known
    )
    host_ms_per_sample: float | None = None  # slope of per-step host time in the global batch
    interconnect: ic.Interconnect | None = None
    framework: str | None = (
        None  # "pytorch" (DDP under torchrun: input per rank, buckets overlap backward), ...
    )
    step_time_ci95_ms: float = 0.0
    # the input-free measurement (analyze/input_cost.py): True where the input's measured cost paces
    # the step (all of it then grows with the global batch); False (within the noise) or None
    # (unmeasured): only its bytes' part does (_input_scale)
    input_paces: bool | None = None
    input_bytes_per_step: float | None = (
        None  # the batch's bytes copied to the devices each step (the trace)
    )
    clock: str = (  # which clock step_time_ms is (scaling.py: the user's, where the run has it)
        "the steady step"
    )


@dataclass(frozen=True)
class Prediction:
    gpus: int
    from_gpus: int
    step_time_ms: float
    samples_per_s: float
    assumptions: list[str] = field(default_factory=list)
    measured_samples_per_s: float | None = None
    error_pct: float | None = None  # (predicted - measured) / measured
    # 95% range: the noise range below and the model's own error (analyze/model_error.py)
    samples_per_s_low: float | None = None
    samples_per_s_high: float | None = None
    # the basis step's own interval and the model's stated ranges (dispatch growth) alone
    noise_samples_per_s_low: float | None = None
    noise_samples_per_s_high: float | None = None


def link_bytes_per_s(inventory: dict) -> float | None:
    """Per-direction line rate between GPUs (read, looked up or assumed:
    analyze/interconnect.py)."""
    found = ic.from_inventory(inventory)
    return found.line_bytes_per_s if found else None


def basis_extras(training: dict, inventory: dict) -> dict:
    """The Basis fields a run's records give beyond its step: the interconnect and the framework."""
    framework = (training.get("framework") or {}).get("name")
    return {"interconnect": ic.from_inventory(inventory), "framework": framework}


def predict(
    basis: Basis,
    n: int,
    mode: str,
    emulated: bool = False,
    interconnect: ic.Interconnect | None = None,
) -> Prediction:
    """Step time and throughput at ``n`` devices from one measured point, with its 95% range.

    ``interconnect``: the machine to scale to, when not the one the run was measured on.
    """
    p = _predict(basis, n, mode, emulated, interconnect, DISPATCH_GROWTH_PER_DEVICE)
    t, ci = basis.step_time_ms, basis.step_time_ci95_ms
    slow = _predict(
        replace(basis, step_time_ms=t + ci),
        n,
        mode,
        emulated,
        interconnect,
        DISPATCH_GROWTH_RANGE[1],
    )
    fast = _predict(
        replace(basis, step_time_ms=max(t - ci, t / 2)),
        n,
        mode,
        emulated,
        interconnect,
        DISPATCH_GROWTH_RANGE[0],
    )
    low = min(slow.samples_per_s, p.samples_per_s)
    high = max(fast.samples_per_s, p.samples_per_s)
    if n == basis.gpus:  # the measured point itself: no model between it and the prediction
        return replace(p, samples_per_s_low=low, samples_per_s_high=high)
    wide_low, wide_high = model_error.widen(p.samples_per_s, low, high)
    return replace(
        p,
        samples_per_s_low=wide_low,
        samples_per_s_high=wide_high,
        noise_samples_per_s_low=low,
        noise_samples_per_s_high=high,
        assumptions=[*p.assumptions, model_error.describe()],
    )


def _predict(
    basis: Basis,
    n: int,
    mode: str,
    emulated: bool,
    interconnect: ic.Interconnect | None,
    growth: float,
) -> Prediction:
    m = basis.gpus
    per_replica_m = basis.global_batch / m
    per_replica = per_replica_m if mode != "strong" else basis.global_batch / n
    global_batch = per_replica * n
    t = basis.step_time_ms
    parts = {c: basis.shares.get(c, 0.0) * t for c in CATEGORIES}
    assumptions = [
        f"from {basis.clock}: {t:.3f} ms",
        f"{mode if mode != 'mixed' else 'weak'} scaling: per-replica batch {per_replica:g}",
    ]
    if emulated:
        assumptions.append(
            "emulated: device work scales with the global batch (the replicas share the cores)"
        )
    device_scale = global_batch / basis.global_batch if emulated else per_replica / per_replica_m
    device_ms = sum(parts[c] * device_scale for c in PER_REPLICA)
    per_rank = basis.framework == "pytorch" and not emulated
    if per_rank:
        input_scale = device_scale
        assumptions.append("input per rank (torchrun: each rank's own DataLoader)")
    elif basis.input_paces or not basis.input_bytes_per_step:
        input_scale = global_batch / basis.global_batch
        assumptions.append(
            "input per host (one pipeline feeds every replica)"
            + (": its measured cost paces the step" if basis.input_paces else "")
        )
    else:
        input_scale = _input_scale(
            basis, parts["input"], global_batch / basis.global_batch, assumptions
        )
    waiting_ms = sum(parts[c] * input_scale for c in PER_GLOBAL)
    host_ms = sum(parts[c] for c in PER_STEP)
    if basis.host_ms_per_sample:
        host_ms = max(0.0, host_ms + basis.host_ms_per_sample * (global_batch - basis.global_batch))
        assumptions.append(
            f"host time per step grows {basis.host_ms_per_sample * 1e3:.3f} us per sample of global"
            " batch (fitted on two measured points)"
        )
    waiting_ms += host_ms
    device_ms += _collective_ms(basis, parts, n, assumptions, interconnect)
    waited = sum(parts[c] for c in WAITING)
    host_paced = not emulated and waited >= t - waited and waited > 0
    one_process = basis.framework in ONE_PROCESS_FRAMEWORKS and not emulated
    dispatch = _dispatch_factor(m, n, growth, not one_process, assumptions)
    if host_paced:
        time_ms = max((t + waiting_ms - waited) * dispatch, device_ms)
        assumptions.append(
            f"host-paced: the device waited {waited / t:.0%} of the step, so its extra work fills "
            "that wait (step = max(host path, device path))"
        )
    else:
        time_ms = device_ms + waiting_ms * dispatch
    return Prediction(
        gpus=n,
        from_gpus=m,
        step_time_ms=time_ms,
        samples_per_s=global_batch / (time_ms / 1e3),
        assumptions=assumptions,
    )


def _input_scale(
    basis: Basis, input_ms: float, batch_ratio: float, assumptions: list[str]
) -> float:
    """How the input part grows where its cost was not measured to pace the step: the part that
    moves the batch's bytes (at INPUT_NS_PER_BYTE) grows with the global batch, the rest is per-step
    work."""
    per_byte_ms = min(input_ms, basis.input_bytes_per_step * INPUT_NS_PER_BYTE / 1e6)
    if input_ms <= 0:
        return batch_ratio
    assumptions.append(
        f"input per host: {per_byte_ms:.3f} of its {input_ms:.3f} ms move the batch's "
        f"{basis.input_bytes_per_step / 1e6:.2f} MB ({INPUT_NS_PER_BYTE} ns a byte) and grow with "
        "the global batch; the rest is per-step work (the iterator, device placement)"
    )
    return (per_byte_ms * batch_ratio + input_ms - per_byte_ms) / input_ms


def _dispatch_factor(
    m: int, n: int, growth: float, own_process: bool, assumptions: list[str]
) -> float:
    """How much one process's host path grows from driving ``m`` devices to ``n`` (module
    docstring)."""
    if own_process or n == m:
        return 1.0
    factor = (1 + growth * (n - 1)) / (1 + growth * (m - 1))
    beyond = " (measured at 2 devices; beyond, extrapolated)" if max(n, m) > 2 else ""
    assumptions.append(
        f"one process drives every device: its host path x{factor:.2f} at {n}"
        f" device{'s' * (n != 1)} ({growth:.1%} a device, measured on two Keras/JAX runs,"
        f" docs/scaling.md){beyond}"
    )
    return factor


def _collective_ms(
    basis: Basis,
    parts: dict[str, float],
    n: int,
    assumptions: list[str],
    override: ic.Interconnect | None,
) -> float:
    m = basis.gpus
    measured_ms = parts["collective"]
    if n == 1:
        return 0.0
    if m > 1 and (override is None or not basis.parameter_bytes):
        assumptions.append(f"collective scaled from {m} devices by ring volume 2(N-1)/N")
        return measured_ms * ((n - 1) / n) / ((m - 1) / m)
    link = override or basis.interconnect
    if basis.parameter_bytes and link is not None:
        overlaps = basis.framework == "pytorch"
        ms, how = exposed_ms(basis.parameter_bytes, n, link, overlaps, parts["compute"])
        assumptions += [link.describe(), how]
        return ms
    if basis.parameter_bytes and basis.link_bytes_per_s:
        assumptions.append(
            f"collective estimated: 2(N-1)/N x {basis.parameter_bytes / 1e6:.1f} MB of parameters /"
            f" {basis.link_bytes_per_s / 1e9:.0f} GB/s link (nominal)"
        )
        return 2 * (n - 1) / n * basis.parameter_bytes / basis.link_bytes_per_s * 1e3
    assumptions.append(
        "collective unknown (no parameter size or link bandwidth): left out, so this is optimistic"
    )
    return 0.0
