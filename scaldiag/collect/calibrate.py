"""``scaldiag calibrate``'s measurements: all-reduce time over message sizes, and what one GPU can
show.

What runs inside PyTorch or JAX is ``collect/frameworks/calibration.py``, imported only when a
measurement runs (torch in the rank processes, jax in ``measure_jax``), so the command's parser and
the rest of scaldiag work without either; this module is the parent side.

- PyTorch: one process per rank (``python -m scaldiag.collect.frameworks.calibration CONFIG RANK``),
  a ``torch.distributed`` group over TCP on 127.0.0.1: NCCL on GPUs, gloo on CPU processes. Each
  size is warmed up, then timed ``calibration.REPEATS`` times as a batch of back-to-back all-reduces
  (as nccl-tests does: a batch hides the ranks' arrival skew that one timed call would add), with
  CUDA events on GPUs and the process clock on CPU; each repeat's time is the slowest rank's (a
  collective ends when its last rank does). Rank 0 writes the result for the parent.
- JAX: ``psum`` under ``pmap`` over the local devices of one process, timed on the host around
  ``block_until_ready``.
- One GPU: no link to measure. What it shows is the device's own copy and add bandwidth (the local
  part of every reduction) and NCCL's fixed cost of a call on one rank.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scaldiag.errors import ScaldiagError


def default_sizes(max_bytes: int) -> list[int]:
    """8 B, then every power of two up to ``max_bytes``."""
    sizes, m = [], 8
    while m <= max_bytes:
        sizes.append(m)
        m *= 2
    return sizes


# --- the machine, from NVML ---


def machine() -> dict:
    """GPU product, count and links as NVML reads them ({"gpu_count": 0, ...} without NVML or
    GPUs)."""
    try:
        from scaldiag.collect.nvml import NvmlSampler, load_nvml
        from scaldiag.collect.samplers import visible_gpu_indices

        nvml = load_nvml()
        sampler = NvmlSampler(nvml, None, visible_gpu_indices(dict(os.environ)))
        gpus, topology = sampler.inventory(), sampler.topology()
    except Exception as exc:  # no libnvidia-ml, no driver, no GPU: a CPU machine
        return {
            "gpu_name": None,
            "gpu_count": 0,
            "gpus": [],
            "topology": [],
            "nvml": f"not read: {type(exc).__name__}: {exc}",
            "link": {"kind": None},
        }
    links = [g.get("nvlink_active_links") for g in gpus]
    kind = (
        "nvlink"
        if any(links)
        else ("pcie" if len(gpus) > 1 and all(x == 0 for x in links) else None)
    )
    return {
        "gpu_name": gpus[0].get("name") if gpus else None,
        "gpu_count": len(gpus),
        "gpus": gpus,
        "topology": topology,
        "link": {"kind": kind, "nvlink_active_links": links},
    }


# --- PyTorch: the parent side ---


def measure_torch(
    sizes: list[int], ranks: int, device: str, timeout_s: float = 300.0
) -> list[dict]:
    """All-reduce rows (bytes, median_s, min_s, max_s, repeats) over ``ranks`` processes on "cuda"
    or "cpu"."""
    with tempfile.TemporaryDirectory(prefix="scaldiag-calibrate-") as tmp:
        result = Path(tmp) / "result.json"
        config = Path(tmp) / "config.json"
        config.write_text(
            json.dumps(
                {
                    "sizes": sizes,
                    "ranks": ranks,
                    "device": device,
                    "port": _free_port(),
                    "result": str(result),
                }
            )
        )
        logs = [
            Path(tmp) / f"rank{rank}.log" for rank in range(ranks)
        ]  # files, not pipes: NCCL_DEBUG can fill one
        procs = [_start_rank(config, rank, log) for rank, log in enumerate(logs)]
        _wait(procs, timeout_s)
        failed = [(r, p) for r, p in enumerate(procs) if p.returncode != 0]
        if failed:
            rank, p = failed[0]
            tail = logs[rank].read_text(errors="replace").strip().splitlines()[-3:]
            raise ScaldiagError(
                f"calibrate: rank {rank} of {ranks} exited {p.returncode}: " + " | ".join(tail)
            )
        return json.loads(result.read_text())["allreduce"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_rank(config: Path, rank: int, log: Path) -> subprocess.Popen:
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the scaldiag package
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    )
    with open(log, "w") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scaldiag.collect.frameworks.calibration",
                str(config),
                str(rank),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def _wait(procs: list[subprocess.Popen], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:  # our own rank processes, by their handles
                q.kill()
                q.wait()
            raise ScaldiagError(
                f"calibrate: the all-reduce ranks took over {timeout_s:.0f} s and were stopped "
                "(fewer or smaller --sizes)"
            ) from None
        if p.returncode != 0:  # one rank failed: the others would wait for it forever
            for q in procs:
                if q.poll() is None:
                    q.kill()
                    q.wait()
            return


# --- inside the frameworks (collect/frameworks/calibration.py, imported here only when one runs)
# ---


def measure_torch_one_gpu() -> dict:
    """The device's copy and add bandwidth, and a one-rank NCCL all-reduce's fixed cost (in a rank
    process)."""
    from scaldiag.collect.frameworks import calibration

    local = calibration.torch_local_bandwidth()
    rows = measure_torch([8], 1, "cuda")
    return {
        **local,
        "one_rank_allreduce_8B": {
            **{k: rows[0][k] for k in ("median_s", "min_s", "max_s", "repeats")},
            "what": "NCCL all_reduce on a group of one rank: its fixed cost per call, no link",
        },
    }


def jax_devices() -> tuple[int, str, str]:
    """How many local devices JAX has, their platform ("gpu", "cpu"...) and kind ("NVIDIA H200")."""
    from scaldiag.collect.frameworks import calibration

    return calibration.jax_devices()


def torch_gpus() -> tuple[int, str | None]:
    """How many GPUs PyTorch sees, and the first one's name."""
    from scaldiag.collect.frameworks import calibration

    return calibration.torch_gpus()


def measure_jax(sizes: list[int]) -> list[dict]:
    """``psum`` over every local device: rows as measure_torch's, timed on the host."""
    from scaldiag.collect.frameworks import calibration

    return calibration.measure_jax(sizes)


def measure_jax_one_gpu() -> dict:
    """The device's copy bandwidth and the host's dispatch-and-wait time for a tiny jitted call."""
    from scaldiag.collect.frameworks import calibration

    return calibration.measure_jax_one_gpu()
