"""NVML samples for each visible GPU, on a background thread, plus the inventory.

Reads are tiered by what they cost (measured on H200, driver 580, per GPU
and call: bench/results/gpu_nvml_h200.md) and by how fast they change:

| every | rate   | reads                                                        | cost     |
|-------|--------|--------------------------------------------------------------|----------|
| 1     | 100 Hz | SM clock, memory used, clocks-event (throttle) reasons       | 0.03 ms  |
| 5     | 20 Hz  | PCIe TX/RX byte counters, instant power (one field-values call) | 0.33 ms |
| 10    | 10 Hz  | utilisation (nvmlDeviceGetUtilizationRates)                  | 0.13 ms  |
| 100   | 1 Hz   | PCIe link generation and width now (they drop when idle)     | <0.02 ms |
| 200   | 0.5 Hz | NVLink data TX/RX counters, all links (one call)             | 2.7 ms   |

Not ``nvmlDeviceGetPcieThroughput``: it samples a 20 ms window per call.
The PCIe counters are 32-bit (they wrap every 4 GiB, 80 ms at PCIe Gen5
x16 line rate); sampled at 20 Hz they are unwrapped here, so the record
holds monotonic cumulative counts.

``nvml`` is the pynvml module (nvidia-ml-py) or, in unit tests, a fake with
the same functions. Nothing here raises into training: a failing read is
recorded once in ``missing`` and dropped from later ticks.
"""

from __future__ import annotations

import functools
import math
import time

from scaldiag.collect.sampling import PeriodicSampler
from scaldiag.record.rundir import JsonlWriter

PERIOD_S = 0.01  # 100 Hz
ALL_LINKS = 0xFFFFFFFF  # scopeId: NVLink counters summed over all links
_UINT32_TYPE = 1  # NVML_VALUE_TYPE_UNSIGNED_INT: a counter that wraps at 2**32

