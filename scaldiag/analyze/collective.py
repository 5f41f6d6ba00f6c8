"""The part of a step's gradient all-reduce that the step waits for (its *exposed* time).

- PyTorch DDP reduces gradients in buckets while backward still runs: 25 MiB
  buckets (``bucket_cap_mb=25``) and a first bucket of 1 MiB
  (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``), filled in reverse
  parameter order. Every bucket but the last overlaps the rest of backward, so
  the step waits for the last bucket plus whatever the others take beyond the
  backward time: exposed = t(last) + max(0, sum t(others) - backward).
- Keras/JAX ``DataParallel`` and TF ``MirroredStrategy`` reduce after the
  gradients are computed (XLA combines the step's all-reduces into few large
  ones): all of it is exposed, unless a multi-device trace shows otherwise.

Backward is taken as 2/3 of the device's compute (backward does about twice
the forward's FLOPs: Kaplan et al. 2020, "Scaling laws for neural language
models", 6N FLOPs per token = 2N forward + 4N backward).
"""

from __future__ import annotations

import math

from scaldiag.analyze.interconnect import Interconnect

DDP_BUCKET_BYTES = 25 * 1024 * 1024  # torch DistributedDataParallel(bucket_cap_mb=25), its default
DDP_FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
BACKWARD_FRACTION_OF_COMPUTE = 2 / 3


def ddp_buckets(
    parameter_bytes: int, parameter_sizes_bytes: list[int] | None = None
) -> list[float]:
    """Bucket sizes in the order DDP reduces them.

    With each parameter's size (in the model's order) the buckets are DDP's own: parameters taken in
    reverse order, each added to the open bucket, which closes once it holds its limit or more (1
    MiB for the first, then 25 MiB), so one parameter larger than the cap is a bucket of its own
    (torch.distributed._compute_bucket_assignment_by_size). On the devset's MLP under DDP this gives
    67.29, 67.13 and 12.86 MB, the buckets its 2-GPU trace shows. Without them: buckets filled to
    the cap.
    """
    if parameter_sizes_bytes:
        return _assigned(parameter_sizes_bytes)
    first = min(parameter_bytes, DDP_FIRST_BUCKET_BYTES)
    rest = parameter_bytes - first
    full = math.floor(rest / DDP_BUCKET_BYTES)
    tail = rest - full * DDP_BUCKET_BYTES
    return [float(first)] + [float(DDP_BUCKET_BYTES)] * full + ([float(tail)] if tail > 0 else [])


def _assigned(parameter_sizes_bytes: list[int]) -> list[float]:
    buckets, open_bytes = [], 0
    for size in reversed(parameter_sizes_bytes):
        open_bytes += size
        if open_bytes >= (DDP_FIRST_BUCKET_BYTES if not buckets else DDP_BUCKET_BYTES):
            buckets.append(float(open_bytes))
            open_bytes = 0
    return buckets + ([float(open_bytes)] if open_bytes else [])


def exposed_ms(
    parameter_bytes: int,
    n: int,
    link: Interconnect,
    overlaps_backward: bool,
    compute_ms: float,
    parameter_sizes_bytes: list[int] | None = None,
) -> tuple[float, str]:
    """Exposed all-reduce time per step (ms) at ``n`` GPUs, and how it was reckoned.

    ``parameter_sizes_bytes``: each parameter's gradient bytes in the model's order, where recorded:
    DDP's real buckets (``ddp_buckets``)."""
    if n < 2:
        return 0.0, ""
    if not overlaps_backward:
        t = link.allreduce_s(parameter_bytes, n) * 1e3
        return (
            t,
            f"all-reduce of {parameter_bytes / 1e6:.1f} MB after backward (no overlap): {t:.3f} ms",
        )
    buckets = ddp_buckets(parameter_bytes, parameter_sizes_bytes)
    times = [link.allreduce_s(b, n) * 1e3 for b in buckets]
    backward = BACKWARD_FRACTION_OF_COMPUTE * compute_ms
    exposed = times[-1] + max(0.0, sum(times[:-1]) - backward)
    how = "DDP's assignment of the parameters" if parameter_sizes_bytes else "25 MiB cap"
    return (
        exposed,
        (
            f"DDP: {len(buckets)} buckets ({parameter_bytes / 1e6:.1f} MB, {how}) take"
            f" {sum(times):.3f} ms, overlapping {backward:.3f} ms of backward: {exposed:.3f} ms"
            " exposed"
        ),
    )
