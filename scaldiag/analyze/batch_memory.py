"""Whether a larger per-replica batch fits in device memory (issue 35).

A batch forecast ("per-replica batch x4: 3.8x") is an out-of-memory error on a card that is 70%
full. From one run, the memory splits into what grows with the batch (activations, the batch
itself, their gradients) and what does not (weights, their gradients, optimizer state), and one
batch size cannot tell the two apart. So the statement is a bound:

    fixed >= the parameters' bytes (training.json ``parameter_bytes``; 0 where not recorded)
    grows <= peak - fixed
    x k needs at most fixed + k x grows

and a factor is *sure* to fit where that worst case fits the device; the largest sure factor is
given. Where it does not fit in the worst case, x k *may* not fit: how much of the peak may grow
for it to fit is said. Nothing is claimed beyond that without a second batch size.

The peak is the framework's allocator's where the adapter recorded one (training.json
``device_memory``: torch.cuda.max_memory_allocated, JAX's memory_stats peak_bytes_in_use,
TensorFlow's get_memory_info peak), against the allocator's limit or the device's memory. Without
it, NVML's largest used memory over the run, which includes the framework's reserved pool (JAX and
TensorFlow reserve most of the card at start: a tiny model reads 75% used), so it only bounds the
peak from above: a "sure" still holds, a "may not" is weak, and the note says so.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = float(1 << 30)
# The largest factor said: past it the batch, not the memory, is what the advice is about.
SURE_FACTOR_MAX = 1024


@dataclass(frozen=True)
class DeviceMemory:
    device: int
    peak_bytes: int  # the most the run held on the device
    total_bytes: int  # what it can hold (the allocator's limit, else the device's memory)
    fixed_min_bytes: int  # surely held whatever the batch: the parameters (0 where unknown)
    source: str  # where the peak comes from, in words
    allocator: bool  # the framework's own peak (True) or NVML's used memory, pool included


@dataclass(frozen=True)
class BatchRoom:
    factor: float
    sure: bool  # x factor fits even if everything but the parameters grows with the batch
    sure_factor: int  # the largest whole factor that surely fits (0: the run itself was over)
    worst_bytes: int  # fixed_min + factor x (peak - fixed_min)
    may_grow_bytes: int  # for x factor to fit, at most this much of the peak may grow with it


def device_memory(training: dict, gpu_samples: list[dict], inventory: dict) -> DeviceMemory | None:
    """The fullest device's memory: the allocator's peak where recorded, else NVML's."""
    fixed = int(training.get("parameter_bytes") or 0)
    totals = {
        g.get("index"): g.get("memory_total_bytes")
        for g in inventory.get("gpus") or []
        if (g.get("memory_total_bytes") or 0) > 0
    }
    # the allocator's limit, or (TensorFlow states none) the device's memory
    peaks = [
        (m, m.get("limit_bytes") or totals.get(m.get("device")) or 0)
        for m in training.get("device_memory") or []
        if (m.get("peak_bytes") or 0) > 0
    ]
    peaks = [(m, limit) for m, limit in peaks if limit > 0]
    if peaks:
        m, limit = max(peaks, key=lambda p: p[0]["peak_bytes"] / p[1])
        return DeviceMemory(
            int(m.get("device") or 0),
            int(m["peak_bytes"]),
            int(limit),
            min(fixed, int(m["peak_bytes"])),
            str(m.get("source") or "the framework's allocator"),
            True,
        )
    used: dict[int, int] = {}
    for row in gpu_samples:
        if row.get("gpu") in totals and isinstance(row.get("mem_used_bytes"), int):
            used[row["gpu"]] = max(used.get(row["gpu"], 0), row["mem_used_bytes"])
    if not used:
        return None
    gpu = max(used, key=lambda g: used[g] / totals[g])
    return DeviceMemory(
        gpu,
        used[gpu],
        int(totals[gpu]),
        min(fixed, used[gpu]),
        "NVML's largest used memory, the framework's reserved pool included: an upper bound",
        False,
    )


def room(mem: DeviceMemory, factor: float) -> BatchRoom:
    grows = max(0, mem.peak_bytes - mem.fixed_min_bytes)
    worst = mem.fixed_min_bytes + factor * grows
    if grows == 0:  # nothing but the parameters: any factor, as far as this bound can say
        sure_factor = SURE_FACTOR_MAX if mem.peak_bytes <= mem.total_bytes else 0
    else:
        sure = (mem.total_bytes - mem.fixed_min_bytes) // grows
        sure_factor = max(0, min(SURE_FACTOR_MAX, int(sure)))
    may_grow = (mem.total_bytes - mem.peak_bytes) / (factor - 1) if factor > 1 else grows
    return BatchRoom(
        factor,
        worst <= mem.total_bytes,
        sure_factor,
        int(worst),
        max(0, int(may_grow)),
    )


def _of(mem: DeviceMemory) -> str:
    """The peak against the whole: ``56.0 of 80.0 GiB``."""
    return f"{mem.peak_bytes / GIB:.1f} of {mem.total_bytes / GIB:.1f} GiB"


def describe(mem: DeviceMemory, r: BatchRoom, per_replica_batch: int | None) -> str:
    """One sentence for a batch forecast: whether x factor fits, and the largest batch sure to."""
    head = (
        f"device memory: peak {_of(mem)} on"
        f" device {mem.device} ({mem.source})"
    )
    k = f"x{r.factor:g}"
    if r.sure:
        verdict = f"{k} stays within it even if all of it but the parameters grows with the batch"
    else:
        verdict = (
            f"{k} may exceed it: it stays within only if at most"
            f" {r.may_grow_bytes / GIB:.1f} GiB of the peak grows with the batch (one batch size"
            " cannot tell how much does)"
        )
        if not mem.allocator:
            verdict += "; NVML's figure holds the framework's pool, so the peak may be far lower"
    sure = (
        "no larger batch is sure to stay within it"
        if r.sure_factor < 2
        else f"sure to stay within it up to x{r.sure_factor}"
        + (f" (per-replica batch {per_replica_batch * r.sure_factor})" if per_replica_batch else "")
    )
    return f"{head}: {verdict}; {sure}"


def brief(mem: DeviceMemory, r: BatchRoom) -> str:
    """``describe`` in a few words, for the forecast's own line. NVML's used memory holds the
    framework's pool (JAX and TensorFlow reserve most of the card), so from it alone only a fit is
    known, never a misfit."""
    k, of = f"x{r.factor:g}", _of(mem)
    if not mem.allocator:
        if r.sure:
            return f"{k} fits in device memory (NVML's peak {of})"
        return f"whether {k} fits is unknown (NVML's {of} holds the framework's pool)"
    if r.sure:
        return f"{k} fits in device memory (peak {of})"
    sure = f"; sure up to x{r.sure_factor}" if r.sure_factor >= 2 else ""
    return f"{k} may not fit in device memory (peak {of}{sure})"


def held(mem: DeviceMemory, per_replica_batch: float, devices: int) -> str:
    """A batch a run already held, for a forecast that keeps it (SD201): it fitted there, at
    that peak; more devices add only the collectives' buffers."""
    whose = "" if mem.allocator else "NVML's "
    return (
        f"per-replica batch {per_replica_batch:g} fitted at {devices} device(s)"
        f" ({whose}peak {_of(mem)})"
    )
