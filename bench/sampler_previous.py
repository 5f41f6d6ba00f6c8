"""The NVML sampler and JSONL writer as they were before issue 12's capture-side work (commit
af6ec2f), frozen here so bench_sampler.py can run them beside the current ones in one process.

Previous: one 100 Hz wake-up; SM clock, memory and clocks-event reasons every tick; PCIe
counters and power every 5 ticks (20 Hz); utilisation every 10 (10 Hz); the PCIe link every
100; NVLink every 200; each row encoded with ``json.dumps`` and written with its own call.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

from scaldiag.collect.nvml import _UINT32_TYPE, ALL_LINKS, NvmlSampler, _field_value
from scaldiag.collect.sampling import PeriodicSampler

PERIOD_S = 0.01
FIELDS = [
    ("power_mw", "NVML_FI_DEV_POWER_INSTANT", 0, 5),
    ("pcie_tx_bytes", "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 0, 5),
    ("pcie_rx_bytes", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 0, 5),
    ("nvlink_tx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", ALL_LINKS, 200),
    ("nvlink_rx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", ALL_LINKS, 200),
]
CALLS = [("sm_clock_mhz", 1), ("mem_used_bytes", 1), ("clocks_event_reasons", 1), ("util_pct", 10),
         ("pcie_gen", 100), ("pcie_width", 100)]


class PreviousJsonlWriter:
    """A line per row: ``json.dumps`` and a file write each, flushed every n rows or 1 s."""

    def __init__(self, path: Path, flush_every: int = 1, max_delay_s: float = 1.0):
        self._file = open(path, "a", buffering=1 << 16)  # noqa: SIM115
        self._pending = 0
        self._flush_every = flush_every
        self._max_delay_ns = int(max_delay_s * 1e9)
        self._flushed_ns = time.monotonic_ns()
        self._lock = threading.Lock()

    def write(self, row: dict) -> None:
        with self._lock:
            if self._file.closed:
                return
            self._file.write(json.dumps(row, separators=(",", ":")) + "\n")
            self._pending += 1
            now = time.monotonic_ns()
            if self._pending >= self._flush_every or now - self._flushed_ns >= self._max_delay_ns:
                self._file.flush()
                self._pending = 0
                self._flushed_ns = now

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


class PreviousNvmlSampler(NvmlSampler):
    """The previous tiers and tick; the reads themselves (``_util``, ``_clock``...) are shared."""

    def __init__(self, nvml, writer, indices=None):
        self.nvml = nvml
        self._writer = writer
        self.missing = []
        count = nvml.nvmlDeviceGetCount()
        self.indices = [i for i in (indices if indices is not None else range(count)) if 0 <= i < count]
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        self._fields = {key: ((getattr(nvml, const), scope), every) for key, const, scope, every in FIELDS
                        if hasattr(nvml, const)}
        reads = {"util_pct": self._util, "mem_used_bytes": self._mem, "sm_clock_mhz": self._clock,
                 "clocks_event_reasons": self._reasons,
                 "pcie_gen": lambda h: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
                 "pcie_width": lambda h: int(nvml.nvmlDeviceGetCurrPcieLinkWidth(h))}
        self._calls = {key: (reads[key], every) for key, every in CALLS}
        self._wrap = {}
        self._tick_count = 0
        self._schedule()
        self.sampler = PeriodicSampler("nvml", PERIOD_S, self._tick)

    def _schedule(self) -> None:
        everies = [every for _, every in self._calls.values()] + [every for _, every in self._fields.values()]
        self._cycle = math.lcm(*everies) if everies else 1
        self._due_calls = [[(key, read) for key, (read, every) in self._calls.items() if phase % every == 0]
                           for phase in range(self._cycle)]
        self._due_fields = [[key for key, (_, every) in self._fields.items() if phase % every == 0]
                            for phase in range(self._cycle)]
        self._field_ids = [[self._fields[key][0] for key in due] for due in self._due_fields]

    def _tick(self) -> None:
        t_ns = time.time_ns()
        phase = self._tick_count % self._cycle
        self._tick_count += 1
        for index, handle in zip(self.indices, self._handles):
            row = {"t_ns": t_ns, "gpu": index}
            if self._due_fields[phase]:
                row.update(self._previous_fields(index, handle, phase))
            for key, read in self._due_calls[phase]:
                try:
                    row[key] = read(handle)
                except Exception as exc:
                    self.missing.append(f"{key}: {type(exc).__name__}: {exc}")
                    del self._calls[key]
                    self._schedule()
            self._writer.write(row)

    def _previous_fields(self, index: int, handle, phase: int) -> dict:
        due = self._due_fields[phase]
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(handle, self._field_ids[phase])
        except Exception as exc:
            self.missing.append(f"field values: {type(exc).__name__}: {exc}")
            self._fields = {}
            self._schedule()
            return {}
        row, dropped = {}, False
        for key, value in zip(due, values):
            if value.nvmlReturn != 0:
                self.missing.append(f"{key}: not supported here (NVML return {value.nvmlReturn})")
                self._fields.pop(key, None)
                dropped = True
                continue
            number = _field_value(value)
            if value.valueType == _UINT32_TYPE and key.endswith("_bytes"):
                number = self._unwrap(index, key, number)
            row[key] = number
        if dropped:
            self._schedule()
        return row
