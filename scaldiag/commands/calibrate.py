"""Measure all-reduce time over message sizes between this machine's GPUs (PyTorch NCCL all_reduce,
one process per GPU, or JAX psum) and save it where later reports find it. With one GPU: what one
GPU can measure, and what predictions will assume. Without GPUs: gloo on CPU processes, saved as a
CPU calibration that GPU predictions never use."""

from __future__ import annotations

import argparse
import datetime
import json
import re
import socket
from pathlib import Path

from scaldiag.analyze import interconnect as ic
from scaldiag.collect import calibrate as measure
from scaldiag.commands.output import emit, replacing
from scaldiag.errors import ScaldiagError

HELP = "measure this machine's all-reduce curve, for predictions"

# 1 GiB: past where NCCL's busbw levels off on NVLink (nccl-tests#212: 256 MB is too small)
GPU_MAX_BYTES = 2**30
CPU_MAX_BYTES = 2**24  # 16 MiB: gloo on CPU processes is ~1-10 GB/s, larger sizes only take longer
UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kib": 2**10,
    "kb": 2**10,
    "m": 2**20,
    "mib": 2**20,
    "mb": 2**20,
    "g": 2**30,
    "gib": 2**30,
    "gb": 2**30,
}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help=HELP, description=__doc__)
    p.add_argument(
        "--out",
        metavar="FILE",
        help=(
            "where to save the JSON (default: $SCALDIAG_CALIBRATION, else "
            "~/.cache/scaldiag/interconnect/<gpu>-x<n>-<framework>.json)"
        ),
    )
    p.add_argument(
        "--framework", choices=("torch", "jax"), help="default: torch where it imports, else jax"
    )
    p.add_argument(
        "--sizes",
        metavar="LIST",
        help=(
            "message sizes, comma-separated, with K/M/G (binary) "
            "suffixes, e.g. 8,64K,1M,64M,1G (default: every power of two "
            "from 8 B to 1 GiB on GPUs, 16 MiB on CPU)"
        ),
    )
    p.add_argument(
        "--device",
        choices=("auto", "gpu", "cpu"),
        default="auto",
        help="cpu: gloo over CPU processes even where GPUs are visible (default: GPUs where any)",
    )
    p.add_argument(
        "--ranks",
        type=int,
        metavar="N",
        help=(
            "processes for the CPU calibration (default 2), or how many of the visible GPUs to use"
        ),
    )
    p.add_argument(
        "--timeout", type=float, default=300.0, metavar="S", help="stop the measurement after S s"
    )
    p.set_defaults(func=run)