# (key, NVML field constant, scopeId, every n ticks)
FIELDS = [
    ("power_mw", "NVML_FI_DEV_POWER_INSTANT", 0, 5),
    ("pcie_tx_bytes", "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 0, 5),
    ("pcie_rx_bytes", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 0, 5),
    ("nvlink_tx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", ALL_LINKS, 200),
    ("nvlink_rx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", ALL_LINKS, 200),
]
# nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs on the PCIe tree
# (NVLink is separate: see nvlink_active_links in the inventory).
TOPOLOGY_LEVELS = {0: "same board", 10: "single PCIe switch", 20: "multiple PCIe switches",
                   30: "PCIe host bridge", 40: "same NUMA node", 50: "across NUMA nodes (SMP link)"}

CALLS = [("sm_clock_mhz", 1), ("mem_used_bytes", 1), ("clocks_event_reasons", 1), ("util_pct", 10),
         ("pcie_gen", 100), ("pcie_width", 100)]


def load_nvml():
    """The real pynvml module, initialised, or raise with the reason."""
    import pynvml  # nvidia-ml-py: a dependency, but libnvidia-ml may be absent

    pynvml.nvmlInit()
    return pynvml


class NvmlSampler:
    def __init__(self, nvml, writer: JsonlWriter, indices: list[int] | None = None):
        self.nvml = nvml
        self._writer = writer
        self.missing: list[str] = []
        count = nvml.nvmlDeviceGetCount()
        self.indices = [i for i in (indices if indices is not None else range(count)) if 0 <= i < count]
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        self._fields = {}  # key -> ((field id, scope), every)
        for key, const, scope, every in FIELDS:
            if hasattr(nvml, const):
                self._fields[key] = ((getattr(nvml, const), scope), every)
            else:
                self.missing.append(f"{key}: this nvidia-ml-py has no {const}")
        reads = {"util_pct": self._util, "mem_used_bytes": self._mem, "sm_clock_mhz": self._clock,
                 "clocks_event_reasons": self._reasons,
                 "pcie_gen": lambda h: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
                 "pcie_width": lambda h: int(nvml.nvmlDeviceGetCurrPcieLinkWidth(h))}
        self._calls = {key: (reads[key], every) for key, every in CALLS}
        self._wrap: dict[tuple[int, str], list[int]] = {}  # (gpu, key) -> [last raw, added]
        self._tick_count = 0
        self._schedule()
        self.sampler = PeriodicSampler("nvml", PERIOD_S, self._tick)

    def _schedule(self) -> None:
        """What is due at each tick of the cycle, worked out once, not per GPU and tick.

        Called again whenever a read is dropped.
        """
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
                row.update(self._read_fields(index, handle, phase))
            for key, read in self._due_calls[phase]:
                try:
                    row[key] = read(handle)
                except Exception as exc:  # unsupported on this GPU/driver: drop it, say so
                    self.missing.append(f"{key}: {type(exc).__name__}: {exc}")
                    del self._calls[key]
                    self._schedule()
            self._writer.write(row)

    def _read_fields(self, index: int, handle, phase: int) -> dict:
        due = self._due_fields[phase]
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(handle, self._field_ids[phase])
        except Exception as exc:
            self.missing.append(f"field values: {type(exc).__name__}: {exc}")
            self._fields = {}
            self._schedule()
            return {}
        row = {}
        dropped = False
        for key, value in zip(due, values):
            if value.nvmlReturn != 0:  # NVML_SUCCESS
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

    def _unwrap(self, index: int, key: str, raw: int) -> int:
        """A wrapping 32-bit counter as a monotonic count (sampled faster than it wraps)."""
        state = self._wrap.setdefault((index, key), [raw, 0])
        if raw < state[0]:
            state[1] += 1 << 32
        state[0] = raw
        return raw + state[1]

    def _util(self, handle) -> int:
        return int(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)

    def _mem(self, handle) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)

    def _clock(self, handle) -> int:
        return int(self.nvml.nvmlDeviceGetClockInfo(handle, self.nvml.NVML_CLOCK_SM))

    def _reasons(self, handle) -> int:
        return int(self._read_reasons(handle))

    @functools.cached_property
    def _read_reasons(self):
        n = self.nvml
        return getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons

    def inventory(self) -> list[dict]:
        return [self._describe(i, h) for i, h in zip(self.indices, self._handles)]

    def topology(self) -> list[dict]:
        """How each pair of sampled GPUs is connected (nvmlGpuTopologyLevel_t, as nvidia-smi topo -m)."""
        pairs = []
        for a in range(len(self.indices)):
            for b in range(a + 1, len(self.indices)):
                try:
                    level = int(self.nvml.nvmlDeviceGetTopologyCommonAncestor(self._handles[a], self._handles[b]))
                except Exception as exc:
                    self.missing.append(f"topology: {type(exc).__name__}")
                    return pairs
                pairs.append({"gpus": [self.indices[a], self.indices[b]], "common_ancestor": level,
                              "path": TOPOLOGY_LEVELS.get(level, str(level))})
        return pairs

    def _describe(self, index: int, handle) -> dict:
        n = self.nvml
        info: dict = {"index": index}
        reads = {
            "name": lambda: _text(n.nvmlDeviceGetName(handle)),
            "uuid": lambda: _text(n.nvmlDeviceGetUUID(handle)),
            "pci_bus_id": lambda: _text(n.nvmlDeviceGetPciInfo(handle).busId),
            "memory_total_bytes": lambda: int(n.nvmlDeviceGetMemoryInfo(handle).total),
            "pcie_gen_current": lambda: int(n.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
            "pcie_gen_max": lambda: int(n.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
            "pcie_width_current": lambda: int(n.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            "pcie_width_max": lambda: int(n.nvmlDeviceGetMaxPcieLinkWidth(handle)),
            "nvlink_active_links": lambda: self._active_links(handle),
            "power_limit_mw": lambda: int(n.nvmlDeviceGetEnforcedPowerLimit(handle)),
        }
        for key, read in reads.items():
            try:
                info[key] = read()
            except Exception as exc:
                info[key] = None
                self.missing.append(f"inventory {key} of GPU {index}: {type(exc).__name__}")
        return info

    def _active_links(self, handle) -> int:
        n = self.nvml
        active = 0
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                active += int(n.nvmlDeviceGetNvLinkState(handle, link) == 1)
            except Exception:  # no such link (or no NVLink at all)
                break
        return active


# nvmlValueType_t -> the nvmlValue_t member holding the number
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_value(value):
    """The number in an nvmlFieldValue_t, by its valueType (nvmlValueType_t)."""
    kind = value.valueType
    return getattr(value.value, _VALUE_MEMBERS[kind] if 0 <= kind < len(_VALUE_MEMBERS) else "ullVal")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
