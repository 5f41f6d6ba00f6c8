"""Start and stop the host and NVML samplers of a run together."""

from __future__ import annotations

import os
from pathlib import Path

from scaldiag.collect.host import HostSampler
from scaldiag.collect.nvml import NvmlSampler, load_nvml
from scaldiag.record.rundir import (
    GPU_SAMPLES,
    HOST_SAMPLES,
    INVENTORY_JSON,
    JsonlWriter,
    write_json,
)

# Rows reach the disk every FLUSH_EVERY_ROWS rows or every FLUSH_MAX_DELAY_S, whichever comes
# first: a killed run loses at most a second of samples, with few syscalls at 100 Hz.
FLUSH_EVERY_ROWS = 200
FLUSH_MAX_DELAY_S = 1.0


def visible_gpu_indices(env: dict) -> list[int] | None:
    """NVML indices the training will use, from CUDA_VISIBLE_DEVICES (None: all).

    Integer entries are taken as NVML indices, which match CUDA's order when
    CUDA_DEVICE_ORDER=PCI_BUS_ID (and on machines of identical GPUs); UUIDs
    are not resolved here and give None (sample all).
    """
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    try:
        return [int(v) for v in items if int(v) >= 0]
    except ValueError:
        return None


class Samplers:
    def __init__(self, run_dir: Path, pid: int, nvml=None, env: dict | None = None):
        self.run_dir = Path(run_dir)
        self.missing: list[str] = []
        self._writers = [
            JsonlWriter(self.run_dir / HOST_SAMPLES, FLUSH_EVERY_ROWS, FLUSH_MAX_DELAY_S),
            JsonlWriter(self.run_dir / GPU_SAMPLES, FLUSH_EVERY_ROWS, FLUSH_MAX_DELAY_S),
        ]
        self.host = HostSampler(self._writers[0], pid)
        self.nvml = None
        try:
            nvml = nvml or load_nvml()
            env = env if env is not None else os.environ
            self.nvml = NvmlSampler(nvml, self._writers[1], visible_gpu_indices(env))
            # Logical device i of the framework is the i-th sampled GPU when
            # CUDA_VISIBLE_DEVICES lists NVML indices (with CUDA_DEVICE_ORDER=PCI_BUS_ID).
            write_json(
                self.run_dir,
                INVENTORY_JSON,
                {
                    "gpus": self.nvml.inventory(),
                    "topology": self.nvml.topology(),
                    "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
                    "logical_to_nvml_index": self.nvml.indices,
                },
            )
        except Exception as exc:  # no driver, no GPU, no library: the run goes on without it
            self.missing.append(f"nvml: no GPU samples ({type(exc).__name__}: {exc})")

    def start(self) -> None:
        self.host.sampler.start()
        if self.nvml:
            self.nvml.sampler.start()

    def stop(self) -> dict:
        """Stop sampling; returns achieved rates and sampler CPU use."""
        stats = {}
        for name, sampler in (
            ("host", self.host.sampler),
            ("nvml", self.nvml.sampler if self.nvml else None),
        ):
            if sampler is None:
                continue
            sampler.stop()
            if sampler.error:
                self.missing.append(f"{name} sampler stopped: {sampler.error}")
            stats[name] = {
                "ticks": sampler.ticks,
                "wall_s": round(sampler.wall_s, 3),
                "cpu_s": round(sampler.cpu_s, 4),
                "hz": round(sampler.ticks / sampler.wall_s, 1) if sampler.wall_s else 0.0,
            }
        if self.nvml:
            self.missing += [f"nvml {m}" for m in self.nvml.missing]
        for writer in self._writers:
            writer.close()
        return stats