def parse_sizes(text: str) -> list[int]:
    sizes = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", item)
        unit = UNITS.get(m.group(2).lower()) if m else None
        if unit is None:
            raise ScaldiagError(f"--sizes: {item!r} is not a size (write e.g. 8, 64K, 1M, 1G)")
        size = int(float(m.group(1)) * unit)
        if size < 4:
            raise ScaldiagError(f"--sizes: {item!r} is under one float32 (4 B)")
        # whole float32s: 9 and 8 would both be 8 B, one size measured twice
        sizes.append(size // 4 * 4)
    if not sizes:
        raise ScaldiagError("--sizes: no size given")
    return sorted(set(sizes))


def run(args: argparse.Namespace) -> int:
    framework = args.framework or _default_framework()
    machine = measure.machine()
    devices = _gpus(framework, machine, args.device)
    if args.ranks is not None and args.ranks < 1:
        raise ScaldiagError("--ranks: at least 1")
    if devices >= 1 and args.ranks:
        devices = min(devices, args.ranks)
    if devices >= 2:
        doc = _between_gpus(args, framework, machine, devices)
    elif devices == 1:
        doc = _one_gpu(framework, machine)
    else:
        doc = _cpu(args, framework, machine)
    path = Path(args.out) if args.out else _default_path(doc)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScaldiagError(f"cannot write {path}: {exc.strerror}") from None
    with replacing(path) as stream:  # a reader sees the old curve or the new one, never half
        stream.write(json.dumps(doc, indent=1) + "\n")
    emit(ic.CalibrationReport(doc, str(path)))
    return 0


def _default_framework() -> str:
    import importlib.util

    if importlib.util.find_spec("torch"):
        return "torch"
    if importlib.util.find_spec("jax"):
        return "jax"
    raise ScaldiagError("calibrate needs PyTorch or JAX installed (neither imports here)")


def _gpus(framework: str, machine: dict, device: str) -> int:
    """GPUs the framework can use here (0: calibrate on CPU processes); the product name from the
    framework where NVML did not give it."""
    if device == "cpu":
        return 0
    if framework == "jax":
        count, platform, kind = measure.jax_devices()
        found, name = (count, kind) if platform == "gpu" else (0, None)
    else:
        found, name = measure.torch_gpus()
    if device == "gpu" and not found:
        raise ScaldiagError(
            f"calibrate --device gpu: {framework} sees no GPU here (NVML: "
            f"{machine.get('gpu_count') or 0} GPUs)"
        )
    if found and not machine.get("gpu_name"):
        machine["gpu_name"] = name
    return found


def _base(framework: str, machine: dict, device: str, ranks: int, backend: str) -> dict:
    return {
        "schema": ic.CALIBRATION_SCHEMA,
        "schema_version": ic.CALIBRATION_SCHEMA_VERSION,
        "measured_at": _now(),
        "device": device,
        "framework": framework,
        "backend": backend,
        "ranks": ranks,
        "host": socket.gethostname(),
        "machine": {
            k: machine.get(k)
            for k in ("gpu_name", "gpu_count", "link", "gpus", "topology", "nvml")
            if k in machine
        },
        "allreduce": [],
        "local": None,
        "notes": [],
    }


def _between_gpus(args, framework: str, machine: dict, n: int) -> dict:
    sizes = parse_sizes(args.sizes) if args.sizes else measure.default_sizes(GPU_MAX_BYTES)
    rows = (
        measure.measure_torch(sizes, n, "cuda", args.timeout)
        if framework == "torch"
        else measure.measure_jax(sizes)
    )
    doc = _base(framework, machine, "gpu", n, "nccl" if framework == "torch" else "xla")
    doc["allreduce"] = _with_bandwidths(rows, n)
    if machine.get("gpu_count") and machine["gpu_count"] != n:
        doc["notes"].append(f"NVML sees {machine['gpu_count']} GPUs; measured over {n}")
    return doc


def _one_gpu(framework: str, machine: dict) -> dict:
    local = (
        measure.measure_torch_one_gpu() if framework == "torch" else measure.measure_jax_one_gpu()
    )
    doc = _base(framework, machine, "gpu", 1, "nccl" if framework == "torch" else "xla")
    doc["local"] = local
    link = ic.from_inventory(
        {"gpus": machine.get("gpus") or [{"name": machine.get("gpu_name")}]}, calibrations=[]
    )
    assumed = link.describe() if link else "no link known (NVML names no GPU product or PCIe link)"
    doc["notes"] += [
        (
            "one GPU visible: the link between GPUs cannot be measured here, so no all-reduce curve"
            " was saved"
        ),
        f"predictions from this machine assume: {assumed}",
    ]
    return doc


def _cpu(args, framework: str, machine: dict) -> dict:
    sizes = parse_sizes(args.sizes) if args.sizes else measure.default_sizes(CPU_MAX_BYTES)
    if (
        framework == "jax"
    ):  # XLA's CPU devices of one process (XLA_FLAGS=--xla_force_host_platform_device_count)
        ranks, platform, _ = measure.jax_devices()
        if ranks < 2 or platform != "cpu":
            raise ScaldiagError(
                "calibrate on CPU with JAX needs 2+ CPU devices: set XLA_FLAGS="
                "--xla_force_host_platform_device_count=2, or use --framework torch (gloo)"
            )
        rows, backend = measure.measure_jax(sizes), "xla-cpu"
    else:
        ranks = args.ranks or 2
        if ranks < 2:
            raise ScaldiagError("--ranks: a CPU calibration needs 2 or more processes")
        rows, backend = measure.measure_torch(sizes, ranks, "cpu", args.timeout), "gloo"
    doc = _base(framework, machine, "cpu", ranks, backend)
    doc["allreduce"] = _with_bandwidths(rows, ranks)
    doc["notes"].append(
        f"a CPU calibration ({backend} between CPU devices of this host): GPU predictions do "
        "not use it"
    )
    return doc


def _with_bandwidths(rows: list[dict], n: int) -> list[dict]:
    """nccl-tests' algbw (bytes / time) and busbw (algbw x 2 (n - 1) / n) at the median time."""
    return [
        {
            **r,
            "algbw_bytes_per_s": r["bytes"] / r["median_s"],
            "busbw_bytes_per_s": r["bytes"] / r["median_s"] * ic.ring_volume(n),
        }
        for r in rows
    ]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _default_path(doc: dict) -> Path:
    import os

    if os.environ.get(ic.CALIBRATION_ENV):
        return Path(os.environ[ic.CALIBRATION_ENV])
    name = doc["machine"].get("gpu_name") if doc["device"] == "gpu" else "cpu"
    slug = re.sub(r"[^a-z0-9]+", "-", (name or "gpu").lower()).strip("-")
    return ic.calibration_dir() / f"{slug}-x{doc['ranks']}-{doc['framework']}.json"
