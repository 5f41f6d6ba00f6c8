"""``scaldiag calibrate``'s framework parts: what runs inside PyTorch and JAX (imported lazily).

``collect/calibrate.py`` holds the parent side (sizes, the rank processes, the machine from NVML)
and imports this module only when a measurement runs, so the command's parser and the rest of
scaldiag work without either framework; each function here imports its framework itself. A PyTorch
rank is this module run as ``python -m scaldiag.collect.frameworks.calibration CONFIG RANK``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from scaldiag.errors import ScaldiagError

REPEATS = 7  # timed batches per size: the median and the spread (min-max) come from these
WARMUP_CALLS = (
    3  # untimed calls per size first (NCCL sets up its buffers and protocol on the first ones)
)
BATCH_TARGET_S = (
    2e-3  # a timed batch lasts about this long (event and clock resolution ~us), 1-50 calls
)
MAX_BATCH_CALLS = 50
# one GPU: copy and add over 256 MiB, well past its caches (H200 L2: 50 MB)
LOCAL_BYTES = 256 * 2**20


def spread(times_s: list[float]) -> dict:
    return {
        "median_s": statistics.median(times_s),
        "min_s": min(times_s),
        "max_s": max(times_s),
        "repeats": len(times_s),
    }


# --- PyTorch: one rank (a process of its own) ---


def _rank_main(config_path: str, rank: int) -> None:
    import torch
    import torch.distributed as dist

    config = json.loads(Path(config_path).read_text())
    ranks, cuda = config["ranks"], config["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{config['port']}",
        rank=rank,
        world_size=ranks,
    )
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    check = torch.ones(4, device=device)
    dist.all_reduce(check)
    if not bool((check == ranks).all()):
        raise RuntimeError(f"all-reduce of ones gave {check.tolist()}, not {ranks}")
    rows = [_time_size(torch, dist, device, m, cuda) for m in config["sizes"]]
    if rank == 0:
        Path(config["result"]).write_text(json.dumps({"allreduce": rows}))
    dist.barrier()
    dist.destroy_process_group()


def _time_size(torch, dist, device, message_bytes: int, cuda: bool) -> dict:
    x = torch.zeros(max(1, message_bytes // 4), dtype=torch.float32, device=device)
    for _ in range(WARMUP_CALLS):
        dist.all_reduce(x)
    one = torch.tensor([_batch_s(torch, dist, x, 1, cuda)], dtype=torch.float64, device=device)
    # every rank must make the same number of calls, or they hang
    dist.all_reduce(one, op=dist.ReduceOp.MAX)
    calls = max(1, min(MAX_BATCH_CALLS, int(BATCH_TARGET_S / max(one.item(), 1e-9))))
    mine = torch.tensor(
        [_batch_s(torch, dist, x, calls, cuda) for _ in range(REPEATS)],
        dtype=torch.float64,
        device=device,
    )
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # each repeat: its slowest rank
    return {"bytes": x.numel() * 4, "calls_per_repeat": calls, **spread(mine.tolist())}


def _batch_s(torch, dist, x, calls: int, cuda: bool) -> float:
    """Seconds per all-reduce over ``calls`` back-to-back ones, the ranks started together."""
    dist.barrier()
    if cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            dist.all_reduce(x)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / calls
    t0 = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(x)
    return (time.perf_counter() - t0) / calls


# --- one GPU: what it can show ---


def torch_local_bandwidth() -> dict:
    """One GPU's copy and add bandwidth (``calibrate.measure_torch_one_gpu`` adds a one-rank NCCL
    call)."""
    import torch

    n = LOCAL_BYTES // 4
    a, b = torch.zeros(n, device="cuda"), torch.ones(n, device="cuda")
    copy = _cuda_repeats(torch, lambda: a.copy_(b))
    add = _cuda_repeats(torch, lambda: a.add_(b))
    return {
        "bytes": LOCAL_BYTES,
        "copy": {
            **copy,
            "bytes_per_s": LOCAL_BYTES / copy["median_s"],
            "what": "dst.copy_(src): bytes copied/s",
        },
        "add": {
            **add,
            "bytes_per_s": LOCAL_BYTES / add["median_s"],
            "what": (
                "a.add_(b): bytes of a reduced/s (reads 2, writes 1), the local step of a reduction"
            ),
        },
    }


def _cuda_repeats(torch, op, calls: int = 10) -> dict:
    op()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            op()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return spread(times)


# --- JAX ---


def jax_devices() -> tuple[int, str, str]:
    """How many local devices JAX has, their platform ("gpu", "cpu"...) and kind ("NVIDIA H200")."""
    import jax

    devices = jax.local_devices()
    return len(devices), devices[0].platform, devices[0].device_kind


def torch_gpus() -> tuple[int, str | None]:
    """How many GPUs PyTorch sees, and the first one's name."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return count, torch.cuda.get_device_name(0) if count else None


def measure_jax(sizes: list[int]) -> list[dict]:
    """``psum`` over every local device (jit of shard_map): rows as measure_torch's, timed on the
    host."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    try:
        shard_map = jax.shard_map
    except AttributeError:  # JAX before 0.6
        from jax.experimental.shard_map import shard_map
    n = jax.local_device_count()
    mesh = jax.make_mesh((n,), ("i",))
    psum = jax.jit(
        shard_map(lambda v: jax.lax.psum(v, "i"), mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    )
    sharded = NamedSharding(mesh, P("i"))
    check = psum(jax.device_put(jnp.ones(4 * n, jnp.float32), sharded))
    if not bool((check == n).all()):
        raise ScaldiagError(f"calibrate: psum of ones over {n} devices gave {check.tolist()}")
    rows = []
    for m in sizes:
        count = max(1, m // 4)  # float32 elements on each device: the message
        x = jax.device_put(jnp.zeros(count * n, jnp.float32), sharded)
        for _ in range(WARMUP_CALLS):
            psum(x).block_until_ready()
        one = _host_batch_s(psum, x, 1)
        calls = max(1, min(MAX_BATCH_CALLS, int(BATCH_TARGET_S / max(one, 1e-9))))
        rows.append(
            {
                "bytes": count * 4,
                "calls_per_repeat": calls,
                **spread([_host_batch_s(psum, x, calls) for _ in range(REPEATS)]),
            }
        )
        del x
    return rows


def _host_batch_s(fn, x, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        y = fn(x)
    y.block_until_ready()
    return (time.perf_counter() - t0) / calls


def measure_jax_one_gpu() -> dict:
    """The device's copy bandwidth and the host's dispatch-and-wait time for a tiny jitted call."""
    import jax
    import jax.numpy as jnp

    a = jnp.zeros(LOCAL_BYTES // 4, jnp.float32)
    copy = jax.jit(lambda v: v + 1.0)  # reads and writes every byte: XLA cannot skip it
    tiny = jax.jit(lambda v: v + 1.0)
    small = jnp.zeros(2, jnp.float32)
    copy(a).block_until_ready()
    tiny(small).block_until_ready()
    big = spread([_host_batch_s(copy, a, 10) for _ in range(REPEATS)])
    call = spread([_host_batch_s(tiny, small, 1) for _ in range(REPEATS)])
    return {
        "bytes": LOCAL_BYTES,
        "copy": {
            **big,
            "bytes_per_s": LOCAL_BYTES / big["median_s"],
            "what": "jit(v + 1): bytes written/s",
        },
        "one_call_8B": {**call, "what": "a jitted call on 8 B, dispatch to result on the host"},
    }


if __name__ == "__main__":  # a rank process of calibrate.measure_torch
    _rank_main(sys.argv[1], int(sys.argv[2]))
